"""Dynamic clusters read off one sort of each row's support instead of a sort of all V entries.

gsd_core ranks whole rows (a stable sort of V entries). After top-k the support S_i =
#{y : p_i(y) > 0} is far smaller (Lumina-mGPT: 2000 of 65,536), and every zero-probability
token ranks after it, in id order. ``SupportRanking`` sorts only the K = max_i S_i largest
entries of each row (or the caller's ``support`` ids, or K read by the engine's validation),
and finds the ranks of zeros by counting. ``rules.clusters.dynamic_masses`` reads verify's
windows off it: slot by slot the tokens gsd_core's ``DynamicClusters.members`` puts there,
their masses summed by the same ops, so P and Q are the reference's bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor


@dataclass(frozen=True)
class SupportSize:
    """The support sizes S_i of rows [N, V] as int32 [N], and their maximum K read on the host
    (the engine's validation reads it with everything else)."""

    count: Tensor
    width: int


@lru_cache(maxsize=64)
def _arange(n: int, device: torch.device) -> Tensor:
    return torch.arange(n, device=device)


@lru_cache(maxsize=64)
def _arange_rows(shape: torch.Size, device: torch.device) -> Tensor:
    """0 .. n - 1 along the last dimension of ``shape`` [..., n] (materialised: ``scatter_`` takes
    no broadcast source)."""
    return torch.arange(shape[-1], device=device).expand(shape).contiguous()


class SupportRanking:
    """The probability ranking (-p, id) of each row of p [..., V], from one sort of its support.

    ``support``: None (count S_i and read K = max_i S_i: one host sync), a ``SupportSize``
    (no sync), or ids [..., K] per row holding every id with p > 0 once (zeros may be added or
    repeated): no count, no sync, no selection over V. The K entries are put in id order
    (zero entries moved past the end as id V + K), then stably sorted by p descending: the
    ranking of the support, exact under ties. The m-th zero of a row ranks S_i + m; its id z
    solves z = m + #{positive ids < z} by a search. When 2K > V the whole rows are sorted."""

    def __init__(self, p: Tensor, support: Tensor | SupportSize | None = None) -> None:
        self.vocab = vocab = p.shape[-1]
        if isinstance(support, Tensor):  # the caller's ids [..., K]
            values = p.gather(-1, support)
            positive = values > 0
            self.count = positive.sum(-1, keepdim=True, dtype=torch.int32)
            self.width, self.dense = support.shape[-1], False
            self._rank_support(values, support, positive, clear=True)
            return
        if support is None:
            self.count = (p > 0).sum(-1, keepdim=True, dtype=torch.int32)
            width = int(self.count.max()) if p.numel() else 1  # the host sync
        else:
            self.count, width = support.count.unsqueeze(-1), support.width if p.numel() else 1
        self.width = width = max(1, min(vocab, width))
        self.dense = 2 * width > vocab
        if self.dense:  # one stable sort of the whole rows ranks the zeros too
            self.ranked_ids = torch.sort(p, dim=-1, descending=True, stable=True).indices
            self.position_rank = torch.empty_like(self.ranked_ids).scatter_(
                -1, self.ranked_ids, _arange_rows(p.shape, p.device)
            )
            return
        top = torch.topk(p, width, dim=-1, sorted=False)
        self._rank_support(top.values, top.indices, top.values > 0, clear=support is None)

    def _rank_support(self, values: Tensor, ids: Tensor, positive: Tensor, clear: bool) -> None:
        """Rank K entries per row (values at ids [..., K], every positive entry once; ``positive``:
        values > 0). ``clear``: give non-positive entries key 0 (NaN rows from unvalidated input
        sort after the support)."""
        ids, by_id = torch.where(positive, ids, self.vocab + self.width).sort(-1)
        self.ids = ids  # positive ids ascending, then V + K: [..., K]
        if clear:
            values = torch.where(positive, values, 0)
        order = values.gather(-1, by_id).sort(dim=-1, descending=True, stable=True).indices
        self.ranked_ids = ids.gather(-1, order)  # ranks 0 .. S_i - 1: the support
        self.position_rank = torch.empty_like(order).scatter_(
            -1, order, _arange_rows(order.shape, ids.device)
        )
        # #zeros before each positive id: non-decreasing over the support; the pads (V + K - k > V)
        # exceed every zero count, so the searches stay exact.
        self.zeros_before = ids - _arange(self.width, ids.device)

    def rank(self, p: Tensor, token: Tensor) -> Tensor:
        """rank(x) for tokens [..., T]: int64 [..., T]."""
        if self.dense:
            return self.position_rank.gather(-1, token)
        below = torch.searchsorted(self.ids, token.contiguous())  # positive ids < x
        ranked = self.position_rank.gather(-1, below.clamp(max=self.width - 1))
        # A zero-probability x follows the S_i positive tokens and the zeros with smaller ids.
        return torch.where(p.gather(-1, token) > 0, ranked, self.count + token - below)

    def tokens_at(self, rank: Tensor) -> Tensor:
        """The token of each rank in [0, V): [..., M] -> [..., M]."""
        if self.dense:
            return self.ranked_ids.gather(-1, rank)
        nth_zero = rank - self.count
        zero_id = nth_zero + torch.searchsorted(self.zeros_before, nth_zero, right=True)
        return torch.where(
            nth_zero < 0, self.ranked_ids.gather(-1, rank.clamp(max=self.width - 1)), zero_id
        )


def top_k_support_width(top_k: int | None, allowed: int) -> int:
    """K for ``top_k_support``: the top-k plus room for ties at the k-th value (k // 8, at least
    16), at most the ``allowed`` count (no top-k: all of them)."""
    return allowed if top_k is None else min(allowed, top_k + max(16, top_k // 8))


def top_k_support(p: Tensor, allowed: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """A fixed-width support of rows p [R, V] that are zero outside ``allowed`` ids [A], found
    without a host read: (ids [R, K], overflow [R] bool), ids = the allowed ids of the
    K = ``width`` largest entries of each row (any order). Where ``overflow`` is False (at most
    K positive entries) the ids hold every id with p > 0 once, plus zero ids: what
    ``SupportRanking`` takes, its ranking then the whole row's bit for bit. Where it is True (more
    than K entries tied at a top-k threshold) the ids miss some: the caller must rank that
    row another way."""
    values = p.index_select(-1, allowed)
    top = torch.topk(values, width, dim=-1, sorted=False).indices
    return allowed[top], (values > 0).sum(-1) > width
