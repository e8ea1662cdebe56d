"""Ports of vLLM's older ``tests/samplers/test_rejection_sampler.py`` (vllm-project/vllm at
commit 055265e0, the v0 ``RejectionSampler``) to ``gsd_core``: same inputs, assertions and
tolerances, adapted; a trimmed parametrisation is stated in its test's docstring. Not ported:
the mixed-seeded batch test (gsd takes one generator per call) and the comparison with
flashinfer's kernel.

vLLM v0 takes recovered and bonus token ids from outside; gsd draws them from the residual and
the bonus row, so these ports put p one-hot on the recovered ids (a residual with one token) and
on the bonus ids.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gsd_core import resolve_window, verify, window_rule


def causal_accepted(k: int, last_accepted: torch.Tensor, generator: torch.Generator
                    ) -> torch.Tensor:
    """vLLM v0's mock_causal_accepted_tensor: accepted up to last_accepted, then random
    acceptances after the first rejection (which causality must ignore). [B, k] bool."""
    batch_size = last_accepted.shape[0]
    positions = torch.arange(k).expand(batch_size, k)
    accepted = positions <= last_accepted.unsqueeze(-1)
    sprinkle_candidates = positions > last_accepted.unsqueeze(-1) + 1
    sprinkle = torch.rand(batch_size, k, generator=generator) > 0.5
    accepted[sprinkle_candidates] = sprinkle[sprinkle_candidates]
    return accepted


@pytest.mark.parametrize("seed", list(range(10)))
@pytest.mark.parametrize("which_tokens_accepted",
                         ["all_tokens_accepted", "no_tokens_accepted", "some_tokens_accepted"])
def test_correct_output_format(which_tokens_accepted: str, seed: int) -> None:
    """Port of test_correct_output_format (vLLM tests/samplers/test_rejection_sampler.py): batch
    10, k = 5, vocab 3000, a given acceptance matrix; drafts up to the first rejection, then the
    recovered (or bonus) token, then -1. The matrix enters as a_i in {0, 1} (u < a_i)."""
    batch_size, k, vocab_size = 10, 5, 3000
    generator = torch.Generator().manual_seed(seed)
    if which_tokens_accepted == "all_tokens_accepted":
        last_accepted = torch.full((batch_size,), k - 1)
    elif which_tokens_accepted == "no_tokens_accepted":
        last_accepted = torch.full((batch_size,), -1)
    else:
        last_accepted = torch.randint(-1, k, (batch_size,), generator=generator)
    accepted = causal_accepted(k, last_accepted, generator)
    recovered = torch.randint(0, vocab_size, (batch_size, k), generator=generator)
    drafts = torch.randint(0, vocab_size, (batch_size, k), generator=generator)
    bonus = torch.randint(0, vocab_size, (batch_size, 1), generator=generator)
    p = F.one_hot(torch.cat([recovered, bonus], -1), vocab_size).double()
    q = F.one_hot(drafts, vocab_size).double()
    uniforms = torch.rand(batch_size, k + 1, generator=generator, dtype=torch.float64)
    out = resolve_window(p, q, drafts, accepted.double(), uniforms, window_rule(None)).tokens
    if which_tokens_accepted == "all_tokens_accepted":
        assert torch.equal(out[:, :-1], drafts)
        assert torch.equal(out[:, -1:], bonus)
    elif which_tokens_accepted == "no_tokens_accepted":
        assert torch.equal(out[:, 0], recovered[:, 0])
        assert torch.equal(out[:, 1:], torch.ones_like(out[:, 1:]) * -1)
    else:
        rows = torch.arange(batch_size)
        recovered_plus_bonus = torch.cat([recovered, bonus], -1)
        assert torch.equal(recovered_plus_bonus[rows, last_accepted + 1],
                           out[rows, last_accepted + 1])
        subsequent = torch.arange(k + 1).expand(batch_size, k + 1) >= (
            last_accepted + 2).unsqueeze(-1)
        assert bool((out[subsequent] == -1).all())


@pytest.mark.parametrize("k", [1, 5])
@pytest.mark.parametrize("vocab_size", [30_000, 50_000])
@pytest.mark.parametrize("batch_size", [1, 31])
def test_no_crash_with_varying_dims(k: int, vocab_size: int, batch_size: int) -> None:
    """Port of test_no_crash_with_varying_dims (vLLM tests/samplers/test_rejection_sampler.py),
    trimmed to the ends of vLLM's ranges: k 1 and 5 (of 1 .. 5), batch sizes 1 and 31 (of
    1 .. 31). vLLM passes torch.rand rows unnormalised; gsd convention: rows must sum to 1
    (checks.py), so they are normalised first."""
    generator = torch.Generator().manual_seed(k)
    draft_probs = torch.rand(batch_size, k, vocab_size, generator=generator)
    target_probs = torch.rand(batch_size, k + 1, vocab_size, generator=generator)
    drafts = torch.randint(0, vocab_size, (batch_size, k), generator=generator)
    result = verify(target_probs / target_probs.sum(-1, keepdim=True),
                    draft_probs / draft_probs.sum(-1, keepdim=True), drafts, generator=generator)
    assert result.tokens.shape == (batch_size, k + 1)
    assert bool((result.tokens[:, 0] >= 0).all())


@pytest.mark.parametrize("above_or_below_vocab_range", ["above", "below"])
def test_raises_when_vocab_oob(above_or_below_vocab_range: str) -> None:
    """Port of test_raises_when_vocab_oob (vLLM tests/samplers/test_rejection_sampler.py), draft
    ids: k = 3, batch 5, vocab 30,000, one id at vocab + 1 or -1. vLLM's strict mode raises an
    AssertionError; gsd raises a ValueError (always checked). Bonus ids: gsd draws them."""
    k, batch_size, vocab_size = 3, 5, 30_000
    generator = torch.Generator().manual_seed(0)
    q = F.softmax(torch.rand(batch_size, k, vocab_size, generator=generator), -1)
    p = F.softmax(torch.rand(batch_size, k + 1, vocab_size, generator=generator), -1)
    drafts = torch.randint(0, vocab_size, (batch_size, k), generator=generator)
    drafts[0][0] = vocab_size + 1 if above_or_below_vocab_range == "above" else -1
    with pytest.raises(ValueError, match="out of range"):
        verify(p, q, drafts, generator=generator)


@pytest.mark.parametrize("draft_and_target_probs_equal", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_rejection_sampling_approximates_target_distribution(
        seed: int, draft_and_target_probs_equal: bool) -> None:
    """Port of test_rejection_sampling_approximates_target_distribution (vLLM
    tests/samplers/test_rejection_sampler.py): vocab 10, k = 1, draft and target softmax(rand)
    (or equal: no NaNs or exceptions), 100 reference laws, sample sizes 10 .. 100,000, the
    distance to the target falls at least 20 times faster than to the references. Trimmed: seeds
    0 and 1, not vLLM's five."""
    vocab_size = 10
    generator = torch.Generator().manual_seed(seed)
    draft_probs, target_probs = (F.softmax(torch.rand(vocab_size, generator=generator), -1)
                                 for _ in range(2))
    reference_probs = F.softmax(torch.rand(100, vocab_size, generator=generator), -1)
    if draft_and_target_probs_equal:
        target_probs = draft_probs.clone()
    to_target, to_reference = [], []
    for num_samples in [10, 100, 1_000, 10_000, 100_000]:
        drafts = torch.multinomial(draft_probs, num_samples, replacement=True,
                                   generator=generator).view(num_samples, 1)
        p = target_probs.expand(2, vocab_size)  # with the (unused) bonus row; broadcast
        q = draft_probs.expand(1, vocab_size)
        tokens = verify(p, q, drafts, generator=generator).tokens[:, :-1].flatten()
        hist = torch.histogram(tokens.float(), bins=vocab_size, range=(0, vocab_size),
                               density=True).hist
        to_reference.append(torch.dist(reference_probs, hist).item() / 100)
        to_target.append(torch.dist(target_probs, hist).item())
    assert to_target[0] / to_target[-1] > 20 * to_reference[0] / to_reference[-1]
