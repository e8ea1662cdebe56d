"""``verify_block`` (Sun et al., arXiv 2403.10444): exact against the target by enumeration
(proofs/14), never fewer accepted drafts in expectation than ``verify``, the paper's Algorithm 2
transcribed per window, and negative controls that the same checks catch."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gsd_core.block_verification as bv
from gsd_core import verify, verify_block, window_law
from gsd_core.block_verification import block_accepted_law, target_joint, token_accepted_law


def tree_tables(seed: int, vocab: int, window: int, max_weight: int = 4) -> list[torch.Tensor]:
    """window + 1 tables [V] * (i + 1) of a random tree model: integer weights 0..max_weight
    (zeros and ties reachable), each row with a positive total, normalised in float64."""
    generator = torch.Generator().manual_seed(seed)
    tables = []
    for i in range(window + 1):
        weights = torch.randint(0, max_weight + 1, [vocab] * (i + 1), generator=generator).double()
        weights[weights.sum(-1) == 0] = 1.0
        tables.append(weights / weights.sum(-1, keepdim=True))
    return tables


models = st.tuples(st.integers(0, 2**31 - 1), st.integers(2, 3), st.integers(1, 3))


@settings(max_examples=60, deadline=None)
@given(models, st.booleans())
def test_block_window_law_is_the_target_joint(model, context_free_drafts):
    seed, vocab, window = model
    target = tree_tables(seed, vocab, window)
    draft = tree_tables(seed + 1, vocab, window)[:window]
    if context_free_drafts:  # Jacobi drafts: q_i does not depend on the window's prefix
        draft = [table.reshape(-1, vocab)[:1].reshape([1] * i + [vocab]).expand([vocab] * (i + 1))
                 for i, table in enumerate(draft)]
    law, accepted = window_law(target, draft, "block")
    assert (law - target_joint(target)).abs().max() <= 1e-12
    assert abs(float(accepted.sum()) - 1) <= 1e-12


@settings(max_examples=60, deadline=None)
@given(models)
def test_block_accepts_at_least_token_wise_at_every_length(model):
    """Pr[tau >= i] >= Pr[n >= i] for every i (proofs/14: w_i >= prod_{j<i} a_j on every
    path), hence the expected accepted length too."""
    seed, vocab, window = model
    target, draft = tree_tables(seed, vocab, window), tree_tables(seed + 7, vocab, window)[:window]
    block = window_law(target, draft, "block")[1]
    token = window_law(target, draft, "token")[1]
    at_least = lambda law: law.flip(0).cumsum(0).flip(0)  # noqa: E731 - Pr[length >= i]
    assert (at_least(block) >= at_least(token) - 1e-12).all()
    lengths = torch.arange(window + 1, dtype=torch.float64)
    assert (block * lengths).sum() >= (token * lengths).sum() - 1e-12


def test_block_accepts_strictly_more_on_a_known_window():
    """The docstring's window: both verifiers exact, block verification accepts more."""
    target = [torch.tensor([0.5, 0.5]), torch.tensor([[0.9, 0.1], [0.9, 0.1]]),
              torch.full((2, 2, 2), 0.5)]
    draft = [torch.tensor([0.25, 0.75]), torch.full((2, 2), 0.5)]
    target, draft = [t.double() for t in target], [d.double() for d in draft]
    lengths = torch.arange(3, dtype=torch.float64)
    block = float((window_law(target, draft, "block")[1] * lengths).sum())
    token = float((window_law(target, draft, "token")[1] * lengths).sum())
    assert block > token + 0.05


def test_a_biased_block_verifier_is_caught(monkeypatch):
    """Negative controls: the plain SD residual norm((p - q)+) instead of the modified
    norm((w p - q)+), or the same weights with the first failing prefix ending the window
    (token-wise stopping), leave the target's law; the check above sees it."""
    target = tree_tables(3, 3, 3)
    draft = tree_tables(4, 3, 3)[:3]
    exact = target_joint(target)
    assert (window_law(target, draft, "block")[0] - exact).abs().max() <= 1e-12
    with monkeypatch.context() as patch:
        patch.setattr(bv, "block_residual", lambda p, q, w: (p - q).clamp(min=0))
        assert (window_law(target, draft, "block")[0] - exact).abs().max() > 1e-3

    def leading_run(p, q, x):
        return _run_law(bv.block_weights(p, q, x)[1])

    with monkeypatch.context() as patch:
        patch.setattr(bv, "block_accepted_law", leading_run)
        assert (window_law(target, draft, "block")[0] - exact).abs().max() > 1e-3


def _run_law(h: torch.Tensor) -> torch.Tensor:
    """Pr[the leading run of passing prefixes has length i]: stops at the first failure."""
    run = torch.nn.functional.pad(h.cumprod(-1), (1, 0), value=1.0)
    return run * (1 - torch.nn.functional.pad(h, (0, 1)))


