"""LANTERN's relaxed acceptance (gsd_core.lantern, proofs/08): neighbourhoods by a plain sort,
the exact law against a rational enumeration and a seeded Monte Carlo of ``verify``,
the SD limits (delta = 0, k = 1), TV(out, p) = acceptance gained, and monotonicity."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from core_strategies import weights_to_probs
from hypothesis import given, settings
from hypothesis import strategies as st

from gsd_core import (
    Lantern,
    LatentNeighbourhoods,
    accept_probability,
    acceptance_rate,
    latent_neighbourhoods,
    output_distribution,
    sample_categorical,
    tv_distance,
    verify,
)


def credited_mass(p: torch.Tensor, tokens, rule: Lantern) -> torch.Tensor:
    """p(x) + m(x) for tokens [T] (or one int) against rows p [..., V]: [..., T] (or [...])."""
    x = torch.as_tensor(tokens)
    out = rule.credited(p, x.reshape(-1).expand(*p.shape[:-1], -1))
    return out[..., 0] if x.ndim == 0 else out


def every_accept(p: torch.Tensor, q: torch.Tensor, rule) -> torch.Tensor:
    return accept_probability(p, q, torch.arange(p.shape[-1]), rule)

TOL = 1e-12


@st.composite
def lantern_cases(draw: st.DrawFn, max_vocab: int = 7) -> dict:
    """Integer weights for p and q, integer 2-D embeddings (many distance ties), k (may exceed
    V), an optional squared-distance limit, and delta halfway between attainable neighbour
    masses (m / T for p-weight total T), so float and rational comparisons agree."""
    vocab = draw(st.integers(1, max_vocab))
    weights = st.lists(st.integers(0, 12), min_size=vocab, max_size=vocab)
    p_w = draw(weights)
    if sum(p_w) == 0:
        p_w[0] = 1
    kind = draw(st.sampled_from(["weights", "weights", "same", "one_hot"]))
    if kind == "same":
        q_w = list(p_w)
    elif kind == "one_hot":  # a Jacobi draft row
        q_w = [0] * vocab
        q_w[draw(st.integers(0, vocab - 1))] = 1
    else:
        q_w = draw(weights)
        if sum(q_w) == 0:
            q_w[-1] = 1
    emb = draw(st.lists(st.tuples(st.integers(-2, 2), st.integers(-2, 2)), min_size=vocab, max_size=vocab))
    total = sum(p_w)
    j = draw(st.integers(-2, total - 1))
    delta = Fraction(0) if j == -2 else Fraction(1) if j == -1 else Fraction(2 * j + 1, 2 * total)
    return {
        "p_w": p_w, "q_w": q_w, "emb": emb, "k": draw(st.integers(1, vocab + 1)),
        "max_sq": draw(st.none() | st.integers(0, 8)), "delta": delta,
    }


def _rule(case: dict, delta: Fraction | float | None = None, k: int | None = None) -> Lantern:
    emb = torch.tensor(case["emb"], dtype=torch.float64)
    limit = None if case["max_sq"] is None else math.sqrt(case["max_sq"])
    hood = latent_neighbourhoods(emb, case["k"] if k is None else k, limit)
    return Lantern(hood, float(case["delta"] if delta is None else delta))


def _pq(case: dict) -> tuple[torch.Tensor, torch.Tensor]:
    return weights_to_probs(case["p_w"]), weights_to_probs(case["q_w"])


def _reference_hood(case: dict, x: int) -> list[int]:
    """B_k(x) by definition: x, then the others by (squared distance, id), within the limit."""
    emb, vocab = case["emb"], len(case["emb"])

    def d2(y: int) -> int:
        return (emb[x][0] - emb[y][0]) ** 2 + (emb[x][1] - emb[y][1]) ** 2

    others = sorted((d2(y), y) for y in range(vocab) if y != x)[: max(0, case["k"] - 1)]
    return [x] + [y for d, y in others if case["max_sq"] is None or d <= case["max_sq"]]


def _reference_law(case: dict) -> tuple[list[Fraction], list[Fraction], list[Fraction]]:
    """Credited masses p(x) + m(x), acceptance a(x) and the output law, in rationals."""
    p = [Fraction(w, sum(case["p_w"])) for w in case["p_w"]]
    q = [Fraction(w, sum(case["q_w"])) for w in case["q_w"]]
    credited = []
    for x in range(len(p)):
        mass, best = Fraction(0), Fraction(0)
        for y in _reference_hood(case, x)[1:]:
            mass += p[y]
            if mass > case["delta"]:
                break
            best = mass
        credited.append(p[x] + best)
    accept = [min(Fraction(1), c / qx) if qx > 0 else Fraction(0) for c, qx in zip(credited, q)]
    alpha = sum(qx * a for qx, a in zip(q, accept))
    excess = [max(Fraction(0), a - b) for a, b in zip(p, q)]
    residual = [e / sum(excess) for e in excess] if sum(excess) > 0 else p
    return credited, accept, [qx * a + (1 - alpha) * r for qx, a, r in zip(q, accept, residual)]


@given(lantern_cases())
def test_neighbourhoods_are_the_k_nearest_by_a_plain_sort(case):
    hood = _rule(case).neighbourhoods
    vocab = len(case["emb"])
    assert hood.index.shape == (vocab, min(case["k"], vocab))
    for x in range(vocab):
        members = hood.index[x][hood.valid[x]].tolist()
        assert members == _reference_hood(case, x)
        assert hood.valid[x].tolist() == sorted(hood.valid[x].tolist(), reverse=True)  # a prefix


@given(lantern_cases())
def test_exact_law_matches_rational_enumeration(case):
    p, q = _pq(case)
    rule = _rule(case)
    credited, accept, out = _reference_law(case)
    tokens = torch.arange(p.shape[-1])
    assert torch.allclose(credited_mass(p, tokens, rule), torch.tensor([float(c) for c in credited],
                          dtype=torch.float64), atol=TOL, rtol=0)
    assert torch.allclose(every_accept(p, q, rule),
                          torch.tensor([float(a) for a in accept], dtype=torch.float64), atol=TOL, rtol=0)
    got = output_distribution(p, q, rule)
    assert torch.allclose(got, torch.tensor([float(o) for o in out], dtype=torch.float64), atol=TOL, rtol=0)


@given(lantern_cases())
def test_delta_zero_or_k_one_is_standard_sd(case):
    p, q = _pq(case)
    for rule in (_rule(case, delta=0.0), _rule(case, k=1)):
        assert torch.equal(every_accept(p, q, rule), every_accept(p, q, None))
        out = output_distribution(p, q, rule)
        assert torch.allclose(out, p, atol=TOL, rtol=0)
        assert torch.allclose(out, output_distribution(p, q), atol=TOL, rtol=0)


def _window_inputs(vocab: int, window: int, batch: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(3 * torch.randn(batch, window + 1, vocab, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(3 * torch.randn(batch, window, vocab, generator=g, dtype=torch.float64), -1)
    drafts = sample_categorical(q, torch.rand(batch, window, generator=g, dtype=torch.float64))
    uniforms = torch.rand(batch, window + 1, generator=g, dtype=torch.float64)
    emb = torch.randn(vocab, 3, generator=g, dtype=torch.float64)
    return p, q, drafts, uniforms, emb


@pytest.mark.parametrize("bonus", [True, False])
def test_verify_with_delta_zero_takes_the_decisions_of_standard_verify(bonus):
    p, q, drafts, uniforms, emb = _window_inputs(vocab=9, window=5, batch=200, seed=1)
    p = p if bonus else p[:, :-1]
    rule = Lantern(latent_neighbourhoods(emb, 4), 0.0)
    got = verify(p, q, drafts, rule, uniforms=uniforms)
    want = verify(p, q, drafts, uniforms=uniforms)
    assert torch.equal(got.tokens, want.tokens) and torch.equal(got.num_accepted, want.num_accepted)
    assert torch.equal(got.num_emitted, want.num_emitted)
    assert torch.allclose(got.accept_probs, want.accept_probs, atol=TOL, rtol=0)


@pytest.mark.parametrize("bonus", [True, False])
def test_verify_matches_a_per_position_reference_loop(bonus):
    vocab, window = 9, 5
    p, q, drafts, uniforms, emb = _window_inputs(vocab, window, batch=120, seed=2)
    p = p if bonus else p[:, :-1]
    rule = Lantern(latent_neighbourhoods(emb, 4), 0.2)
    got = verify(p, q, drafts, rule, uniforms=uniforms)
    for b in range(p.shape[0]):
        emitted = []
        for i in range(window):
            x = int(drafts[b, i])
            a = min(1.0, float(credited_mass(p[b, i], x, rule)) / float(q[b, i, x]))
            assert float(got.accept_probs[b, i]) == pytest.approx(a, abs=TOL)
            if float(uniforms[b, i]) < a:
                emitted.append(x)
                continue
            excess = (p[b, i] - q[b, i]).clamp(min=0)
            emitted.append(int(sample_categorical(excess, uniforms[b, window])))
            break
        else:
            if bonus:
                emitted.append(int(sample_categorical(p[b, window], uniforms[b, window])))
        n = len(emitted)
        assert got.tokens[b, :n].tolist() == emitted and bool((got.tokens[b, n:] == -1).all())
        assert int(got.num_emitted[b]) == n


@settings(max_examples=25)
@given(lantern_cases(max_vocab=6))
def test_verify_matches_exact_law_by_seeded_monte_carlo(case):
    """One step, N independent draws: every frequency within 4 standard errors of the law;
    a token of law 0 never appears."""
    p, q = _pq(case)
    rule = _rule(case)
    vocab, n = p.shape[-1], 40_000
    g = torch.Generator().manual_seed(12345)
    drafts = sample_categorical(q.expand(n, vocab), torch.rand(n, generator=g, dtype=torch.float64))
    result = verify(p.expand(n, 1, vocab), q.expand(n, 1, vocab), drafts.view(n, 1), rule, generator=g)
    freq = torch.bincount(result.tokens[:, 0], minlength=vocab).double() / n
    law = output_distribution(p, q, rule)
    assert abs(float(law.sum()) - 1) < TOL
    se = (law * (1 - law) / n).clamp(min=0).sqrt()
    assert bool(((freq - law).abs() <= 4 * se + TOL).all()), (freq, law)


@given(lantern_cases())
def test_output_law_is_a_distribution_and_tv_equals_acceptance_gained(case):
    p, q = _pq(case)
    rule = _rule(case)
    out = output_distribution(p, q, rule)
    assert bool((out >= -TOL).all()) and abs(float(out.sum()) - 1) < TOL
    tv = float(tv_distance(out, p))
    gain = float(acceptance_rate(p, q, rule) - acceptance_rate(p, q))
    assert tv == pytest.approx(gain, abs=1e-12)
    # The bound in delta (proofs/08): sum_x min((q - p)+, delta), and never above TV(p, q).
    bound = float(torch.minimum((q - p).clamp(min=0), torch.tensor(rule.delta, dtype=torch.float64)).sum())
    assert tv <= bound + TOL
    assert tv <= float(tv_distance(p, q)) + TOL
    # The paper's budget, per drafted token: moving A(x) onto x changes p by m(x) <= delta.
    credited = credited_mass(p, torch.arange(p.shape[-1]), rule)
    assert bool((credited - p <= rule.delta + TOL).all()) and bool((credited >= p).all())


@given(lantern_cases(), st.data())
def test_acceptance_is_monotone_in_delta_and_k(case, data):
    p, q = _pq(case)
    total = sum(case["p_w"])
    j = data.draw(st.integers(0, total), label="larger delta index")
    larger = max(case["delta"], min(Fraction(1), Fraction(2 * j + 1, 2 * total)))
    small, large = _rule(case), _rule(case, delta=larger)
    assert bool((every_accept(p, q, small)
                 <= every_accept(p, q, large)).all())
    assert float(acceptance_rate(p, q, small)) <= float(acceptance_rate(p, q, large)) + TOL
    assert float(acceptance_rate(p, q)) <= float(acceptance_rate(p, q, small)) + TOL
    bigger_k = _rule(case, k=case["k"] + data.draw(st.integers(0, 3), label="extra k"))
    assert bool((every_accept(p, q, small)
                 <= every_accept(p, q, bigger_k)).all())


def test_budget_per_token_does_not_bound_the_output_law():
    """proofs/08: four drafted tokens, each with an undrafted twin holding its p mass nearby;
    delta = 1/4 credits each twin to its token, every draft is accepted, out = q, TV = 1."""
    p = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1], dtype=torch.float64) / 4
    q = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0], dtype=torch.float64) / 4
    emb = torch.tensor([[10.0 * (i % 4), float(i // 4)] for i in range(8)], dtype=torch.float64)
    rule = Lantern(latent_neighbourhoods(emb, 2), 0.25)
    assert rule.neighbourhoods.index[:4, 1].tolist() == [4, 5, 6, 7]
    assert float(acceptance_rate(p, q, rule)) == 1.0 and float(acceptance_rate(p, q)) == 0.0
    out = output_distribution(p, q, rule)
    assert torch.equal(out, q)
    assert float(tv_distance(out, p)) == 1.0


def test_max_distance_limits_the_neighbourhood():
    emb = torch.tensor([[0.0], [1.0], [2.0], [5.0]], dtype=torch.float64)
    hood = latent_neighbourhoods(emb, 4, max_distance=2.0)
    assert hood.index[0].tolist() == [0, 1, 2, 3] and hood.valid[0].tolist() == [True, True, True, False]
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    assert float(credited_mass(p, 0, Lantern(hood, 1.0))) == pytest.approx(0.6, abs=TOL)


def test_bad_inputs_raise_clear_errors():
    emb = torch.randn(5, 2, dtype=torch.float64)
    hood = latent_neighbourhoods(emb, 3)
    with pytest.raises(ValueError, match="delta"):
        Lantern(hood, 1.5)
    with pytest.raises(ValueError, match="delta"):
        Lantern(hood, -0.1)
    with pytest.raises(ValueError, match="k must be"):
        latent_neighbourhoods(emb, 0)
    with pytest.raises(ValueError, match="embeddings"):
        latent_neighbourhoods(torch.arange(5), 2)
    with pytest.raises(ValueError, match="column 0"):
        LatentNeighbourhoods(torch.zeros(3, 2, dtype=torch.int64), torch.ones(3, 2, dtype=torch.bool))
    p = torch.full((6,), 1 / 6, dtype=torch.float64)
    with pytest.raises(ValueError, match="cover 5 tokens"):
        output_distribution(p, p, Lantern(hood, 0.1))
    p5 = torch.full((2, 5), 0.2, dtype=torch.float64)
    with pytest.raises(ValueError, match="draft_tokens"):
        verify(p5, p5, torch.tensor([0, 7]), Lantern(hood, 0.1))
    with pytest.raises(ValueError, match="rule must be"):
        verify(p5, p5, torch.tensor([0, 1]), 0.1)


def test_batched_rows_with_different_supports_of_q():
    """Acceptance is computed on the support of q (the widest row's); rows with narrower
    supports, one-hot rows and a full row agree with the definition token by token."""
    g = torch.Generator().manual_seed(7)
    vocab = 10
    p = torch.softmax(torch.randn(4, vocab, generator=g, dtype=torch.float64), -1)
    q = torch.zeros(4, vocab, dtype=torch.float64)
    q[0, 3] = 1.0
    q[1, [2, 8]] = torch.tensor([0.25, 0.75], dtype=torch.float64)
    q[2, [0, 1, 5, 9]] = 0.25
    rule = Lantern(latent_neighbourhoods(torch.randn(vocab, 2, generator=g, dtype=torch.float64), 5), 0.3)
    q[3] = torch.softmax(torch.randn(vocab, generator=g, dtype=torch.float64), -1)
    for qs in (q[:3], q):  # narrow supports only (selection path), and with a full row (all tokens)
        ps = p[: qs.shape[0]]
        credited = credited_mass(ps, torch.arange(vocab), rule)  # [R, V]
        want = torch.where(qs > 0, (credited / qs).clamp(max=1.0), 0.0)
        assert torch.allclose(every_accept(ps, qs, rule), want, atol=TOL, rtol=0)
        for i in range(qs.shape[0]):
            assert torch.allclose(output_distribution(ps, qs, rule)[i],
                                  output_distribution(ps[i], qs[i], rule), atol=TOL, rtol=0)
