"""Exact laws of one verification step, by enumerating every token: draw x ~ q, accept with
a(x) = min(1, P(x)/Q(x)), else draw from the residual r (``rules``). Then

    alpha = sum_x q(x) a(x)                      (the acceptance rate; Theorem 1's letter)
    out(y) = q(y) a(y) + (1 - alpha) r(y)        (the law of the emitted token)

SD gives alpha = 1 - TV(p, q) and out = p (proofs/02); a partition gives alpha = 1 - TV(p', q')
(Theorem 1, proofs/01); GSD's distortion is TV(out, p) (proofs/06). The sums over the
vocabulary in alpha and in r's normalisation are taken in one fixed order (``fixed_order_sum``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .checks import check_pair
from .rules import Rule, as_rule, mass_ratio


def fixed_order_sum(x: Tensor, dim: int = -1, keepdim: bool = False) -> Tensor:
    """sum over ``dim`` in one fixed order, the same on every CPU, thread count and device.

    A pairwise tree: the n entries are padded with zeros to n' = 2^ceil(log2 n), then halves
    are added elementwise, x[:h] + x[h:] (h = n'/2, n'/4, .., 1): each step an elementwise add
    of fixed slices, whatever the kernel's vector width; torch.sum's blocking is the kernel's
    choice. log2(n') ops, error O(eps log n). x: [..., n, ...]."""
    if x.ndim == 0:
        return x
    dim = dim % x.ndim
    x = x.movedim(dim, -1)
    n = x.shape[-1]
    if n == 0:  # the empty sum: one zero column
        x, n = x.new_zeros(*x.shape[:-1], 1), 1
    half = (1 << (n - 1).bit_length()) // 2
    if half and n > half:  # the first step adds x[h:] onto x[:n - h], i.e. with the zero pad
        x = torch.cat([x[..., : n - half] + x[..., half:], x[..., n - half: half]], -1)
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x.movedim(-1, dim) if keepdim else x.squeeze(-1)


def tv_distance(p: Tensor, q: Tensor) -> Tensor:
    """TV(p, q) = 1/2 sum_x |p(x) - q(x)|: p, q [..., V] -> [...] in [0, 1]."""
    p, q = check_pair(p, q)
    return 0.5 * (p - q).abs().sum(-1)


def every_accept_prob(rule: Rule, p: Tensor, q: Tensor) -> Tensor:
    """a(x) for every token x: rows p, q [..., V] of one shape (unchecked) -> [..., V]."""
    return mass_ratio(
        *rule.masses(p, q, torch.arange(p.shape[-1], device=p.device).expand(p.shape))
    )


def output_law(rule: Rule, p: Tensor, q: Tensor, accept: Tensor) -> Tensor:
    """out = q a + (1 - alpha) r from every token's a [..., V] (rows of one shape, unchecked;
    a is needed only where q > 0). 1 - alpha is clamped at 0: it is >= 0 in exact arithmetic,
    but rounding can take alpha above 1."""
    alpha = fixed_order_sum(q * accept, keepdim=True)
    return q * accept + (1 - alpha).clamp(min=0) * _normalised(rule.residual_weights(p, q))


def acceptance_rate(p: Tensor, q: Tensor, rule: object = None) -> Tensor:
    """alpha = sum_x q(x) a(x), the probability that one step accepts. p, q: [..., V] -> [...].
    rule: None (SD: alpha = 1 - TV(p, q)), partition labels [V] or a rule.

    >>> from gsd_core import DynamicClusters
    >>> p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    >>> q = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    >>> acceptance_rate(p, q)  # SD: 1 - TV(p, q) = 1 - 0.3
    tensor(0.7000, dtype=torch.float64)
    >>> acceptance_rate(p, q, DynamicClusters(3))  # GSD accepts more often
    tensor(0.8125, dtype=torch.float64)
    """
    p, q = check_pair(p, q)
    return fixed_order_sum(q * every_accept_prob(as_rule(rule), p, q))


def residual_distribution(p: Tensor, q: Tensor, rule: object = None) -> Tensor:
    """The distribution r a rejection resamples from: norm((p - q)+) (SD, dynamic clusters,
    LANTERN), or a partition's cluster-exact residual (its ``residual="cluster"``). p
    (renormalised) when the residual mass is ~0: never NaN. p, q: [..., V]. Returns [..., V]."""
    p, q = check_pair(p, q)
    return _normalised(as_rule(rule).residual_weights(p, q))


def _normalised(weights: Tensor) -> Tensor:
    return weights / fixed_order_sum(weights, keepdim=True)


def output_distribution(p: Tensor, q: Tensor, rule: object = None) -> Tensor:
    """The law of the token one step emits, out = q a + (1 - alpha) r.
    p, q: [..., V] -> [..., V].

    >>> from gsd_core import DynamicClusters
    >>> p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    >>> q = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    >>> output_distribution(p, q)  # SD is lossless: out = p
    tensor([0.5000, 0.3000, 0.2000], dtype=torch.float64)
    >>> output_distribution(p, q, DynamicClusters(3))  # GSD is not: TV(out, p) = 0.1125
    tensor([0.3875, 0.3000, 0.3125], dtype=torch.float64)
    """
    p, q = check_pair(p, q)
    rule = as_rule(rule)
    return output_law(rule, p, q, every_accept_prob(rule, p, q))
