"""The engine's input checks, split for its one host sync: shape, dtype and device checks that
read no values (``window_shapes``, ``check_token_tensor``, ``check_uniform_tensor``,
``check_randomness``), then verdicts on the few scalars the sync reads back (``judge_*``: row-sum
extrema and minima, id and uniform ranges). They refuse what ``gsd_core.check_window`` refuses,
with its messages (tests/lab/test_engine_checks.py)."""

from __future__ import annotations

import torch
from torch import Tensor

from gsd_core import SUM_TOLERANCE, working_dtype

__all__ = ["broadcast_shapes", "check_randomness", "check_token_tensor", "check_uniform_tensor",
           "judge_probabilities", "judge_tokens", "judge_uniforms", "window_shapes",
           "working_dtype"]


def broadcast_shapes(*shapes: tuple[int, ...]) -> torch.Size:
    """The shape the given shapes broadcast to (numpy's rule: aligned from the right, each size
    equal or 1), as ``torch.broadcast_shapes``; RuntimeError when they do not broadcast. Plain
    Python: no aten op (each is a launch), and torch's own imports SymPy on first use."""
    ndim = max((len(shape) for shape in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for axis, size in enumerate(shape, ndim - len(shape)):
            if size == 1:
                continue
            if out[axis] == 1:
                out[axis] = size
            elif out[axis] != size:
                raise RuntimeError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
    return torch.Size(out)


def _float_rows(x: object, name: str) -> None:
    if not isinstance(x, Tensor) or not x.is_floating_point():
        got = x.dtype if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(
            f"{name} must be a floating-point torch.Tensor of probabilities, got {got}")
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"{name} must have a non-empty last (vocabulary) dimension, "
                         f"got shape {tuple(x.shape)}")


def _same_device(x: Tensor, device: torch.device, name: str, reference: str = "p") -> None:
    if x.device != device:
        raise ValueError(f"{name} is on {x.device} but {reference} is on {device}: "
                         "put them on one device")


def window_shapes(p: object, q: object, draft_tokens: object) -> tuple[torch.Size, int]:
    """The window's shape checks (no values read): the batch shape and the number L of drafts."""
    if not isinstance(p, Tensor) or not isinstance(q, Tensor) or p.ndim < 2 or q.ndim < 2:
        raise ValueError("p and q must be tensors of shape [..., L, V] (p may have L + 1 rows)")
    window = q.shape[-2]
    if p.shape[-2] not in (window, window + 1):
        raise ValueError(f"p must have L or L + 1 rows for L = {window} drafts, got {p.shape[-2]}")
    if not isinstance(draft_tokens, Tensor) or draft_tokens.ndim < 1 or (
            draft_tokens.shape[-1] != window):
        raise ValueError(f"draft_tokens must have shape [..., L={window}]")
    _float_rows(p, "p")
    _float_rows(q, "q")
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"p and q must share the vocabulary size (last dim): {p.shape[-1]} vs {q.shape[-1]}")
    _same_device(q, p.device, "q")
    check_token_tensor(draft_tokens, p.device, "draft_tokens")
    try:
        batch = broadcast_shapes(p.shape[:-2], q.shape[:-2], draft_tokens.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"batch shapes do not match: p {tuple(p.shape)}, q {tuple(q.shape)}, "
            f"drafts {tuple(draft_tokens.shape)}") from None
    return batch, window


def check_token_tensor(tokens: object, device: torch.device, name: str = "token") -> Tensor:
    """Token ids as an int64 tensor on ``device``; values unchecked (``judge_tokens``)."""
    if not isinstance(tokens, Tensor):
        raise ValueError(f"{name} must be an int or an integer tensor, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    _same_device(tokens, device, name)
    return tokens if tokens.dtype == torch.int64 else tokens.long()


def check_uniform_tensor(uniforms: object, shape: tuple[int, ...] | None, device: torch.device,
                         name: str = "uniforms", reference: str = "p") -> Tensor:
    """dtype (float32 or float64), shape (None: any) and device of uniforms; values unchecked."""
    if not isinstance(uniforms, Tensor) or uniforms.dtype not in (torch.float32, torch.float64):
        kind = uniforms.dtype if isinstance(uniforms, Tensor) else type(uniforms).__name__
        raise ValueError(f"{name} must be a float32 or float64 tensor of U[0, 1) draws, got "
                         f"{kind} (a 16-bit uniform has steps of 2^-8 to 2^-11 near 1)")
    if shape is not None and tuple(uniforms.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(uniforms.shape)}")
    _same_device(uniforms, device, name, reference)
    return uniforms


def check_randomness(uniforms: object, generator: object, device: torch.device) -> None:
    """One source of randomness: uniforms or a generator (on p's device type), not both."""
    if uniforms is not None and generator is not None:
        raise ValueError("give uniforms or a generator, not both (the generator would be ignored)")
    if generator is not None and torch.device(generator.device).type != device.type:
        raise ValueError(f"generator is on {generator.device} but p is on {device}")


def judge_probabilities(name: str, dtype: torch.dtype, low_sum: float, high_sum: float,
                        low_entry: float) -> None:
    """Raise unless row sums in [low_sum, high_sum] are 1 within ``dtype``'s tolerance and the
    smallest entry ``low_entry`` is >= 0 (NaN and inf fail)."""
    if not all(v == v and abs(v) != float("inf") for v in (low_sum, high_sum, low_entry)):
        raise ValueError(f"{name} contains NaN or inf")
    if low_entry < 0:
        raise ValueError(f"{name} has negative entries: not a probability distribution")
    worst, tol = max(abs(low_sum - 1), abs(high_sum - 1)), SUM_TOLERANCE[dtype]
    if worst > tol:
        raise ValueError(
            f"{name} rows must sum to 1 over the last dimension (tolerance {tol:g} for "
            f"{dtype}); worst row is off by {worst:.3g} (renormalise with "
            "p / p.sum(-1, keepdim=True))")


def judge_tokens(name: str, vocab_size: int, low: float, high: float) -> None:
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{name} has ids out of range [0, {vocab_size}): min {int(low)}, max {int(high)}")


def judge_uniforms(low: float, high: float) -> None:
    if not (low >= 0 and high < 1):  # NaN fails both comparisons
        raise ValueError(f"uniforms must lie in [0, 1) and not be NaN: min {low}, max {high}")
