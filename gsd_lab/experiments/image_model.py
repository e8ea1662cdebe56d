"""What the experiments need from a model, in one place: the decoding adapter, how a prompt
becomes token ids, how many tokens an image has, how tokens become pixels, and the quality
proxies. ``load_image_model`` builds it for every model name of the command line.

Models:
- ``standin`` (default): the embedded class-conditional stand-in (``gsd_lab.standin.adapter``);
  a prompt is a class index or class name; quality: condition-consistency score (x100) and a
  Frechet distance on classifier features against held-out real crops (proxies).
- ``lumina-mgpt-7b-{512,768,1024}``: real Lumina-mGPT weights from ``weights``; a prompt is text;
  quality: CLIP score when a CLIP model is available.
- ``anole-7b`` (Chameleon / Anole, pixels with ``vqgan``) and ``emu3-gen`` (pixels through its
  own VQ-VAE): text prompts as Lumina-mGPT (``gsd_lab.models.anole``, ``gsd_lab.models.emu3``).
- ``janus-pro-{1b,7b}``: Janus-Pro (the transformers conversion), text prompts, no quality proxy;
- ``tiny-random``: a random tiny Llama over 8x8 codes, a fixed colour per code (tests only).

On CPU the forward runs in float64 (``CausalLMAdapter.set_compute_dtype``), so tokens, NFE and
every table are the same on any x86 instruction set and thread count; ``float64_on_cpu=False``
keeps the model's own dtype (float32: last-bit differences between CPU kernels flip sampling
decisions, see ``gsd_lab.experiments.determinism``).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import Tensor

from ..models.adapter import CausalLMAdapter

TINY_RANDOM = "tiny-random"
DIGITS = "digits"  # gsd_lab.digits: the embedded model with object structure


@dataclass
class ImageModel:
    """A model ready for the experiments.

    encode(prompt) -> (prompt_ids [P], uncond_prompt_ids [P'] or None); decode(tokens [N]) ->
    uint8 image [H, W, 3]; ``condition_scores(images, prompts)`` -> [B] (higher is better) and
    ``frechet_distance(images)`` -> float (lower is better) are None where unavailable; so is
    ``decode`` (e.g. Lumina-mGPT without its VQGAN). ``weights_info``: where the weights came
    from and their SHA-256 (for provenance records). ``quality_column``: the name tables give the
    per-image score (``clip_score`` on Lumina-mGPT; rows keep the key ``condition_score``)."""

    name: str
    adapter: CausalLMAdapter
    num_tokens: int
    encode: Callable[[str], tuple[Tensor, Tensor | None]]
    decode: Callable[[Tensor], np.ndarray] | None
    default_prompts: list[str]
    condition_scores: Callable[[list[np.ndarray], list[str]], np.ndarray] | None = None
    frechet_distance: Callable[[list[np.ndarray]], float] | None = None
    quality_names: dict[str, str] = field(default_factory=dict)
    weights_info: dict[str, Any] = field(default_factory=dict)
    # What the per-image score is, as tables name its columns (rows keep the key condition_score).
    quality_column: str = "condition_score"
    quality_config: dict[str, Any] = field(default_factory=dict)  # e.g. the CLIP resize

    @property
    def embeddings(self) -> Tensor:
        """Input-embedding rows of the adapter's model [V, D] (GSD's distance filter)."""
        return self.adapter.embeddings

    @property
    def image_vocabulary(self) -> Tensor:
        """Token ids that may be sampled as image tokens [A]."""
        return self.adapter.allowed_tokens


@contextmanager
def guidance_scale(model: ImageModel, scale: float | None) -> Iterator[ImageModel]:
    """Run ``model`` with another classifier-free guidance scale inside the block (restored after).

    scale 1.0 gives the conditional distribution (u + 1 (c - u) = c, both rows still computed);
    None switches guidance off (the prompt alone). Only for models that use CFG."""
    adapter = model.adapter
    if not adapter.uses_cfg:
        raise ValueError(f"{model.name} does not use classifier-free guidance")
    previous = adapter.cfg_scale
    adapter.cfg_scale = None if scale is None else float(scale)
    try:
        yield model
    finally:
        adapter.cfg_scale = previous


class _TinyAdapter(CausalLMAdapter):
    """The tiny random model's adapter: a ``CausalLMAdapter`` that knows its codes' content."""

    def __init__(self, model: Any, codes: Tensor, content: Tensor, **kwargs: Any) -> None:
        super().__init__(model, codes, **kwargs)
        self._content = content

    def code_content(self) -> Tensor:
        """[K, 48]: code i's 4 x 4 block of its colour, pixel values in [-1, 1]
        (what decode paints)."""
        return self._content


def tiny_random_model(
    seed: int = 0,
    *,
    side: int = 8,
    num_codes: int = 64,
    num_classes: int = 4,
    cfg_scale: float | None = 2.0,
    top_k: int | None = None,
    compute_dtype: torch.dtype | None = torch.float64,
) -> ImageModel:
    """A tiny randomly initialised class-conditional model (tests and development only).

    Vocabulary: class tokens 0..C-1, null class C, image codes C+1..C+K. An image is side x side
    codes; decode paints each code's fixed random colour on a 4x4 block (its ``code_content()``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = num_classes + 1 + num_codes
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=side * side + 8,
    )
    # transformers initialises weights from the global generator: seed it inside a forked RNG
    # state so that the caller's global state is left as it was; then redraw them reproducibly.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).eval()
    _integer_init(model, seed)
    codes = torch.arange(num_classes + 1, vocab)
    palette = (torch.rand(vocab, 3, generator=torch.Generator().manual_seed(seed)) * 255).to(
        torch.uint8
    )
    # What each code decodes to: its colour on a 4 x 4 block, as pixel values in [-1, 1].
    content = (palette[codes].to(torch.float64) / 127.5 - 1).repeat(1, 16)
    adapter = _TinyAdapter(
        model,
        codes,
        content,
        cfg_scale=cfg_scale,
        top_k=top_k,
        row_length=side,
        compute_dtype=compute_dtype,
    )

    def encode(prompt: str) -> tuple[Tensor, Tensor | None]:
        label = int(prompt)
        if not 0 <= label < num_classes:
            raise ValueError(f"tiny-random has classes 0..{num_classes - 1}, got {prompt!r}")
        # The adapter's current scale decides (``guidance_scale`` may switch CFG off for a block).
        return torch.tensor([label]), (torch.tensor([num_classes]) if adapter.uses_cfg else None)

    def decode(tokens: Tensor) -> np.ndarray:
        grid = palette[tokens.reshape(side, side).cpu()]
        return grid.repeat_interleave(4, 0).repeat_interleave(4, 1).numpy()

    return ImageModel(
        TINY_RANDOM, adapter, side * side, encode, decode, [str(c) for c in range(num_classes)]
    )


