"""The engine's value checks, fused into one host sync: every argument is reduced on its device to
a few scalars (row-sum extrema, minima, id ranges), and those travel to the host together.
The verdicts are ``checks.judge_*``: the engine refuses what gsd_core refuses, with its messages
(tests/lab/engine/test_engine_checks.py)."""

from __future__ import annotations

import torch
from torch import Tensor

from .checks import judge_tokens

_FEW = 4096  # up to this many values travel to the host as they are, without reductions


def _exact_together(parts: list[Tensor]) -> list[Tensor]:
    """``parts`` made safe to cat / stack without rounding: with floats but no float64 part the
    first part becomes float64, so that the promotion is to float64 (exact for every float and
    for integers up to 2^53; bfloat16 would round ids above 256, float16 above 2048)."""
    floating = any(t.is_floating_point() for t in parts)
    if not floating or any(t.dtype == torch.float64 for t in parts):
        return parts
    return [parts[0].double(), *parts[1:]]


def host_ranges(parts: list[Tensor]) -> list[tuple[float, float] | None]:
    """(min, max) of each tensor, (NaN, NaN) if it holds a NaN, None if it is empty; one host
    sync for all. Few values of 1-D tensors travel as they are (one cat, no reductions);
    otherwise each is reduced on its device first."""
    ranges: list[tuple[float, float] | None] = []
    if all(t.ndim == 1 for t in parts) and sum(t.numel() for t in parts) <= _FEW:
        values = torch.cat(_exact_together(parts)).tolist() if parts else []
        for t in parts:
            chunk, values = values[: t.numel()], values[t.numel() :]
            nan = any(v != v for v in chunk)
            ranges.append(
                None if not chunk else (float("nan"),) * 2 if nan else (min(chunk), max(chunk))
            )
        return ranges
    filled = [t for t in parts if t.numel()]
    values = (
        torch.stack(_exact_together([m for t in filled for m in torch.aminmax(t)])).tolist()
        if filled
        else []
    )
    for t in parts:
        if t.numel():
            ranges.append((values[0], values[1]))
            values = values[2:]
        else:
            ranges.append(None)
    return ranges


def flat(x: Tensor) -> Tensor:
    """x as 1-D (no op when it already is: each op is a launch or a view on a GPU)."""
    return x if x.ndim == 1 else x.reshape(-1)


def probability_parts(x: Tensor) -> list[Tensor]:
    """Row sums and row minima of probability rows [..., V], flattened."""
    return [flat(x.sum(-1)), flat(x.amin(-1))]


def support_parts(p_rows: Tensor, support: Tensor) -> list[Tensor]:
    """What checks ``support`` [..., L, K] against p's draft rows [..., L, V] (one batch shape):
    the (min, max) of its ids, and the row extrema of r = p - (p(s) taken back off at each s).
    r = 0 iff the support holds every id with p > 0 of its row, each once: a missing positive
    id leaves r = p > 0, a repeated one r = -p < 0 (ids with p = 0 may repeat). Exact:
    p(s) - p(s) = 0."""
    safe = support.clamp(0, p_rows.shape[-1] - 1)  # in range for the reads below
    left = p_rows.scatter_add(-1, safe, p_rows.gather(-1, safe).neg())
    ids = support.new_empty(0) if not support.numel() else torch.stack(list(torch.aminmax(support)))
    return [ids, flat(left.amax(-1)), flat(left.amin(-1))]


def judge_support(ranges: list[tuple[float, float] | None], vocab: int) -> None:
    """Raise the ``ValueError`` that the ranges of ``support_parts`` show, if any."""
    if ranges[0] is not None:
        judge_tokens("support", vocab, *ranges[0])
    if ranges[1] is not None and ranges[1][1] > 0:
        raise ValueError(
            "support must hold every token id with p > 0 in its row of p[..., :L, :] "
            "(ids with p = 0 may be added): a row misses one"
        )
    if ranges[2] is not None and ranges[2][0] < 0:
        raise ValueError("support must hold each token id with p > 0 once: a row repeats one")
