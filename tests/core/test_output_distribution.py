"""Exact output laws: SD is lossless, the cluster-exact residual keeps cluster masses, and the
token-level GSD law matches an independent rational enumeration (proofs/02, 03, 06)."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from core_strategies import pairs_with_partition, prob_pairs
from hypothesis import given
from hypothesis import strategies as st

from gsd_core import (
    Amplify,
    DynamicClusters,
    FixedPartition,
    RankBinnedClusters,
    acceptance_rate,
    group_probs,
    output_distribution,
    residual_distribution,
    tv_distance,
)

TOL = 1e-12


@given(prob_pairs())
def test_standard_sd_output_is_exactly_p(pq):
    p, q = pq
    out = output_distribution(p, q)
    assert out.dtype == torch.float64
    assert torch.allclose(out, p, atol=TOL, rtol=0)


@given(prob_pairs())
def test_cluster_residual_with_singletons_is_standard_sd(pq):
    p, q = pq
    out = output_distribution(p, q, FixedPartition(torch.arange(p.shape[-1]), "cluster"))
    assert torch.allclose(out, p, atol=TOL, rtol=0)


@given(pairs_with_partition())
def test_cluster_exact_residual_preserves_cluster_masses(pqc):
    p, q, labels = pqc
    out = output_distribution(p, q, FixedPartition(labels, "cluster"))
    assert torch.allclose(out.sum(), torch.tensor(1.0, dtype=torch.float64), atol=TOL)
    assert torch.allclose(group_probs(out, labels), group_probs(p, labels), atol=TOL, rtol=0)
    # Inside a cluster the emitted token follows q on acceptance, so the law is generally not p.


@given(prob_pairs(max_vocab=9), st.integers(1, 9))
def test_rank_binned_cluster_residual_preserves_bin_masses(pq, group_size):
    p, q = pq
    rule = RankBinnedClusters(group_size, "cluster")
    out = output_distribution(p, q, rule)
    labels = rule.partition_labels(p)
    assert torch.allclose(group_probs(out, labels), group_probs(p, labels), atol=TOL, rtol=0)


def _token_gsd_law_rational(p: list[Fraction], q: list[Fraction], clusters: list[list[int]], scale: Fraction):
    """out(y) = q(y) a(y) + (1 - alpha) r(y), a(x) = min(1, s p(C(x)) / q(C(x))), r = norm((p - q)+) (p if 0)."""
    size = len(p)
    accept = []
    for x in range(size):
        qc = sum(q[y] for y in clusters[x])
        accept.append(min(Fraction(1), scale * sum(p[y] for y in clusters[x]) / qc) if qc > 0 else Fraction(0))
    alpha = sum(q[x] * accept[x] for x in range(size))
    excess = [max(Fraction(0), p[y] - q[y]) for y in range(size)]
    mass = sum(excess)
    residual = [e / mass for e in excess] if mass > 0 else list(p)
    return [q[y] * accept[y] + (1 - alpha) * residual[y] for y in range(size)], alpha


def _rank_window_clusters(p: list[Fraction], size: int) -> list[list[int]]:
    """G = size tokens: (G-1)//2 ranks above x, G//2 below, clipped."""
    order = sorted(range(len(p)), key=lambda y: (-p[y], y))
    rank = {y: r for r, y in enumerate(order)}
    return [order[max(0, rank[x] - (size - 1) // 2) : rank[x] + size // 2 + 1] for x in range(len(p))]


@given(st.integers(1, 7).flatmap(lambda v: st.tuples(
    st.lists(st.integers(0, 9), min_size=v, max_size=v).filter(any),
    st.lists(st.integers(0, 9), min_size=v, max_size=v).filter(any),
)), st.integers(1, 7), st.sampled_from([Fraction(1), Fraction(3, 2), Fraction(4)]))
def test_token_level_gsd_law_matches_rational_enumeration(weights, group_size, scale):
    pw, qw = weights
    p_exact = [Fraction(w, sum(pw)) for w in pw]
    q_exact = [Fraction(w, sum(qw)) for w in qw]
    clusters = _rank_window_clusters(p_exact, group_size)
    law, alpha = _token_gsd_law_rational(p_exact, q_exact, clusters, scale)
    p = torch.tensor([float(x) for x in p_exact], dtype=torch.float64)
    q = torch.tensor([float(x) for x in q_exact], dtype=torch.float64)
    rule = Amplify(float(scale), DynamicClusters(group_size))
    out = output_distribution(p, q, rule)
    assert torch.allclose(out, torch.tensor([float(x) for x in law], dtype=torch.float64), atol=TOL, rtol=0)
    assert abs(acceptance_rate(p, q, rule).item() - float(alpha)) < TOL


@given(prob_pairs(), st.floats(1.0, 8.0))
def test_amplify_accepts_at_least_as_often_and_stays_a_distribution(pq, scale):
    p, q = pq
    assert acceptance_rate(p, q, Amplify(scale)).item() >= acceptance_rate(p, q).item() - TOL
    out = output_distribution(p, q, Amplify(scale))
    assert bool((out >= 0).all()) and abs(out.sum().item() - 1.0) < TOL


def test_amplify_is_lossy_with_exact_numbers():
    # p = (1/2, 1/2), q = (3/4, 1/4), s = 2: a = (1, 1), every draft accepted, output = q.
    p = torch.tensor([0.5, 0.5], dtype=torch.float64)
    q = torch.tensor([0.75, 0.25], dtype=torch.float64)
    assert acceptance_rate(p, q, Amplify(2.0)).item() == 1.0
    assert torch.equal(output_distribution(p, q, Amplify(2.0)), q)
    assert tv_distance(output_distribution(p, q, Amplify(2.0)), p).item() == 0.25
    assert torch.equal(output_distribution(p, q, Amplify(1.0)), p)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf"), "2", True])
def test_amplify_scale_must_be_finite_and_positive(scale):
    with pytest.raises(ValueError, match="Amplify scale"):
        Amplify(scale)


def test_output_law_has_no_negative_entries_when_alpha_rounds_above_one():
    """Amplify(4) accepts every draft (a = 1) and q's fixed-order sum rounds to 1 + 1 ulp, so
    1 - alpha = -2.2e-16; the residual sits on token 7, which q never drafts: unclamped, out(7)
    was -2.2e-16 (the old gsd_core). The law must stay >= 0: out = q exactly."""
    from gsd_core.exact import fixed_order_sum

    q = torch.softmax(torch.randn(7, generator=torch.Generator().manual_seed(0), dtype=torch.float64), -1)
    q = torch.cat([q, q.new_zeros(1)])
    p = torch.cat([q[:7] / 2, q.new_full((1,), 0.5)])
    assert float(fixed_order_sum(q)) > 1.0
    out = output_distribution(p, q, Amplify(4.0))
    assert bool((out >= 0).all()) and torch.equal(out, q)


@given(prob_pairs())
def test_residual_is_a_distribution_and_falls_back_to_p(pq):
    p, q = pq
    r = residual_distribution(p, q)
    assert not bool(torch.isnan(r).any())
    assert abs(r.sum().item() - 1.0) < TOL
    if torch.equal(p, q):  # no residual mass: p, renormalised in the fixed order
        assert torch.allclose(r, p, atol=TOL, rtol=0)
    else:
        assert bool((r[p <= q] == 0).all())  # mass only where p exceeds q


def test_dynamic_rule_rejects_cluster_residual():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    with pytest.raises(TypeError):
        DynamicClusters(3, residual="cluster")  # only partitions have a cluster-exact residual
    with pytest.raises(ValueError, match="residual mode"):
        RankBinnedClusters(3, "cluster-exact")


@given(pairs_with_partition())
def test_cluster_exact_distortion_formula(pqc):
    """proofs/03: out(y) - p(y) = min(p'(C), q'(C)) * (q(y|C) - p(y|C)) for y in C, so
    TV(out, p) = sum_C min(p'(C), q'(C)) * TV(q(.|C), p(.|C))."""
    p, q, labels = pqc
    out = output_distribution(p, q, FixedPartition(labels, "cluster"))
    pc, qc = group_probs(p, labels), group_probs(q, labels)
    p_in = torch.where(pc[labels] > 0, p / pc[labels].clamp(min=1e-300), 0.0)
    q_in = torch.where(qc[labels] > 0, q / qc[labels].clamp(min=1e-300), 0.0)
    weight = torch.minimum(pc, qc)[labels]
    assert torch.allclose(out - p, weight * (q_in - p_in), atol=TOL, rtol=0)


@pytest.mark.parametrize("rule", [DynamicClusters(50), DynamicClusters(14, max_prob_gap=0.002),
                                  DynamicClusters(14, rank_by="q"), RankBinnedClusters(7)],
                         ids=["G50", "G14-gap", "G14-rank-q", "bins7"])
def test_exact_accept_probabilities_are_the_ones_verify_tests_bit_for_bit(rule):
    """The exact law's a(x) and verify's accept_probs are one computation, so they agree in
    every bit (a law off by an ulp from the rule it describes would not be exact)."""
    from gsd_core import accept_probability, verify

    vocab, window = 512, 16
    gen = torch.Generator().manual_seed(11)
    for _ in range(3):
        logits = 2.0 * torch.randn(window + 1, vocab, generator=gen, dtype=torch.float64)
        kth = torch.topk(logits, 100, dim=-1).values[:, -1:]
        p = torch.softmax(logits.masked_fill(logits < kth, -torch.inf), -1)
        noisy = logits[:window] + torch.randn(window, vocab, generator=gen, dtype=torch.float64)
        q = torch.softmax(noisy.masked_fill(noisy < kth[:window], -torch.inf), -1)
        drafts = torch.multinomial(q, 1, generator=gen).squeeze(-1)
        uniforms = torch.rand(window + 1, generator=gen, dtype=torch.float64)
        tested = verify(p, q, drafts, rule, uniforms=uniforms).accept_probs
        exact = accept_probability(p[:window], q, torch.arange(vocab), rule).gather(-1, drafts[:, None]).squeeze(-1)
        assert torch.equal(tested, exact)
