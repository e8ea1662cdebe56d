"""gsd_lab: experiments for Grouped Speculative Decoding over Hugging Face causal LMs.

A map, in reading order (each package's ``__init__`` maps its files):

- ``decode/``: ``generate``, the AR / SJD / GSD loop, and the method spec it runs;
- ``engine/``: gsd_core's verification shaped for an accelerator (and op / sync profiling),
  and the rules' optional capabilities (``engine.capabilities``);
- ``accounting/``: the exact distortion (TV) and transport (W1) of every verified position;
- ``models/``: the adapter interface, Lumina-mGPT and the families Anole (Chameleon), Emu3 and
  Janus; ``standin/``: the embedded stand-in model; ``digits/``: a second embedded model
  (MNIST digits) on the stand-in's pipeline, with a classifier-based quality measure;
- ``quality/``: image quality proxies and CLIP score;
- ``experiments/``: the analyses behind the figures and notebooks;
- ``paper/``: the paper job (``python -m gsd_lab figures``): plan, decode, tables, render;
- ``teaching/``: the notebooks' helpers and checked cells, and the notebook runner;
- ``io/``: provenance, figures and tables on disk, prompts, progress lines;
- ``checks/``: ``check-weights``, every family's download checked item by item;
- ``testing/``: tiny random checkpoints of every family in its release layout (tests, GPU
  scripts' ``--tiny`` mode, and anyone testing an adapter of their own);
- ``cli/``: ``python -m gsd_lab``, one module per command; ``evaluate`` (sharded runs);
  ``workers``: work split over worker processes, one intra-op thread each.

The public surface: the names below, importable from ``gsd_lab`` itself (loaded on first use, so
``import gsd_lab`` stays cheap). Everything else is the lab's own and may change between
versions.

- decoding: ``generate`` (one image), ``generate_batch`` with ``DecodeRequest`` (several per
  forward), ``DecodingMethod`` (what to run), ``DecodeResult`` (tokens, NFE, acceptance,
  distortion, times);
- a new acceptance rule: its gsd_core-style rule plus one ``AcceptanceSpec`` registered with
  ``register_acceptance`` (tests/lab/decode/test_acceptance_extension.py);
- models: ``load_model`` (adapters by name), ``load_image_model`` (adapter, prompts, decoder
  and quality proxies), ``CausalLMAdapter`` (the interface a new model implements);
- runs: ``RunCache`` (configurations x prompts x seeds, with worker processes) and its
  ``Recording`` settings;
- the engine's ``verify``: gsd_core's ``verify``, bit for bit, with one host sync.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

PUBLIC = {  # name: the module that defines it
    "generate": "gsd_lab.decode.loop",
    "DecodeResult": "gsd_lab.decode.loop",
    "generate_batch": "gsd_lab.decode.batch",
    "DecodeRequest": "gsd_lab.decode.batch",
    "DecodingMethod": "gsd_lab.decode.methods",
    "AcceptanceSpec": "gsd_lab.decode.acceptance",
    "register_acceptance": "gsd_lab.decode.acceptance",
    "load_model": "gsd_lab.models",
    "CausalLMAdapter": "gsd_lab.models.adapter",
    "load_image_model": "gsd_lab.experiments.image_model",
    "RunCache": "gsd_lab.experiments.runs",
    "Recording": "gsd_lab.experiments.runs",
    "verify": "gsd_lab.engine",
}
__all__ = sorted(PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in PUBLIC:
        raise AttributeError(f"module 'gsd_lab' has no attribute {name!r}")
    return getattr(importlib.import_module(PUBLIC[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *PUBLIC])
