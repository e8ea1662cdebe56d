"""LANTERN's relaxed acceptance (Jang et al., ICLR 2025, arXiv 2410.03355), a peer of GSD.

Each token x has a *latent neighbourhood* B_k(x): x, then its nearest tokens y_1, y_2, ..., k
tokens in all (``latent_neighbourhoods``). Walking B_k(x) outwards, the neighbours' target mass
is credited to x while the cumulative mass stays within the total-variation budget delta:

    m(x) = max { S_j : S_j <= delta, j = 0 .. k - 1 },   S_j = p(y_1) + ... + p(y_j),   S_0 = 0,

and a(x) = min(1, (p(x) + m(x)) / q(x)) (LANTERN's row in the table of ``rules``), residual
norm((p - q)+). Moving A(x) = {y_1 .. y_j}'s mass onto x changes p by TV = m(x) <= delta (the
paper's bound, per drafted token). The exact law (proofs/08) has TV(out, p) = alpha - alpha_SD =
sum_x min((q(x) - p(x))+, m(x)): at most TV(p, q), but *not* at most delta (delta = 1/4, TV = 1).

k counts x itself (k = 1 is SD); distances are Euclidean between embedding rows, ties by the
smaller id; delta in [0, 1]. The five readings of the paper and its released code behind these
choices: docs/core.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .checks import check_count, check_tokens
from .rules import token_residual


@dataclass(frozen=True)
class LatentNeighbourhoods:
    """B_k(x) for every token x: ``index`` int64 [V, k] (column 0 is x itself, then the others
    by distance, ties by id) and ``valid`` bool [V, k] (False past ``max_distance``; a prefix
    of each row). Build with ``latent_neighbourhoods``."""

    index: Tensor
    valid: Tensor

    def __post_init__(self) -> None:
        index, valid = self.index, self.valid
        if not (isinstance(index, Tensor) and index.dtype == torch.int64 and index.ndim == 2
                and index.shape[1] >= 1):
            raise ValueError("index must be an int64 tensor [V, k], k >= 1")
        if not isinstance(valid, Tensor) or valid.dtype != torch.bool or valid.shape != index.shape:
            raise ValueError(f"valid must be a bool tensor of index's shape {tuple(index.shape)}")
        if not bool((index[:, 0] == torch.arange(index.shape[0], device=index.device)).all()):
            raise ValueError("column 0 of index must be the token itself (B_k(x) starts at x)")
        check_tokens(index, index.shape[0], index.device, "index")
        if not bool(valid[:, 0].all()):
            raise ValueError("the token itself (column 0) must be valid")

    @property
    def vocab_size(self) -> int:
        return self.index.shape[0]

    @property
    def k(self) -> int:
        return self.index.shape[1]


def latent_neighbourhoods(
    embeddings: Tensor, k: int, max_distance: float | None = None, *, chunk_elements: int = 1 << 22
) -> LatentNeighbourhoods:
    """The k-token latent neighbourhoods B_k(x) of all V tokens from ``embeddings`` [V, D].

    Distances d(x, y) = ||e_x - e_y||_2 in float64, computed directly (no |a|^2 + |b|^2 - 2ab
    expansion: ties and thresholds exact for integer embeddings); rows stably sorted (equal
    distances in id order), x forced first; k clipped to V. y != x is valid iff
    d(x, y) <= max_distance (None: all are). ``chunk_elements`` distances at a time."""
    if not (isinstance(embeddings, Tensor) and embeddings.ndim == 2
            and embeddings.is_floating_point()):
        raise ValueError("embeddings must be a float tensor [V, D], "
                         f"got {getattr(embeddings, 'shape', embeddings)!r}")
    if embeddings.shape[0] < 1:
        raise ValueError("embeddings must have at least one row (token)")
    check_count(k, "k")
    if max_distance is not None and not (isinstance(max_distance, (int, float))
                                         and max_distance >= 0):
        raise ValueError(f"max_distance must be a number >= 0 or None, got {max_distance!r}")
    emb = embeddings.to(torch.float64)
    if not bool(torch.isfinite(emb).all()):
        raise ValueError("embeddings contain NaN or inf")
    vocab = emb.shape[0]
    k = min(k, vocab)
    step = max(1, chunk_elements // vocab)
    index_parts, valid_parts = [], []
    for start in range(0, vocab, step):  # chunks of rows, bounded memory
        rows = torch.arange(start, min(vocab, start + step), device=emb.device)
        dist = torch.cdist(emb[rows], emb, compute_mode="donot_use_mm_for_euclid_dist")
        dist[torch.arange(rows.numel(), device=emb.device), rows] = -1.0  # x itself first
        order = torch.sort(dist, dim=-1, stable=True)
        index_parts.append(order.indices[:, :k])
        valid_parts.append(order.values[:, :k] <= (math.inf if max_distance is None
                                                   else float(max_distance)))
    return LatentNeighbourhoods(torch.cat(index_parts), torch.cat(valid_parts))


@dataclass(frozen=True)
class Lantern:
    """LANTERN's rule (module docstring): the neighbourhoods B_k and the total-variation budget
    delta in [0, 1]. delta = 0 or k = 1 is SD."""

    neighbourhoods: LatentNeighbourhoods
    delta: float

    def __post_init__(self) -> None:
        if not isinstance(self.neighbourhoods, LatentNeighbourhoods):
            raise ValueError("neighbourhoods must be a LatentNeighbourhoods "
                             "(see latent_neighbourhoods)")
        delta = self.delta
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (0 <= delta <= 1):
            raise ValueError(
                f"delta must be a number in [0, 1] (a total-variation budget), got {delta!r}; "
                "LANTERN++'s relative budget (the released code's delta > 1) is not implemented")

    def tables(self, vocab: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """(index, valid) [V, k] on ``device``; the vocabulary must be the table's."""
        hood = self.neighbourhoods
        if hood.vocab_size != vocab:
            raise ValueError(f"the neighbourhoods cover {hood.vocab_size} tokens but p has {vocab}")
        return hood.index.to(device), hood.valid.to(device)

    def credited(self, p: Tensor, x: Tensor) -> Tensor:
        """p(x) + m(x) for tokens x [..., T] against rows p [..., V]: [..., T]."""
        index, valid = self.tables(p.shape[-1], p.device)
        members = index[x]  # [..., T, k]
        probs = torch.where(valid[x], p.gather(-1, members.flatten(-2)).view(members.shape), 0.0)
        if members.shape[-1] == 1:
            return probs[..., 0]
        # S_j = p(y_1) + .. + p(y_j) is non-decreasing (in floating point too), so the S_j <= delta
        # form a prefix and the largest of them is m(x); S_0 = 0 when none fits.
        cumulative = probs[..., 1:].cumsum(-1)
        return probs[..., 0] + torch.where(cumulative <= self.delta, cumulative, 0.0).amax(-1)

    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.credited(p, x), q.gather(-1, x)

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        return token_residual(p, q)
