"""Verification rules: the mass a drafted token is credited and charged, and the residual.

Every rule is the same test with other masses. A token x drafted from q is accepted with

    a(x) = min(1, P(x) / Q(x))                    (0 where Q(x) = 0: x cannot be drafted)

and after a rejection a token is drawn from the rule's residual r:

    rule                          P(x)            Q(x)          r
    SD (Leviathan et al. 2023)    p(x)            q(x)          norm((p - q)+)
    GSD, clusters C(x)            p(C(x))         q(C(x))       norm((p - q)+); for partitions
                                                                also the cluster-exact residual
    Amplify(k, rule)              k P_rule(x)     Q_rule(x)     the rule's
    LANTERN (lantern.py)          p(x) + m(x)     q(x)          norm((p - q)+)

with p(C) = sum_{y in C} p(y). A rule is any object with the two methods of ``Rule``. Shapes:
p, q [..., V] (leading dimensions batch), drafted tokens x [..., T] int64. GSD's clusters, from
the probability ranking (docs/core.md): ``DynamicClusters(G)`` (Algorithm 3; overlapping, so no
Theorem 1: proofs/04), the partitions ``RankBinnedClusters(G)`` (proofs/05), ``FixedPartition``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

from .checks import check_choice, check_count, check_labels, check_pair, check_tokens


@runtime_checkable
class Rule(Protocol):
    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """(P(x), Q(x)) for tokens x [..., T] against rows p, q [..., V]: [..., T] each."""

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        """Weights [..., V] >= 0 proportional to the residual r (sampled by inverse CDF)."""


def mass_ratio(credited: Tensor, charged: Tensor) -> Tensor:
    """min(1, P/Q), and 0 where Q = 0, as min(P, Q) / Q: bit for bit min(1, P/Q) for Q > 0 (a
    correctly rounded division gives Q/Q = 1 exactly), and 0/0 = NaN -> 0 for Q = 0."""
    return torch.minimum(credited, charged).div_(charged).nan_to_num_(0.0)


def token_residual(p: Tensor, q: Tensor) -> Tensor:
    """Weights (p - q)+ of the residual norm((p - q)+); p itself where their mass is ~0
    (p == q up to rounding: a rejection then has probability ~0). [..., V]."""
    excess = (p - q).clamp(min=0)
    return torch.where(excess.sum(-1, keepdim=True) > torch.finfo(p.dtype).eps, excess, p)


def cluster_residual(p: Tensor, p_mass: Tensor, q_mass: Tensor, labels: Tensor) -> Tensor:
    """The cluster-exact residual of a partition (proofs/03): a cluster C ~ norm((p' - q')+) over
    the cluster masses p', q' [..., K], then y ~ p(y) / p'(C) inside it. labels [..., V]: the
    cluster of each token. p itself where the excess mass is ~0. Returns [..., V], summing to 1."""
    tiny = torch.finfo(p.dtype).eps
    excess = (p_mass - q_mass).clamp(min=0)
    total = excess.sum(-1, keepdim=True)
    per_unit = excess / total.clamp(min=tiny) / p_mass.clamp(min=torch.finfo(p.dtype).tiny)
    return torch.where(total > tiny, p * per_unit.gather(-1, labels), p)


def probability_order(ranking: Tensor) -> tuple[Tensor, Tensor]:
    """The probability ranking of each row [..., V]: ``order`` (order[r] = the token of rank r)
    and ``rank`` (its inverse), both int64 [..., V]."""
    order = torch.sort(ranking, dim=-1, descending=True, stable=True).indices
    return order, order.argsort(-1)


def probability_ranks(p: Tensor) -> Tensor:
    """rank(y) for every token: [..., V] -> int64 [..., V] (ties: smaller id first)."""
    return probability_order(p)[1]


@dataclass(frozen=True)
class SD:
    """Standard speculative sampling: P = p(x), Q = q(x), r = norm((p - q)+). ``None`` means SD."""

    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        return p.gather(-1, x), q.gather(-1, x)

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        return token_residual(p, q)


class Partition:
    """A rule whose clusters partition the vocabulary once p is known, so that Theorem 1 holds
    (proofs/01, 05) and the cluster-exact residual exists. Subclasses give ``cluster_masses``."""

    residual: str

    def cluster_masses(self, p: Tensor, q: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(p' [..., K], q' [..., K], labels [..., V]): cluster masses and each token's cluster."""
        raise NotImplementedError

    def partition_labels(self, p: Tensor) -> Tensor:
        """Each token's cluster for rows p [..., V]: int64 [..., V] (a fixed partition: its
        labels)."""
        return self.cluster_masses(p, p)[2]

    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        p_mass, q_mass, labels = self.cluster_masses(p, q)
        cluster = labels.expand(p.shape).gather(-1, x)
        return p_mass.gather(-1, cluster), q_mass.gather(-1, cluster)

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        if self.residual == "token":
            return token_residual(p, q)
        p_mass, q_mass, labels = self.cluster_masses(p, q)
        return cluster_residual(p, p_mass, q_mass, labels.expand(p.shape))


