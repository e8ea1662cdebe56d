"""Save and load the stand-in's weights: safetensors only (never pickle), clear errors
naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn


class WeightFileError(ValueError):
    """A weight or config file exists but cannot be read (corrupted, truncated, wrong keys)."""


# Storage precision of the stand-in's weights: float16 (11-bit significand, against bfloat16's
# 8) holds every stand-in weight (|w| <= 1.34, far below float16's 65504; the ~0.4 % below its
# smallest normal 6.1e-5 keep an absolute error <= 3e-8). Loading widens it to float32 / float64
# exactly, so the float64 forward is exact for the weights as stored.
STORAGE_DTYPE = torch.float16


def storage_state(
    state: dict[str, torch.Tensor], dtype: torch.dtype = STORAGE_DTYPE, name: str = "module"
) -> dict[str, torch.Tensor]:
    """The floating tensors of ``state`` rounded to ``dtype`` (others unchanged); ValueError
    naming the tensor if one does not fit (non-finite, or beyond ``dtype``'s range)."""
    out = {}
    for key, value in state.items():
        if value.is_floating_point():
            stored = value.detach().to(dtype)
            if not bool(torch.isfinite(stored).all()):
                worst = float(value.detach().abs().max())
                raise ValueError(
                    f"{name}: tensor {key} does not fit {dtype} (max |w| = {worst:.4g})"
                )
            value = stored
        out[key] = value.contiguous()
    return out


def save_module(
    module: nn.Module,
    path: Path,
    dtype: torch.dtype = STORAGE_DTYPE,
    metadata: dict[str, str] | None = None,
) -> None:
    """Write ``module``'s state as safetensors with floating tensors in ``dtype``, and round the
    module's own tensors to the stored values, so that what runs next equals what loads."""
    from safetensors.torch import save_file

    own = module.state_dict()
    state = storage_state(own, dtype, str(path))
    with torch.no_grad():
        for key, value in state.items():
            if value.is_floating_point():
                own[key].copy_(value.to(own[key].dtype))
    save_file(state, str(path), metadata=metadata)


def load_state(path: Path) -> dict[str, torch.Tensor]:
    """Read a safetensors file; FileNotFoundError or WeightFileError naming the file."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"stand-in weight file missing: {path}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise WeightFileError(
            f"stand-in weight file {path} is corrupted or unreadable: {err}"
        ) from err


def load_into(
    module: nn.Module, path: Path, *, dtype: torch.dtype | None = None, assign: bool = False
) -> nn.Module:
    """Load a safetensors file into ``module``, checking keys and shapes; stored tensors are
    cast to the module's dtypes (float16 storage widens exactly), floating ones to ``dtype``
    when given. ``assign``: the loaded tensors replace the module's (no copy into them; for a
    module built without initialising its parameters, whose every state entry is loaded here)."""
    state = load_state(path)
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    bad_shapes = [k for k in own if k in state and own[k].shape != state[k].shape]
    if missing or unexpected or bad_shapes:
        raise WeightFileError(
            f"stand-in weight file {path} does not match the model: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}, wrong shapes {bad_shapes[:5]}"
        )
    widened = {
        k: v.to(dtype if dtype is not None and v.is_floating_point() else own[k].dtype)
        for k, v in state.items()
    }
    module.load_state_dict(widened, assign=assign)
    return module


def read_json(path: Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"stand-in config file missing: {path}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise WeightFileError(f"stand-in config file {path} is corrupted: {err}") from err


def write_json(path: Path, obj: dict) -> None:
    Path(path).write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")
