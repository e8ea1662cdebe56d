"""The transport relaxation's fast solver, "ranked" (gsd_lab.decode.relaxation_w1.ranked_plans,
proofs/12): on windows of many rows with per-row budgets it respects both capacities and each
row's budget, is exactly the law speculative sampling toward r emits (gsd_core's exact law),
accepts 1 - T + M, has W1(r, p) <= its cost (POT), moves no more than the LP, is the same bits
row by row as alone and under any thread count; a plan over its budget fails the W1 check."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("scipy.optimize")
pytest.importorskip("ot")

from gsd_core import acceptance_rate, output_distribution, tv_distance, verify
from gsd_lab.accounting.transport import w1_from_laws
from gsd_lab.decode.relaxation_w1 import (
    TransportRelaxation,
    content_neighbours,
    ranked_plans,
    transport_plan,
)

TOL = 1e-12
BUDGETS = [0.0, 1e-3, 5e-3, 0.02, 0.05, 1.0, 0.01, 10.0]


def window(seed: int, vocab: int, rows: int, dims: int = 3):
    """Content [vocab, dims] in [-1, 1], and rows p, q [rows, vocab] like a model's: peaked
    softmaxes, q a perturbation of p, the last row a one-hot draft (a fresh Jacobi draft)."""
    g = torch.Generator().manual_seed(seed)
    content = torch.rand(vocab, dims, generator=g, dtype=torch.float64) * 2 - 1
    logits = 4 * torch.randn(rows, vocab, generator=g, dtype=torch.float64)
    p = torch.softmax(logits, -1)
    q = torch.softmax(logits + 2 * torch.randn(rows, vocab, generator=g, dtype=torch.float64), -1)
    q[-1] = 0
    q[-1, seed % vocab] = 1
    return content, torch.arange(vocab), p, q


@pytest.mark.parametrize("seed", range(3))
def test_capacities_budget_law_acceptance_and_w1(seed):
    content, tokens, p, q = window(seed, 256, len(BUDGETS))
    hood = content_neighbours(content, tokens, 256, 8)
    eps = torch.tensor(BUDGETS, dtype=torch.float64)
    rule = TransportRelaxation(hood, eps)  # "ranked", the default
    r, moved, cost = rule.plan(p, q)
    excess, deficit = (p - q).clamp(min=0), (q - p).clamp(min=0)
    sent, received = p - r, r - p
    assert bool((sent[excess > 0] >= 0).all()) and bool((received[deficit > 0] >= 0).all())
    assert bool((sent <= excess + 1e-15).all()) and bool((received <= deficit + 1e-15).all())
    assert torch.equal(r[(excess == 0) & (deficit == 0)], p[(excess == 0) & (deficit == 0)])
    assert bool((cost <= eps * (1 + 1e-12)).all())
    assert bool((r >= 0).all()) and torch.allclose(r.sum(-1), torch.ones_like(moved), atol=TOL)
    assert torch.equal(r[0], p[0]) and moved[0].item() == 0 and cost[0].item() == 0
    assert bool((moved[1:] > 0).all())  # every positive budget moves mass here
    out = output_distribution(p, q, rule)
    assert torch.allclose(out, r, rtol=0, atol=TOL)  # speculative sampling toward r emits r
    total = tv_distance(p, q)
    assert torch.allclose(acceptance_rate(p, q, rule), 1 - total + moved, rtol=0, atol=TOL)
    assert torch.allclose(tv_distance(r, p), moved, rtol=0, atol=TOL)
    w1 = w1_from_laws(p, r, content, tokens)
    assert bool((w1 <= cost + TOL).all()), (w1 - cost).max()


def test_no_more_than_the_lp_and_not_far_below():
    """The LP is the most any plan on these edges moves, so "ranked" moves at most its mass. The
    floor of a quarter is a guard against a solver that stops moving mass, far below what it
    measures (benchmarks/transport_solver_speed.py), not a guarantee."""
    content, tokens, p, q = window(7, 256, len(BUDGETS))
    hood = content_neighbours(content, tokens, 256, 8)
    eps = torch.tensor(BUDGETS, dtype=torch.float64)
    _, moved, _ = TransportRelaxation(hood, eps, "ranked").plan(p, q)
    _, best, _ = TransportRelaxation(hood, eps, "lp").plan(p, q)
    assert bool((moved <= best + 1e-9).all())
    assert bool((moved[1:] >= best[1:] / 4).all()), (moved / best).tolist()


def test_each_row_is_its_own_plan_bit_for_bit():
    """A row's plan does not depend on the other rows of the window (nor on their budgets)."""
    content, tokens, p, q = window(3, 256, len(BUDGETS))
    hood = content_neighbours(content, tokens, 256, 8)
    eps = torch.tensor(BUDGETS, dtype=torch.float64)
    r, moved, cost = ranked_plans(p, q, hood, eps)
    for i in range(len(BUDGETS)):
        one, m, c = transport_plan(p[i], q[i], hood, BUDGETS[i], "ranked")
        assert torch.equal(one, r[i]) and m == moved[i].item() and c == cost[i].item()
    flipped = ranked_plans(p.flip(0), q.flip(0), hood, eps.flip(0))
    assert torch.equal(flipped[0], r.flip(0)) and torch.equal(flipped[2], cost.flip(0))


