"""Input checks shared by the public functions: every bad input raises a ``ValueError`` that
names the argument and the problem, never a silent wrong answer.

Checks that read tensor values reduce them on the device to a few scalars and read those
back at once (one host sync per call, fused across arguments where a function takes several).

Row sums. A probability vector must sum to 1 within the tolerance of the precision it was
made in: 1e-9 for float64, 1e-4 for float32, 2e-2 for float16 / bfloat16. A float64 tensor
whose every entry is exactly a float32 number (e.g. a float32 softmax cast to float64 for
exact arithmetic) was made in float32 and gets the float32 tolerance; nothing is
renormalised. Rows off by more (e.g. 1e-3), negative entries, NaN and inf are rejected.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Row sums must be 1 within this tolerance, by the precision the distribution was made in.
_SUM_TOLERANCE = {
    torch.float64: 1e-9,
    torch.float32: 1e-4,
    torch.float16: 2e-2,
    torch.bfloat16: 2e-2,
}


def working_dtype(*tensors: Tensor) -> torch.dtype:
    """float64 if any input is float64, else float32 (16-bit inputs are computed in float32)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def host_values(summary: list[Tensor]) -> list[float]:
    """Read 0-dim tensors back to the host with one sync (stacked, exactly: ``_exact_together``)."""
    return torch.stack(_exact_together(summary)).tolist() if summary else []


_FEW = 4096  # up to this many values travel to the host as they are, without reductions


def _exact_together(parts: list[Tensor]) -> list[Tensor]:
    """``parts`` made safe to cat/stack into one tensor without rounding any value.

    cat/stack promote to the widest dtype present: with 16-bit floats and no float64, integer
    ids and support sizes would round (bfloat16 holds integers exactly only up to 256,
    float16 up to 2048, float32 up to 2^24). When a part is floating but none is float64,
    the first part is cast to float64, so that the promotion is to float64: exact for every
    float and for integers up to 2^53. All-integer parts promote to int64 (exact), and with
    a float64 part present nothing is cast (no extra op)."""
    floating = any(t.is_floating_point() for t in parts)
    if not floating or any(t.dtype == torch.float64 for t in parts):
        return parts
    return [parts[0].double(), *parts[1:]]


def host_ranges(parts: list[Tensor]) -> list[tuple[float, float] | None]:
    """(min, max) of each tensor, NaN if it holds a NaN, None if it is empty; one host sync
    for all. Few values of 1-D tensors are read back as they are (one concatenation, no
    per-tensor reductions); otherwise each is reduced on its device first. Values come back
    exactly, whatever mix of dtypes (``_exact_together``)."""
    nan = float("nan")
    ranges: list[tuple[float, float] | None] = []
    if all(t.ndim == 1 for t in parts) and sum(t.numel() for t in parts) <= _FEW:
        values = torch.cat(_exact_together(parts)).tolist() if parts else []
        for t in parts:
            chunk, values = values[: t.numel()], values[t.numel():]
            if not chunk:
                ranges.append(None)
            elif any(v != v for v in chunk):
                ranges.append((nan, nan))
            else:
                ranges.append((min(chunk), max(chunk)))
        return ranges
    filled = [t for t in parts if t.numel()]
    extrema = [m for t in filled for m in torch.aminmax(t)]
    values = torch.stack(_exact_together(extrema)).tolist() if filled else []
    for t in parts:
        if t.numel():
            ranges.append((values[0], values[1]))
            values = values[2:]
        else:
            ranges.append(None)
    return ranges


def check_device(x: Tensor, device: torch.device, name: str, reference: str = "p") -> None:
    if x.device != device:
        raise ValueError(f"{name} is on {x.device} but {reference} is on {device}: put them on one device")


def check_probability_tensor(x: object, name: str) -> Tensor:
    """The checks of ``check_probabilities`` that need no values: a float tensor [..., V >= 1]."""
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor of probabilities, got {x.dtype}")
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"{name} must have a non-empty last (vocabulary) dimension, got shape {tuple(x.shape)}")
    return x


def probability_parts(x: Tensor) -> list[Tensor]:
    """Row sums and row minima of ``x``, for ``host_ranges`` and ``judge_probabilities``."""
    return [x.sum(-1), x.amin(-1)]


def judge_probabilities(x: Tensor, name: str, ranges: list[tuple[float, float] | None]) -> None:
    """Raise the ``ValueError`` that the ranges of ``probability_parts`` show, if any."""
    sums, minima = ranges
    if sums is None:  # no rows
        return
    values = (*sums, minima[0])
    if not all(v == v and abs(v) != float("inf") for v in values):
        raise ValueError(f"{name} contains NaN or inf")
    if minima[0] < 0:
        raise ValueError(f"{name} has negative entries: not a probability distribution")
    worst = max(abs(sums[0] - 1), abs(sums[1] - 1))
    tol = _SUM_TOLERANCE.get(x.dtype, 1e-4)
    if worst > tol:
        made_in = _made_in(x)
        if made_in is not None and worst <= _SUM_TOLERANCE[made_in]:
            return
        raise ValueError(
            f"{name} rows must sum to 1 over the last dimension (tolerance {tol:g} for {x.dtype}"
            + (f", {_SUM_TOLERANCE[made_in]:g} for values made in {made_in}" if made_in is not None else "")
            + f"); worst row is off by {worst:.3g} (renormalise with p / p.sum(-1, keepdim=True) if intended)"
        )