def _integer_init(model: torch.nn.Module, seed: int, std: float = 0.02) -> None:
    """Redraw every weight as k * (std sqrt(3) / 4096), k uniform integer in [-4096, 4096] (norm
    weights 1), from a seeded generator.

    torch's normal_ / uniform_ fills are vectorised per CPU instruction set and differ in the
    last bits between ``ATEN_CPU_CAPABILITY`` settings; integer draws and one multiplication
    are the same everywhere, so the tiny model is the same model on every CPU."""
    generator = torch.Generator().manual_seed(seed)
    step = std * 3**0.5 / 4096
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                draws = torch.randint(-4096, 4097, tuple(param.shape), generator=generator)
                param.copy_(draws.to(torch.float64) * step)


def load_image_model(
    name: str = "standin",
    *,
    weights: str | None = None,
    vqgan: str | None = None,
    clip: str | None = None,
    device: str | None = None,
    cfg_scale: float | None = None,
    top_k: int | None = None,
    seed: int = 0,
    float64_on_cpu: bool = True,
    tokenizer: str | None = None,
    clip_resize: int | None = None,
    quick: bool = False,
) -> ImageModel:
    """Build the ``ImageModel`` for a command-line model name (see the module docstring).

    cfg_scale / top_k override the model's defaults when given; ``clip``: a local CLIP folder
    for Lumina-mGPT's CLIP score; device: default cuda when available for Lumina-mGPT, else cpu.
    float64_on_cpu: run the forward of a model on CPU in float64 (module docstring). tokenizer:
    Lumina-mGPT's tokenizer.json folder (default: found next to the weights). clip_resize: CLIP
    scores images resized to that side first (the release preset's 299; None: as decoded).
    quick: what one eager ``generate`` on the stand-in needs, loaded fast (the command line's
    generate): the float64 forward without ``transformers`` (``standin.llama_forward``, the same
    logits bit for bit; the eager runner only: the batched and static runners need a
    ``transformers`` model), no quality metrics, the tokenizer loaded at its first use.
    ValueError for another model, a non-CPU device or ``float64_on_cpu=False``."""
    if quick:
        if name != "standin" or (device or "cpu") != "cpu" or not float64_on_cpu:
            raise ValueError(
                "quick loads the stand-in in float64 on the CPU only, got model "
                f"{name!r}, device {device!r}, float64_on_cpu={float64_on_cpu}"
            )
        return _quick_standin(weights, cfg_scale=cfg_scale, top_k=top_k)
    model = _load_image_model(
        name,
        weights=weights,
        vqgan=vqgan,
        clip=clip,
        device=device,
        cfg_scale=cfg_scale,
        top_k=top_k,
        seed=seed,
        tokenizer=tokenizer,
        clip_resize=clip_resize,
    )
    adapter = model.adapter
    if adapter.device.type == "cpu":
        if float64_on_cpu and adapter.compute_dtype != torch.float64:
            adapter.set_compute_dtype(torch.float64)
        elif not float64_on_cpu and name == TINY_RANDOM:
            adapter.set_compute_dtype(torch.float32)
    return model


