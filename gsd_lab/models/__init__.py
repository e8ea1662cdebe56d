"""Model adapters and the registry that the CLI, the figures and the notebooks load models by.

``load_model("standin")`` is the embedded default (weights shipped in the package);
``load_model("lumina-mgpt-7b-768", weights=DIR, vqgan=DIR)`` loads real Lumina-mGPT weights.
"""

from __future__ import annotations

from typing import Any

from .adapter import CausalLMAdapter

MODEL_NAMES = ("standin", "lumina-mgpt-7b-512", "lumina-mgpt-7b-768", "lumina-mgpt-7b-1024")


def load_model(name: str = "standin", *, weights: str | None = None, vqgan: str | None = None,
               device: str = "cpu", dtype: Any = None, **kwargs: Any):
    """Return the ready adapter for a model name in ``MODEL_NAMES``."""
    if name == "standin":
        from ..standin.adapter import load_standin

        return load_standin(device=device, **kwargs)
    if name.startswith("lumina-mgpt-7b-") and name in MODEL_NAMES:
        from .lumina_mgpt import load_lumina_mgpt

        resolution = int(name.rsplit("-", 1)[1])
        return load_lumina_mgpt(weights, vqgan_dir=vqgan, resolution=resolution, device=device,
                                dtype=dtype, **kwargs)
    raise ValueError(f"unknown model {name!r}; expected one of {MODEL_NAMES}")
