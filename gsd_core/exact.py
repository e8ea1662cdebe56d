"""Exact, enumerated quantities of one verification step: the acceptance rate and the output
distribution (draw x ~ q, accept with min(1, s * p(C(x))/q(C(x))), else resample)."""

from __future__ import annotations

import torch
from torch import Tensor

from ._validation import check_acceptance_scale, check_pair
from .grouping import ClusterRule, DynamicClusters, _group_sum, as_cluster_rule, rule_members
from .verification import RESIDUAL_MODES, _partition_labels, _ratio, _residual


def fixed_order_sum(x: Tensor, dim: int = -1, keepdim: bool = False) -> Tensor:
    """sum over ``dim`` in one fixed order, the same on every CPU, thread count and device.

    A pairwise tree: the n entries x_0 .. x_{n-1} are padded with zeros to n' = 2^ceil(log2 n),
    then halves are added elementwise, x[:h] + x[h:] (h = n'/2, n'/4, .., 1). Each step is an
    elementwise add of fixed slices, rounded the same whatever the kernel's vector width
    (``ATEN_CPU_CAPABILITY``) or threads; torch.sum's blocking is the kernel's choice. Adding
    the zero pad is exact. log2(n') ops, O(n) work; pairwise error O(eps log n). x: [..., n, ...]."""
    if x.ndim == 0:
        return x
    dim = dim % x.ndim
    x = x.movedim(dim, -1)
    n = x.shape[-1]
    if n == 0:
        out = x.new_zeros(x.shape[:-1])
    else:
        half = (1 << (n - 1).bit_length()) // 2
        if half and n > half:  # the first step adds x[h:] onto x[:n - h], i.e. with the zero pad
            x = torch.cat([x[..., : n - half] + x[..., half:], x[..., n - half: half]], -1)
        while x.shape[-1] > 1:
            half = x.shape[-1] // 2
            x = x[..., :half] + x[..., half:]
        out = x.squeeze(-1)
    return out.unsqueeze(dim) if keepdim else out


def token_accept_probabilities(
    p: Tensor, q: Tensor, rule: ClusterRule | None, *, acceptance_scale: float = 1.0
) -> Tensor:
    """a(x) = min(1, s * p(C(x)) / q(C(x))) for every token x at once: [..., V] -> [..., V].

    s = acceptance_scale (1: the exact rule). Partitions go through cluster masses
    (O(V log V)); ``DynamicClusters`` ranks each row once and windows all tokens in chunks
    (O(V G) memory); other rules enumerate C(x) for all x (O(V^2) memory: small V only). p, q must already share one shape and dtype (as ``acceptance_rate`` makes them).
    """
    scale = check_acceptance_scale(acceptance_scale)
    if rule is None:
        return _ratio(p, q, scale)
    if rule.is_partition and hasattr(rule, "partition_labels"):
        labels = rule.partition_labels(p).expand(p.shape)
        ratio = _ratio(_group_sum(p, labels), _group_sum(q, labels), scale)
        return ratio.gather(-1, labels)
    if isinstance(rule, DynamicClusters):  # O(V G) memory: one ranking per row, windows in chunks
        p_rows, q_rows = p.reshape(-1, p.shape[-1]), q.reshape(-1, q.shape[-1])
        p_mass, q_mass = rule.all_token_masses(p_rows, q_rows)
        return _ratio(p_mass, q_mass, scale).view(p.shape)
    vocab = p.shape[-1]
    p_all = p.unsqueeze(-2).expand(*p.shape[:-1], vocab, vocab)
    q_all = q.unsqueeze(-2).expand(*q.shape[:-1], vocab, vocab)
    tokens = torch.arange(vocab, device=p.device).expand(p.shape)
    index, keep = rule_members(rule, p_all, tokens, q_all)
    keep = keep.to(p.dtype)
    p_mass = (p_all.gather(-1, index) * keep).sum(-1)
    q_mass = (q_all.gather(-1, index) * keep).sum(-1)
    return _ratio(p_mass, q_mass, scale)


def _prepare(p: Tensor, q: Tensor) -> tuple[Tensor, Tensor]:
    p, q = check_pair(p, q)
    shape = torch.broadcast_shapes(p.shape, q.shape)
    return p.expand(shape), q.expand(shape)


def acceptance_rate(p: Tensor, q: Tensor, clusters: object = None, *, acceptance_scale: float = 1.0) -> Tensor:
    """Exact probability that one verification step accepts: sum_x q(x) * a(x).

    clusters: None (standard SD: equals sum_x min(p, q) = 1 - TV(p, q)), partition labels
    [V] (equals 1 - TV(p', q'), Theorem 1), or a rule (``DynamicClusters``, ``RankBinnedClusters``).
    a(x) = min(1, s * p(C(x))/q(C(x))), s = acceptance_scale. p, q: [..., V]. Returns [...].
    """
    p, q = _prepare(p, q)
    rule = as_cluster_rule(clusters, p.shape[-1])
    return fixed_order_sum(q * token_accept_probabilities(p, q, rule, acceptance_scale=acceptance_scale))


def output_distribution(
    p: Tensor, q: Tensor, clusters: object = None, residual: str = "token", *, acceptance_scale: float = 1.0
) -> Tensor:
    """Exact law of the token one verification step emits: out = q * a + (1 - beta) * r.

    a(x) = min(1, s * p(C(x))/q(C(x))) (s = acceptance_scale), beta = sum_x q(x) a(x), r the
    residual (``residual_distribution``: "token" or, for partitions, "cluster"). Standard SD
    (s = 1) gives out = p exactly (proofs/02); GSD's distortion is TV(out, p) (proofs/06).
    p, q: [..., V]. Returns [..., V].
    """
    if residual not in RESIDUAL_MODES:
        raise ValueError(f"unknown residual mode {residual!r}; expected one of {RESIDUAL_MODES}")
    p, q = _prepare(p, q)
    rule = as_cluster_rule(clusters, p.shape[-1])
    accept = token_accept_probabilities(p, q, rule, acceptance_scale=acceptance_scale)
    return output_law(p, q, accept, _partition_labels(rule, p) if residual == "cluster" else None)


def mass_accept_probabilities(p_mass: Tensor, q_mass: Tensor, *, acceptance_scale: float = 1.0) -> Tensor:
    """a = min(1, s * p(C) / q(C)) from cluster masses (any shape), 0 where q(C) = 0 (such a
    token is never drafted). s = acceptance_scale."""
    return _ratio(p_mass, q_mass, check_acceptance_scale(acceptance_scale))


def output_law(p: Tensor, q: Tensor, accept: Tensor, labels: Tensor | None = None) -> Tensor:
    """The one-step output law given every token's acceptance probability a(x):

        out = q * a + (1 - beta) * r,   beta = sum_x q(x) a(x),

    r the token residual norm((p - q)+) (``labels`` None) or the cluster-exact residual over
    partition ``labels``. p, q, accept: [..., V] of one shape (unchecked). Returns [..., V].
    beta is summed in a fixed order (``fixed_order_sum``)."""
    beta = fixed_order_sum(q * accept, keepdim=True)
    return q * accept + (1 - beta) * _residual(p, q, labels)