def test_same_bits_under_any_thread_count():
    """16 rows x 4096 tokens: large enough for torch's kernels to split work across threads
    (their grain is 32768 elements)."""
    content, tokens, p, q = window(5, 4096, 16, dims=4)
    hood = content_neighbours(content, tokens, 4096, 16)
    eps = torch.linspace(0, 0.05, 16, dtype=torch.float64)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ranked_plans(p, q, hood, eps)
        torch.set_num_threads(4)
        many = ranked_plans(p, q, hood, eps)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(one, many))
    assert bool((one[1][1:] > 0).all())


def test_a_plan_over_its_budget_fails_the_w1_check():
    """The negative control: the plan at a larger budget, claimed at a smaller one, is caught by
    POT's W1 (so the W1 <= cost check above has power)."""
    content, tokens, p, q = window(11, 256, 1)
    hood = content_neighbours(content, tokens, 256, 8)
    small = 1e-3
    r, _, cost = TransportRelaxation(hood, 1.0).plan(p, q)
    w1 = w1_from_laws(p, r, content, tokens)
    assert bool((cost > small).all()) and bool((w1 > small).all())
    honest = TransportRelaxation(hood, small).plan(p, q)
    assert bool((w1_from_laws(p, honest[0], content, tokens) <= small + TOL).all())


def test_degenerate_rows_and_tokens_without_content():
    """Ids without content (no neighbours), a row with p = q, a single-code vocabulary (no
    neighbour at all): nothing moves there, r = p bit for bit."""
    content, tokens, p, q = window(2, 256, 3)
    vocab = 260  # ids 256..259 carry no content
    p = torch.cat([p, torch.zeros(3, 4, dtype=torch.float64)], -1)
    q = torch.cat([q, torch.zeros(3, 4, dtype=torch.float64)], -1)
    p[0, 257], q[0, 258] = 0.5, 0.5  # excess and deficit at ids no edge reaches
    p[0], q[0] = p[0] / p[0].sum(), q[0] / q[0].sum()
    q[1] = p[1]
    hood = content_neighbours(content, tokens, vocab, 8)
    r, moved, cost = ranked_plans(p, q, hood, torch.full((3,), 0.05, dtype=torch.float64))
    assert r[0, 257] == p[0, 257] and r[0, 258] == p[0, 258] and moved[0] > 0
    assert torch.equal(r[1], p[1]) and moved[1].item() == 0 and cost[1].item() == 0
    lone = content_neighbours(content[:1], tokens[:1], vocab, 4)
    r, moved, _ = ranked_plans(p, q, lone, torch.full((3,), 0.05, dtype=torch.float64))
    assert torch.equal(r, p) and bool((moved == 0).all())