def _load_image_model(
    name: str,
    *,
    weights: str | None,
    vqgan: str | None,
    clip: str | None,
    device: str | None,
    cfg_scale: float | None,
    top_k: int | None,
    seed: int,
    tokenizer: str | None,
    clip_resize: int | None,
) -> ImageModel:
    if name == TINY_RANDOM:
        kwargs: dict[str, Any] = {}
        if cfg_scale is not None:
            kwargs["cfg_scale"] = cfg_scale
        if top_k is not None:
            kwargs["top_k"] = top_k
        return tiny_random_model(seed, **kwargs)
    from ..models import MODEL_NAMES, load_model

    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; expected one of {MODEL_NAMES + (TINY_RANDOM,)}")
    overrides = {k: v for k, v in (("cfg_scale", cfg_scale), ("top_k", top_k)) if v is not None}
    if name == DIGITS:
        return _digits_model(device or "cpu", weights, overrides)
    if name == "standin":
        from ..standin.adapter import load_standin

        # --weights for the stand-in: another weights folder (e.g. a fresh training run).
        adapter = load_standin(device or "cpu", weights_dir=weights, **overrides)
        model = standin_image_model(adapter, weights_dir=weights)
        from ..standin.loading import WEIGHTS_DIR

        model.weights_info = weights_info(
            Path(weights) if weights else WEIGHTS_DIR, "ar_model.safetensors"
        )
        return model
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("janus-"):
        adapter = load_model(name, weights=weights, device=device, tokenizer=tokenizer, **overrides)
        return _janus_model(name, adapter, weights)
    adapter = load_model(
        name, weights=weights, vqgan=vqgan, device=device, tokenizer=tokenizer, **overrides
    )
    model = _lumina_model(name, adapter, clip, clip_resize)
    # The tokenizer actually used (the checkpoint's or a sibling 768 folder's): it decides the
    # prompt ids.
    model.weights_info = {
        "weights": str(weights),
        "vqgan": vqgan,
        "clip": clip,
        "tokenizer": str(adapter.tokenizer.path.parent),
    }
    return model


