"""Dynamic clusters' masses for the exact accounting: the windows of one full ranking per row.

verify ranks a window of drafts (``ranking.dynamic_masses``: one sort of the
support, a search per member); the accounting asks for the windows of every token of q's
support (K = 2000 of the stand-in's 8203 ids, M = G slots each), whose members overlap. So each
row is ranked once in full, as gsd_core ranks it (one stable sort of V entries: its zeros in id
order follow the support), p and q are laid out in that order, padded with (G - 1) // 2 zeros in
front and G // 2 behind, and the window of a token of rank r is the run of M entries starting at
r: one gather of a [K, M] block from a strided view (``Tensor.unfold``), no search per member.
The zero padding stands where gsd_core clips the window (a slot it does not keep adds 0 either
way), the filters are gsd_core's on the same members, and P, Q are summed over the M slots by
the same op on the same [..., M] values, so they are ``DynamicClusters.masses`` bit for bit.
The distance filter's table is read 8 pairs a byte (``packed_adjacency``): its lookups, random
within a table row, were the largest cost left.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor

from gsd_core import DynamicClusters

Masses = tuple[Tensor, Tensor]  # (P, Q) [N, T]: p(C(x)) and q(C(x)) of tokens x


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
    [N, T] each, bit for bit ``rule.masses`` (module docstring). ``adjacency``: the bool table
    [V, V] of the embedding filter (``accounting.distortion.embedding_adjacency``), else
    gsd_core's filter on the embedding differences. Windows [2, N, T', M] in chunks of T' >= 1
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
            keep = _filter(rule, p, x, member_ids[row, at], members[0], adjacency)
            members = torch.where(keep, members, 0.0)
        parts.append(members.sum(-1))
    sums = torch.cat(parts, -1) if len(parts) > 1 else parts[0]
    return sums[0], sums[1]


def _filter(
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
