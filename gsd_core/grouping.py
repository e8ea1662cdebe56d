"""Clusters of interchangeable tokens: fixed partitions, the paper's dynamic clusters
(Algorithm 3) and our rank-binned partition.

The probability ranking used everywhere orders the vocabulary by p descending, ties broken by
the smaller token id first: token y precedes token z iff (-p(y), y) < (-p(z), z). The rank of
a token is the number of tokens that precede it. Rank windows are selected in O(V) per row
without sorting, or, for few rows of a small vocabulary (``_use_sort``), where its few ops
are cheaper, read off one stable sort per row; both are exact under ties and give the same
members.
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


def _nth_in_mask(counts: Tensor, nth: Tensor) -> Tensor:
    """Index of the nth True entry (1-based) of each row, given ``counts`` = mask.cumsum(-1).

    counts: [N, V] int32 (non-decreasing); nth: [N, K] >= 1. The nth True entry is the first
    position where the running count reaches nth, found by binary search: O(K log V)."""
    found = torch.searchsorted(counts, nth.to(counts.dtype).contiguous())
    return found.clamp(max=counts.shape[-1] - 1)


def _tied_members(
    tie: Tensor, token: Tensor, n_before: Tensor, n_after: Tensor, k_before: int, k_after: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Tokens sharing p(x) sit right next to x in the ranking, ordered by id: those with a
    smaller id just before it (nearest = largest such id), those with a larger id just after.

    tie: [N, V] bool (p == p(x)). Returns indices and validity [N, k_before] (before, nearest
    first) and [N, k_after] (after, nearest first)."""
    counts = tie.cumsum(-1, dtype=torch.int32)
    own = counts.gather(-1, token.unsqueeze(-1)).long()  # 1-based position of x among its ties
    total = counts[:, -1:].long()
    step_b = torch.arange(1, k_before + 1, device=tie.device)
    step_a = torch.arange(1, k_after + 1, device=tie.device)
    nth_b, nth_a = own - step_b, own + step_a
    ok_b = (nth_b >= 1) & (step_b <= n_before.unsqueeze(-1))
    ok_a = (nth_a <= total) & (step_a <= n_after.unsqueeze(-1))
    idx_b = _nth_in_mask(counts, nth_b.clamp(min=1))
    idx_a = _nth_in_mask(counts, torch.minimum(nth_a, total))
    return idx_b, ok_b, idx_a, ok_a


def _strict_members(p: Tensor, px: Tensor, count: Tensor, k: int, above: bool) -> tuple[Tensor, Tensor]:
    """The ``count`` tokens nearest to x in the ranking among those with p strictly above
    (or below) p(x), nearest first: one top-k, exact under ties.

    Above x, nearer means a smaller p and, among equal p, a larger id; below x, a larger p and,
    among equal p, a smaller id. top-k picks an arbitrary subset of a tied value, so a row
    whose selection ends inside a run of equal values gets that run's slots re-chosen by id.
    p: [N, V]; px: [N, 1]; count: [N] <= k. Returns indices, validity [N, k]."""
    vocab = p.shape[-1]
    k_plus = min(k + 1, vocab)
    fill = torch.inf if above else -torch.inf
    candidates = torch.where(p > px, p, fill) if above else torch.where(p < px, p, fill)
    values, index = torch.topk(candidates, k_plus, dim=-1, largest=not above, sorted=True)
    del candidates
    position = torch.arange(k_plus, device=p.device)
    chosen = position < count.unsqueeze(-1)
    valid = torch.isfinite(values) & chosen
    # Boundary value t of the selection, and whether more tokens share t than were chosen.
    last = values.gather(-1, (count - 1).clamp(min=0, max=k_plus - 1).unsqueeze(-1))
    first_out = values.gather(-1, count.clamp(max=k_plus - 1).unsqueeze(-1))
    first_out, last = first_out.squeeze(-1), last.squeeze(-1)
    straddles = (count > 0) & (count < k_plus) & torch.isfinite(first_out) & (last == first_out)
    if bool(straddles.any()):
        rows = straddles.nonzero(as_tuple=True)[0]
        t = last[rows].unsqueeze(-1)
        at_t = p[rows] == t
        counts = at_t.to(torch.int32).cumsum(-1, dtype=torch.int32)
        total = counts[:, -1:].long()
        in_run = (values[rows] == t) & chosen[rows]
        start = (chosen[rows] & ~in_run).sum(-1, keepdim=True)  # slots before the run of t
        need = in_run.sum(-1, keepdim=True)
        step = position - start  # i-th slot of the run
        # Above x the run is entered from its largest id; below x from its smallest.
        nth = (total - step) if above else (1 + step)
        ids = _nth_in_mask(counts, nth.clamp(min=1, max=vocab))
        index[rows] = torch.where((step >= 0) & (step < need), ids, index[rows])
    return index[..., :k], valid[..., :k]