def member_table(labels: Tensor) -> Tensor:
    """Each cluster's tokens in id order, padded with V: int64 [..., K, M] for partition labels
    [..., V] (K clusters, M tokens in the largest). Summing a row's entries over a cluster's
    row of the table is a fixed order of additions (no scatter-add).

    Tokens 0..4 in clusters 1, 0, 1, 2, 1 (V = 5 marks an empty slot):

    >>> member_table(torch.tensor([1, 0, 1, 2, 1]))
    tensor([[1, 5, 5],
            [0, 2, 4],
            [3, 5, 5]])
    """
    vocab = labels.shape[-1]
    ids, order = labels.sort(dim=-1, stable=True)  # cluster ids ascending, tokens in id order
    # A token's slot: its place in the sorted row minus the place where its cluster starts.
    slot = torch.arange(vocab, device=labels.device) - torch.searchsorted(ids, ids)
    clusters, size = int(labels.max()) + 1, int(slot.max()) + 1
    table = torch.full((*labels.shape[:-1], clusters * size), vocab, device=labels.device)
    table.scatter_(-1, ids * size + slot, order)  # every (cluster, slot) is written at most once
    return table.view(*labels.shape[:-1], clusters, size)


@dataclass(frozen=True)
class FixedPartition(Partition):
    """A partition of the vocabulary that does not depend on p: integer labels [V] (or [..., V],
    one partition per row), label[y] = the cluster of token y. residual: "token"
    (norm((p - q)+)) or "cluster" (cluster-exact, proofs/03). Masses: sums over ``member_table``."""

    labels: Tensor
    residual: str = "token"

    def __post_init__(self) -> None:
        check_choice(self.residual, "residual mode", ("token", "cluster"))
        labels = check_labels(self.labels)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "_members", member_table(labels))

    def cluster_masses(self, p: Tensor, q: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        vocab = self.labels.shape[-1]
        if p.shape[-1] != vocab:
            raise ValueError(f"partition labels cover {vocab} tokens but p has {p.shape[-1]}")
        members = self._members.to(p.device)  # [..., K, M]
        batch = p.shape[:-1] if members.ndim == 2 else torch.broadcast_shapes(  # per-row labels
            p.shape[:-1], members.shape[:-2])
        index = members.clamp(max=vocab - 1).flatten(-2).expand(*batch, -1)  # [..., K * M]
        valid = members < vocab

        def summed(x: Tensor) -> Tensor:  # [..., V] -> the clusters' masses [..., K]
            gathered = x.expand(*batch, vocab).gather(-1, index).view(*batch, *valid.shape[-2:])
            return torch.where(valid, gathered, 0.0).sum(-1)

        return summed(p), summed(q), self.labels.to(p.device)


@dataclass(frozen=True)
class RankBinnedClusters(Partition):
    """Bins of G consecutive ranks of p: cluster(y) = rank(y) // G (proofs/05).

    Bins are contiguous in rank order, so their masses are sums of the sorted row reshaped to
    [..., ceil(V/G), G] (zero-padded): a fixed order of additions, no scatter.

    With G = 2 the ranks of p = (0.5, 0.3, 0.2) fall in bins {0, 1} and {2}: token 1 is credited
    and charged its bin's masses, P = 0.8 and Q = 0.7, so a(1) = 1 (SD's a(1) is 0.3 / 0.5).

    >>> p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    >>> q = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    >>> credited, charged = RankBinnedClusters(2).masses(p, q, torch.tensor([1, 2]))
    >>> credited
    tensor([0.8000, 0.2000], dtype=torch.float64)
    >>> charged
    tensor([0.7000, 0.3000], dtype=torch.float64)
    """

    group_size: int
    residual: str = "token"

    def __post_init__(self) -> None:
        check_count(self.group_size, "group_size (G, tokens per cluster)")
        check_choice(self.residual, "residual mode", ("token", "cluster"))

    def cluster_masses(self, p: Tensor, q: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        size, vocab = self.group_size, p.shape[-1]
        order, rank = probability_order(p)
        bins = -(-vocab // size)

        def binned(x: Tensor) -> Tensor:
            padded = F.pad(x.gather(-1, order), (0, bins * size - vocab))
            return padded.view(*x.shape[:-1], bins, size).sum(-1)

        return binned(p), binned(q), rank // size


def member_masses(p: Tensor, q: Tensor, index: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
    """(P, Q): the masses of p and q [..., V] over each draft's kept cluster members, ids
    ``index`` and ``keep`` [..., T, M] -> [..., T] each, summed over the M slots in order."""
    flat = index.flatten(-2)
    return (torch.where(keep, p.gather(-1, flat).view(index.shape), 0.0).sum(-1),
            torch.where(keep, q.gather(-1, flat).view(index.shape), 0.0).sum(-1))


@dataclass(frozen=True)
class DynamicClusters:
    """The paper's dynamic clusters (Algorithm 3): the rank window of G tokens around x,
    (G-1)//2 ranks above and G//2 below (clipped at the ends), then filtered:

        C(x) = {y in window : |p(y) - p(x)| <= max_prob_gap,
                              ||e_y - e_x||^2 <= max_embedding_distance}

    (a filter is skipped when its bound is None; ``embeddings`` [V', D], V' >= V). x always
    stays. rank_by="q" ranks by the draft (Table 2's ablation); the filters still use p. Token
    residual only. The release's ``logit_sort[idx-7 : idx+7]`` (ascending sort) is G = 14; it
    filters with strict ``<``, ranks ties the other way round, skips the distance filter for
    ids above 10000, takes the plain ratio for the draft x = 10000 and aborts on its GPU where a
    lower draft's window holds 10000 as its largest id (gsd_lab's ReleaseDistanceClusters).

    Ties: of tokens with equal p (q for rank_by="q") the smaller id ranks first, one stable
    descending sort (``probability_order``); the zeros follow the support in id order.

    The masses credited and charged for a draft x = 2, the lowest of three ranks, with G = 3:
    C(2) = {1, 2}, P = 0.3 + 0.2, Q = 0.3 + 0.5, so a(2) = min(1, P / Q) = 0.625.

    >>> p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    >>> q = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    >>> credited, charged = DynamicClusters(3).masses(p, q, torch.tensor([2]))
    >>> credited, charged
    (tensor([0.5000], dtype=torch.float64), tensor([0.8000], dtype=torch.float64))

    The tie order: tokens 1 and 2 tie for the top, so token 1 ranks first and token 2 second;
    with G = 2 (x and the rank below it) C(1) = {1, 2} and C(2) = {2, 0}:

    >>> tied = torch.tensor([0.2, 0.4, 0.4], dtype=torch.float64)
    >>> DynamicClusters(2).members(tied, tied, torch.tensor([1, 2]))[0]
    tensor([[1, 2],
            [2, 0]])
    """

    group_size: int
    max_embedding_distance: float | None = None
    max_prob_gap: float | None = None
    embeddings: Tensor | None = None
    rank_by: str = "p"

    def __post_init__(self) -> None:
        check_count(self.group_size, "group_size (G, tokens per cluster)")
        check_choice(self.rank_by, "rank_by", ("p", "q"))
        emb = self.embeddings
        if emb is not None and not (isinstance(emb, Tensor) and emb.ndim == 2
                                    and emb.is_floating_point()):
            raise ValueError(f"embeddings must be a float tensor [V, D], got "
                             f"{getattr(emb, 'shape', emb)!r}")
        if self.max_embedding_distance is not None and emb is None:
            raise ValueError("max_embedding_distance needs embeddings (a [V, D] tensor)")
        for name in ("max_embedding_distance", "max_prob_gap"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")

    def offsets(self, vocab: int, device: torch.device | None = None) -> Tensor:
        """Rank offsets of the window's slots, -(G-1)//2 .. G//2, each side at most V - 1. [M]."""
        size, last = self.group_size, vocab - 1
        return torch.arange(-min((size - 1) // 2, last), min(size // 2, last) + 1, device=device)

    def members(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """C(x) for tokens x [..., T] as ids [..., T, M] and keep [..., T, M] (slot j holds the
        token at rank rank(x) + offsets[j]; a clipped slot holds some id and keep False)."""
        vocab = p.shape[-1]
        order, rank = probability_order(q if self.rank_by == "q" else p)
        ranks = rank.gather(-1, x).unsqueeze(-1) + self.offsets(vocab, p.device)
        keep = (ranks >= 0) & (ranks < vocab)
        index = order.gather(-1, ranks.clamp(0, vocab - 1).flatten(-2)).view(ranks.shape)
        return index, self.filter(p, x, index, keep)

    def filter(self, p: Tensor, x: Tensor, index: Tensor, keep: Tensor) -> Tensor:
        """keep [..., T, M] & the gap and distance filters of y = index against x [..., T]."""
        if self.max_prob_gap is not None:
            p_x = p.gather(-1, x).unsqueeze(-1)
            p_y = p.gather(-1, index.flatten(-2)).view(index.shape)
            keep = keep & ((p_y - p_x).abs() <= self.max_prob_gap)
        if self.max_embedding_distance is not None:
            if self.embeddings.shape[0] < p.shape[-1]:
                raise ValueError(f"embeddings has {self.embeddings.shape[0]} rows but the "
                                 f"vocabulary has {p.shape[-1]} tokens")
            emb = self.embeddings.to(p.device)
            diff = emb[index].to(torch.float64) - emb[x].to(torch.float64).unsqueeze(-2)
            keep = keep & (diff.square().sum(-1) <= self.max_embedding_distance)
        return keep

    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        return member_masses(p, q, *self.members(p, q, x))

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        return token_residual(p, q)


@dataclass(frozen=True)
class Amplify:
    """The lossy relaxation "Amplify (k)" the paper compares against: P = k P_rule, so
    a(x) = min(1, k P_rule(x) / Q_rule(x)) (our reading: the paper's formula was not found).
    The residual is the rule's, unchanged, so the output is not p even for SD. k > 1 accepts
    more often; k < 1 less (also lossy). rule: None (SD), labels [V] or a rule."""

    scale: float
    rule: object = None

    def __post_init__(self) -> None:
        scale = self.scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (
                0 < scale < math.inf):
            raise ValueError(f"the Amplify scale k must be a finite real number > 0, got {scale!r}")
        object.__setattr__(self, "rule", as_rule(self.rule))

    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        credited, charged = self.rule.masses(p, q, x)
        return self.scale * credited, charged

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        return self.rule.residual_weights(p, q)


def window_rule(rule: object) -> Rule:
    """``as_rule`` for ``verify``'s window: a fixed partition must be one partition [V] for all its
    rows (labels [..., V], one partition per row, are for the exact laws)."""
    inner = rule = as_rule(rule)
    while isinstance(inner, Amplify):
        inner = inner.rule
    if isinstance(inner, FixedPartition) and inner.labels.ndim > 1:
        raise ValueError(f"verify takes one partition of the vocabulary, labels [V]; got labels of "
                         f"shape {tuple(inner.labels.shape)} (one per row: for the exact laws)")
    return rule


def as_rule(rule: object) -> Rule:
    """None -> SD(); integer labels [V] -> FixedPartition(labels); a rule -> itself."""
    if rule is None:
        return SD()
    if isinstance(rule, Tensor):
        return FixedPartition(rule)
    if isinstance(rule, Rule):
        return rule
    raise ValueError("rule must be None (SD), integer partition labels [V], or a rule such as "
                     f"DynamicClusters or Amplify (``Rule``); got {type(rule).__name__}")


def group_probs(p: Tensor, labels: Tensor) -> Tensor:
    """Cluster masses of a fixed partition: p'(C_k) = sum_{labels[y] = k} p(y).
    p: [..., V]; labels: [V] integer ids >= 0. Returns [..., K], K = labels.max() + 1 (ids >= V
    are first relabelled to 0 .. K-1 in increasing order); an empty cluster has mass 0."""
    p, _ = check_pair(p, p)
    return FixedPartition(labels).cluster_masses(p, p)[0]


def dynamic_cluster(p: Tensor, token: Tensor | int, group_size: int, *,
                    embeddings: Tensor | None = None, max_embedding_distance: float | None = None,
                    max_prob_gap: float | None = None, rank_by: str = "p", q: Tensor | None = None
                    ) -> Tensor:
    """The paper's dynamic cluster C(x) of ``token`` (``DynamicClusters``) as a bool mask [..., V].
    p (q, for rank_by="q"): [..., V]; token: int or int tensor [...] (broadcast)."""
    if rank_by == "q" and q is None:
        raise ValueError("DynamicClusters(rank_by='q') ranks by the draft q: pass q")
    p, q = check_pair(p, p if q is None else q)
    rule = DynamicClusters(group_size, max_embedding_distance, max_prob_gap, embeddings, rank_by)
    x = check_tokens(token, p.shape[-1], p.device).expand(p.shape[:-1]).unsqueeze(-1)  # [..., 1]
    index, keep = rule.members(p, q, x)  # [..., 1, M]
    everyone = torch.arange(p.shape[-1], device=p.device)
    return ((index[..., 0, :, None] == everyone) & keep[..., 0, :, None]).any(-2)