def _quick_standin(
    weights: str | None, *, cfg_scale: float | None, top_k: int | None
) -> ImageModel:
    """``load_image_model(quick=True)`` (its docstring)."""
    from ..standin.adapter import load_standin
    from ..standin.loading import WEIGHTS_DIR

    overrides = {k: v for k, v in (("cfg_scale", cfg_scale), ("top_k", top_k)) if v is not None}
    adapter = load_standin(
        "cpu", weights_dir=weights, fast_forward=True, lazy_tokenizer=True, **overrides
    )
    model = standin_image_model(adapter, with_metrics=False)
    model.weights_info = weights_info(
        Path(weights) if weights else WEIGHTS_DIR, "ar_model.safetensors"
    )
    return model


def weights_info(folder: Path, filename: str) -> dict[str, Any]:
    """The folder and the SHA-256 of one weights file in it (identifies the weights used)."""
    import hashlib

    path = folder / filename
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return {"weights_dir": str(folder), f"{filename}_sha256": digest}


# A few Parti-style prompts for runs without --prompts (the paper uses all 1,600 PartiPrompts).
LUMINA_DEFAULT_PROMPTS = [
    "a portrait of a dog wearing a red scarf",
    "a cheeseburger with lettuce and tomato on a wooden table",
    "a lighthouse on a rocky coast at sunset",
    "an astronaut riding a horse in a field of flowers",
]


def _lumina_model(
    name: str, adapter: Any, clip_dir: str | None, clip_resize: int | None = None
) -> ImageModel:
    def encode(prompt: str) -> tuple[Tensor, Tensor | None]:
        uncond = adapter.unconditional_prompt_ids() if adapter.uses_cfg else None
        return adapter.prompt_ids(prompt), uncond

    def decode(tokens: Tensor) -> np.ndarray:
        return adapter.decode_images(tokens)[0].cpu().numpy()

    return ImageModel(
        name,
        adapter,
        adapter.num_image_tokens,
        encode,
        decode if _can_decode(adapter) else None,
        list(LUMINA_DEFAULT_PROMPTS),
        condition_scores=_clip_scorer(clip_dir, adapter.device, clip_resize) if clip_dir else None,
        quality_names={"condition_score": "CLIP score\n(higher better)"},
        quality_column="clip_score",
        quality_config={"clip_resize": clip_resize} if clip_dir else {},
    )


def _can_decode(adapter: Any) -> bool:
    """Whether the adapter turns tokens into pixels: a VQGAN loaded (Lumina-mGPT, Anole) or a
    decoder of its own (``GridImageAdapter.decode_indices``: Emu3's VQ-VAE)."""
    return (
        getattr(adapter, "vqgan", None) is not None
        or getattr(adapter, "decode_indices", None) is not None
    )


def _janus_model(name: str, adapter: Any, weights: str | None) -> ImageModel:
    """``ImageModel`` of a ``JanusAdapter``: text prompts (``prompt_ids``), the stock
    unconditional row under CFG, pixels through the checkpoint's ``JanusVQVAE``; no quality
    proxy (no CLIP wired for Janus yet)."""

    def encode(prompt: str) -> tuple[Tensor, Tensor | None]:
        ids = adapter.prompt_ids(prompt)
        return ids, (adapter.unconditional_prompt_ids(ids) if adapter.uses_cfg else None)

    def decode(tokens: Tensor) -> np.ndarray:
        return adapter.decode_images(tokens)[0].cpu().numpy()

    model = ImageModel(
        name, adapter, adapter.num_image_tokens, encode, decode, list(LUMINA_DEFAULT_PROMPTS)
    )
    model.weights_info = {"weights": str(weights), "tokenizer": str(adapter.tokenizer.path)}
    return model


def _clip_scorer(
    clip_dir: str, device: Any, resize: int | None = None
) -> Callable[[list[np.ndarray], list[str]], np.ndarray]:
    """Per-image CLIP scores against the prompts, from a local CLIP folder (quality.clip_score);
    ``resize``: images resized to resize x resize first (the release preset: 299)."""
    from ..quality.clip_score import clip_scores, load_clip

    clip_model, processor = load_clip(clip_dir, device=device)

    def scores(images: list[np.ndarray], prompts: list[str]) -> np.ndarray:
        return clip_scores(images, prompts, clip_model, processor, resize=resize).numpy()

    return scores


