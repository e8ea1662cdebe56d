"""The engine's input checks, split for its one host sync: shape, dtype and device checks that
read no value and run no aten op (``window_shapes``, ``check_token_tensor``,
``check_uniform_tensor``, ``check_randomness``; where one fails, gsd_core's own check runs and
names the problem), then verdicts on the few scalars the sync reads back (``judge_*``: row-sum
extrema and minima, id and uniform ranges). They refuse what ``gsd_core.check_window`` refuses,
with its messages (tests/lab/engine/test_engine_checks.py)."""

from __future__ import annotations

import torch
from torch import Tensor

from gsd_core import SUM_TOLERANCE, check_tokens, check_uniforms, check_window, working_dtype

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


def _ids(x: Tensor) -> bool:
    """An integer dtype, as gsd_core's checks read it (not floating, complex or bool)."""
    return not (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool)


def window_shapes(p: object, q: object, draft_tokens: object) -> tuple[torch.Size, int]:
    """The batch shape and the number L of drafts of a window whose shapes, dtypes and devices
    pass ``gsd_core.check_window``'s checks, read without a value; otherwise that check runs and
    names the problem."""
    if (isinstance(p, Tensor) and isinstance(q, Tensor) and isinstance(draft_tokens, Tensor)
            and min(p.ndim, q.ndim) >= 2 and draft_tokens.ndim >= 1
            and p.is_floating_point() and q.is_floating_point()
            and p.shape[-1] == q.shape[-1] >= 1 and p.shape[-2] - q.shape[-2] in (0, 1)
            and draft_tokens.shape[-1] == q.shape[-2] and _ids(draft_tokens)
            and p.device == q.device == draft_tokens.device):
        try:
            batch = broadcast_shapes(p.shape[:-2], q.shape[:-2], draft_tokens.shape[:-1])
            return batch, q.shape[-2]
        except RuntimeError:
            pass
    check_window(p, q, draft_tokens)
    raise AssertionError("gsd_core.check_window passed a window window_shapes refuses")


def check_token_tensor(tokens: object, device: torch.device, name: str = "token") -> Tensor:
    """Token ids as an int64 tensor on ``device``; values unchecked (``judge_tokens``)."""
    if not (isinstance(tokens, Tensor) and _ids(tokens) and tokens.device == device):
        check_tokens(tokens, 0, device, name)  # names the problem before reading a value
        raise AssertionError(f"gsd_core.check_tokens passed {name}, check_token_tensor did not")
    return tokens if tokens.dtype == torch.int64 else tokens.long()


def check_uniform_tensor(uniforms: object, shape: tuple[int, ...] | None, device: torch.device,
                         name: str = "uniforms", reference: str = "p") -> Tensor:
    """dtype (float32 or float64), shape (None: any) and device of uniforms; values unchecked
    (``judge_uniforms``)."""
    if not (isinstance(uniforms, Tensor) and uniforms.dtype in (torch.float32, torch.float64)
            and (shape is None or tuple(uniforms.shape) == tuple(shape))
            and uniforms.device == device):
        check_uniforms(uniforms, shape, device, name, reference)  # names the problem
        raise AssertionError(f"gsd_core.check_uniforms passed {name}, check_uniform_tensor did not")
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
    """Raise gsd_core's error unless the ids' range [low, high] lies in [0, vocab_size)."""
    if low < 0 or high >= vocab_size:
        check_tokens(torch.tensor([int(low), int(high)]), vocab_size, torch.device("cpu"), name)
        raise AssertionError(f"gsd_core.check_tokens passed a range judge_tokens refuses: {name}")


def judge_uniforms(low: float, high: float) -> None:
    """Raise gsd_core's error unless the uniforms' range [low, high] lies in [0, 1)."""
    if not (low >= 0 and high < 1):  # NaN fails both comparisons
        check_uniforms(torch.tensor([low, high], dtype=torch.float64), None, torch.device("cpu"))
        raise AssertionError("gsd_core.check_uniforms passed a range judge_uniforms refuses")
