"""The embedded digits model: the stand-in's adapter (``StandinAdapter``) over the digits weights.

``load_digits()`` is ``gsd_lab.standin.adapter.load_standin`` on ``gsd_lab/digits/weights``: a
``CausalLMAdapter`` whose allowed tokens are the 1024 image codes, classifier-free guidance
against the null-class prompt, float64 on CPU (the same tokens on any x86 CPU, as the stand-in),
and the tokenizer's tiles to turn 196 codes into a 28 x 28 image (grey, in three channels).
Prompts are the digits "0" .. "9" (or their indices).

Defaults: cfg_scale 3.0 (the stand-in's), no top-k (1024 codes: the whole law is sampled),
temperature 1.0 (the stand-in's); no CFG scale or top-k of
``benchmarks/archive/digits_sampling.py``'s sweep reaches the digits' accuracy target
(docs/standin.md), so none replaces them.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..standin.adapter import StandinAdapter, load_standin

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
DEFAULT_CFG_SCALE = 3.0
DEFAULT_TOP_K: int | None = None


def load_digits(
    device: str | torch.device = "cpu",
    *,
    weights_dir: str | Path | None = None,
    cfg_scale: float | None = DEFAULT_CFG_SCALE,
    top_k: int | None = DEFAULT_TOP_K,
    **options,
) -> StandinAdapter:
    """The shipped digits model's adapter: ``load_standin`` on ``weights_dir`` (default the
    shipped ``WEIGHTS_DIR``) with the digits' defaults; ``options`` are ``load_standin``'s
    (temperature, compute_dtype, fast_forward, lazy_tokenizer)."""
    directory = WEIGHTS_DIR if weights_dir is None else weights_dir
    return load_standin(device, weights_dir=directory, cfg_scale=cfg_scale, top_k=top_k, **options)
