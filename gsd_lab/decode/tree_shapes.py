"""Token-tree shapes chosen for the cost of a forward (Sequoia-style, arXiv 2402.12374).

A shape (k_1 .. k_D) at window L (``DecodingMethod(tree=..., window=L)``) feeds 1 + N tokens per
forward, N = ``gsd_core.tree_size(shape, L - D)``. From positional acceptance A [L, K],
A[t, j - 1] = the probability that one of the first j candidates at depth t + 1 is accepted given
the walk reached depth t + 1 (recursive rejection's first j stages are the j-candidate
verifier, so one wide run measures every j <= its width), the expected tokens committed per
forward, taking the depths' outcomes as independent, are

    E(shape, L) = 1 + sum_{t=1}^{L} prod_{d <= t} A[d - 1, k_d - 1]      (k_d = 1 past depth D)

and the modelled time per committed token is cost(1 + N) / E, cost the roofline's
(``gsd_lab.accounting.roofline``). ``ranked_shapes`` scores every shape up to a depth and width
under a token budget, best first. The independence across depths is the model's simplification
(Sequoia's positional acceptance vector makes the same one).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import Tensor

from gsd_core import tree_size

from ..accounting.roofline import Roofline


@dataclass(frozen=True)
class ScoredShape:
    """shape, window, tokens per forward (1 + N), expected tokens committed per forward, and the
    modelled weight-read times per committed token."""

    shape: tuple[int, ...]
    window: int
    tokens: int
    expected_committed: float
    cost_per_token: float


def tree_tokens(shape: tuple[int, ...], window: int) -> int:
    """1 + N: the head's token and the tree's nodes (the shape cut to ``window`` depths)."""
    cut = shape[:window]
    return 1 + tree_size(cut, window - len(cut))


def expected_committed(shape: tuple[int, ...], window: int, acceptance: Tensor) -> float:
    """E(shape, L) of the module docstring; acceptance [>= L, K] float64."""
    if acceptance.shape[0] < window:
        raise ValueError(f"acceptance covers {acceptance.shape[0]} depths, the window {window}")
    total, reach = 1.0, 1.0
    for t in range(window):
        k = shape[t] if t < len(shape) else 1
        if k > acceptance.shape[1]:
            raise ValueError(f"acceptance measured up to {acceptance.shape[1]} candidates, not {k}")
        reach *= float(acceptance[t, k - 1])
        total += reach
    return total


def positional_acceptance(walks: list[tuple[list[int], list[int | None]]], depth: int,
                          width: int) -> Tensor:
    """A [depth, width] from walks: each walk as (the widths of the depths it visited, the rank
    accepted at each, None where all were rejected). A[t, j - 1] = the share of visits to depth
    t + 1 with at least j candidates whose accepted rank is < j; NaN where none."""
    hits = torch.zeros(depth, width, dtype=torch.float64)
    seen = torch.zeros(depth, width, dtype=torch.float64)
    for widths, ranks in walks:
        for t, (k, rank) in enumerate(zip(widths, ranks)):
            if t >= depth:
                break
            for j in range(1, min(k, width) + 1):
                seen[t, j - 1] += 1
                hits[t, j - 1] += rank is not None and rank < j
    return torch.where(seen > 0, hits / seen.clamp(min=1), torch.nan)


def ranked_shapes(
    acceptance: Tensor, roofline: Roofline, windows: list[int], budget: float,
    max_depth: int = 3, max_width: int | None = None,
) -> list[ScoredShape]:
    """Every shape of depth <= ``max_depth`` and widths <= ``max_width`` (default: those measured)
    at each window, feeding at most ``budget`` tokens, by modelled time per committed token.
    Shapes deeper than a window are skipped there (cut to the window they repeat a shorter one)."""
    width = acceptance.shape[1] if max_width is None else max_width
    out = []
    for window in windows:
        for depth in range(1, min(max_depth, window) + 1):
            for shape in itertools.product(range(1, width + 1), repeat=depth):
                if shape[-1] == 1 and depth > 1:
                    continue  # the same tree as the shorter shape
                tokens = tree_tokens(shape, window)
                if tokens > budget or all(k == 1 for k in shape):
                    continue
                expected = expected_committed(shape, window, acceptance)
                if expected != expected:  # NaN: a depth the measurement never reached
                    continue
                cost = roofline.forward_cost(tokens) / expected
                out.append(ScoredShape(shape, window, tokens, expected, cost))
    return sorted(out, key=lambda s: s.cost_per_token)
