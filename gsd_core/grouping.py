"""Clusters of interchangeable tokens: fixed partitions, the paper's dynamic clusters
(Algorithm 3) and our rank-binned partition.

The probability ranking used everywhere orders the vocabulary by p descending, ties broken by
the smaller token id first: token y precedes token z iff (-p(y), y) < (-p(z), z). The rank of
a token is the number of tokens that precede it. All selections below are O(V) per row (no
sort) and exact under ties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from ._validation import check_labels, check_probabilities, check_tokens


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


def _nearest_in_set(
    values: Tensor, in_set: Tensor, count: Tensor, max_count: int, *, closer_is_smaller: bool
) -> Tensor:
    """Mask of the ``count`` members of ``in_set`` nearest to the pivot in the ranking.

    Above the pivot, nearer means a smaller p and, among equal p, a larger id; below it, a
    larger p and, among equal p, a smaller id. ``count``: [...] per-row numbers <= max_count.
    """
    vocab = values.shape[-1]
    k = min(max_count, vocab)
    if k == 0:
        return torch.zeros_like(in_set)
    fill = torch.inf if closer_is_smaller else -torch.inf
    candidates = torch.topk(values.masked_fill(~in_set, fill), k, dim=-1, largest=not closer_is_smaller).values
    n = torch.minimum(count, in_set.sum(-1))
    threshold = candidates.gather(-1, (n - 1).clamp(min=0).unsqueeze(-1))
    strictly = in_set & ((values < threshold) if closer_is_smaller else (values > threshold))
    tied = in_set & (values == threshold)
    need = (n - strictly.sum(-1)).unsqueeze(-1)
    if bool((tied.sum(-1, keepdim=True) <= need).all()):
        chosen_ties = tied  # the common case: no tie straddles the boundary
    else:
        # Ties at the boundary: above the pivot the larger ids are nearer, below it the smaller.
        order = tied.flip(-1).cumsum(-1).flip(-1) if closer_is_smaller else tied.cumsum(-1)
        chosen_ties = tied & (order <= need)
    return (strictly | chosen_ties) & (n > 0).unsqueeze(-1)


def rank_window(p: Tensor, token: Tensor, n_before: Tensor | int, n_after: Tensor | int) -> Tensor:
    """Tokens whose rank lies in [rank(x) - n_before, rank(x) + n_after], clipped at both ends.

    p: [..., V]; token: [...]; n_before, n_after: ints or int tensors [...]. Returns bool [..., V].
    """
    index, valid = rank_window_members(p, token, n_before, n_after)
    return _members_to_mask(index, valid, p.shape)


def _rank_window_mask_exact(p: Tensor, token: Tensor, n_before: Tensor, n_after: Tensor) -> Tensor:
    """Reference O(V) selection of the rank window as a mask, exact under any ties."""
    px = p.gather(-1, token.unsqueeze(-1))
    ids = torch.arange(p.shape[-1], device=p.device)
    tie = p == px
    before = (p > px) | (tie & (ids < token.unsqueeze(-1)))
    after = (p < px) | (tie & (ids > token.unsqueeze(-1)))
    max_before = int(n_before.max().item()) if n_before.numel() else 0
    max_after = int(n_after.max().item()) if n_after.numel() else 0
    mask = _nearest_in_set(p, before, n_before, max_before, closer_is_smaller=True)
    mask |= _nearest_in_set(p, after, n_after, max_after, closer_is_smaller=False)
    return mask.scatter(-1, token.unsqueeze(-1), True)


def _nearest_strict(p: Tensor, px: Tensor, count: Tensor, k: int, above: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Fast path: the ``count`` tokens strictly above (or below) p(x) nearest to it, by one top-k.

    Returns indices [..., k], validity [..., k] and a per-row flag that is True where a tie
    straddles the selection boundary (those rows need the exact path)."""
    vocab = p.shape[-1]
    k_plus = min(k + 1, vocab)
    if above:
        candidates = torch.where(p > px, p, torch.inf)
    else:
        candidates = torch.where(p < px, p, -torch.inf)
    values, index = torch.topk(candidates, k_plus, dim=-1, largest=not above, sorted=True)
    finite = torch.isfinite(values)
    position = torch.arange(k_plus, device=p.device)
    valid = finite & (position < count.unsqueeze(-1))
    # A tie straddles the boundary if the last chosen value equals the first value left out.
    last = values.gather(-1, (count - 1).clamp(min=0, max=k_plus - 1).unsqueeze(-1)).squeeze(-1)
    first_out = values.gather(-1, count.clamp(max=k_plus - 1).unsqueeze(-1)).squeeze(-1)
    straddles = (count > 0) & (count < k_plus) & torch.isfinite(first_out) & (last == first_out)
    return index[..., :k], valid[..., :k], straddles


