"""a(x) where the exact law needs it: on the support of q.

out = q a + (1 - alpha) r needs a(x) only where q(x) > 0: one token for Jacobi's fresh one-hot
drafts, the top-k for re-drafted rows, instead of all V (gsd_core's enumeration: for dynamic
clusters with the embedding filter [V, M, D] differences per row). The masses there are
gsd_core's bit for bit (``ranking.dynamic_masses``, or the rule's own ``masses``), so the law
is gsd_core's ``output_law`` of the probabilities ``verify`` tests.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gsd_core import Amplify, DynamicClusters, Lantern, Rule, as_rule, mass_ratio

from .ranking import dynamic_masses


def support_masses(
    rule: Rule,
    p: Tensor,
    q: Tensor,
    tokens: Tensor,
    *,
    adjacency: Tensor | None = None,
    chunk_elements: int = 1 << 24,
) -> tuple[Tensor, Tensor]:
    """(P, Q) [N, T] of tokens [N, T] against rows p, q [N, V], at most ``chunk_elements``
    gathered entries at a time. ``adjacency``: the embedding filter of dynamic clusters as a
    bool table [V, V] (``ranking.dynamic_masses``)."""
    if isinstance(rule, Amplify):
        credited, charged = support_masses(
            rule.rule, p, q, tokens, adjacency=adjacency, chunk_elements=chunk_elements
        )
        return rule.scale * credited, charged
    if isinstance(rule, DynamicClusters):
        return dynamic_masses(
            rule, p, q, tokens, adjacency=adjacency, chunk_elements=chunk_elements
        )
    if adjacency is not None:
        raise ValueError(
            f"adjacency is the dynamic clusters' embedding filter; {type(rule).__name__} has none"
        )
    # LANTERN gathers [N, T, k]: chunks of tokens; a partition's cluster masses are O(V) per row:
    # all at once.
    step = (
        max(1, chunk_elements // max(1, p.shape[0] * rule.neighbourhoods.k))
        if isinstance(rule, Lantern)
        else max(1, tokens.shape[-1])
    )
    parts = [
        rule.masses(p, q, tokens[:, start : start + step])
        for start in range(0, tokens.shape[-1], step)
    ]
    if not parts:
        return p.new_empty(tokens.shape), q.new_empty(tokens.shape)
    return torch.cat([c for c, _ in parts], -1), torch.cat([m for _, m in parts], -1)


def support_accept(
    rule: object,
    p: Tensor,
    q: Tensor,
    *,
    adjacency: Tensor | None = None,
    chunk_elements: int = 1 << 24,
) -> Tensor:
    """a(x) for rows p, q [N, V] where q(x) > 0, 0 elsewhere: [N, V]. K = the widest support
    of q (one host sync); the K largest entries of each row hold its support."""
    rule = as_rule(rule)
    width = max(1, int((q > 0).sum(-1).max())) if q.shape[0] else 1
    tokens = torch.topk(q, width, dim=-1).indices  # distinct ids, the support first
    accept = mass_ratio(
        *support_masses(rule, p, q, tokens, adjacency=adjacency, chunk_elements=chunk_elements)
    )
    accept = torch.where(
        q.gather(-1, tokens) > 0, accept, 0.0
    )  # narrower rows' extra ids have q = 0
    return torch.zeros_like(q).scatter_(-1, tokens, accept)  # distinct ids: no accumulation
