"""The TV-optimal relaxation (gsd_core.relaxation, proofs/10): its exact acceptance
1 - T + min(delta, T) and output law (the mixture, at TV min(delta, T)), SD at delta = 0, the
sampler against the law, and the one-step bound that no other rule (GSD's clusters, rank bins,
partitions, Amplify, LANTERN) exceeds at its own exact distortion."""

from __future__ import annotations

import pytest
import torch
from core_strategies import partitions, prob_pairs
from hypothesis import given, settings
from hypothesis import strategies as st

from gsd_core import (
    SD,
    Amplify,
    DynamicClusters,
    FixedPartition,
    Lantern,
    OptimalRelaxation,
    RankBinnedClusters,
    accept_probability,
    acceptance_rate,
    latent_neighbourhoods,
    output_distribution,
    tv_distance,
    verify,
)

TOL = 1e-12
deltas = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0, 1, allow_nan=False))


@settings(max_examples=300, deadline=None)
@given(prob_pairs(max_vocab=9), deltas)
def test_acceptance_and_distortion_are_exactly_the_bound(pair, delta):
    p, q = pair
    rule = OptimalRelaxation(delta)
    total = tv_distance(p, q).item()
    alpha = acceptance_rate(p, q, rule).item()
    out = output_distribution(p, q, rule)
    assert alpha == pytest.approx(1 - total + min(delta, total), abs=TOL)
    assert tv_distance(out, p).item() == pytest.approx(min(delta, total), abs=TOL)
    lam = min(1.0, delta / total) if total > 0 else 1.0
    assert torch.allclose(out, (1 - lam) * p + lam * q, rtol=0, atol=TOL)  # the mixture itself
    assert out.min().item() >= 0 and out.sum().item() == pytest.approx(1, abs=TOL)


@settings(max_examples=150, deadline=None)
@given(prob_pairs(max_vocab=9))
def test_delta_zero_is_sd_bit_for_bit(pair):
    p, q = pair
    every = torch.arange(p.shape[-1])
    relaxed = OptimalRelaxation(0.0)
    assert torch.equal(
        accept_probability(p, q, every, relaxed), accept_probability(p, q, every, SD())
    )
    assert torch.equal(output_distribution(p, q, relaxed), output_distribution(p, q))


@settings(max_examples=100, deadline=None)
@given(st.lists(prob_pairs(min_vocab=5, max_vocab=5), min_size=1, max_size=4), st.data())
def test_per_row_budgets_are_each_row_s_own_bit_for_bit(pairs, data):
    p, q = torch.stack([a for a, _ in pairs]), torch.stack([b for _, b in pairs])
    delta = [data.draw(deltas) for _ in pairs]
    rows = OptimalRelaxation(torch.tensor(delta, dtype=torch.float64))
    every = torch.arange(5)
    for i, d in enumerate(delta):
        single = OptimalRelaxation(d)
        assert torch.equal(
            accept_probability(p, q, every, rows)[i], accept_probability(p[i], q[i], every, single)
        )
        assert torch.equal(
            output_distribution(p, q, rows)[i], output_distribution(p[i], q[i], single)
        )


def rival_rules(vocab: int, data: st.DataObject) -> list:
    """GSD (dynamic clusters, with and without the probability-gap filter), rank bins (both
    residuals), a drawn fixed partition (both residuals), Amplify of SD and of clusters,
    LANTERN on random 2-D integer embeddings."""
    size = data.draw(st.integers(1, vocab))
    labels = data.draw(partitions(vocab))
    emb = torch.tensor(
        data.draw(
            st.lists(
                st.lists(st.integers(-3, 3), min_size=2, max_size=2), min_size=vocab, max_size=vocab
            )
        ),
        dtype=torch.float64,
    )
    hood = latent_neighbourhoods(emb, data.draw(st.integers(1, vocab)))
    scale = data.draw(st.floats(0.25, 4.0))
    return [
        DynamicClusters(size),
        DynamicClusters(size, max_prob_gap=0.1),
        RankBinnedClusters(size),
        RankBinnedClusters(size, "cluster"),
        FixedPartition(labels),
        FixedPartition(labels, "cluster"),
        Amplify(scale),
        Amplify(scale, DynamicClusters(size)),
        Lantern(hood, data.draw(st.floats(0, 1))),
    ]


