"""gsd_lab: experiments for Grouped Speculative Decoding over Hugging Face causal LMs.

Subpackages, in reading order (each ``__init__`` maps its files; the map at length:
docs/lab.md): ``decode/`` (``generate``, the AR / SJD / GSD loop), ``engine/`` (gsd_core's
verification for an accelerator, ``engine.capabilities``), ``rules/`` (each rule family's lab
parts), ``accounting/`` (exact TV and W1), ``models/`` (adapters), ``standin/`` and
``digits/`` (the embedded models), ``quality/``, ``experiments/``, ``paper/`` (the figures job:
plan, decode, tables, render), ``teaching/``, ``runs/`` (the run store: sharded, resumable
runs), ``io/``, ``checks/``, ``testing/`` (tiny checkpoints) and ``cli/``; module ``workers``.

The public surface, importable from ``gsd_lab`` itself (loaded on first use); everything else is
the lab's own and may change between versions:

- decoding: ``generate``, ``generate_batch`` with ``DecodeRequest``, ``DecodingMethod``,
  ``DecodeResult``;
- a new acceptance rule: an ``AcceptanceSpec`` registered with ``register_acceptance``;
- models: ``load_model``, ``load_image_model``, ``CausalLMAdapter``;
- runs: ``RunCache`` and its ``Recording`` settings;
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
