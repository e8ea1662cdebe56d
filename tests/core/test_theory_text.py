"""Exact checks of statements in the theory text that are not a rule's own law:

- proofs/10, Claim 3: a rule with a(x) >= min(1, p(x)/q(x)) for every x and SD's residual lies on
  the line alpha = 1 - T + TV(out, p); the weaker hypothesis "every token with p >= q accepted"
  does not suffice (Amplify(1/2) on p = (1/2, 1/2), q = (1/4, 3/4): 1/2 below); fixed partitions
  and Amplify with k < 1 or over clusters can fall below.
- proofs/12, Claim 2: g = min(q, r) - min(q, p) equals min(D, n+) - (n- - E)+ token by token
  (n = r - p), the identity its proof sums.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from core_strategies import prob_pairs, prob_vectors
from hypothesis import given, settings
from hypothesis import strategies as st

from gsd_core import (
    Amplify,
    DynamicClusters,
    FixedPartition,
    OptimalRelaxation,
    acceptance_rate,
    output_distribution,
    tv_distance,
)

TOL = 1e-12


def gap_to_the_line(p: torch.Tensor, q: torch.Tensor, rule) -> float:
    """1 - T + TV(out, p) - alpha: 0 on the line, > 0 below it (never < 0: proofs/10 Claim 1)."""
    total = tv_distance(p, q).item()
    spent = tv_distance(output_distribution(p, q, rule), p).item()
    return 1 - total + spent - acceptance_rate(p, q, rule).item()


def law_of_a_rule(p, q, a):
    """(alpha, output law) of "accept x ~ q with a(x), else draw from SD's residual"."""
    alpha = float((q * a).sum())
    excess = (p - q).clamp_min(0)
    rho = excess / excess.sum() if float(excess.sum()) > 0 else torch.zeros_like(p)
    return alpha, q * a + (1 - alpha) * rho


@settings(max_examples=200, deadline=None)
@given(prob_pairs(max_vocab=8), st.data())
def test_rules_meeting_claim_3_lie_on_the_line(pair, data):
    p, q = pair
    vocab = p.shape[-1]
    sd = torch.where(q > 0, torch.minimum(torch.ones_like(p), p / q.clamp_min(1e-300)), 0.0)
    extra = torch.tensor(
        data.draw(st.lists(st.floats(0, 1), min_size=vocab, max_size=vocab)), dtype=torch.float64
    )
    a = sd + extra * (1 - sd)  # any a(x) in [min(1, p/q), 1]
    total = tv_distance(p, q).item()
    alpha, out = law_of_a_rule(p, q, a)
    if total > 0:
        assert alpha == pytest.approx(1 - total + tv_distance(out, p).item(), abs=TOL)
    scale = data.draw(st.floats(1.0, 8.0))
    assert abs(gap_to_the_line(p, q, Amplify(scale))) < TOL
    assert abs(gap_to_the_line(p, q, OptimalRelaxation(data.draw(st.floats(0, 1))))) < TOL


def test_amplify_half_accepts_every_p_ge_q_token_yet_lies_below():
    half = Fraction(1, 2)
    p, q = [half, half], [Fraction(1, 4), Fraction(3, 4)]
    a = [min(Fraction(1), half * pi / qi) for pi, qi in zip(p, q)]
    assert a == [1, Fraction(1, 3)]  # token 0 (p >= q) always accepted; a(1) < p(1)/q(1) = 2/3
    alpha = sum(qi * ai for qi, ai in zip(q, a))
    residual = [max(pi - qi, 0) for pi, qi in zip(p, q)]  # SD's: all on token 0
    residual = [w / sum(residual) for w in residual]
    out = [qi * ai + (1 - alpha) * w for qi, ai, w in zip(q, a, residual)]
    total = sum(abs(pi - qi) for pi, qi in zip(p, q)) / 2
    spent = sum(abs(oi - pi) for oi, pi in zip(out, p)) / 2
    assert (alpha, out, total, spent) == (half, [Fraction(3, 4), Fraction(1, 4)], Fraction(1, 4),
                                          Fraction(1, 4))
    assert 1 - total + spent - alpha == half
    pt, qt = torch.tensor([0.5, 0.5], dtype=torch.float64), torch.tensor([0.25, 0.75],
                                                                         dtype=torch.float64)
    assert gap_to_the_line(pt, qt, Amplify(0.5)) == pytest.approx(0.5, abs=TOL)


def test_partitions_and_amplify_fall_below_the_line():
    """Not only GSD's clusters and rank bins: a fixed partition (either residual), Amplify with
    k < 1 over SD and Amplify with k > 1 over a partition or dynamic clusters, each on a pair."""
    p = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    labels = torch.tensor([0, 1, 0])
    q = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64)
    assert gap_to_the_line(p, q, FixedPartition(labels)) > 1e-3
    assert gap_to_the_line(p, q, FixedPartition(labels, "cluster")) > 1e-3
    q = torch.tensor([0.125, 0.125, 0.75], dtype=torch.float64)
    assert gap_to_the_line(p, q, Amplify(1.5, FixedPartition(labels))) > 1e-3
    assert gap_to_the_line(p, q, Amplify(1.5, DynamicClusters(2))) > 1e-3
    assert gap_to_the_line(p[:2] * 0 + 0.5, torch.tensor([0.25, 0.75], dtype=torch.float64),
                           Amplify(0.9)) > 1e-3


@settings(max_examples=200, deadline=None)
@given(prob_pairs(max_vocab=8), st.data())
def test_proof_12_g_identity(pair, data):
    p, q = pair
    r = data.draw(prob_vectors(vocab=p.shape[-1]))
    excess, deficit = (p - q).clamp_min(0), (q - p).clamp_min(0)
    n = r - p
    n_plus, n_minus = n.clamp_min(0), (-n).clamp_min(0)
    g = torch.minimum(q, r) - torch.minimum(q, p)
    bound = torch.minimum(deficit, n_plus) - (n_minus - excess).clamp_min(0)
    assert torch.allclose(g, bound, rtol=0, atol=TOL)
