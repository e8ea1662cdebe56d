"""Save and load the stand-in's weights: safetensors only (never pickle), clear errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn


class WeightFileError(ValueError):
    """A weight or config file exists but cannot be read (corrupted, truncated, wrong keys)."""


def save_module(module: nn.Module, path: Path, dtype: torch.dtype | None = None,
                metadata: dict[str, str] | None = None) -> None:
    from safetensors.torch import save_file

    state = {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).contiguous()
             for k, v in module.state_dict().items()}
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
        raise WeightFileError(f"stand-in weight file {path} is corrupted or unreadable: {err}") from err


def load_into(module: nn.Module, path: Path) -> nn.Module:
    """Load a safetensors file into ``module`` (float32), checking keys and shapes."""
    state = load_state(path)
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    bad_shapes = [k for k in own if k in state and own[k].shape != state[k].shape]
    if missing or unexpected or bad_shapes:
        raise WeightFileError(
            f"stand-in weight file {path} does not match the model: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}, wrong shapes {bad_shapes[:5]}")
    module.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})
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
