"""The transport relaxation (gsd_lab.decode.relaxation_w1, proofs/12): its exact law (the transported
target r), acceptance 1 - T + M, W1(r, p) <= eps by POT, the LP at least the greedy plan, and no
rival rule (GSD's clusters, Amplify, LANTERN) accepting more than the LP on the full support at
the rival's own exact W1."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("scipy.optimize")
pytest.importorskip("ot")

from gsd_core import (
    Amplify,
    DynamicClusters,
    Lantern,
    acceptance_rate,
    latent_neighbourhoods,
    output_distribution,
    tv_distance,
    verify,
)
from gsd_core.rules import token_residual
from gsd_lab.accounting.transport import w1_from_laws
from gsd_lab.decode.relaxation_w1 import TransportRelaxation, content_neighbours, transport_plan

TOL = 1e-12


def case(seed: int, vocab: int = 7):
    g = torch.Generator().manual_seed(seed)
    content = torch.rand(vocab, 2, generator=g, dtype=torch.float64) * 2 - 1
    p = torch.rand(vocab, generator=g, dtype=torch.float64) ** 3
    q = torch.rand(vocab, generator=g, dtype=torch.float64) ** 3
    if seed % 3 == 0:  # a one-hot draft, as a fresh Jacobi draft
        q = torch.zeros(vocab, dtype=torch.float64)
        q[seed % vocab] = 1
    return content, torch.arange(vocab), p / p.sum(), q / q.sum()


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("solver", ["ranked", "greedy", "lp"])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_exact_law_acceptance_and_w1_budget(seed, solver, k):
    content, tokens, p, q = case(seed)
    hood = content_neighbours(content, tokens, p.numel(), k)
    for eps in (0.0, 0.02, 0.1, 1.0):
        rule = TransportRelaxation(hood, eps, solver)
        r, moved, cost = transport_plan(p, q, hood, eps, solver)
        assert cost <= eps + TOL
        out = output_distribution(p, q, rule)
        assert torch.allclose(out, r, rtol=0, atol=TOL)  # speculative sampling toward r emits r
        total = tv_distance(p, q).item()
        assert acceptance_rate(p, q, rule).item() == pytest.approx(1 - total + moved, abs=1e-10)
        assert tv_distance(r, p).item() == pytest.approx(moved, abs=1e-10)
        w1 = w1_from_laws(p[None], r[None], content, tokens).item()
        assert w1 <= cost + 1e-9  # the plan is one transport from p to r
        if eps == 0:
            assert torch.equal(r, p) and moved == 0


@pytest.mark.parametrize("seed", range(12))
def test_the_lp_moves_at_least_the_greedy_mass(seed):
    content, tokens, p, q = case(seed)
    hood = content_neighbours(content, tokens, p.numel(), 3)
    for eps in (0.02, 0.1, 0.3):
        greedy = transport_plan(p, q, hood, eps, "greedy")[1]
        best = transport_plan(p, q, hood, eps, "lp")[1]
        assert best >= greedy - 1e-9


def test_greedy_is_not_optimal_by_hand():
    """Excess a = b = 0.5, deficit x = z = 0.5; edges a -> x (cost 1), b -> x (0.9), b -> z (1.1);
    eps = 1. Greedy fills the cheapest edge b -> x first and strands a: M = 0.5. The LP sends
    f3 = 1/24 along b -> x and 0.5 - f3 along each of a -> x and b -> z (cost 1.05 - 1.2 f3 = 1):
    M = 1 - f3 = 23/24."""
    content = torch.tensor([[0.0], [1.0], [1.9], [3.0]], dtype=torch.float64)  # a, x, b, z
    tokens = torch.arange(4)
    p = torch.tensor([0.5, 0.0, 0.5, 0.0], dtype=torch.float64)
    q = torch.tensor([0.0, 0.5, 0.0, 0.5], dtype=torch.float64)
    hood = content_neighbours(content, tokens, 4, 2)
    hood = type(hood)(
        torch.tensor([[1, -1], [0, -1], [1, 3], [2, -1]]),
        torch.tensor(
            [[1.0, np.inf], [1.0, np.inf], [0.9, 1.1], [1.1, np.inf]], dtype=torch.float64
        ),
    )
    assert transport_plan(p, q, hood, 1.0, "greedy")[1] == pytest.approx(0.5, abs=1e-12)
    assert transport_plan(p, q, hood, 1.0, "lp")[1] == pytest.approx(23 / 24, abs=1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_no_rival_accepts_more_than_the_lp_at_its_own_w1(seed):
    """Full support (k = V - 1, every edge): the LP at eps = a rival's exact W1(out, p) accepts at
    least as often as the rival (proofs/12)."""
    content, tokens, p, q = case(seed)
    vocab = p.numel()
    hood = content_neighbours(content, tokens, vocab, vocab - 1)
    lantern = latent_neighbourhoods(content, 3)
    for rival in (DynamicClusters(3), DynamicClusters(5), Amplify(1.5), Lantern(lantern, 0.2)):
        w1 = w1_from_laws(p[None], output_distribution(p, q, rival)[None], content, tokens).item()
        best = acceptance_rate(p, q, TransportRelaxation(hood, w1 + 1e-12, "lp")).item()
        assert acceptance_rate(p, q, rival).item() <= best + 1e-9, rival


def test_verify_runs_the_rule_and_bad_input_is_refused():
    content, tokens, p, q = case(1)
    hood = content_neighbours(content, tokens, p.numel(), 3)
    rule = TransportRelaxation(hood, 0.1)
    drafts = torch.multinomial(q, 4, replacement=True, generator=torch.Generator().manual_seed(0))
    result = verify(
        p.expand(4, 7), q.expand(4, 7), drafts, rule, generator=torch.Generator().manual_seed(1)
    )
    assert result.num_accepted.item() <= 4
    with pytest.raises(ValueError, match="eps"):
        TransportRelaxation(hood, -1.0)
    with pytest.raises(ValueError, match="solver"):
        TransportRelaxation(hood, 0.1, "simplex")
    with pytest.raises(ValueError, match="neighbours cover"):
        acceptance_rate(
            torch.full((5,), 0.2, dtype=torch.float64),
            torch.full((5,), 0.2, dtype=torch.float64),
            rule,
        )


@pytest.mark.parametrize("solver", ["ranked", "greedy", "lp"])
def test_per_row_budgets_are_each_rows_own_plan(solver):
    """eps as a tensor [L] against a window [L, V]: row i's plan is the plan at float eps[i], bit
    for bit; a row with eps = 0 is SD bit for bit (r = p, SD's masses and residual)."""
    rows = [case(seed) for seed in (1, 2, 3, 4)]
    content, tokens = rows[0][0], rows[0][1]
    p = torch.stack([row[2] for row in rows])
    q = torch.stack([row[3] for row in rows])
    hood = content_neighbours(content, tokens, p.shape[-1], 3)
    eps = torch.tensor([0.1, 0.0, 0.3, 0.02], dtype=torch.float64)
    rule = TransportRelaxation(hood, eps, solver)
    r, moved, cost = rule.plan(p, q)
    assert r.shape == p.shape and moved.shape == cost.shape == (4,)
    for i in range(4):
        one, m, c = TransportRelaxation(hood, float(eps[i]), solver).plan(p[i], q[i])
        assert torch.equal(r[i], one) and moved[i].item() == m.item() and cost[i].item() == c.item()
        assert cost[i].item() <= eps[i].item() + TOL
    assert torch.equal(r[1], p[1]) and moved[1].item() == 0 and cost[1].item() == 0
    assert moved[0].item() > 0  # the control: a positive budget does move mass here
    x = torch.arange(7).expand(4, 7)
    credited, charged = rule.masses(p, q, x)
    assert torch.equal(credited[1], p[1]) and torch.equal(charged, q)
    assert torch.equal(rule.residual_weights(p, q)[1], token_residual(p[1], q[1]))
    # a [2, 1] budget broadcasts against rows [2, 4]
    wide = TransportRelaxation(hood, torch.tensor([[0.0], [0.1]], dtype=torch.float64), solver)
    r2, moved2, _ = wide.plan(p.expand(2, 4, 7), q.expand(2, 4, 7))
    assert torch.equal(r2[0], p) and bool((moved2[0] == 0).all())
    assert torch.equal(r2[1], TransportRelaxation(hood, 0.1, solver).targets(p, q))


def test_bad_budgets_are_refused():
    content, tokens, p, q = case(1)
    hood = content_neighbours(content, tokens, p.numel(), 3)
    for bad in (
        -0.1,
        float("nan"),
        float("inf"),
        True,
        torch.tensor([0.1, float("nan")], dtype=torch.float64),
        torch.tensor([0.1, -1e-9], dtype=torch.float64),
        torch.tensor([0.1, float("inf")], dtype=torch.float64),
        torch.tensor([1, 2]),
    ):
        with pytest.raises(ValueError, match="eps"):
            TransportRelaxation(hood, bad)
    rule = TransportRelaxation(hood, torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64))
    with pytest.raises(ValueError, match="does not broadcast"):
        rule.plan(p.expand(4, 7), q.expand(4, 7))
