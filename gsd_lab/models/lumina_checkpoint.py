"""Lumina-mGPT checkpoint I/O: the folder located, its safetensors shards read and checked, and
the model built strictly from them.

The released checkpoints (``lumina_mgpt.load_lumina_mgpt`` loads them) are
``ChameleonForConditionalGeneration`` weights except for the q/k-norms, stored per model-parallel
rank as [model_parallel_size, head_dim] where transformers expects [num_heads, head_dim] (k:
num_key_value_heads). We read the safetensors shards ourselves, expand
w -> w.repeat_interleave(num_heads / model_parallel_size, 0) (exactly the fork's forward, which
repeats each rank's row over its heads), and load strictly: any missing, unexpected or
mis-shaped key raises, except the image *encoder* ``model.vqmodel.*``, which the releases drop
and text-to-image generation never uses (it is not even allocated here).

A key in two shards, a key the index puts in another shard, and q/k-norms in a layout the
config does not name raise ``ValueError`` too (``expand_qk_norm``, ``stores_expanded_qk_norms``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import Tensor

from .loading import find_checkpoint

logger = logging.getLogger(__name__)

HF_REPO_TEMPLATE = "Alpha-VLLM/Lumina-mGPT-7B-{resolution}"
IMAGE_ENCODER_PREFIX = "model.vqmodel."


# ---- locating the weights ---------------------------------------------------------------------


def resolve_weights_dir(weights: str | Path | None, resolution: int = 768) -> Path:
    """The folder holding ``config.json`` and the safetensors shards: ``weights`` itself, a
    Hugging Face cache entry (``models--Alpha-VLLM--Lumina-mGPT-7B-768``) or a cache root holding
    one; None searches the Hugging Face cache (``loading.find_checkpoint``)."""
    return find_checkpoint(weights, HF_REPO_TEMPLATE.format(resolution=resolution), "Lumina-mGPT")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` hook: a JSON object with a repeated key is an error (not "last one wins")."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"key {key!r} appears twice in one JSON object")
        seen[key] = value
    return seen


def _safetensors_index(folder: Path) -> dict[str, str] | None:
    """The index's ``weight_map`` (tensor name -> shard file name), or None without an index."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return None
    try:
        weight_map = json.loads(index.read_text(), object_pairs_hook=_no_duplicate_keys).get(
            "weight_map"
        )
    except ValueError as error:
        raise ValueError(f"{index}: {error}") from error
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{index} has no weight_map")
    return weight_map


def _safetensors_files(folder: Path) -> list[Path]:
    weight_map = _safetensors_index(folder)
    if weight_map is not None:
        files = sorted({folder / name for name in weight_map.values()})
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(
                f"{folder / 'model.safetensors.index.json'} "
                f"lists shards that are not there: {missing}"
            )
        return files
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(
            f"no *.safetensors weights in {folder} (only safetensors checkpoints are supported)"
        )
    return files


# ---- loading ------------------------------------------------------------------------------------


def read_lumina_config(folder: Path) -> Any:
    """``ChameleonConfig`` from ``config.json`` (model_type chameleon; extra Lumina keys kept)."""
    from transformers import ChameleonConfig

    raw = json.loads((folder / "config.json").read_text())
    if raw.get("model_type") != "chameleon":
        raise ValueError(
            f"{folder / 'config.json'} has model_type {raw.get('model_type')!r}; "
            "Lumina-mGPT is 'chameleon'"
        )
    if not raw.get("vocabulary_map"):
        raise ValueError(
            f"{folder / 'config.json'} has no vocabulary_map (needed for the image token ids)"
        )
    config = ChameleonConfig.from_pretrained(str(folder))
    if getattr(config, "mask_image_logits", False):
        logger.info(
            "config.mask_image_logits is true; ignored: logits are computed from the backbone"
        )
    return config


# Stock transformers classes: checkpoints saved from them (or by transformers' Chameleon
# converter) hold q/k-norms already expanded to [heads, head_dim].
TRANSFORMERS_ARCHITECTURES = ("ChameleonForConditionalGeneration", "ChameleonModel")
# Lumina-mGPT's own class, as its releases' config.json names it: q/k-norms stored per rank.
LUMINA_ARCHITECTURE = "ChameleonXLLMXForConditionalGeneration"


def stores_expanded_qk_norms(config: Any) -> bool:
    """True when config.json's ``architectures`` names a stock transformers Chameleon class: its
    q/k-norms are stored as [heads, head_dim]. Otherwise (Lumina-mGPT's
    ``ChameleonXLLMXForConditionalGeneration``, or no architectures) they are stored per
    model-parallel rank, [model_parallel_size, head_dim]. ``model_parallel_size`` itself cannot
    tell: transformers' ChameleonConfig defaults it to 1 and its converter saves it."""
    return bool(set(getattr(config, "architectures", None) or ()) & set(TRANSFORMERS_ARCHITECTURES))


