"""Each gsd convention of docs/conventions.md, where gsd differs from transformers and vLLM,
asserted on gsd_core (the peers' side is cited there, from their code)."""

from __future__ import annotations

import pytest
import torch

from gsd_core import SUM_TOLERANCE, residual_distribution, verify

P = torch.tensor([[0.5, 0.3, 0.2, 0.0]], dtype=torch.float64)


def test_a_draft_with_zero_draft_probability_is_rejected() -> None:
    q = torch.tensor([[0.5, 0.5, 0.0, 0.0]], dtype=torch.float64)  # q(2) = 0 < p(2)
    result = verify(P, q, torch.tensor([2]), uniforms=torch.zeros(2, dtype=torch.float64))
    assert result.accept_probs.item() == 0.0
    assert result.num_accepted.item() == 0  # even with u = 0


def test_a_tie_u_equal_to_a_rejects() -> None:
    q = torch.tensor([[0.25, 0.6, 0.15, 0.0]], dtype=torch.float64)  # a(1) = 0.3 / 0.6 = 0.5
    tie = verify(P, q, torch.tensor([1]), uniforms=torch.tensor([0.5, 0.0], dtype=torch.float64))
    below = verify(P, q, torch.tensor([1]),
                   uniforms=torch.tensor([0.5 - 2**-53, 0.0], dtype=torch.float64))
    assert tie.accept_probs.item() == 0.5
    assert (tie.num_accepted.item(), below.num_accepted.item()) == (0, 1)


def test_p_equal_to_q_has_an_empty_residual_and_draws_from_p() -> None:
    """p == q with a rejection forced anyway: the residual (p - q)+ is empty and the token is
    drawn from p. p [2, 4] is p_0 and the bonus row, q [1, 4] = p_0; the draft 3 has q(3) = 0,
    so a = 0 and u_0 = 0 rejects it; u_1 = 0.9 falls in token 2's interval [0.5, 1) of p's
    CDF. vLLM v1 gives token 0 (its race over zeros), vLLM v0 the uniform law over V (token 3
    by inverse CDF at this u), transformers NaN."""
    assert torch.equal(residual_distribution(P, P), P)
    p = torch.tensor([[0.25, 0.25, 0.5, 0.0]] * 2, dtype=torch.float64)
    q = p[:1]  # q == p_0
    u = torch.tensor([0.0, 0.9], dtype=torch.float64)
    assert verify(p, q, torch.tensor([3]), uniforms=u).tokens.tolist() == [2, -1]


def test_a_placeholder_draft_raises() -> None:
    with pytest.raises(ValueError, match="out of range"):
        verify(P, P, torch.tensor([-1]), generator=torch.Generator())


def test_one_generator_per_call_draws_every_uniform_of_the_call() -> None:
    """verify(generator=g) draws one float64 tensor [..., L + 1] of uniforms from g, in one
    call, for all batch rows: the same tokens as passing those uniforms."""
    generator = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(6, 4, 9, generator=generator, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(6, 3, 9, generator=generator, dtype=torch.float64), -1)
    drafts = torch.randint(0, 9, (6, 3), generator=generator)
    drawn = verify(p, q, drafts, generator=torch.Generator().manual_seed(1))
    uniforms = torch.rand(6, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert torch.equal(drawn.tokens, verify(p, q, drafts, uniforms=uniforms).tokens)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_rows_must_sum_to_one_within_the_dtype_tolerance(dtype: torch.dtype) -> None:
    tolerance = SUM_TOLERANCE[dtype]
    assert tolerance == {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 2e-2}[dtype]
    within = torch.tensor([[0.5, 0.5 - tolerance / 4]], dtype=torch.float64).to(dtype)
    beyond = torch.tensor([[0.5, 0.5 - 4 * tolerance]], dtype=torch.float64).to(dtype)
    q = torch.tensor([[0.5, 0.5]], dtype=dtype)
    verify(within, q, torch.tensor([0]), generator=torch.Generator())
    with pytest.raises(ValueError, match="must sum to 1"):
        verify(beyond, q, torch.tensor([0]), generator=torch.Generator())
