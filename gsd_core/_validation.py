"""Input checks shared by the public functions: every bad input raises a ``ValueError`` that
names the argument and the problem, never a silent wrong answer."""

from __future__ import annotations

import torch
from torch import Tensor

# Row sums must be 1 within this tolerance, by the dtype the caller handed in.
_SUM_TOLERANCE = {
    torch.float64: 1e-9,
    torch.float32: 1e-4,
    torch.float16: 2e-2,
    torch.bfloat16: 2e-2,
}


def working_dtype(*tensors: Tensor) -> torch.dtype:
    """float64 if any input is float64, else float32 (16-bit inputs are computed in float32)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def check_probabilities(x: Tensor, name: str) -> Tensor:
    """Check that ``x`` holds probability vectors over its last dimension and return it
    upcast to float32 or float64 (a new tensor is made only when the dtype changes)."""
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor of probabilities, got {x.dtype}")
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"{name} must have a non-empty last (vocabulary) dimension, got shape {tuple(x.shape)}")
    tol = _SUM_TOLERANCE.get(x.dtype, 1e-4)
    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()
    sums = x.sum(-1)
    # Entries are compared with 1 below, so a finite row sum means no NaN or inf entry.
    if not torch.isfinite(sums).all():
        raise ValueError(f"{name} contains NaN or inf")
    if x.amin() < 0:
        raise ValueError(f"{name} has negative entries: not a probability distribution")
    worst = (sums - 1).abs().max().item() if sums.numel() else 0.0
    if worst > tol:
        raise ValueError(
            f"{name} rows must sum to 1 over the last dimension (tolerance {tol:g} for this dtype); "
            f"worst row is off by {worst:.3g}"
        )
    return x


def check_pair(p: Tensor, q: Tensor, validate: bool = True) -> tuple[Tensor, Tensor]:
    """Validate target ``p`` and draft ``q`` and bring them to one working dtype.

    Their shapes must broadcast and share the vocabulary size V (last dimension)."""
    if validate:
        p = check_probabilities(p, "p")
        q = check_probabilities(q, "q")
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(f"p and q must share the vocabulary size (last dim): {p.shape[-1]} vs {q.shape[-1]}")
    try:
        torch.broadcast_shapes(p.shape, q.shape)
    except RuntimeError:
        raise ValueError(f"p and q shapes do not broadcast: {tuple(p.shape)} vs {tuple(q.shape)}") from None
    dtype = working_dtype(p, q)
    return p.to(dtype), q.to(dtype)


def check_tokens(tokens: Tensor | int, vocab_size: int, name: str = "token") -> Tensor:
    """Token ids as an int64 tensor, each in [0, vocab_size)."""
    if isinstance(tokens, int):
        tokens = torch.tensor(tokens)
    if not isinstance(tokens, Tensor):
        raise ValueError(f"{name} must be an int or an integer tensor, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    tokens = tokens.long()
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(
            f"{name} has ids out of range [0, {vocab_size}): min {tokens.min().item()}, max {tokens.max().item()}"
        )
    return tokens


def check_labels(labels: Tensor, vocab_size: int) -> Tensor:
    """Partition labels: integer cluster ids >= 0, last dimension V."""
    if not isinstance(labels, Tensor) or labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError("partition labels must be an integer tensor of cluster ids, one per token")
    if labels.ndim < 1 or labels.shape[-1] != vocab_size:
        raise ValueError(
            f"partition labels must have last dimension V={vocab_size}, got shape {tuple(labels.shape)}"
        )
    if labels.numel() and labels.min() < 0:
        raise ValueError("partition labels must be non-negative cluster ids")
    return labels.long()


def check_acceptance_scale(scale: float) -> float:
    """The acceptance scale s of min(1, s * p(C)/q(C)): a finite real number > 0."""
    if isinstance(scale, Tensor) and scale.numel() == 1:
        scale = scale.item()
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"acceptance_scale must be a real number > 0, got {type(scale).__name__}")
    scale = float(scale)
    if not (scale > 0 and scale < float("inf")):
        raise ValueError(f"acceptance_scale must be finite and > 0, got {scale!r}")
    return scale