def _digits_model(device: str, weights: str | None, overrides: dict[str, Any]) -> ImageModel:
    """The digits model (``gsd_lab.digits``) on the stand-in's pipeline: prompts "0".."9", its
    own classifier's condition score and Frechet distance against the held-out digits."""
    from ..digits import data
    from ..digits.adapter import WEIGHTS_DIR, load_digits

    directory = Path(weights) if weights else WEIGHTS_DIR
    adapter = load_digits(device, weights_dir=directory, **overrides)
    model = standin_image_model(adapter, weights_dir=directory, name=DIGITS,
                                heldout=lambda: data.digits("heldout")[0])
    model.weights_info = weights_info(directory, "ar_model.safetensors")
    return model


def standin_image_model(
    adapter: Any,
    *,
    with_metrics: bool = True,
    weights_dir: Any = None,
    name: str = "standin",
    heldout: Callable[[], Tensor] | None = None,
) -> ImageModel:
    """``ImageModel`` of a ``StandinAdapter`` (the stand-in, or ``name`` "digits"): prompts are
    class names (or indices), quality is the condition-consistency score (x100) and Frechet
    distance (``quality.metrics``) of the classifier in ``weights_dir``, against ``heldout()``'s
    real images (uint8 [N, H, W, 3] or float [N, 3, H, W]; default: the stand-in's crops)."""

    def encode(prompt: str) -> tuple[Tensor, Tensor | None]:
        label = int(prompt) if str(prompt).isdigit() else prompt
        uncond = adapter.uncond_prompt_ids() if adapter.uses_cfg else None
        return adapter.prompt_ids(label), uncond

    def decode(tokens: Tensor) -> np.ndarray:
        return adapter.decode_images(tokens)[0].cpu().numpy()

    scores = frechet = None
    if with_metrics:
        scores, frechet = _standin_metrics(adapter, weights_dir, heldout)
    return ImageModel(
        name,
        adapter,
        adapter.num_image_tokens,
        encode,
        decode,
        list(adapter.class_names),
        condition_scores=scores,
        frechet_distance=frechet,
        quality_names={
            "condition_score": "condition score x100\n(higher better)",
            "frechet_distance": "Frechet distance, classifier\nfeatures (lower better)",
        },
    )


def _standin_metrics(adapter: Any, weights_dir: Any = None,
                     heldout: Callable[[], Tensor] | None = None) -> tuple[Any, Any]:
    """(condition_scores, frechet_distance) from the classifier in ``weights_dir`` (default the
    stand-in's); the Frechet reference is its features of ``heldout()``'s real images (default
    the stand-in's fixed held-out crops; computed once, at the first Frechet distance)."""
    from ..quality.metrics import (
        classifier_features,
        condition_consistency,
        frechet_distance_features,
    )
    from ..standin.classifier import heldout_set
    from ..standin.loading import WEIGHTS_DIR, load_classifier

    classifier = load_classifier(weights_dir or WEIGHTS_DIR)
    cached: dict[str, Tensor] = {}

    def reference() -> Tensor:
        """Built on first use: the held-out crops take seconds to prepare
        (a generate needs none)."""
        if "features" not in cached:
            reference_images = heldout() if heldout is not None else heldout_set()[0]
            cached["features"] = classifier_features(classifier, reference_images)
        return cached["features"]

    def scores(images: list[np.ndarray], prompts: list[str]) -> np.ndarray:
        labels = [adapter.class_index(int(p) if str(p).isdigit() else p) for p in prompts]
        return np.array(
            [
                condition_consistency(
                    classifier,
                    torch.from_numpy(np.ascontiguousarray(image))[None],
                    torch.tensor([label]),
                )
                for image, label in zip(images, labels)
            ]
        )

    def frechet(images: list[np.ndarray]) -> float:
        batch = torch.from_numpy(np.ascontiguousarray(np.stack(images)))
        return frechet_distance_features(classifier_features(classifier, batch), reference())

    return scores, frechet