@pytest.mark.parametrize("bonus", [True, False])
def test_window_target_is_verify_with_the_rule(bonus):
    """SD on window_target(p, q) draws exactly what verify with the rule draws (a float eps:
    the same accept probabilities and tokens for every uniform); with eps per row verify with
    the rule cannot run (its residual sees the stop row alone) and says what to do instead."""
    content, tokens, p, q = window(4, 256, 6)
    hood = content_neighbours(content, tokens, 256, 8)
    window_p = torch.cat([p, torch.softmax(p[:1] * 3, -1)]) if bonus else p
    g = torch.Generator().manual_seed(0)
    for eps in (0.0, 0.01, 0.1):
        rule = TransportRelaxation(hood, eps)
        target = rule.window_target(window_p, q)
        assert torch.equal(target[:6], rule.targets(p, q))
        assert not bonus or torch.equal(target[6], window_p[6])
        for _ in range(20):
            drafts = torch.multinomial(q, 1, generator=g).squeeze(-1)
            u = torch.rand(7, generator=g, dtype=torch.float64)
            ours = verify(window_p, q, drafts, rule, uniforms=u)
            plain = verify(target, q, drafts, uniforms=u)
            assert torch.equal(ours.accept_probs, plain.accept_probs)
            assert torch.equal(ours.tokens, plain.tokens)
    per_row = TransportRelaxation(hood, torch.linspace(0, 0.1, 6, dtype=torch.float64))
    target = per_row.window_target(window_p, q)
    assert torch.equal(target[:6], per_row.targets(p, q))
    with pytest.raises(ValueError, match="window_target"):
        verify(window_p, q, drafts, per_row, uniforms=u)


def test_a_spent_budget_stops_the_row_even_at_cost_zero():
    """Two ids with the same content are neighbours at cost 0: a plan with eps = 0 (or one whose
    budget is spent) moves nothing along that edge, as "greedy" and "lp"; eps > 0 does."""
    content = torch.tensor([[0.0], [0.0], [1.0]], dtype=torch.float64)
    hood = content_neighbours(content, torch.arange(3), 3, 1)
    assert hood.cost[0, 0].item() == 0 and hood.index[0, 0].item() == 1
    p = torch.tensor([[0.6, 0.1, 0.3]] * 2, dtype=torch.float64)
    q = torch.tensor([[0.1, 0.6, 0.3]] * 2, dtype=torch.float64)
    r, moved, cost = ranked_plans(p, q, hood, torch.tensor([0.0, 1e-9], dtype=torch.float64))
    assert torch.equal(r[0], p[0]) and moved[0].item() == 0
    assert moved[1].item() == pytest.approx(0.5, abs=TOL) and cost[1].item() == 0
    for solver in ("greedy", "lp"):
        assert transport_plan(p[0], q[0], hood, 0.0, solver)[1] == 0


def test_ranked_plans_refuses_rows_of_another_vocabulary_and_skips_infinite_costs():
    from gsd_lab.decode.relaxation_w1 import ContentNeighbours, ranked_plans

    index = torch.tensor([[1], [0], [1]], dtype=torch.int64)
    cost = torch.tensor([[float("inf")], [0.5], [0.5]], dtype=torch.float64)
    hood = ContentNeighbours(index, cost)
    p = torch.tensor([[0.6, 0.2, 0.2]], dtype=torch.float64)
    q = torch.tensor([[0.2, 0.6, 0.2]], dtype=torch.float64)
    with pytest.raises(ValueError, match="neighbours' V = 3"):
        ranked_plans(p[:, :2], q[:, :2], hood, torch.tensor([1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="eps must be"):
        ranked_plans(p, q, hood, torch.tensor([1.0, 1.0], dtype=torch.float64))
    # token 0 (excess) has only an infinite-cost edge to token 1: nothing can move, no NaN
    r, moved, spent = ranked_plans(p, q, hood, torch.tensor([1.0], dtype=torch.float64))
    assert torch.equal(r, p) and float(moved[0]) == 0.0 and float(spent[0]) == 0.0
