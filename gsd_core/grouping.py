"""Clusters of interchangeable tokens: fixed partitions, the paper's dynamic clusters
(Algorithm 3) and our rank-binned partition.

The probability ranking used everywhere orders the vocabulary by p descending, ties broken by
the smaller token id first: token y precedes token z iff (-p(y), y) < (-p(z), z). The rank of
a token is the number of tokens that precede it. Rank windows are read off one stable sort
of the support (``_SupportRanking``: the top-K entries, K the largest support of a row;
tokens with p = 0 are ranked by counting), a fixed number of ops for any number of rows,
exact under ties.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar, Protocol, runtime_checkable

import torch
from torch import Tensor

from ._validation import check_labels, check_pair, check_probabilities, check_tokens


def group_probs(p: Tensor, labels: Tensor) -> Tensor:
    """Cluster masses of a partition: p'(C_k) = sum_{x : labels[x] = k} p(x).

    p: [..., V]; labels: [V] or broadcastable to [..., V], integer cluster ids >= 0.
    Returns [..., K] with K = labels.max() + 1 (empty clusters have mass 0).
    """
    p = check_probabilities(p, "p")
    labels = check_labels(labels, p.shape[-1])
    return _group_sum(p, labels)


def _group_sum(p: Tensor, labels: Tensor) -> Tensor:
    num_clusters = int(labels.max().item()) + 1
    shape = torch.broadcast_shapes(p.shape, labels.shape)
    out = torch.zeros(*shape[:-1], num_clusters, dtype=p.dtype, device=p.device)
    return out.scatter_add_(-1, labels.expand(shape), p.expand(shape))


def probability_rank(p: Tensor, token: Tensor) -> Tensor:
    """Rank of ``token`` in the p-descending order (ties: smaller id first), O(V).

    p: [..., V]; token: [...] (broadcast against p.shape[:-1]). Returns int64 [...]."""
    px = p.gather(-1, token.unsqueeze(-1))
    ids = torch.arange(p.shape[-1], device=p.device)
    before = (p > px) | ((p == px) & (ids < token.unsqueeze(-1)))
    return before.sum(-1)


def probability_ranks(p: Tensor) -> Tensor:
    """Ranks of all tokens, [..., V] -> [..., V] int64, by one stable sort (ties: smaller id first)."""
    order = torch.sort(p, dim=-1, descending=True, stable=True).indices
    ranks = torch.empty_like(order)
    ranks.scatter_(-1, order, torch.arange(p.shape[-1], device=p.device).expand_as(order))
    return ranks


def rank_window(p: Tensor, token: Tensor, n_before: Tensor | int, n_after: Tensor | int) -> Tensor:
    """Tokens whose rank lies in [rank(x) - n_before, rank(x) + n_after], clipped at both ends.

    p: [..., V]; token: [...]; n_before, n_after: ints or int tensors [...]. Returns bool [..., V].
    """
    index, valid = rank_window_members(p, token, n_before, n_after)
    return _members_to_mask(index, valid, p.shape)


@dataclass(frozen=True)
class _SupportSize:
    """The support sizes S_i = #{y : p_i(y) > 0} of rows p [N, V] as int32 [N], and their
    maximum K already read on the host (``verify`` reads it with its validation)."""

    count: Tensor
    width: int


class _SupportRanking:
    """The probability ranking of each row of p [N, V], read off one sort of its support.

    The K = max_i S_i largest entries of every row (S_i = #{y : p_i(y) > 0}; one host sync
    reads K) hold each row's whole support (when 2K > V the whole rows are sorted instead).
    Or the caller gives ``support`` [N, K]: ids per row that include every id with p > 0
    once (ids with p = 0 may be added, and repeated; ``verify`` checks this under
    ``validate``); then there is no count, no sync and no selection over V. Or ``verify``
    gives the sizes S_i and K it read with its validation (``_SupportSize``): no sync here.

    The K entries are put in id order (entries with p = 0 moved past the end as id V + K),
    then stably sorted by p descending: within the support that is the ranking (-p, id),
    exact under ties. Tokens with p = 0 rank after every positive one, in id order, so their
    ranks follow by counting: the m-th zero of a row (0-based) is z = m + #{positive y < z}.
    Cost: O(N V) for the selection (none with ``support``), O(N K log K) for the sorts
    (K = 2000 after Lumina-mGPT's top-k); a fixed number of ops."""

    def __init__(self, p: Tensor, support: Tensor | _SupportSize | None = None) -> None:
        vocab = p.shape[-1]
        self.vocab = vocab
        if isinstance(support, _SupportSize):  # sizes known: no count, no sync here
            self.count = support.count.unsqueeze(-1)
            self._rank_top(p, max(1, min(vocab, support.width)) if p.shape[0] else 1, validated=True)
            return
        if support is not None:
            # The caller's support [N, K] (every positive id once, maybe zeros too): K is known,
            # so no count sync and no selection over V; entries with p = 0 become pads below.
            values = p.gather(-1, support)
            self.count = (values > 0).sum(-1, keepdim=True, dtype=torch.int32)
            self.width, self.dense = support.shape[-1], False
            self._rank_support(values, support, vocab, p.device)
            return
        self.count = (p > 0).sum(-1, keepdim=True, dtype=torch.int32)  # S_i [N, 1] (int32: a cheaper reduction)
        self._rank_top(p, max(1, min(vocab, int(self.count.max()))) if p.shape[0] else 1)

    def _rank_top(self, p: Tensor, width: int, validated: bool = False) -> None:
        """Rank the support found among the K = ``width`` largest entries of each row."""
        vocab = self.vocab
        self.width = width
        # A support wider than half the vocabulary: one stable sort of the whole rows is cheaper
        # than top-K and two sorts, and ranks the zeros too (ties at 0 stay in id order).
        self.dense = 2 * width > vocab
        if self.dense:
            self.ranked_ids = torch.sort(p, dim=-1, descending=True, stable=True).indices
            self.position_rank = torch.empty_like(self.ranked_ids).scatter_(
                -1, self.ranked_ids, _arange_rows(*p.shape, p.device))
            return
        top = torch.topk(p, width, dim=-1, sorted=False)
        self._rank_support(top.values, top.indices, vocab, p.device, validated)

    def _rank_support(self, values: Tensor, ids: Tensor, vocab: int, device: torch.device,
                      validated: bool = False) -> None:
        """Rank K entries per row, values [N, K] at ids [N, K] holding every positive entry of
        the row once: ids with p > 0 ascending (the rest as pads V + K), then a stable sort by
        p descending. ``validated``: the rows passed ``verify``'s checks (no NaN), so the pads'
        values need no clearing."""
        width = self.width
        positive = values > 0
        ids, by_id = torch.where(positive, ids, vocab + width).sort(-1)
        self.ids = ids  # positive ids ascending, then V + K: [N, K]
        if not validated:  # pads get key 0 and sort after the support, whatever they held (NaN)
            values = torch.where(positive, values, 0)
        order = values.gather(-1, by_id).sort(dim=-1, descending=True, stable=True).indices
        self.ranked_ids = ids.gather(-1, order)  # [N, K]: ranks 0 .. S_i - 1 are the support
        # Rank of the id at each position of ``ids`` (the inverse permutation of ``order``).
        self.position_rank = torch.empty_like(order).scatter_(-1, order, _arange_rows(*order.shape, device))
        # #zeros before each positive id: non-decreasing over the support; the pads after it
        # (V + K - k > V) exceed every zero count, so searches stay exact.
        self.zeros_before = ids - _arange(width, device)

    def rank(self, p: Tensor, token: Tensor) -> Tensor:
        """Rank of ``token`` [N, 1] in each row: #{y : (-p(y), y) < (-p(x), x)}. int64 [N, 1]."""
        if self.dense:
            return self.position_rank.gather(-1, token)
        if not token.is_contiguous():  # searchsorted would copy it anyway, with a warning
            token = token.contiguous()
        below = torch.searchsorted(self.ids, token)  # positive ids < x (x's position if positive)
        positive = p.gather(-1, token) > 0
        ranked = self.position_rank.gather(-1, below.clamp(max=self.width - 1))
        # A zero-probability x follows all S_i positive tokens and the zeros with smaller ids.
        return torch.where(positive, ranked, self.count + token - below)

    def tokens_at(self, rank: Tensor) -> Tensor:
        """Token of each rank in [0, V): rank [N, M] -> ids [N, M]."""
        if self.dense:
            return self.ranked_ids.gather(-1, rank)
        nth_zero = rank - self.count
        zero_id = nth_zero + torch.searchsorted(self.zeros_before, nth_zero, right=True)
        support_id = self.ranked_ids.gather(-1, rank.clamp(max=self.width - 1))
        return torch.where(nth_zero < 0, support_id, zero_id)


@lru_cache(maxsize=64)
def _arange(n: int, device: torch.device) -> Tensor:
    return torch.arange(n, device=device)


@lru_cache(maxsize=64)
def _arange_rows(rows: int, n: int, device: torch.device) -> Tensor:
    """0 .. n - 1 in each of ``rows`` rows (materialised: ``scatter_`` takes no broadcast source)."""
    return torch.arange(n, device=device).repeat(rows, 1)


def _window_members(
    ranking: _SupportRanking,
    token: Tensor,
    rank: Tensor,
    k_before: int,
    k_after: int,
    n_before: Tensor | None = None,
    n_after: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Members of the rank window [rank - n_before, rank + n_after] (clipped to [0, V)) as
    slots at rank offsets -k_before .. k_after: indices [N, M] and validity [N, M], M =
    k_before + 1 + k_after; invalid slots hold some id in [0, V). token, rank: [N, 1];
    n_before / n_after: per-row limits [N, 1] (None: k_before / k_after for every row)."""
    offsets = _window_offsets(k_before, k_after, token.device)
    ranks = rank + offsets
    clipped = ranks.clamp(0, ranking.vocab - 1)
    valid = clipped == ranks
    if n_before is not None:
        valid &= (offsets >= -n_before) & (offsets <= n_after)
    return ranking.tokens_at(clipped), valid


@lru_cache(maxsize=64)
def _window_offsets(k_before: int, k_after: int, device: torch.device) -> Tensor:
    """Rank offsets of the window's slots: -k_before .. k_after (0: the token). [M] int64."""
    return torch.arange(-k_before, k_after + 1, device=device)


def _window_extent(n: Tensor | int, batch: torch.Size, vocab: int, device: torch.device) -> tuple[int, Tensor | None]:
    """Slots k = min(max(n), V - 1) one side of the window needs, and the per-row limit
    [N, 1] (None for a plain int: every row alike, no device sync)."""
    if isinstance(n, int):
        if n < 0:
            raise ValueError(f"window extents must be >= 0, got {n}")
        return min(n, vocab - 1), None
    n = torch.as_tensor(n, device=device).long().expand(batch).reshape(-1, 1)
    if n.numel() == 0:
        return 0, n
    low, high = torch.stack([n.min(), n.max()]).tolist()
    if low < 0:
        raise ValueError(f"window extents must be >= 0, got {low}")
    return min(high, vocab - 1), n


def rank_window_members(
    p: Tensor, token: Tensor, n_before: Tensor | int, n_after: Tensor | int, support: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The rank window of ``rank_window`` as member indices [..., M] and validity [..., M],
    M = min(max(n_before), V - 1) + 1 + min(max(n_after), V - 1). The token itself is always a
    valid member; invalid slots hold some id in [0, V).

    Exact under any ties (the ranking (-p, id) of ``_SupportRanking``): one sort of the
    support, then ranks and the tokens at ranks by searches, a fixed number of ops.
    ``support`` [..., K] (optional, unchecked here): ids per row including every id with
    p > 0 once (ids with p = 0 may be added), e.g. the top-k ids p was restricted to; it saves
    the count, its host sync and the selection over V.
    """
    batch, vocab = p.shape[:-1], p.shape[-1]
    rows = p if p.ndim == 2 else p.reshape(-1, vocab)
    token = token.reshape(-1, 1) if token.shape == batch else token.expand(batch).reshape(-1, 1)
    k_before, n_before = _window_extent(n_before, batch, vocab, p.device)
    k_after, n_after = _window_extent(n_after, batch, vocab, p.device)
    if (n_before is None) != (n_after is None):  # one side per row, the other an int: per row both
        n_before = torch.full_like(token, k_before) if n_before is None else n_before
        n_after = torch.full_like(token, k_after) if n_after is None else n_after
    if isinstance(support, Tensor):  # [N, K] like the rows
        if support.shape[:-1] != batch:
            support = support.expand(*batch, support.shape[-1])
        if support.ndim != 2:
            support = support.reshape(-1, support.shape[-1])
    ranking = _SupportRanking(rows, support)
    index, valid = _window_members(ranking, token, ranking.rank(rows, token), k_before, k_after, n_before, n_after)
    if p.ndim == 2:
        return index, valid
    return index.reshape(*batch, index.shape[-1]), valid.reshape(*batch, valid.shape[-1])


def _members_to_mask(index: Tensor, valid: Tensor, shape: torch.Size) -> Tensor:
    """Scatter member lists back to a bool mask (invalid slots may repeat a valid index)."""
    counts = torch.zeros(shape, dtype=torch.int32, device=index.device)
    return counts.scatter_add_(-1, index, valid.to(torch.int32)) > 0


def _mask_members(mask: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """Indices [..., size] of the True entries of ``mask`` (at most ``size`` of them) and their validity."""
    k = min(size, mask.shape[-1])
    index = torch.topk(mask.to(torch.float32), k, dim=-1).indices
    valid = mask.gather(-1, index)
    if k < size:  # pad to the requested width with invalid slots
        pad = size - k
        index = torch.cat([index, index[..., :1].expand(*index.shape[:-1], pad)], -1)
        valid = torch.cat([valid, torch.zeros_like(valid[..., :1]).expand(*valid.shape[:-1], pad)], -1)
    return index, valid


RANK_BY = ("p", "q")


@runtime_checkable
class ClusterRule(Protocol):
    """A rule that assigns each drafted token x a cluster C(x) given the target p (and, for
    rules that need it, the draft q).

    ``is_partition`` is True when the clusters {C(x)} partition the vocabulary for every p
    (then Theorem 1 applies and the cluster-exact residual is defined); such rules also have
    ``partition_labels(p) -> [..., V]``. Rules written against the older two-argument
    ``members(p, token)`` keep working: q is passed only to rules whose ``members`` accepts it.
    """

    is_partition: bool

    def members(self, p: Tensor, token: Tensor, q: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Cluster of ``token`` given p [..., V] (q [..., V]), token [...]: indices [..., M] and validity [..., M]."""
        ...


@lru_cache(maxsize=None)
def _members_takes_q(rule_type: type) -> bool:
    try:
        params = inspect.signature(rule_type.members).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(x.name == "q" or x.kind is inspect.Parameter.VAR_KEYWORD for x in params)


def rule_members(rule: ClusterRule, p: Tensor, token: Tensor, q: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``rule.members(p, token, q=q)``, or ``rule.members(p, token)`` for rules without a q argument."""
    if _members_takes_q(type(rule)):
        return rule.members(p, token, q=q)
    return rule.members(p, token)


@dataclass(frozen=True)
class FixedPartition:
    """A partition of the vocabulary given as integer labels [V] (or [..., V]) that does not depend on p."""

    labels: Tensor
    is_partition: ClassVar[bool] = True

    def partition_labels(self, p: Tensor) -> Tensor:
        return check_labels(self.labels, p.shape[-1]).to(p.device)

    def cluster_mask(self, p: Tensor, token: Tensor) -> Tensor:
        labels = self.partition_labels(p).expand(p.shape)
        return labels == labels.gather(-1, token.unsqueeze(-1))

    def members(self, p: Tensor, token: Tensor, q: Tensor | None = None) -> tuple[Tensor, Tensor]:
        mask = self.cluster_mask(p, token)
        return _mask_members(mask, int(mask.sum(-1).max().item()))


@dataclass(frozen=True)
class DynamicClusters:
    """The paper's dynamic clusters (Algorithm 3, VERIFY_GSD), as in ``dynamic_cluster``.

    Token-dependent and overlapping: *not* a partition, so Theorem 1 does not hold in general
    (proofs/04_dynamic_counterexample.md) and only the token-level residual applies.

    rank_by: "p" (the paper, Table 2 row C/D) ranks the vocabulary by the target; "q" (Table 2
    row B, the ablation) ranks it by the draft distribution instead, same tie rule (smaller id
    first). The filters are unchanged: the gap filter always compares *target* probabilities
    |p(y) - p(x)|, as in the released code. With rank_by="q" the rule needs q, which ``verify``,
    ``acceptance_rate`` and ``output_distribution`` pass (``members(p, token, q)``).
    """

    group_size: int
    max_embedding_distance: float | None = None
    max_prob_gap: float | None = None
    embeddings: Tensor | None = None
    rank_by: str = "p"
    is_partition: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if isinstance(self.group_size, bool) or not isinstance(self.group_size, int) or self.group_size < 0:
            raise ValueError(f"group_size must be an int >= 0, got {self.group_size!r}")
        if self.rank_by not in RANK_BY:
            raise ValueError(f"rank_by must be one of {RANK_BY}, got {self.rank_by!r}")
        if self.max_embedding_distance is not None and self.embeddings is None:
            raise ValueError("max_embedding_distance needs embeddings (a [V, D] tensor)")
        emb = self.embeddings
        if emb is not None and (not isinstance(emb, Tensor) or emb.ndim != 2 or not emb.is_floating_point()):
            raise ValueError(f"embeddings must be a float tensor [V, D], got {getattr(emb, 'shape', emb)!r}")
        for name in ("max_embedding_distance", "max_prob_gap"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")

    @property
    def ranks_by_p(self) -> bool:
        """Whether the rank windows rank p's rows (rank_by="p"). Only then does ``verify(support=)``
        use its ids [..., L, K] (every id with p > 0 once): the K entries are ranked instead of
        finding the support among all V (no count, no host sync, no selection over V); with
        rank_by="q" the windows rank q, and ``verify`` ignores ``support``."""
        return self.rank_by == "p"

    def members(self, p: Tensor, token: Tensor, q: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return self._members(p, token, q)

    def _members(
        self, p: Tensor, token: Tensor, q: Tensor | None = None, support: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``members``; ``support`` [..., K]: ids including every id with p > 0 in each row of
        p (``verify``'s argument), used when ranking by p."""
        if self.rank_by == "q":
            if q is None:
                raise ValueError("DynamicClusters(rank_by='q') ranks by the draft q: pass q to members()")
            ranking = q.expand(p.shape) if q.shape != p.shape else q
        else:
            ranking = p
        half = self.group_size // 2
        index, keep = rank_window_members(ranking, token, half, half, support if self.ranks_by_p else None)
        if self.max_prob_gap is not None or self.max_embedding_distance is not None:
            keep = self._filter(p, token.expand(p.shape[:-1]).unsqueeze(-1), index.unsqueeze(-2),
                                keep.unsqueeze(-2)).squeeze(-2)
        # The token passes both filters (gap 0, distance 0), so it always stays in its cluster.
        return index, keep

    def _filter(self, p: Tensor, token: Tensor, index: Tensor, keep: Tensor, adjacency: Tensor | None = None) -> Tensor:
        """Apply the gap and embedding filters: p [..., V], token [..., T], index / keep [..., T, M].

        ``adjacency``: optional bool [V, V] table of the embedding filter, adjacency[x, y] =
        ||e_y - e_x||^2 <= max_embedding_distance (built once by the caller): read instead of
        gathering [..., T, M, D] embedding differences."""
        if self.max_prob_gap is not None:
            px = p.gather(-1, token).unsqueeze(-1)
            py = p.gather(-1, index.flatten(-2)).view(index.shape)
            keep = keep & ((py - px).abs() <= self.max_prob_gap)
        if self.max_embedding_distance is not None:
            vocab = p.shape[-1]
            if adjacency is not None:
                if adjacency.shape != (vocab, vocab) or adjacency.dtype != torch.bool:
                    raise ValueError(f"adjacency must be a bool table [V, V] = [{vocab}, {vocab}], "
                                     f"got {adjacency.dtype} {tuple(adjacency.shape)}")
                # A flat take: advanced indexing table[x, y] was 4x slower.
                return keep & adjacency.view(-1).take(token.unsqueeze(-1) * vocab + index)
            emb = self.embeddings
            if emb.shape[0] < vocab:
                raise ValueError(f"embeddings has {emb.shape[0]} rows but the vocabulary has {vocab} tokens")
            emb = emb.to(device=p.device)
            diff = emb[index].to(torch.float64) - emb[token].to(torch.float64).unsqueeze(-2)
            keep = keep & (diff.square().sum(-1) <= self.max_embedding_distance)
        return keep

    def all_token_masses(self, p: Tensor, q: Tensor, chunk_elements: int = 1 << 24, *,
                         tokens: Tensor | None = None, adjacency: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """p(C(x)) and q(C(x)) for every token x at once: [N, V] x 2 for rows p, q [N, V]; or,
        with ``tokens`` [N, K] (ids per row), for those tokens only: [N, K] x 2.

        One ranking (one sort of the support) per row, then the windows of the tokens in
        chunks of tokens, so memory is O(N V G) (O(N K G)) at most ``chunk_elements`` at a
        time, never [V, V] (``acceptance_rate`` at V = 65536). ``adjacency``: the embedding
        filter as a precomputed bool table [V, V] (``_filter``): O(N K G) instead of
        O(N K G D), and chunks of ``chunk_elements`` // (N M) tokens (M = 2 floor(G/2) + 1).
        The M window entries are summed exactly as ``verify`` sums them (``_cluster_masses``),
        so a(x) = min(1, s p(C(x)) / q(C(x))) is bit for bit the probability verify tests."""
        ranking_rows = q if self.rank_by == "q" else p
        n, vocab = p.shape
        if tokens is not None:
            if not isinstance(tokens, Tensor) or tokens.ndim != 2 or tokens.shape[0] != n \
                    or tokens.dtype != torch.int64:
                got = f"{tokens.dtype} {tuple(tokens.shape)}" if isinstance(tokens, Tensor) else type(tokens).__name__
                raise ValueError(f"tokens must be int64 ids [N={n}, K], got {got}")
            if tokens.numel() and not bool(((tokens >= 0) & (tokens < vocab)).all()):
                raise ValueError(f"tokens must be ids in [0, V={vocab})")
        if adjacency is not None and self.max_embedding_distance is None:
            raise ValueError("adjacency is the embedding filter's table, but this rule has no "
                             "max_embedding_distance: nothing would use it")
        half = min(self.group_size // 2, vocab - 1)
        ranking = _SupportRanking(ranking_rows)
        offsets = _window_offsets(half, half, p.device)
        gathers_embeddings = self.max_embedding_distance is not None and adjacency is None
        embedding_width = self.embeddings.shape[-1] if gathers_embeddings else 1
        step = max(1, chunk_elements // max(1, n * offsets.numel() * embedding_width))
        count = vocab if tokens is None else tokens.shape[-1]
        p_mass = p.new_empty(n, count)
        q_mass = q.new_empty(n, count)
        for start in range(0, count, step):  # chunks of tokens, not a loop over single tokens
            if tokens is None:
                token = torch.arange(start, min(vocab, start + step), device=p.device).expand(n, -1)
            else:
                token = tokens[:, start: start + step]
            ranks = ranking.rank(ranking_rows, token).unsqueeze(-1) + offsets  # [N, T, M]
            clipped = ranks.clamp(0, vocab - 1)
            keep = clipped == ranks
            index = ranking.tokens_at(clipped.flatten(-2)).view(ranks.shape)
            keep = self._filter(p, token, index, keep, adjacency)
            members = index.flatten(-2)
            for rows, mass in ((p, p_mass), (q, q_mass)):
                mass[:, start: start + step] = torch.where(
                    keep, rows.gather(-1, members).view(index.shape), 0).sum(-1)
        return p_mass, q_mass


@dataclass(frozen=True)
class RankBinnedClusters:
    """Our provable alternative: cut the p-ranking into consecutive bins of ``group_size``.

    labels(y) = rank_p(y) // group_size. The partition depends on p only (not on the drafted
    token), so it is fixed once p is, Theorem 1 applies, and the cluster-exact residual exists.
    """

    group_size: int
    is_partition: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if isinstance(self.group_size, bool) or not isinstance(self.group_size, int) or self.group_size < 1:
            raise ValueError(f"RankBinnedClusters needs group_size >= 1, got {self.group_size!r}")

    def partition_labels(self, p: Tensor) -> Tensor:
        return probability_ranks(p) // self.group_size

    def members(self, p: Tensor, token: Tensor, q: Tensor | None = None) -> tuple[Tensor, Tensor]:
        size = self.group_size
        batch, vocab = p.shape[:-1], p.shape[-1]
        rows = p.reshape(-1, vocab)
        token = token.expand(batch).reshape(-1, 1)
        ranking = _SupportRanking(rows)
        rank = ranking.rank(rows, token)
        offset = rank % size  # the bin is ranks [rank - offset, rank - offset + size - 1]
        k = min(size - 1, vocab - 1)
        index, valid = _window_members(ranking, token, rank, k, k, offset, size - 1 - offset)
        return index.reshape(*batch, index.shape[-1]), valid.reshape(*batch, valid.shape[-1])


def as_cluster_rule(clusters: object, vocab_size: int) -> ClusterRule | None:
    """Normalise the ``clusters`` argument: None (standard SD), partition labels, or a rule."""
    if clusters is None:
        return None
    if isinstance(clusters, Tensor):
        return FixedPartition(check_labels(clusters, vocab_size))
    if isinstance(clusters, (DynamicClusters, RankBinnedClusters, FixedPartition)):
        return clusters  # skips the slower structural check of the Protocol below
    if isinstance(clusters, ClusterRule):
        return clusters
    raise ValueError(
        "clusters must be None, an integer label tensor [V], or a rule such as "
        f"DynamicClusters / RankBinnedClusters; got {type(clusters).__name__}"
    )


def cluster_mask(rule: ClusterRule, p: Tensor, token: Tensor, q: Tensor | None = None) -> Tensor:
    """Bool mask [..., V] of C(token) under ``rule``; p (and q, for rules ranking by q): [..., V], token: [...]."""
    index, keep = rule_members(rule, p, token.expand(p.shape[:-1]), q)
    return _members_to_mask(index, keep, p.shape)


def dynamic_cluster(
    p: Tensor,
    token: Tensor | int,
    group_size: int,
    *,
    embeddings: Tensor | None = None,
    max_embedding_distance: float | None = None,
    max_prob_gap: float | None = None,
    rank_by: str = "p",
    q: Tensor | None = None,
) -> Tensor:
    """The paper's dynamic cluster of ``token`` (Algorithm 3) as a bool mask [..., V].

    Rank the vocabulary by p descending (ties: smaller id first); keep the tokens y with
    |rank(y) - rank(x)| <= group_size // 2 (clipped at the ends, not shifted); drop y with
    |p(y) - p(x)| > max_prob_gap and y with ||e_y - e_x||^2 > max_embedding_distance
    (``embeddings``: [V, D]); x itself is always kept. group_size 0 gives {x}: standard SD.

    Differences from the released code (junhyukso/GSD): it slices 7 ranks on one side and 6 on
    the other (14 tokens, the window truncated, or empty and falling back to plain SD, near the
    ends), filters with strict ``<`` at delta = 0.15 and d = 0.5 (squared distance between rows
    of the transformer's input embedding ``embed_tokens.weight``), and skips the distance filter
    when a window id is above 10000. Here the window is symmetric, bounds are inclusive and
    the filters always apply.

    rank_by="q" ranks by the draft ``q`` instead (the Table 2 ablation); the filters still use p.
    p (q): [..., V]; token: int or int tensor broadcastable to p.shape[:-1].
    """
    if q is None:
        p = check_probabilities(p, "p")
    else:
        p, q = check_pair(p, q)
        shape = torch.broadcast_shapes(p.shape, q.shape)
        p, q = p.expand(shape), q.expand(shape)
    token = check_tokens(token, p.shape[-1]).to(p.device)
    rule = DynamicClusters(group_size, max_embedding_distance, max_prob_gap, embeddings, rank_by)
    return cluster_mask(rule, p, token, q)