def _window_side(
    p: Tensor, px: Tensor, count: Tensor, k: int, tied_index: Tensor | None, tied_ok: Tensor | None, above: bool
) -> tuple[Tensor, Tensor]:
    """One side of the rank window, nearest first: tied tokens, then strict ones. [N, k] each."""
    n = p.shape[0]
    slot = torch.arange(k, device=p.device)
    used = tied_ok.sum(-1) if tied_ok is not None else torch.zeros(n, dtype=torch.long, device=p.device)
    rest = (count - used).clamp(min=0)
    strict_index = torch.zeros(n, k, dtype=torch.long, device=p.device)
    strict_ok = torch.zeros(n, k, dtype=torch.bool, device=p.device)
    need = rest > 0
    if bool(need.any()):
        if bool(need.all()):
            strict_index, strict_ok = _strict_members(p, px, rest, k, above)
        else:
            rows = need.nonzero(as_tuple=True)[0]
            strict_index[rows], strict_ok[rows] = _strict_members(
                p.index_select(0, rows), px[rows], rest[rows], k, above
            )
    if tied_ok is None:
        return strict_index, strict_ok
    # Slot j holds the j-th tied token while those last, then the (j - used)-th strict one.
    from_strict = (slot - used.unsqueeze(-1)).clamp(min=0)
    is_tied = slot < used.unsqueeze(-1)
    index = torch.where(is_tied, tied_index, strict_index.gather(-1, from_strict))
    ok = torch.where(is_tied, tied_ok, strict_ok.gather(-1, from_strict))
    return index, ok


# Ties of p(x) are first looked for among the ids within this distance of x (cheap gathers);
# only rows where that neighbourhood does not settle the window scan the whole row.
_LOCAL_REACH = 64


