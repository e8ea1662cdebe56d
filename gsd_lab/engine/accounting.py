"""a(x) where the exact law needs it: on the support of q.

out = q a + (1 - alpha) r needs a(x) only where q(x) > 0: one token for Jacobi's fresh one-hot
drafts, the top-k for re-drafted rows, instead of all V (gsd_core's enumeration: for dynamic
clusters with the embedding filter [V, M, D] differences per row). The masses there are
gsd_core's bit for bit, so the law is gsd_core's ``output_law`` of the probabilities ``verify``
tests, by the rule's ``capabilities.support_masses`` (dynamic clusters: ``rules.clusters``, one
ranking per row; LANTERN's in chunks; any other rule its own ``masses``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from gsd_core import as_rule, mass_ratio

from .capabilities import support_masses


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
