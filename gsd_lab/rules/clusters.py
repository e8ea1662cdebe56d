"""GSD's clusters in the lab: every path beside gsd_core's ``DynamicClusters``,
``RankBinnedClusters`` and ``FixedPartition``, and their registrations.

- ``dynamic_masses``: verify's window, ranked on the support of p (``engine.ranking``);
- ``ranked_window_masses``: the accounting's windows of every token of q's support, from one
  full ranking per row (docs/decoding.md), the distance filter read from ``packed_adjacency``;
- ``ReleaseDistanceClusters`` and ``release_distance_table``: the GSD release's window and
  filters (the ``release`` preset, docs/lumina-mgpt.md);
- the registrations in ``engine.capabilities``: support ranking, window and support masses,
  members per token, the embedding filter, rows, the partitions' cluster-exact residual and
  coupling.

Every path is gsd_core's masses bit for bit (tests/lab/rules/test_clusters.py names the path
that diverges). The spec ``ClusterAcceptance`` (``decode.acceptance``) and its builder
``decode.rule_parts.cluster_rule`` stay in ``decode``: torch-free, and read by the command line.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from gsd_core import DynamicClusters, FixedPartition, Partition, check_count, member_masses

from ..engine.capabilities import (
    Masses,
    cluster_residual,
    coupling,
    embedding_filter,
    member_slots,
    rows_of,
    shared_rows,
    slice_rows,
    support_masses,
    uses_support,
    window_masses,
)
from ..engine.ranking import SupportRanking, SupportSize


# --- verify's window: ranked on the support of p ------------------------------------------------


@lru_cache(maxsize=64)
def _offsets(group_size: int, vocab: int, device: torch.device) -> Tensor:
    """``DynamicClusters(group_size).offsets``, made once per window shape."""
    return DynamicClusters(group_size).offsets(vocab, device)


def dynamic_masses(
    rule: DynamicClusters,
    p: Tensor,
    q: Tensor,
    drafts: Tensor,
    support: Tensor | SupportSize | None = None,
) -> tuple[Tensor, Tensor]:
    """(p(C(x_i)), q(C(x_i))) of ``DynamicClusters`` for one draft per row, the decoding loop's
    window (draft x_i against row i): drafts [...] against rows p, q [..., V], [...] each, bit for
    bit ``rule.masses``. One ranking per row (``support`` as in ``SupportRanking``, for rows
    ranked by p), then the M members at ranks rank(x_i) + offsets (slots outside [0, V) dropped)."""
    ranking_rows = q if rule.rank_by == "q" else p
    ranking = SupportRanking(ranking_rows, support if rule.rank_by == "p" else None)
    vocab = p.shape[-1]
    x = drafts.unsqueeze(-1)  # [..., 1]
    ranks = ranking.rank(ranking_rows, x) + _offsets(rule.group_size, vocab, p.device)  # [..., M]
    clipped = ranks.clamp(0, vocab - 1)
    members = ranking.tokens_at(clipped)
    keep = clipped == ranks
    if rule.max_prob_gap is not None or rule.max_embedding_distance is not None:
        keep = rule.filter(p, x, members.unsqueeze(-2), keep.unsqueeze(-2)).squeeze(-2)
    p_mass, q_mass = (torch.where(keep, rows.gather(-1, members), 0.0).sum(-1) for rows in (p, q))
    return p_mass, q_mass


# --- the accounting's windows: one full ranking per row ----------------------------------------


def ranked_window_masses(
    rule: DynamicClusters,
    p: Tensor,
    q: Tensor,
    tokens: Tensor,
    *,
    adjacency: Tensor | None = None,
    chunk_elements: int = 1 << 24,
) -> Masses:
    """(p(C(x)), q(C(x))) of ``DynamicClusters`` for tokens [N, T] against rows p, q [N, V]:
    [N, T] each, bit for bit ``rule.masses``. Each row is ranked once in full as gsd_core ranks
    it, p and q are laid out in that order, padded with (G - 1) // 2 zeros in front and G // 2
    behind (where gsd_core clips the window: an unkept slot adds 0 either way), and the window
    of a token of rank r is the run of M entries from r (``Tensor.unfold``), summed over the M
    slots by gsd_core's op; the filters are gsd_core's on the same members. ``adjacency``: the
    bool table [V, V] of the embedding filter (``accounting.distortion.embedding_adjacency``),
    read 8 pairs a byte (``packed_adjacency``), else gsd_core's filter on the embedding
    differences. Windows [2, N, T', M] in chunks of T' >= 1
    tokens, N T' M (x D without the table) <= ``chunk_elements`` where one token allows it:
    memory ~2 N T' M of p's dtype (plus N T' M D float64 differences without the table) and a
    few int64 index blocks of N T' M, beside the rows' full ranking (a few [N, V])."""
    if adjacency is not None and rule.max_embedding_distance is None:
        raise ValueError(
            "adjacency is the embedding filter's table, but this rule has no "
            "max_embedding_distance: nothing would use it"
        )
    rows, vocab = p.shape
    if vocab > 0 and adjacency is not None and (
        adjacency.shape != (vocab, vocab) or adjacency.dtype != torch.bool
    ):
        raise ValueError(
            f"adjacency must be a bool table [V, V] = [{vocab}, {vocab}], "
            f"got {adjacency.dtype} {tuple(adjacency.shape)}"
        )
    if tokens.shape[-1] == 0 or rows == 0:
        return p.new_zeros(tokens.shape), q.new_zeros(tokens.shape)
    offsets = rule.offsets(vocab, p.device)
    slots, before, after = offsets.numel(), -int(offsets[0]), int(offsets[-1])
    # gsd_core.probability_order: rank(y) of every token, and the tokens in rank order.
    order = torch.sort(
        q if rule.rank_by == "q" else p, dim=-1, descending=True, stable=True
    ).indices
    rank = torch.empty_like(order).scatter_(
        -1, order, torch.arange(vocab, device=p.device).expand(rows, vocab)
    )
    ranked = torch.stack([p, q]).gather(-1, order.expand(2, rows, vocab))
    windows = F.pad(ranked, (before, after)).unfold(-1, slots, 1)  # [2, N, V, M], a view
    filtered = rule.max_prob_gap is not None or rule.max_embedding_distance is not None
    member_ids = F.pad(order, (before, after)).unfold(-1, slots, 1) if filtered else None
    width = (
        rule.embeddings.shape[-1]
        if rule.max_embedding_distance is not None and adjacency is None
        else 1
    )
    step = max(1, chunk_elements // max(1, rows * slots * width))
    row = torch.arange(rows, device=p.device).unsqueeze(-1)
    parts = []
    for start in range(0, tokens.shape[-1], step):
        x = tokens[:, start : start + step]
        at = rank.gather(-1, x)
        members = windows[:, row, at]  # [2, N, T', M]: ranks rank(x) + offsets, 0 past the ends
        if filtered:
            keep = _window_filter(rule, p, x, member_ids[row, at], members[0], adjacency)
            members = torch.where(keep, members, 0.0)
        parts.append(members.sum(-1))
    sums = torch.cat(parts, -1) if len(parts) > 1 else parts[0]
    return sums[0], sums[1]


def _window_filter(
    rule: DynamicClusters,
    p: Tensor,
    x: Tensor,
    members: Tensor,
    member_p: Tensor,
    adjacency: Tensor | None,
) -> Tensor:
    """gsd_core's ``DynamicClusters.filter`` of the members [N, T, M] (ids; ``member_p`` their
    p) against x [N, T], the distance read from ``adjacency`` where given. Slots past the ends
    hold id 0 and p = 0: whatever is decided there, they add 0."""
    keep = None
    if rule.max_prob_gap is not None:
        keep = (member_p - p.gather(-1, x).unsqueeze(-1)).abs() <= rule.max_prob_gap
    if rule.max_embedding_distance is None:
        return keep
    if adjacency is not None:
        bits = packed_adjacency(adjacency)  # 8 pairs a byte: 8x fewer cache lines per lookup
        byte = bits.view(-1).take(x.unsqueeze(-1) * bits.shape[-1] + (members >> 3))
        near = (byte >> (members & 7).to(torch.uint8)) & 1 != 0
    else:
        unfiltered = dataclasses.replace(rule, max_prob_gap=None)
        near = unfiltered.filter(p, x, members, torch.ones_like(members, dtype=torch.bool))
    return near if keep is None else keep & near


# (table as passed, its bits); the tables of the last two filters (~8.4 MB each at V = 8203)
_PACKED_CACHE: list[tuple[Tensor, Tensor]] = []


def packed_adjacency(adjacency: Tensor, *, chunk_rows: int = 4096) -> Tensor:
    """The bool table [V, V] with 8 pairs a byte: uint8 [V, ceil(V / 8)], bit y % 8 of byte
    [x, y // 8] is adjacency[x, y]. Cached by the identity of the table
    (``accounting.distortion.embedding_adjacency`` returns its cached object); callers must not
    modify a table in place."""
    for table, bits in _PACKED_CACHE:
        if table is adjacency:
            return bits
    vocab = adjacency.shape[-1]
    weights = torch.tensor([1 << bit for bit in range(8)], dtype=torch.uint8)
    weights = weights.to(adjacency.device)
    bits = torch.empty(
        adjacency.shape[0], -(-vocab // 8), dtype=torch.uint8, device=adjacency.device
    )
    for start in range(0, adjacency.shape[0], chunk_rows):  # bounded temporaries on a GPU
        rows = F.pad(adjacency[start : start + chunk_rows].to(torch.uint8), (0, -vocab % 8))
        bits[start : start + chunk_rows] = (rows.view(rows.shape[0], -1, 8) * weights).sum(
            -1, dtype=torch.uint8
        )
    _PACKED_CACHE.insert(0, (adjacency, bits))
    del _PACKED_CACHE[2:]
    return bits


# --- the GSD release's clusters ----------------------------------------------------------------


RELEASE_TABLE_ROWS = 10_000  # embed_tokens[:10000]


def release_distance_table(
    embeddings: Tensor, max_distance: float, rows: int = RELEASE_TABLE_ROWS
) -> Tensor:
    """bool [R, R], R = min(rows, V): (|a|^2 + |b|^2 - 2 a.b) < max_distance over the first R
    embedding rows, every operation in bfloat16 as the release (its weights are bfloat16)."""
    a = embeddings[:rows].detach().to(torch.bfloat16)
    squares = (a**2).sum(-1, keepdim=True)
    return (squares + squares.T - 2 * a @ a.T) < max_distance


@dataclass(frozen=True)
class ReleaseDistanceClusters:
    """GSD's dynamic clusters as the release computes them (junhyukso/GSD
    ``scheduler/jacobi_iteration_lumina_mgpt.py``, ``SpeculativeSampler.__call__``). With
    ``ascending`` the ids of p [..., V] in one stable ascending sort and c the position of x:

        W(x) = ascending[c - G//2 : c + G - G//2]     (empty where c < G//2: the start is < 0)
        C(x) = {x} | {y in W(x) : |p(y) - p(x)| < max_prob_gap, adjacency[x, y]}

    Ties: of tokens with equal p the larger id ranks higher (``DynamicClusters``: the smaller).
    The distance filter applies where max W(x) < R (``adjacency`` [R, R]), none where
    max W(x) > ``id_bound`` (the release's ``max() <= 10000``; no table: none anywhere), and
    C(x) = {x}, the plain ratio p(x) / q(x), where R <= max W(x) <= id_bound: the release raises
    an IndexError and falls back to that ratio where R <= x (x = 10000 exactly), and aborts on its
    GPU where x < R (module docstring, not reproduced); and where W(x) is empty (the release's
    ``.max()`` of nothing raises). Members in slot order, ascending. V >= G (the release: 65,536
    ids, G = 14).

    adjacency: ``release_distance_table(embed_tokens, d)``. A ``gsd_core`` rule (``masses``,
    ``residual_weights``: the token residual), token-dependent and overlapping like
    ``DynamicClusters``."""

    group_size: int
    adjacency: Tensor | None
    max_prob_gap: float | None = 0.15
    id_bound: int = RELEASE_TABLE_ROWS

    def __post_init__(self) -> None:
        """G an int >= 1, ``adjacency`` a square bool tensor or None, ``id_bound`` an int."""
        check_count(self.group_size, "group_size (G, tokens per cluster)")
        table = self.adjacency
        if table is not None and not (
            isinstance(table, Tensor)
            and table.dtype == torch.bool
            and table.dim() == 2
            and table.shape[0] == table.shape[1]
        ):
            tensor = isinstance(table, Tensor)
            got = f"{table.dtype} {tuple(table.shape)}" if tensor else repr(table)
            raise ValueError(f"adjacency must be a square bool tensor [R, R] or None, got {got}")
        if isinstance(self.id_bound, bool) or not isinstance(self.id_bound, int):
            raise ValueError(f"id_bound must be an int, got {self.id_bound!r}")

    def members(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """C(x) for tokens x [..., T]: ids [..., T, G] and keep [..., T, G]."""
        vocab, size = p.shape[-1], self.group_size
        if vocab < size:
            raise ValueError(f"the release's window needs V >= G, got V = {vocab}, G = {size}")
        ascending = torch.sort(p, dim=-1, stable=True).indices  # the release's logit_sort
        ranks = torch.arange(vocab, device=p.device).expand_as(ascending)
        rank = torch.empty_like(ascending).scatter_(-1, ascending, ranks)  # the inverse permutation
        start = rank.gather(-1, x) - size // 2  # [..., T]
        slots = start.unsqueeze(-1) + torch.arange(size, device=p.device)  # [..., T, G]
        # A negative start wraps past the stop (V >= G): the release's slice is empty.
        in_slice = (start >= 0).unsqueeze(-1) & (slots < vocab)
        index = ascending.gather(-1, slots.clamp(0, vocab - 1).flatten(-2)).view(slots.shape)
        token = x.unsqueeze(-1)
        keep = in_slice
        if self.max_prob_gap is not None:
            p_x = p.gather(-1, x).unsqueeze(-1)
            p_y = p.gather(-1, index.flatten(-2)).view(index.shape)
            keep = keep & ((p_y - p_x).abs() < self.max_prob_gap)
        fallback = ~in_slice.any(-1, keepdim=True)
        if self.adjacency is not None:
            rows = self.adjacency.shape[0]
            largest = torch.where(in_slice, index, -1).amax(-1, keepdim=True)
            filtered = largest <= self.id_bound
            # The release: an IndexError where x >= R, an abort on its GPU where x < R (the
            # module docstring); the plain ratio in both.
            missing = filtered & (largest >= rows)
            table = self.adjacency.to(p.device)
            near = table[token.clamp(max=rows - 1), index.clamp(max=rows - 1)]
            keep = torch.where(filtered & ~missing, keep & near, keep)
            fallback = fallback | missing
        keep = keep | (in_slice & (index == token))  # x stays (module docstring)
        first = torch.arange(size, device=p.device) == 0
        return torch.where(fallback & first, token, index), torch.where(fallback, first, keep)

    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """(p(C(x)), q(C(x))) for tokens x [..., T]: [..., T] each (``member_masses``)."""
        return member_masses(p, q, *self.members(p, q, x))

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        return DynamicClusters(self.group_size).residual_weights(p, q)  # the token residual


# --- registrations -----------------------------------------------------------------------------


uses_support.register(DynamicClusters, lambda rule: rule.rank_by == "p")


@window_masses.register
def _(rule: DynamicClusters, p: Tensor, q: Tensor, drafts: Tensor, support: Any) -> Masses:
    if rule.rank_by == "p":  # ranked on the support of p (``ranking``)
        return dynamic_masses(rule, p, q, drafts, support)
    return rule.masses(p, q, drafts.unsqueeze(-1))


# The windows of every support token overlap: one full ranking per row serves them all.
support_masses.register(DynamicClusters, ranked_window_masses)
member_slots.register(DynamicClusters, lambda rule, vocab: rule.offsets(vocab).numel())


@embedding_filter.register
def _(rule: DynamicClusters) -> tuple[Tensor, float] | None:
    if rule.max_embedding_distance is None:
        return None
    return rule.embeddings, rule.max_embedding_distance


rows_of.register(DynamicClusters, shared_rows)  # embeddings [V, D]: the vocabulary's
rows_of.register(ReleaseDistanceClusters, shared_rows)  # adjacency [R, R]: the vocabulary's


@rows_of.register
def _(rule: FixedPartition, index: slice | list[int]) -> FixedPartition:
    """labels [V] or [1, V]: every row's partition (broadcast), kept whole; [N, V], N > 1: one
    partition per row, sliced."""
    if rule.labels.ndim == 1 or rule.labels.shape[0] == 1:
        return rule
    return slice_rows(rule, index)


cluster_residual.register(Partition, lambda rule: replace(rule, residual="cluster"))
coupling.register(
    Partition, lambda rule: rule.partition_labels if rule.residual == "cluster" else None
)