@settings(max_examples=200, deadline=None)
@given(prob_pairs(max_vocab=8), st.data())
def test_no_rule_accepts_more_than_the_bound_at_its_own_distortion(pair, data):
    p, q = pair
    total = tv_distance(p, q).item()
    for rule in rival_rules(p.shape[-1], data):
        spent = tv_distance(output_distribution(p, q, rule), p).item()
        alpha = acceptance_rate(p, q, rule).item()
        assert alpha <= 1 - total + spent + TOL, (rule, alpha, total, spent)
        # and the relaxation at that budget attains the bound
        assert acceptance_rate(p, q, OptimalRelaxation(min(spent, 1.0))).item() >= alpha - TOL


def test_a_rule_strictly_below_the_bound_exists():
    """The bound can be strict for a rival: dynamic clusters on proofs/04's example distort
    and accept less than 1 - T + their distortion."""
    p = torch.tensor([5, 4, 3, 2, 1], dtype=torch.float64) / 15
    q = torch.tensor([5, 5, 3, 2, 0], dtype=torch.float64) / 15
    rule = DynamicClusters(2)
    total = tv_distance(p, q).item()
    spent = tv_distance(output_distribution(p, q, rule), p).item()
    assert spent > 0
    assert acceptance_rate(p, q, rule).item() < 1 - total + spent - 1e-3


def test_verify_emits_the_exact_law_by_seeded_monte_carlo():
    """One draft per window, no bonus row: x ~ q, verify, the emitted token's frequencies
    against the mixture, 40,000 seeded draws, every frequency within 4 standard errors."""
    generator = torch.Generator().manual_seed(7)
    p = torch.tensor([0.45, 0.3, 0.15, 0.1, 0.0], dtype=torch.float64)
    q = torch.tensor([0.1, 0.1, 0.2, 0.3, 0.3], dtype=torch.float64)
    n = 40_000
    for delta in (0.0, 0.2, 0.5):
        x = torch.multinomial(q, n, replacement=True, generator=generator).view(n, 1)
        result = verify(
            p.expand(n, 1, 5), q.expand(n, 1, 5), x, OptimalRelaxation(delta), generator=generator
        )
        freq = torch.bincount(result.tokens[:, 0], minlength=5).double() / n
        law = output_distribution(p, q, OptimalRelaxation(delta))
        se = (law * (1 - law) / n).sqrt().clamp(min=1e-4)
        assert ((freq - law).abs() <= 4 * se).all(), (delta, freq, law)


def test_per_row_budget_in_a_window():
    """verify's window [B, L, V] takes budgets [B, L]: a row with delta >= T accepts surely,
    a row with delta = 0 tests exactly as SD."""
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64).expand(3, 2, 3)
    q = torch.tensor([[0.0, 0.5, 0.5], [0.5, 0.3, 0.2]], dtype=torch.float64).expand(3, 2, 3)
    x = torch.tensor([2, 0]).expand(3, 2)
    delta = torch.tensor([[0.5, 0.0], [0.0, 0.3], [0.25, 0.15]], dtype=torch.float64)
    accept = verify(
        p, q, x, OptimalRelaxation(delta), generator=torch.Generator().manual_seed(0)
    ).accept_probs
    assert torch.allclose(
        accept,
        torch.tensor([[1.0, 0.4], [0.0, 1.0], [0.5, 0.7]], dtype=torch.float64),
        rtol=0,
        atol=TOL,
    )


@pytest.mark.parametrize(
    "delta", [-0.1, 1.5, float("nan"), True, "0.1", torch.tensor([0.1, 2.0]), torch.tensor([1, 0])]
)
def test_bad_budgets_are_refused(delta):
    with pytest.raises(ValueError, match="delta"):
        OptimalRelaxation(delta)


def test_a_per_row_budget_of_the_wrong_shape_is_refused():
    p = torch.full((2, 4), 0.25, dtype=torch.float64)
    with pytest.raises(ValueError, match="does not broadcast"):
        acceptance_rate(p, p, OptimalRelaxation(torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)))