def _tied_window(p: Tensor, token: Tensor, n_before: Tensor, n_after: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Rank window for rows where other tokens share p(x) (e.g. p(x) = 0 after top-k).

    Tokens tied with x sit right next to it in the ranking, ordered by id: those with smaller
    ids just before it, larger ids just after. Take the nearest tied ones first (one top-k over
    ids), then fill up from the strict sets. Returns members, validity and a per-row flag for
    ties straddling an edge of the strict part (exact path)."""
    vocab = p.shape[-1]
    px = p.gather(-1, token.unsqueeze(-1))
    ids = torch.arange(vocab, device=p.device)
    tie = p == px
    before_ids = torch.where(tie & (ids < token.unsqueeze(-1)), ids, -1)
    after_ids = torch.where(tie & (ids > token.unsqueeze(-1)), ids, vocab)
    parts, valids, bad = [token.unsqueeze(-1)], [torch.ones_like(token, dtype=torch.bool).unsqueeze(-1)], None
    for side_ids, count, largest in ((before_ids, n_before, True), (after_ids, n_after, False)):
        k = min(int(count.max().item()), vocab)
        if k == 0:
            continue
        values, index = torch.topk(side_ids, k, dim=-1, largest=largest, sorted=True)
        ok = ((values >= 0) & (values < vocab)) & (torch.arange(k, device=p.device) < count.unsqueeze(-1))
        rest = count - ok.sum(-1)
        s_index, s_ok, s_bad = _nearest_strict(p, px, rest, k, above=largest)
        parts += [index, s_index]
        valids += [ok, s_ok]
        bad = s_bad if bad is None else bad | s_bad
    if bad is None:
        bad = torch.zeros_like(token, dtype=torch.bool)
    index, valid = torch.cat(parts, -1), torch.cat(valids, -1)
    return torch.where(valid, index, token.unsqueeze(-1)), valid, bad


def rank_window_members(
    p: Tensor, token: Tensor, n_before: Tensor | int, n_after: Tensor | int
) -> tuple[Tensor, Tensor]:
    """The rank window of ``rank_window`` as member indices [..., M] and validity [..., M],
    M = max(n_before) + 1 + max(n_after). The token itself is always a valid member.

    Fast path: two top-k selections on strict comparisons, O(V). Rows where p(x) is tied with
    another token, or a tie straddles a window edge, are recomputed by the exact mask path.
    """
    batch, vocab = p.shape[:-1], p.shape[-1]
    # Work on rows [N, V]; reshape back at the end.
    token = token.expand(batch).reshape(-1)
    n_before = torch.as_tensor(n_before, device=p.device).expand(batch).reshape(-1)
    n_after = torch.as_tensor(n_after, device=p.device).expand(batch).reshape(-1)
    p = p.reshape(-1, vocab)
    max_before = int(n_before.max().item()) if n_before.numel() else 0
    max_after = int(n_after.max().item()) if n_after.numel() else 0
    px = p.gather(-1, token.unsqueeze(-1))
    tied = (p == px).sum(-1) > 1  # p(x) shared with another token: ties ordered by id
    idx_b, ok_b, bad_b = _nearest_strict(p, px, n_before, max_before, above=True)
    idx_a, ok_a, bad_a = _nearest_strict(p, px, n_after, max_after, above=False)
    index = torch.cat([idx_b, token.unsqueeze(-1), idx_a], -1)
    valid = torch.cat([ok_b, torch.ones_like(token, dtype=torch.bool).unsqueeze(-1), ok_a], -1)
    if bool(tied.any()):
        rows = tied.nonzero(as_tuple=True)
        tie_index, tie_valid, tie_bad = _tied_window(p[rows], token[rows], n_before[rows], n_after[rows])
        index, valid = index.clone(), valid.clone()
        index[rows], valid[rows] = _mask_members(_members_to_mask(tie_index, tie_valid, p[rows].shape), index.shape[-1])
        bad_b, bad_a = bad_b.clone(), bad_a.clone()
        bad_b[rows], bad_a[rows] = tie_bad, tie_bad
    needs_exact = bad_b | bad_a
    if bool(needs_exact.any()):
        rows = needs_exact.nonzero(as_tuple=True)
        mask = _rank_window_mask_exact(p[rows], token[rows], n_before[rows], n_after[rows])
        exact_index, exact_valid = _mask_members(mask, index.shape[-1])
        index, valid = index.clone(), valid.clone()
        index[rows], valid[rows] = exact_index, exact_valid
    # Invalid slots point at the token itself, so no slot names an unrelated token.
    index = torch.where(valid, index, token.unsqueeze(-1))
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


@runtime_checkable
class ClusterRule(Protocol):
    """A rule that assigns each drafted token x a cluster C(x) given the target p.

    ``is_partition`` is True when the clusters {C(x)} partition the vocabulary for every p
    (then Theorem 1 applies and the cluster-exact residual is defined)."""

    is_partition: bool

    def members(self, p: Tensor, token: Tensor) -> tuple[Tensor, Tensor]:
        """Cluster of ``token`` given p [..., V], token [...]: indices [..., M] and validity [..., M]."""
        ...


@dataclass(frozen=True)
class FixedPartition:
    """A partition of the vocabulary given as integer labels [V] (or [..., V]) that does not depend on p."""

    labels: Tensor
    is_partition: bool = True

    def partition_labels(self, p: Tensor) -> Tensor:
        return check_labels(self.labels, p.shape[-1]).to(p.device)

    def cluster_mask(self, p: Tensor, token: Tensor) -> Tensor:
        labels = self.partition_labels(p).expand(p.shape)
        return labels == labels.gather(-1, token.unsqueeze(-1))

    def members(self, p: Tensor, token: Tensor) -> tuple[Tensor, Tensor]:
        mask = self.cluster_mask(p, token)
        return _mask_members(mask, int(mask.sum(-1).max().item()))


@dataclass(frozen=True)
class DynamicClusters:
    """The paper's dynamic clusters (Algorithm 3, VERIFY_GSD), as in ``dynamic_cluster``.

    Token-dependent and overlapping: *not* a partition, so Theorem 1 does not hold in general
    (proofs/04_dynamic_counterexample.md) and only the token-level residual applies."""

    group_size: int
    max_embedding_distance: float | None = None
    max_prob_gap: float | None = None
    embeddings: Tensor | None = None
    is_partition: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.group_size, int) or self.group_size < 0:
            raise ValueError(f"group_size must be an int >= 0, got {self.group_size!r}")
        if self.max_embedding_distance is not None and self.embeddings is None:
            raise ValueError("max_embedding_distance needs embeddings (a [V, D] tensor)")
        if self.embeddings is not None and (self.embeddings.ndim != 2 or not self.embeddings.is_floating_point()):
            raise ValueError(f"embeddings must be a float tensor [V, D], got {tuple(self.embeddings.shape)}")
        for name in ("max_embedding_distance", "max_prob_gap"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")

    def members(self, p: Tensor, token: Tensor) -> tuple[Tensor, Tensor]:
        half = self.group_size // 2
        index, keep = rank_window_members(p, token, half, half)
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
    is_partition: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.group_size, int) or self.group_size < 1:
            raise ValueError(f"RankBinnedClusters needs group_size >= 1, got {self.group_size!r}")

    def partition_labels(self, p: Tensor) -> Tensor:
        return probability_ranks(p) // self.group_size

    def members(self, p: Tensor, token: Tensor) -> tuple[Tensor, Tensor]:
        offset = probability_rank(p, token) % self.group_size
        return rank_window_members(p, token, offset, self.group_size - 1 - offset)


def as_cluster_rule(clusters: object, vocab_size: int) -> ClusterRule | None:
    """Normalise the ``clusters`` argument: None (standard SD), partition labels, or a rule."""
    if clusters is None:
        return None
    if isinstance(clusters, Tensor):
        return FixedPartition(check_labels(clusters, vocab_size))
    if isinstance(clusters, ClusterRule):
        return clusters
    raise ValueError(
        "clusters must be None, an integer label tensor [V], or a rule such as "
        f"DynamicClusters / RankBinnedClusters; got {type(clusters).__name__}"
    )


def cluster_mask(rule: ClusterRule, p: Tensor, token: Tensor) -> Tensor:
    """Bool mask [..., V] of C(token) under ``rule``; p: [..., V], token: [...]."""
    index, keep = rule.members(p, token.expand(p.shape[:-1]))
    return _members_to_mask(index, keep, p.shape)


def dynamic_cluster(
    p: Tensor,
    token: Tensor | int,
    group_size: int,
    *,
    embeddings: Tensor | None = None,
    max_embedding_distance: float | None = None,
    max_prob_gap: float | None = None,
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

    p: [..., V]; token: int or int tensor broadcastable to p.shape[:-1].
    """
    p = check_probabilities(p, "p")
    token = check_tokens(token, p.shape[-1]).to(p.device)
    rule = DynamicClusters(group_size, max_embedding_distance, max_prob_gap, embeddings)
    return cluster_mask(rule, p, token)