def _model_parallel_size(config: Any) -> int:
    return int(getattr(config, "model_parallel_size", None) or 1)


def estimated_parameters(config: Any, *, expanded_qk_norms: bool = False) -> int:
    """Parameter count of the text model from the config, norms included.

    Per layer: attention 2 d^2 + 2 d d_kv (q, o; k, v), MLP 3 d f, two RMSNorm weights 2 d, and the
    q/k-norm weights and biases 2 (r_q + r_k) h_d; plus embeddings and untied head 2 V d and the
    final norm d. The q/k-norm rows r are as stored (``expanded_qk_norms=False``: r_q = r_k =
    model_parallel_size for Lumina's layout, the head counts for a transformers checkpoint, see
    ``stores_expanded_qk_norms``) or as loaded (``True``: r_q = heads, r_k = kv heads).
    Lumina-mGPT 7B: 7,013,158,912 stored, 7,013,666,816 loaded (model.vqmodel.* not counted)."""
    d, layers, ffn = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = d // heads
    kv = kv_heads * head_dim
    if expanded_qk_norms or stores_expanded_qk_norms(config):
        qk_rows = heads + kv_heads
    else:
        qk_rows = 2 * _model_parallel_size(config)
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * ffn + 2 * d + 2 * qk_rows * head_dim
    return 2 * config.vocab_size * d + layers * per_layer + d


def expand_qk_norm(name: str, tensor: Tensor, config: Any) -> Tensor:
    """A stored q/k-norm weight or bias -> transformers' [heads, head_dim] (heads = kv heads for k).

    Lumina's layout (the default): the tensor must be [r, head_dim], r = config
    ``model_parallel_size``, and becomes t.repeat_interleave(heads / r, 0), as the Lumina fork's
    forward does. Only when config.json's ``architectures`` names a stock transformers class
    (``stores_expanded_qk_norms``) must it already be [heads, head_dim]. Any other shape raises
    ``ValueError``: no guessing the layout from the shape."""
    heads = config.num_attention_heads if ".q_norm." in name else config.num_key_value_heads
    head_dim = config.hidden_size // config.num_attention_heads
    if stores_expanded_qk_norms(config):
        if tuple(tensor.shape) != (heads, head_dim):
            raise ValueError(
                f"{name}: shape {tuple(tensor.shape)}; config.json's architectures "
                f"{config.architectures} is stock transformers, whose layout [heads={heads}, "
                f"head_dim={head_dim}] is expected (Lumina's per-rank q/k-norms need Lumina's "
                f"architectures, {LUMINA_ARCHITECTURE})"
            )
        return tensor
    ranks = _model_parallel_size(config)
    if heads % ranks:
        raise ValueError(
            f"config model_parallel_size={ranks} does not divide the {heads} heads of {name}"
        )
    if tuple(tensor.shape) != (ranks, head_dim):
        looks_expanded = ranks != heads and tuple(tensor.shape) == (heads, head_dim)
        raise ValueError(
            f"{name}: shape {tuple(tensor.shape)}; config.json says model_parallel_size={ranks}, "
            f"so Lumina's per-rank layout [{ranks}, head_dim={head_dim}] is expected"
            + (
                " (this looks like transformers' expanded [heads, head_dim] layout: set "
                'config.json\'s architectures to ["ChameleonForConditionalGeneration"] if the '
                "weights are stored that way)"
                if looks_expanded
                else ""
            )
        )
    return tensor.repeat_interleave(heads // ranks, dim=0)


def _open_shard(file: Path, device: str | torch.device) -> Any:
    """``safe_open`` of one shard; a file safetensors cannot read (truncated by an interrupted
    download, or not safetensors at all) raises ``ValueError`` naming it."""
    from safetensors import SafetensorError, safe_open

    try:
        return safe_open(str(file), framework="pt", device=str(device))
    except SafetensorError as error:
        raise ValueError(
            f"{file} is not a readable safetensors file ({error}; {file.stat().st_size:,} bytes): "
            "an interrupted download? Download it again"
        ) from error


def stored_tensors(
    folder: Path, *, device: str | torch.device = "cpu"
) -> Iterator[tuple[str, str, Any]]:
    """(name, shard file name, open ``safe_open`` handle) for every tensor of the safetensors
    shards, file by file; use the handle before asking for the next item.

    Raises ``ValueError`` when a shard cannot be read (``_open_shard``), a tensor name is stored in
    two shards (no "last one wins"), or the index puts a tensor in another shard than the one
    holding it or lists one no shard holds."""
    weight_map = _safetensors_index(folder)
    stored_in: dict[str, str] = {}
    for file in _safetensors_files(folder):
        with _open_shard(file, device) as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open handles are not iterable)
                if name in stored_in:
                    raise ValueError(
                        f"tensor {name} is stored in two shards, {stored_in[name]} and {file.name}"
                    )
                stored_in[name] = file.name
                if weight_map is not None and weight_map.get(name) != file.name:
                    raise ValueError(
                        f"tensor {name} is stored in {file.name} but the index says "
                        f"{weight_map.get(name, 'nothing about it')}"
                    )
                yield name, file.name, handle
    if weight_map is not None:
        absent = sorted(set(weight_map) - set(stored_in))
        if absent:
            raise ValueError(f"the index lists {len(absent)} tensors no shard holds: {absent[:6]}")