def _made_in(x: Tensor) -> torch.dtype | None:
    """float32 when a float64 ``x`` holds only float32 numbers (made in float32), else None.
    Read only when a row sum is off by more than the float64 tolerance."""
    if x.dtype == torch.float64 and bool((x.float().double() == x).all()):
        return torch.float32
    return None


def check_probabilities(x: Tensor, name: str) -> Tensor:
    """Check that ``x`` holds probability vectors over its last dimension and return it
    upcast to float32 or float64 (a new tensor is made only when the dtype changes)."""
    x = check_probability_tensor(x, name)
    judge_probabilities(x, name, host_ranges(probability_parts(x)))
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def check_pair(p: Tensor, q: Tensor, validate: bool = True) -> tuple[Tensor, Tensor]:
    """Validate target ``p`` and draft ``q`` (one host sync for both) and bring them to one
    working dtype. Their shapes must broadcast, share the vocabulary size V (last dimension)
    and live on one device."""
    p, q = check_probability_tensor(p, "p"), check_probability_tensor(q, "q")
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(f"p and q must share the vocabulary size (last dim): {p.shape[-1]} vs {q.shape[-1]}")
    check_device(q, p.device, "q")
    try:
        torch.broadcast_shapes(p.shape, q.shape)
    except RuntimeError:
        raise ValueError(f"p and q shapes do not broadcast: {tuple(p.shape)} vs {tuple(q.shape)}") from None
    if validate:
        ranges = host_ranges(probability_parts(p) + probability_parts(q))
        judge_probabilities(p, "p", ranges[:2])
        judge_probabilities(q, "q", ranges[2:])
    dtype = working_dtype(p, q)
    return p.to(dtype), q.to(dtype)


def check_token_tensor(tokens: Tensor | int, device: torch.device, name: str = "token") -> Tensor:
    """Token ids as an int64 tensor on ``device`` (a Python int is made there), values unchecked."""
    if isinstance(tokens, int) and not isinstance(tokens, bool):
        return torch.tensor(tokens, device=device)
    if not isinstance(tokens, Tensor):
        raise ValueError(f"{name} must be an int or an integer tensor, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    check_device(tokens, device, name)
    return tokens if tokens.dtype == torch.int64 else tokens.long()


def judge_tokens(values: tuple[float, float] | None, vocab_size: int, name: str = "token") -> None:
    """Raise unless the (min, max) of token ids lies in [0, vocab_size)."""
    if values is not None and (values[0] < 0 or values[1] >= vocab_size):
        raise ValueError(
            f"{name} has ids out of range [0, {vocab_size}): min {int(values[0])}, max {int(values[1])}"
        )


def check_tokens(tokens: Tensor | int, vocab_size: int, name: str = "token", device: torch.device | None = None) -> Tensor:
    """Token ids as an int64 tensor, each in [0, vocab_size), on ``device`` (default: CPU for
    ints, the tensor's own device otherwise)."""
    if device is None:
        device = tokens.device if isinstance(tokens, Tensor) else torch.device("cpu")
    tokens = check_token_tensor(tokens, device, name)
    judge_tokens(host_ranges([tokens.reshape(-1)])[0], vocab_size, name)
    return tokens


def check_uniform_tensor(uniforms: object, shape: tuple[int, ...], device: torch.device) -> Tensor:
    """Shape, dtype and device of the ``uniforms`` of ``verify`` (values: ``judge_uniforms``)."""
    if not isinstance(uniforms, Tensor) or not uniforms.is_floating_point():
        kind = uniforms.dtype if isinstance(uniforms, Tensor) else type(uniforms).__name__
        raise ValueError(f"uniforms must be a floating-point tensor of U[0, 1) draws, got {kind}")
    if tuple(uniforms.shape) != tuple(shape):
        raise ValueError(f"uniforms must have shape {tuple(shape)}, got {tuple(uniforms.shape)}")
    check_device(uniforms, device, "uniforms")
    return uniforms


def judge_uniforms(values: tuple[float, float] | None) -> None:
    """Raise unless the (min, max) of uniforms lies in [0, 1)."""
    if values is not None and not (values[0] >= 0 and values[1] < 1):  # NaN fails both comparisons
        raise ValueError(f"uniforms must lie in [0, 1) and not be NaN: min {values[0]}, max {values[1]}")


def check_labels(labels: Tensor, vocab_size: int) -> Tensor:
    """Partition labels: integer cluster ids >= 0, last dimension V, as int64.

    A partition of V tokens has at most V clusters; labels with ids >= V are relabelled to
    0 .. K-1 in increasing order (``torch.unique``), so memory never follows the largest id."""
    if not isinstance(labels, Tensor) or labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError("partition labels must be an integer tensor of cluster ids, one per token")
    if labels.ndim < 1 or labels.shape[-1] != vocab_size:
        raise ValueError(
            f"partition labels must have last dimension V={vocab_size}, got shape {tuple(labels.shape)}"
        )
    labels = labels.long()
    if labels.numel() == 0:
        return labels
    low, high = host_values(list(torch.aminmax(labels)))
    if low < 0:
        raise ValueError("partition labels must be non-negative cluster ids")
    if high >= vocab_size:
        labels = torch.unique(labels, return_inverse=True)[1]
    return labels


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