def _algorithm_2(p, q, x, u):
    """Sun et al.'s Algorithm 2 for one window in Python floats: p [L + 1][V], q [L][V]."""
    window, vocab = len(x), len(p[0])
    weights, h = [1.0], []
    for i in range(window):
        ratio = p[i][x[i]] / q[i][x[i]] if q[i][x[i]] > 0 else 0.0
        weights.append(min(1.0, weights[i] * ratio))
    for i in range(1, window + 1):
        if i == window:
            h.append(weights[window])
            continue
        rho = sum(max(weights[i] * p[i][y] - q[i][y], 0.0) for y in range(vocab))
        denominator = rho + 1 - weights[i]
        h.append(rho / denominator if denominator > 0 else 0.0)
    tau = max([i for i in range(1, window + 1) if u[i - 1] < h[i - 1]], default=0)
    q_row = q[tau] if tau < window else [0.0] * vocab
    residual = [max(weights[tau] * p[tau][y] - q_row[y], 0.0) for y in range(vocab)]
    total, cumulative = sum(residual), 0.0
    for y in range(vocab):
        cumulative += residual[y]
        if cumulative > u[window] * total:
            return list(x[:tau]) + [y]
    return list(x[:tau]) + [max(y for y in range(vocab) if residual[y] > 0)]


def test_verify_block_is_algorithm_2():
    generator = torch.Generator().manual_seed(11)
    batch, window, vocab = 200, 4, 5
    p = torch.randint(0, 4, (batch, window + 1, vocab), generator=generator).double() + 0.01
    q = torch.randint(0, 4, (batch, window, vocab), generator=generator).double() + 0.01
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    x = torch.randint(0, vocab, (batch, window), generator=generator)
    u = torch.rand(batch, window + 1, generator=generator, dtype=torch.float64)
    result = verify_block(p, q, x, uniforms=u)
    for b in range(batch):
        expected = _algorithm_2(p[b].tolist(), q[b].tolist(), x[b].tolist(), u[b].tolist())
        got = result.tokens[b][: int(result.num_emitted[b])].tolist()
        assert got == expected, b
    assert (result.num_emitted == result.num_accepted + 1).all()


def test_one_draft_is_verify_and_the_law_given_drafts_is_exact():
    generator = torch.Generator().manual_seed(5)
    p = torch.rand(300, 2, 4, generator=generator, dtype=torch.float64)
    q = torch.rand(300, 1, 4, generator=generator, dtype=torch.float64)
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    x = torch.randint(0, 4, (300, 1), generator=generator)
    u = torch.rand(300, 2, generator=generator, dtype=torch.float64)
    assert torch.equal(verify_block(p, q, x, uniforms=u).tokens, verify(p, q, x, uniforms=u).tokens)
    assert torch.allclose(block_accepted_law(p, q, x), token_accepted_law(p, q, x), atol=1e-15)
    # Pr[tau = i | drafts] against counts over many uniforms (a loose sanity bound, 6 sigma)
    p5 = torch.rand(1, 4, 3, generator=generator, dtype=torch.float64)
    q5 = torch.rand(1, 3, 3, generator=generator, dtype=torch.float64)
    p5, q5 = p5 / p5.sum(-1, keepdim=True), q5 / q5.sum(-1, keepdim=True)
    x5 = torch.tensor([[0, 1, 2]])
    draws = 20000
    tau = verify_block(p5.expand(draws, -1, -1), q5.expand(draws, -1, -1), x5.expand(draws, -1),
                       generator=torch.Generator().manual_seed(0)).num_accepted
    law = block_accepted_law(p5, q5, x5)[0]
    freq = torch.bincount(tau, minlength=4).double() / draws
    assert (law >= 0).all()
    assert ((freq - law).abs() <= 6 * (law * (1 - law) / draws).sqrt() + 1e-9).all()


def test_verify_block_refuses_a_window_without_the_bonus_row():
    p, q = torch.full((2, 3), 1 / 3, dtype=torch.float64), torch.full((2, 3), 1 / 3,
                                                                      dtype=torch.float64)
    with pytest.raises(ValueError, match="bonus row"):
        verify_block(p, q, torch.tensor([0, 1]), generator=torch.Generator())


def test_an_empty_window_draws_from_the_bonus_row():
    p = torch.tensor([[[0.0, 0.0, 1.0, 0.0]]], dtype=torch.float64).expand(3, 1, 4)
    result = verify_block(p, torch.empty(3, 0, 4, dtype=torch.float64),
                          torch.empty(3, 0, dtype=torch.long), generator=torch.Generator())
    assert result.tokens.tolist() == [[2]] * 3 and result.num_accepted.tolist() == [0] * 3
    assert result.accept_probs.shape == (3, 0)
