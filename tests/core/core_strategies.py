"""Hypothesis strategies for the gsd_core property tests.

Probability vectors come from integer weights divided by their sum (float64), so exact zeros,
exact ties, p == q and one-hot vectors are all reachable and shrink to readable examples.
``vocab_sizes`` is shared (``st.shared``) so p, q and partitions drawn in one test agree on V.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

MAX_WEIGHT = 20


def vocab_sizes(min_size: int = 1, max_size: int = 8) -> st.SearchStrategy[int]:
    return st.shared(st.integers(min_size, max_size), key="V")


def weights_to_probs(weights: list[int]) -> torch.Tensor:
    w = torch.tensor(weights, dtype=torch.float64)
    return w / w.sum()


@st.composite
def prob_vectors(draw: st.DrawFn, vocab: int | None = None, max_weight: int = MAX_WEIGHT) -> torch.Tensor:
    """A float64 probability vector [V]: integer weights (at least one positive) normalised."""
    size = vocab if vocab is not None else draw(vocab_sizes())
    kind = draw(st.sampled_from(["weights", "weights", "weights", "one_hot", "uniform"]))
    if kind == "one_hot":
        weights = [0] * size
        weights[draw(st.integers(0, size - 1))] = 1
    elif kind == "uniform":
        weights = [1] * size
    else:
        weights = draw(st.lists(st.integers(0, max_weight), min_size=size, max_size=size))
        if sum(weights) == 0:
            weights[draw(st.integers(0, size - 1))] = 1
    return weights_to_probs(weights)


@st.composite
def prob_pairs(draw: st.DrawFn, min_vocab: int = 1, max_vocab: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, q) over one vocabulary; sometimes q == p exactly."""
    size = draw(st.integers(min_vocab, max_vocab))
    p = draw(prob_vectors(size))
    q = p.clone() if draw(st.integers(0, 7)) == 0 else draw(prob_vectors(size))
    return p, q


@st.composite
def partitions(draw: st.DrawFn, vocab: int) -> torch.Tensor:
    """Integer labels [V] of a partition of range(V), relabelled to 0..K-1 in order of first use."""
    raw = draw(st.lists(st.integers(0, vocab - 1), min_size=vocab, max_size=vocab))
    relabel: dict[int, int] = {}
    return torch.tensor([relabel.setdefault(x, len(relabel)) for x in raw], dtype=torch.long)


@st.composite
def pairs_with_partition(draw: st.DrawFn, max_vocab: int = 8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    p, q = draw(prob_pairs(max_vocab=max_vocab))
    return p, q, draw(partitions(p.shape[-1]))


def coarsen(labels: torch.Tensor, merge: list[int]) -> torch.Tensor:
    """Merge clusters: cluster k goes to merge[k] (a function on cluster ids), relabelled 0..K'-1."""
    merged = torch.tensor(merge, dtype=torch.long)[labels]
    _, relabelled = torch.unique(merged, return_inverse=True)
    return relabelled
