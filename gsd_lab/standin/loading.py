"""Build the stand-in's modules from a weights directory (safetensors + JSON configs only).

The AR model loads as ``transformers``' LlamaForCausalLM (``load_ar_model``, every runner) or as
``llama_forward.LlamaForward`` (``load_ar_forward``: float64 on CPU, the same logits bit for bit,
no ``transformers`` import; the command line's ``generate`` on the stand-in)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from .ar import TokenLayout
from .classifier import CropClassifier
from .tokenizer import PatchVQTokenizer, TokenizerConfig
from .weights_io import WeightFileError, load_into, read_json

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


def read_tokenizer_config(directory: Path = WEIGHTS_DIR) -> TokenizerConfig:
    """``directory``'s tokenizer_config.json (WeightFileError naming the file if invalid)."""
    config_path = Path(directory) / "tokenizer_config.json"
    try:
        return TokenizerConfig.from_dict(read_json(config_path))
    except (KeyError, TypeError, ValueError) as err:
        raise WeightFileError(f"stand-in config file {config_path} is invalid: {err}") from err


def load_tokenizer(directory: Path = WEIGHTS_DIR) -> PatchVQTokenizer:
    config = read_tokenizer_config(directory)
    return load_into(PatchVQTokenizer(config), Path(directory) / "tokenizer.safetensors").eval()


def stored_distance_quantiles(directory: Path = WEIGHTS_DIR) -> list[dict]:
    """The distance-filter quantiles recorded at export (``manifest.json``'s
    ``distance_quantiles``: ``gsd_lab.decode.methods.distance_quantile_entry`` records, each keyed
    by the digest of the embeddings it was computed from); [] when none are recorded."""
    path = Path(directory) / "manifest.json"
    if not path.is_file():
        return []
    entries = read_json(path).get("distance_quantiles", [])
    keys = {"embeddings_sha256", "quantile", "seed", "value"}
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and keys <= set(e) for e in entries
    ):
        raise WeightFileError(
            f"stand-in file {path}: distance_quantiles must be a list of "
            f"records with {sorted(keys)}"
        )
    return entries


def load_classifier(directory: Path = WEIGHTS_DIR) -> CropClassifier:
    directory = Path(directory)
    config_path = directory / "classifier_config.json"
    cfg = read_json(config_path)
    try:
        model = CropClassifier(
            cfg["num_classes"], width=cfg["width"], feature_dim=cfg["feature_dim"]
        )
    except (KeyError, TypeError) as err:
        raise WeightFileError(f"stand-in config file {config_path} lacks a field: {err}") from err
    return load_into(model, directory / "classifier.safetensors").eval()


@contextmanager
def _without_initialising_weights() -> Iterator[None]:
    """Build a ``transformers`` model with its parameters allocated but not randomly initialised
    (``no_init_weights``, as ``from_pretrained`` does): every one is loaded next, and the random
    init cost more than the load. Non-persistent buffers (the rotary frequencies) are still
    computed in ``__init__``. A plain build where that helper is missing."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # transformers < 5
        try:
            from transformers.modeling_utils import no_init_weights
        except ImportError:
            no_init_weights = nullcontext
    with no_init_weights():
        yield


def _read_ar_config(directory: Path) -> tuple[dict, TokenLayout]:
    """(the ar_config.json dict, its TokenLayout); WeightFileError naming the file if invalid."""
    config_path = directory / "ar_config.json"
    cfg = read_json(config_path)
    try:
        lay = cfg["layout"]
        layout = TokenLayout(lay["codebook_size"], lay["num_classes"], lay["grid"])
        if not isinstance(cfg["llama"], dict):
            raise TypeError(f"'llama' must be a dict, got {type(cfg['llama']).__name__}")
    except (KeyError, TypeError, ValueError) as err:
        raise WeightFileError(f"stand-in config file {config_path} is invalid: {err}") from err
    return cfg, layout


def _check_vocabulary(directory: Path, layout: TokenLayout, model_vocab: int) -> None:
    if layout.vocab_size != model_vocab:
        raise WeightFileError(
            f"stand-in config file {directory / 'ar_config.json'}: layout vocabulary "
            f"{layout.vocab_size} != model vocabulary {model_vocab}"
        )


def load_ar_model(directory: Path = WEIGHTS_DIR, dtype: torch.dtype | None = None):
    """(LlamaForCausalLM in eval mode, TokenLayout, the ar_config.json dict); parameters cast
    to ``dtype`` when given (float64 for CPU-reproducible outputs, with ``cast_model_float64``'s
    float64 norms and rotary), else float32. The stored float16 tensors are widened straight to
    ``dtype`` (exact) into a model built without random init: the same tensors as building,
    loading into float32 and casting, at a fraction of the time."""
    from transformers.models.llama.configuration_llama import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaForCausalLM

    directory = Path(directory)
    cfg, layout = _read_ar_config(directory)
    try:
        llama = LlamaConfig.from_dict(cfg["llama"])
    except (KeyError, TypeError, ValueError) as err:
        raise WeightFileError(
            f"stand-in config file {directory / 'ar_config.json'} is invalid: {err}"
        ) from err
    _check_vocabulary(directory, layout, llama.vocab_size)
    with _without_initialising_weights():
        model = LlamaForCausalLM(llama)
    load_into(model, directory / "ar_model.safetensors", dtype=dtype, assign=True)
    if dtype == torch.float64:
        from ..models.float64 import cast_model_float64

        cast_model_float64(model)  # float64 norms and rotary too, not only the parameters
    elif dtype is not None:
        model = model.to(dtype)  # the buffers (parameters are dtype already)
    return model.eval(), layout, cfg


def load_ar_forward(directory: Path = WEIGHTS_DIR):
    """(``llama_forward.LlamaForward`` in eval mode, TokenLayout, the ar_config.json dict): the
    same model as ``load_ar_model(directory, torch.float64)``, the same logits bit for bit,
    without importing ``transformers``. WeightFileError naming the file for a config outside
    the forward's scope (``LlamaShape.from_dict``) or weights that do not match it."""
    from .llama_forward import LlamaForward, LlamaShape

    directory = Path(directory)
    cfg, layout = _read_ar_config(directory)
    try:
        shape = LlamaShape.from_dict(cfg["llama"])
    except ValueError as err:
        raise WeightFileError(
            f"stand-in config file {directory / 'ar_config.json'}: {err}"
        ) from err
    _check_vocabulary(directory, layout, shape.vocab_size)
    model = LlamaForward(shape)  # parameters on the meta device, every one assigned next
    load_into(model, directory / "ar_model.safetensors", dtype=torch.float64, assign=True)
    return model.eval(), layout, cfg