def is_qk_norm(name: str) -> bool:
    return ".self_attn.q_norm." in name or ".self_attn.k_norm." in name


def read_lumina_state_dict(
    folder: Path, config: Any, *, device: str | torch.device, dtype: torch.dtype
) -> dict[str, Tensor]:
    """All text-model tensors of the safetensors shards, on ``device`` in ``dtype``, q/k-norms
    expanded; ``model.vqmodel.*`` tensors, if any, are skipped (never read). The shards are
    checked as they are read (``stored_tensors``)."""
    state: dict[str, Tensor] = {}
    skipped = 0
    for name, _, handle in stored_tensors(folder, device=device):
        if name.startswith(IMAGE_ENCODER_PREFIX):
            skipped += 1
            continue
        tensor = handle.get_tensor(name)
        if is_qk_norm(name):
            tensor = expand_qk_norm(name, tensor, config)
        state[name] = tensor.to(dtype=dtype) if tensor.is_floating_point() else tensor
    if skipped:
        logger.info(
            "skipped %d model.vqmodel.* tensors (image encoder; not needed to generate images)",
            skipped,
        )
    return state


def meta_lumina_model(config: Any) -> Any:
    """``ChameleonForConditionalGeneration(config)`` on the meta device (no memory), without the
    image encoder (absent from Lumina releases, unused for generation)."""
    from transformers import ChameleonForConditionalGeneration

    with torch.device("meta"):
        model = ChameleonForConditionalGeneration(config)
    model.model.vqmodel = None
    return model


def architecture_mismatch(
    expected: dict[str, tuple[int, ...]], stored: dict[str, tuple[int, ...]]
) -> str | None:
    """None when ``stored`` (name -> shape, q/k-norms as loaded) has exactly the tensors of
    ``expected``, else what differs: missing, unexpected and mis-shaped names (first few)."""
    missing = sorted(set(expected) - set(stored))
    unexpected = sorted(set(stored) - set(expected))
    wrong_shape = [
        f"{k} {tuple(stored[k])} (expected {tuple(v)})"
        for k, v in expected.items()
        if k in stored and tuple(stored[k]) != tuple(v)
    ]
    if not (missing or unexpected or wrong_shape):
        return None
    return (
        f"missing {len(missing)} {missing[:6]}, unexpected {len(unexpected)} {unexpected[:6]}, "
        f"wrong shape {len(wrong_shape)} {wrong_shape[:4]}"
    )


def build_lumina_model(config: Any, state: dict[str, Tensor], *, device: str | torch.device) -> Any:
    """A ``ChameleonForConditionalGeneration`` built on the meta device, without the image encoder,
    whose parameters *are* the tensors of ``state``
    (strict: every key must match in name and shape)."""
    from transformers.models.chameleon.modeling_chameleon import ChameleonRotaryEmbedding

    model = meta_lumina_model(config)
    problem = architecture_mismatch(
        {k: tuple(v.shape) for k, v in model.state_dict().items()},
        {k: tuple(v.shape) for k, v in state.items()},
    )
    if problem:
        raise ValueError(
            "the checkpoint does not match the Chameleon "
            f"architecture of its config.json: {problem}"
        )
    model.load_state_dict(state, strict=True, assign=True)
    logger.info(
        "model.vqmodel.* (image encoder) not loaded: Lumina-mGPT "
        "releases drop it; generation does not use it"
    )
    model.model.rotary_emb = ChameleonRotaryEmbedding(config).to(
        device
    )  # non-persistent buffers, never saved
    on_meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if on_meta:
        raise ValueError(f"tensors left uninitialised after loading: {on_meta[:6]}")
    return model.eval()
