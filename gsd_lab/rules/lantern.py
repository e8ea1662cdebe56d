"""LANTERN in the lab: the paths beside gsd_core's ``Lantern`` and their registrations.

- the accounting's support masses, in chunks of tokens (``support_masses``) and the members per
  token, k (``member_slots``): LANTERN's one-step law on the support of q;
- ``lantern_distortion``: TV(out, p) without the law, by proofs/08's identity (``direct_tv``).

The spec ``LanternAcceptance`` stays in ``decode.acceptance`` (torch-free, read by the command
line; docs/lab.md). tests/lab/rules/test_lantern_paths.py puts every path beside gsd_core's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from gsd_core import Lantern, fixed_order_sum

from ..engine.capabilities import Masses, direct_tv, member_slots, no_adjacency, support_masses


@support_masses.register
def _(rule: Lantern, p: Tensor, q: Tensor, tokens: Tensor, *, adjacency: Any = None,
      chunk_elements: int = 1 << 24) -> Masses:
    no_adjacency(rule, adjacency)
    step = max(1, chunk_elements // max(1, p.shape[0] * rule.neighbourhoods.k))  # [N, T, k]
    parts = [rule.masses(p, q, tokens[:, i : i + step]) for i in range(0, tokens.shape[-1], step)]
    if not parts:
        return p.new_empty(tokens.shape), q.new_empty(tokens.shape)
    return torch.cat([c for c, _ in parts], -1), torch.cat([m for _, m in parts], -1)


member_slots.register(Lantern, lambda rule, vocab: rule.neighbourhoods.k)


def lantern_distortion(p: Tensor, q: Tensor, rule: Lantern, *, block: int = 64) -> Tensor:
    """TV(LANTERN's one-step law, p) for rows p, q [N, V] float64 -> [N], by proofs/08's identity

        TV(out, p) = sum_x min((q(x) - p(x))+, m(x)),

    m(x) the neighbour mass LANTERN credits (``gsd_core.lantern``). Only tokens with q(x) > p(x)
    count, and each term is settled as soon as the walk through B_k(x) has credited
    m >= q(x) - p(x) or passed the budget delta; so the neighbourhoods (k = 1001 in the figures)
    are walked in blocks of ``block`` neighbours, settled entries dropped after each block,
    instead of gathering all k per token (the accounting's main cost otherwise). The
    running sums are continued with the same left-to-right additions as one cumsum over the
    whole neighbourhood (the block's cumsum starts from the previous total), so on a CPU (a
    sequential cumsum) the budget test S_j <= delta sees gsd_core's S_j bit for bit; on a GPU a
    parallel scan may group the additions differently, so an S_j within an ulp of delta could be
    decided differently from ``verify`` with the rule (not tested on a GPU here)."""
    index, valid = rule.tables(p.shape[-1], p.device)
    gap = q - p
    carries = gap > 0  # the entries that can carry distortion
    row, token = carries.nonzero(as_tuple=True)
    need = gap[row, token]  # (q - p)+ > 0
    credit = torch.zeros_like(need)  # m so far
    total = torch.zeros_like(need)  # S_j so far
    entry = torch.arange(need.numel(), device=p.device)
    settled_value = torch.zeros_like(need)
    for start in range(1, index.shape[1], block):
        if entry.numel() == 0:
            break
        members = index[token, start : start + block]  # [E, B]
        masses = torch.where(
            valid[token, start : start + block], p[row.unsqueeze(-1), members], 0.0
        )
        sums = torch.cat([total.unsqueeze(-1), masses], -1).cumsum(-1)[
            :, 1:
        ]  # S_j, one sequential scan
        credit = torch.maximum(credit, torch.where(sums <= rule.delta, sums, 0.0).amax(-1))
        total = sums[:, -1]
        open_ = (credit < need[entry]) & (total <= rule.delta)
        settled_value[entry[~open_]] = credit[~open_]
        entry, row, token, credit, total = (
            entry[open_],
            row[open_],
            token[open_],
            credit[open_],
            total[open_],
        )
    settled_value[entry] = credit  # walks that reached the end of B_k(x) still open
    terms = torch.zeros_like(gap).masked_scatter_(carries, torch.minimum(need, settled_value))
    return fixed_order_sum(terms)


@direct_tv.register
def _(rule: Lantern, p: Tensor, q: Tensor) -> Tensor:
    return lantern_distortion(p, q, rule)  # proofs/08's identity: no law needed
