"""Model adapters: the interface decoding runs on, and the real model.

- ``adapter``: ``CausalLMAdapter``, what ``generate`` needs from a model (processed rows p);
- ``float64``: float64 forwards for exact tests; ``static``: the static-cache runner;
  ``batched``: ``BatchRunner``, several images per forward (per-row cache lengths; the batch
  size ``default_batch_size``); ``static_batched``: the same on a static cache;
- ``lumina_mgpt`` (with ``lumina_checkpoint``, its shards read and the model built strictly,
  ``lumina_tokenizer``, ``chameleon_vqgan``): Lumina-mGPT (``lumina-mgpt-7b-768``, ...);
- ``anole`` (Chameleon / Anole, ``anole-7b``) and ``emu3`` (``emu3-gen``), on ``grid_image``'s
  ``GridImageAdapter``;
- ``janus``: Janus-Pro (stock ``JanusForConditionalGeneration``), ``janus-pro-1b``;
- ``tree``: one forward over a token tree (k candidate branches) and the cache rollback to one
  branch, for the multi-draft decoder;
- ``loading``: what every family's loader does first (find the checkpoint folder and its
  tokenizer, pick device and dtype, refuse a model too large for the CPU).

The stand-in is a package of its own (``gsd_lab.standin``) that builds on this one, never the
other way round. ``MODEL_NAMES``: every name the command line takes (``load_image_model``).
"""

from __future__ import annotations

from typing import Any

from .adapter import CausalLMAdapter

MODEL_NAMES = (
    "standin", "digits", "lumina-mgpt-7b-512", "lumina-mgpt-7b-768", "lumina-mgpt-7b-1024"
)
# Families of stock transformers classes: name -> loader (module, function).
FAMILY_LOADERS = {"anole-7b": ("anole", "load_anole"), "emu3-gen": ("emu3", "load_emu3")}
MODEL_NAMES += tuple(FAMILY_LOADERS)
JANUS_NAMES = ("janus-pro-1b", "janus-pro-7b")
MODEL_NAMES += JANUS_NAMES


def load_model(
    name: str,
    *,
    weights: str | None = None,
    vqgan: str | None = None,
    device: str = "cpu",
    dtype: Any = None,
    **kwargs: Any,
):
    """Return the ready adapter for a name "lumina-mgpt-7b-{512,768,1024}", "anole-7b" (``vqgan``:
    the Chameleon VQGAN folder), "emu3-gen" (``vqgan`` must be None: Emu3 decodes with its own
    VQ-VAE) or "janus-pro-{1b,7b}" (``janus.load_janus``: ``vqgan`` does not apply, Janus decodes
    with its own VQ model)."""
    if name in ("standin", "digits"):
        raise ValueError(
            f"{name} loads with gsd_lab.standin.adapter.load_standin or "
            f"gsd_lab.digits.adapter.load_digits (or "
            f"experiments.image_model.load_image_model({name!r}))"
        )
    if name in FAMILY_LOADERS:
        import importlib

        module, function = FAMILY_LOADERS[name]
        loader = getattr(importlib.import_module(f".{module}", __name__), function)
        if name == "emu3-gen":
            if vqgan is not None:
                raise ValueError("emu3-gen decodes with its own VQ-VAE: vqgan does not apply")
        else:
            kwargs["vqgan_dir"] = vqgan
        return loader(weights, device=device, dtype=dtype, **kwargs)
    if name in JANUS_NAMES:
        if vqgan is not None:
            raise ValueError(f"{name} decodes with its own VQ model: vqgan does not apply")
        from .janus import load_janus

        return load_janus(weights, name=name, device=device, dtype=dtype, **kwargs)
    if name.startswith("lumina-mgpt-7b-") and name in MODEL_NAMES:
        from .lumina_mgpt import load_lumina_mgpt

        resolution = int(name.rsplit("-", 1)[1])
        return load_lumina_mgpt(
            weights, vqgan_dir=vqgan, resolution=resolution, device=device, dtype=dtype, **kwargs
        )
    raise ValueError(f"unknown model {name!r}; expected one of {MODEL_NAMES}")