def _local_tied_side(
    p: Tensor, px: Tensor, token: Tensor, count: Tensor, k: int, reach: int, after: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """Tied tokens nearest to x on one side, searched among ids x -+ 1..reach only.

    Returns indices, validity [N, k] (nearest first) and a per-row flag ``complete``: True
    where the neighbourhood already holds ``count`` ties or reaches the end of the vocabulary,
    so no tie farther away can be among the nearest."""
    vocab = p.shape[-1]
    offsets = torch.arange(1, reach + 1, device=p.device)
    ids = token.unsqueeze(-1) + offsets if after else token.unsqueeze(-1) - offsets
    inside = (ids < vocab) if after else (ids >= 0)
    tie = (p.gather(-1, ids.clamp(0, vocab - 1)) == px) & inside
    counts = tie.to(torch.int32).cumsum(-1, dtype=torch.int32)
    found = counts[:, -1].long()
    edge = (token + reach >= vocab - 1) if after else (token - reach <= 0)
    complete = (found >= count) | edge
    step = torch.arange(1, k + 1, device=p.device)
    ok = (step <= found.unsqueeze(-1)) & (step <= count.unsqueeze(-1))
    index = ids.gather(-1, _nth_in_mask(counts, step.expand(ids.shape[0], k)))
    return index, ok, complete


def _window_generic(
    p: Tensor, px: Tensor, token: Tensor, n_before: Tensor, n_after: Tensor, k_before: int, k_after: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Both sides of the rank window, nearest first, for rows p [N, V] whose columns are in id
    order: ties of p(x) by one cumulative count over the row, the rest by ``_window_side``.
    Returns column indices and validity, [N, k_before] and [N, k_after]."""
    tb, ok_tb, ta, ok_ta = _tied_members(p == px, token, n_before, n_after, k_before, k_after)
    idx_b, ok_b = _window_side(p, px, n_before, k_before, tb, ok_tb, above=True)
    idx_a, ok_a = _window_side(p, px, n_after, k_after, ta, ok_ta, above=False)
    return idx_b, ok_b, idx_a, ok_a


def _smallest_zero_ids(p: Tensor, count: int) -> tuple[Tensor, Tensor]:
    """The ``count`` smallest ids y with p(y) = 0 in each row of p [N, V], and their validity.
    Looked for among the first ids first; rows without enough zeros there scan the whole row."""
    vocab = p.shape[-1]
    reach = min(vocab, max(_LOCAL_REACH, 2 * count))
    zero = p[:, :reach] == 0
    counts = zero.cumsum(-1, dtype=torch.int32)
    if reach < vocab and bool((counts[:, -1] < count).any()):
        counts = (p == 0).cumsum(-1, dtype=torch.int32)
    step = torch.arange(1, count + 1, device=p.device)
    return _nth_in_mask(counts, step.expand(p.shape[0], count)), step <= counts[:, -1:].long()


_BLOCK = 64  # ids per block when packing the support of a sparse p


def _window_sparse(
    p: Tensor, px: Tensor, token: Tensor, n_before: Tensor, n_after: Tensor, k_before: int, k_after: int
) -> tuple[Tensor, Tensor, Tensor, Tensor] | None:
    """``_window_generic`` for rows with p(x) > 0 whose support is small (p after top-k).

    The blocks of ``_BLOCK`` consecutive ids that hold a positive entry (found by one max per
    block) are packed, in id order, into [N, W] and the window is found there. Entries with
    p = 0 become pads with value -1: below every real token and tied among themselves. Tokens
    with p = 0 rank last, by id, so pad slots chosen below x are replaced by the smallest ids
    where p = 0, in order. Returns None when the packed rows would not be much narrower."""
    n, vocab = p.shape
    head = vocab - vocab % _BLOCK
    block_has = p[:, :head].reshape(n, head // _BLOCK, _BLOCK).amax(-1) > 0
    rows, blocks = block_has.nonzero(as_tuple=True)
    per_row = torch.bincount(rows, minlength=n)
    width_blocks = int(per_row.max().item()) if rows.numel() else 0
    width = width_blocks * _BLOCK + (vocab - head) + k_after + 1  # + tail ids + room for pads
    if width > vocab // 4:
        return None
    slot = torch.arange(rows.numel(), device=p.device) - (per_row.cumsum(0) - per_row)[rows]
    first_ids = torch.full((n, width_blocks), vocab, dtype=torch.long, device=p.device)
    first_ids[rows, slot] = blocks * _BLOCK
    # Empty block slots get ids >= V: like the pads below, they are no token.
    block_ids = first_ids.unsqueeze(-1) + torch.arange(_BLOCK, device=p.device)
    tail = torch.arange(head, vocab, device=p.device).expand(n, vocab - head)
    pads = torch.full((n, k_after + 1), vocab, dtype=torch.long, device=p.device)
    # Real ids appear in increasing order (blocks, then the tail); ids >= V mark empty slots.
    ids = torch.cat([block_ids.reshape(n, -1), tail, pads], -1)
    values = p.gather(-1, ids.clamp(max=vocab - 1))
    values = torch.where((ids < vocab) & (values > 0), values, -1.0)
    own = (ids == token.unsqueeze(-1)).to(torch.uint8).argmax(-1)  # slot of x (p(x) > 0)
    idx_b, ok_b, idx_a, ok_a = _window_generic(values, px, own, n_before, n_after, k_before, k_after)
    is_pad = values.gather(-1, idx_a) < 0
    idx_b = ids.gather(-1, idx_b)
    idx_a = ids.gather(-1, idx_a)
    if bool((is_pad & ok_a).any()):
        zero_ids, zero_ok = _smallest_zero_ids(p, k_after + 1)
        nth = (is_pad.long().cumsum(-1) - 1).clamp(min=0)  # pads are taken in slot order
        idx_a = torch.where(is_pad, zero_ids.gather(-1, nth), idx_a)
        ok_a = ok_a & (~is_pad | zero_ok.gather(-1, nth))
    idx_b = torch.where(ok_b, idx_b, token.unsqueeze(-1))
    idx_a = torch.where(ok_a, idx_a, token.unsqueeze(-1))
    return idx_b, ok_b, idx_a, ok_a


def _window_rows(
    p: Tensor, px: Tensor, token: Tensor, n_before: Tensor, n_after: Tensor, k_before: int, k_after: int, rows: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The rank window of the given ``rows`` (those the neighbourhood search did not settle):
    on the packed support where p(x) > 0 and p is sparse, else over the full rows.
    p: [N, V] etc. for all rows; returns [len(rows), k_before] x 2 and [len(rows), k_after] x 2."""
    args = (p, px, token, n_before, n_after)

    def pick(index: Tensor) -> tuple[Tensor, ...]:
        return args if index.numel() == p.shape[0] else tuple(a.index_select(0, index) for a in args)

    positive = px[rows, 0] > 0
    packed = None
    if bool(positive.any()):
        packed = _window_sparse(*pick(rows[positive]), k_before, k_after)
    if packed is None:
        return _window_generic(*pick(rows), k_before, k_after)
    if bool(positive.all()):
        return packed
    rest = _window_generic(*pick(rows[~positive]), k_before, k_after)
    out = []
    for part_packed, part_rest in zip(packed, rest):
        full = part_packed.new_empty((rows.numel(), part_packed.shape[-1]))
        full[positive], full[~positive] = part_packed, part_rest
        out.append(full)
    return tuple(out)


# Small selections take the sort-based path: one stable sort per row and a handful of ops,
# cheaper than the many small ops of the O(V) selection up to about this many rows x tokens
# (measured on CPU: one row up to V = 8192, sixteen rows at V = 1100).
_SORT_MAX_VOCAB = 8192
_SORT_MAX_ELEMENTS = 16384


def _use_sort(rows: int, vocab: int) -> bool:
    return vocab <= _SORT_MAX_VOCAB and rows * vocab <= _SORT_MAX_ELEMENTS


def _descending_order(p: Tensor) -> Tensor:
    """Token ids in ranking order, [N, V] -> [N, V]: a stable descending sort keeps equal
    values in id order, which is exactly the tie rule (smaller id first)."""
    return torch.sort(p, dim=-1, descending=True, stable=True).indices


def _rank_in_order(order: Tensor, token: Tensor) -> Tensor:
    """Position of ``token`` [N] in each row of ``order`` [N, V]: its rank, int64 [N]."""
    return (order == token.unsqueeze(-1)).to(torch.uint8).argmax(-1)


def _sorted_window_members(
    order: Tensor,
    rank: Tensor,
    token: Tensor,
    n_before: Tensor | None,
    n_after: Tensor | None,
    k_before: int,
    k_after: int,
) -> tuple[Tensor, Tensor]:
    """The rank window read off the sorted order: slots at ranks rank - 1 .. rank - k_before
    (nearest first), the token, then rank + 1 .. rank + k_after; a slot is valid when its
    rank lies in [0, V) and its offset within n_before / n_after (None: within k, all rows).
    order: [N, V]; rank, token, n_before, n_after: [N]. Returns [N, M] x 2, invalid slots
    pointing at the token."""
    offsets = _window_offsets(k_before, k_after, order.device)
    position = rank.unsqueeze(-1) + offsets
    valid = (position >= 0) & (position < order.shape[-1])
    if n_before is not None:
        limit = torch.where(offsets < 0, n_before.unsqueeze(-1), n_after.unsqueeze(-1))
        valid &= offsets.abs() <= limit
    index = order.gather(-1, position.clamp(0, order.shape[-1] - 1))
    return torch.where(valid, index, token.unsqueeze(-1)), valid


@lru_cache(maxsize=64)
def _window_offsets(k_before: int, k_after: int, device: torch.device) -> Tensor:
    """Rank offsets of the window's slots: -1 .. -k_before, 0, 1 .. k_after. [M] int64."""
    before = [-i for i in range(1, k_before + 1)]
    return torch.tensor(before + [0] + list(range(1, k_after + 1)), dtype=torch.long, device=device)


def _window_extent(n: Tensor | int, batch: torch.Size, vocab: int, device: torch.device) -> tuple[int, Tensor]:
    """Slots k = min(max(n), V - 1) one side of the window needs, and n as int64 [prod(batch)]."""
    count = batch.numel()
    if isinstance(n, int):  # a plain int needs no device sync to find its maximum
        return (min(n, vocab - 1) if count else 0), torch.full((count,), n, dtype=torch.long, device=device)
    n = torch.as_tensor(n, device=device).long().expand(batch).reshape(-1)
    return (min(int(n.max().item()), vocab - 1) if count else 0), n


def rank_window_members(
    p: Tensor, token: Tensor, n_before: Tensor | int, n_after: Tensor | int
) -> tuple[Tensor, Tensor]:
    """The rank window of ``rank_window`` as member indices [..., M] and validity [..., M],
    M = min(max(n_before), V - 1) + 1 + min(max(n_after), V - 1). The token itself is always a
    valid member; invalid slots point at the token.

    Exact under any ties, without sorting. Tokens tied with p(x) sit next to x in the ranking,
    ordered by id, so they are looked for among nearby ids first: the common case after top-k,
    p(x) = 0, costs a few gathers. Other rows use one cumulative count for the ties and one
    top-k per side for the rest (on the packed positive entries when p is sparse), with a tie
    at the selection boundary re-chosen by id.
    """
    batch, vocab = p.shape[:-1], p.shape[-1]
    token = token.expand(batch).reshape(-1)
    p = p.reshape(-1, vocab)
    if _use_sort(p.shape[0], vocab):
        same_extent = isinstance(n_before, int) and isinstance(n_after, int) and min(n_before, n_after) >= 0
        if same_extent:  # every row alike (DynamicClusters): only the ends of the ranking clip it
            k_before, k_after = min(n_before, vocab - 1), min(n_after, vocab - 1)
            n_before = n_after = None
        else:
            k_before, n_before = _window_extent(n_before, batch, vocab, p.device)
            k_after, n_after = _window_extent(n_after, batch, vocab, p.device)
        order = _descending_order(p)
        index, valid = _sorted_window_members(
            order, _rank_in_order(order, token), token, n_before, n_after, k_before, k_after
        )
        return index.reshape(*batch, -1), valid.reshape(*batch, -1)
    k_before, n_before = _window_extent(n_before, batch, vocab, p.device)
    k_after, n_after = _window_extent(n_after, batch, vocab, p.device)
    px = p.gather(-1, token.unsqueeze(-1))
    idx_b = ok_b = idx_a = ok_a = None
    if k_before + k_after > 0:
        reach = min(vocab - 1, max(_LOCAL_REACH, k_before, k_after))
        idx_b, ok_b, done_b = _local_tied_side(p, px, token, n_before, k_before, reach, after=False)
        idx_a, ok_a, done_a = _local_tied_side(p, px, token, n_after, k_after, reach, after=True)
        # Settled: all nearest ties found and no strict neighbours needed on either side.
        settled = done_b & done_a & (ok_b.sum(-1) >= n_before) & (ok_a.sum(-1) >= n_after)
        if not bool(settled.all()):
            rows = (~settled).nonzero(as_tuple=True)[0]
            window = _window_rows(p, px, token, n_before, n_after, k_before, k_after, rows)
            if rows.numel() == p.shape[0]:
                idx_b, ok_b, idx_a, ok_a = window
            else:
                idx_b[rows], ok_b[rows], idx_a[rows], ok_a[rows] = window
    own, own_ok = token.unsqueeze(-1), torch.ones_like(token, dtype=torch.bool).unsqueeze(-1)
    if idx_b is None:  # an empty window on both sides: the token alone
        index, valid = own, own_ok
    else:
        index, valid = torch.cat([idx_b, own, idx_a], -1), torch.cat([ok_b, own_ok, ok_a], -1)
    index = torch.where(valid, index, own)
    return index.reshape(*batch, -1), valid.reshape(*batch, -1)


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

    def members(self, p: Tensor, token: Tensor, q: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if self.rank_by == "q":
            if q is None:
                raise ValueError("DynamicClusters(rank_by='q') ranks by the draft q: pass q to members()")
            ranking = q.expand(p.shape) if q.shape != p.shape else q
        else:
            ranking = p
        half = self.group_size // 2
        index, keep = rank_window_members(ranking, token, half, half)
        if self.max_prob_gap is not None:
            px = p.gather(-1, token.unsqueeze(-1))
            keep = keep & ((p.gather(-1, index) - px).abs() <= self.max_prob_gap)
        if self.max_embedding_distance is not None:
            emb = self.embeddings
            if emb.shape[0] < p.shape[-1]:
                raise ValueError(f"embeddings has {emb.shape[0]} rows but the vocabulary has {p.shape[-1]} tokens")
            emb = emb.to(device=p.device)
            diff = emb[index].to(torch.float64) - emb[token].to(torch.float64).unsqueeze(-2)
            keep = keep & (diff.square().sum(-1) <= self.max_embedding_distance)
        # The token passes both filters (gap 0, distance 0), so it always stays in its cluster.
        return index, keep


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
        if _use_sort(batch.numel(), vocab):  # one sort gives the rank and the window
            order = _descending_order(p.reshape(-1, vocab))
            token = token.expand(batch).reshape(-1)
            rank = _rank_in_order(order, token)
            offset = rank % size
            k = min(size - 1, vocab - 1)
            index, valid = _sorted_window_members(order, rank, token, offset, size - 1 - offset, k, k)
            return index.reshape(*batch, -1), valid.reshape(*batch, -1)
        offset = probability_rank(p, token) % size
        return rank_window_members(p, token, offset, size - 1 - offset)


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
