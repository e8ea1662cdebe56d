"""Recursive rejection sampling over k candidates emits exactly p (proofs/15_multiple_drafts.md):
exact laws by enumeration of the candidate tuples, the sampler against them, and negative
controls (a residual that forgets the earlier rejections is caught)."""

from __future__ import annotations

import pytest
import torch
from core_strategies import prob_pairs
from hypothesis import given, settings
from hypothesis import strategies as st

from gsd_core import acceptance_rate, verify
from gsd_core.multidraft import (
    draw_without_replacement,
    multidraft_law,
    normalised,
    one_hot,
    recursive_rejection,
    stage_law,
    without_replacement_rows,
)
from gsd_core.rules import mass_ratio, token_residual

TOL = 1e-12


@settings(max_examples=60, deadline=None)
@given(prob_pairs(max_vocab=5), st.integers(1, 3), st.sampled_from(["without", "iid"]))
def test_rrs_emits_exactly_p(pq, k, scheme):
    p, q = pq
    law, alpha = multidraft_law(p, q, k, scheme)
    assert torch.allclose(law, p, atol=TOL, rtol=0)
    assert -TOL <= float(alpha) <= 1 + TOL


@settings(max_examples=60, deadline=None)
@given(prob_pairs(min_vocab=2, max_vocab=5), st.sampled_from(["without", "iid"]))
def test_acceptance_grows_with_k_and_k1_is_sd(pq, scheme):
    p, q = pq
    alphas = [float(multidraft_law(p, q, k, scheme)[1]) for k in (1, 2, 3)]
    assert alphas[0] == pytest.approx(float(acceptance_rate(p, q)), abs=TOL)
    assert alphas[0] <= alphas[1] + TOL and alphas[1] <= alphas[2] + TOL


def test_without_replacement_accepts_more_than_iid_here():
    """A case where i.i.d. candidates repeat the rejected token: without replacement gains."""
    p = torch.tensor([0.1, 0.9], dtype=torch.float64)
    q = torch.tensor([0.9, 0.1], dtype=torch.float64)
    iid = float(multidraft_law(p, q, 2, "iid")[1])
    without = float(multidraft_law(p, q, 2, "without")[1])
    assert without == pytest.approx(1.0, abs=TOL)  # the second candidate is the other token
    assert iid < without - 0.05


@settings(max_examples=40, deadline=None)
@given(prob_pairs(min_vocab=2, max_vocab=5), st.integers(1, 3))
def test_given_candidates_emit_p(pq, k):
    """Candidates the verifier conditions on (one-hot q_j, e.g. fresh tokens): every fixed tuple
    of distinct tokens gives law p."""
    p, _ = pq
    vocab = p.shape[-1]
    tup = tuple(range(min(k, vocab)))
    law, _ = stage_law(p, one_hot(torch.tensor(tup), vocab), tup)
    assert torch.allclose(law, p, atol=TOL, rtol=0)


def test_k1_is_verify_bit_for_bit():
    gen = torch.Generator().manual_seed(3)
    p = normalised(torch.rand(64, 7, generator=gen, dtype=torch.float64))
    q = normalised(torch.rand(64, 7, generator=gen, dtype=torch.float64))
    x = torch.randint(7, (64, 1), generator=gen)
    u = torch.rand(64, 2, generator=gen, dtype=torch.float64)
    ours = recursive_rejection(p, q.unsqueeze(-2), x, u)
    theirs = verify(p.unsqueeze(-2), q.unsqueeze(-2), x, uniforms=u)
    assert torch.equal(ours.token, theirs.tokens[..., 0])
    assert torch.equal(ours.accepted, 1 - theirs.num_accepted)  # accepted: index 0, else k = 1


def test_sampler_matches_the_exact_law():
    """The sampler (draws without replacement, then RRS), 200000 rows at once, against p."""
    gen = torch.Generator().manual_seed(11)
    p = torch.tensor([0.05, 0.4, 0.25, 0.3], dtype=torch.float64)
    q = torch.tensor([0.5, 0.1, 0.3, 0.1], dtype=torch.float64)
    n, k = 200_000, 3
    rows = q.expand(n, -1)
    first = torch.multinomial(q, n, replacement=True, generator=gen)
    x = draw_without_replacement(rows, first, k, torch.rand(n, k - 1, generator=gen, dtype=torch.float64))
    out = recursive_rejection(p.expand(n, -1), without_replacement_rows(rows, x), x,
                              torch.rand(n, k + 1, generator=gen, dtype=torch.float64))
    freq = torch.bincount(out.token, minlength=4).double() / n
    assert (freq - p).abs().max() < 4 * (0.25 / n) ** 0.5  # 4 standard errors at most
    _, alpha = multidraft_law(p, q, k)
    accepted = (out.accepted < k).double().mean()
    assert abs(float(accepted - alpha)) < 4 * (0.25 / n) ** 0.5


def test_absent_candidates_are_rejected_and_keep_the_residual():
    """q with one token: the second candidate is absent (zero row), the law is still p."""
    p = torch.tensor([0.3, 0.7], dtype=torch.float64)
    q = torch.tensor([1.0, 0.0], dtype=torch.float64)
    x = draw_without_replacement(q, torch.tensor(0), 2, torch.tensor([0.5], dtype=torch.float64))
    assert x.tolist() == [0, 0]
    rows = without_replacement_rows(q, x)
    assert rows[1].abs().sum() == 0
    law, alpha = multidraft_law(p, q, 2)
    assert torch.allclose(law, p, atol=TOL, rtol=0) and float(alpha) == pytest.approx(0.3, abs=TOL)


# --- negative control: the residual must be the recursive one ---------------------------------

def _law_with_residual_from_p(p: torch.Tensor, q: torch.Tensor, k: int) -> torch.Tensor:
    """RRS where every stage tests against p and residual norm((p - q)+), not r_j: wrong."""
    vocab = p.shape[-1]
    law = torch.zeros_like(p)
    import itertools
    for tup in itertools.product(range(vocab), repeat=k):
        x = torch.tensor(tup)
        rows = without_replacement_rows(q, x)
        prob = float(torch.prod(rows[torch.arange(k), x]))
        if prob == 0:
            continue
        reach, out = 1.0, torch.zeros_like(p)
        for j, t in enumerate(tup):
            a = float(mass_ratio(p[t : t + 1], rows[j, t : t + 1]))
            out[t] += reach * a
            reach *= 1 - a
        law += prob * (out + reach * normalised(token_residual(p, q)))
    return law


def test_negative_control_non_recursive_residual_is_lossy():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    wrong = _law_with_residual_from_p(p, q, 2)
    assert (wrong - p).abs().sum() / 2 > 0.05
    assert torch.allclose(multidraft_law(p, q, 2)[0], p, atol=TOL, rtol=0)


def test_negative_control_candidates_declared_with_the_row_drawn_from():
    """Candidates drawn without replacement but verified as if i.i.d. (q_j = q): lossy."""
    p = torch.tensor([0.1, 0.2, 0.7], dtype=torch.float64)
    q = torch.tensor([0.05, 0.9, 0.05], dtype=torch.float64)
    wrong = torch.zeros_like(p)
    for tup in [(a, b) for a in range(3) for b in range(3) if a != b]:
        x = torch.tensor(tup)
        prob = float(torch.prod(without_replacement_rows(q, x)[torch.arange(2), x]))
        wrong += prob * stage_law(p, q.expand(2, 3), tup)[0]
    assert (wrong - p).abs().sum() / 2 > 0.1
    assert torch.allclose(multidraft_law(p, q, 2)[0], p, atol=TOL, rtol=0)
