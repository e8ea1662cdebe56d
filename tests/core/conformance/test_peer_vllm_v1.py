"""Ports of vLLM's ``tests/v1/sample/test_rejection_sampler.py`` (vllm-project/vllm at commit
004fce2d) to ``gsd_core.verify``: same inputs, assertions and tolerances, adapted to gsd's API,
except ``test_sample_recovered_tokens``, whose reference is an inverse-CDF draw of the same
residual law on the same uniforms, not vLLM's exponential race (see its docstring); a trimmed
parametrisation is stated in its test's docstring.

Not ported: the tests of penalties, bad words and allowed token ids (vLLM applies them inside
its sampler; gsd takes the processed p), of FLy (a lossy acceptance rule) and of the float64
race (``use_fp64_gumbel``; gsd draws by inverse CDF).

vLLM's greedy path compares drafts with the target's argmax; here that is a window with p and q
one-hot (``peers.greedy_batch``). vLLM's top-k / top-p are applied inside its sampler; gsd takes
the processed target law p, so the tests pass p after the same masking. Where gsd's documented
convention differs (docs/conventions.md), the port asserts gsd's and a comment says so.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from peers import PLACEHOLDER, greedy_batch, one_hot

from gsd_core import output_distribution, residual_distribution, verify
from gsd_core.rules import token_residual
from gsd_core.verification import draw

P = PLACEHOLDER


@pytest.mark.parametrize("spec_tokens,output_tokens,expected", [
    ([[1, 2, 3]], [[1, 2, 3, 4]], [[1, 2, 3, 4]]),  # test_perfect_match
    ([[1, 2, 3]], [[1, 5, 3, 4]], [[1, 5, P, P]]),  # test_early_mismatch
    ([[1, 2], [3]], [[1, 2, 5], [3, 4]], [[1, 2, 5], [3, 4, P]]),  # test_multiple_sequences
    ([[1]], [[1, 2]], [[1, 2]]),  # test_single_token_sequence
    ([[]], [[5]], [[5]]),  # test_empty_sequence
    ([[1, 2, 3], [4, 5, 6]], [[1, 2, 7, 6], [4, 8, 6, 9]],
     [[1, 2, 7, P], [4, 8, P, P]]),  # test_multiple_mismatches
    ([[1, 2]], [[1, 2, 3]], [[1, 2, 3]]),  # test_parametrized_cases
    ([[1]], [[2, 3]], [[2, P]]),
    ([[1, 2], [3, 4]], [[1, 5, 6], [3, 4, 7]], [[1, 5, P], [3, 4, 7]]),
])
def test_greedy_cases(spec_tokens: list[list[int]], output_tokens: list[list[int]],
                      expected: list[list[int]]) -> None:
    """Ports test_perfect_match, test_early_mismatch, test_multiple_sequences,
    test_single_token_sequence, test_empty_sequence, test_multiple_mismatches and
    test_parametrized_cases (vLLM tests/v1/sample/test_rejection_sampler.py)."""
    assert torch.equal(greedy_batch(spec_tokens, output_tokens), torch.tensor(expected))


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("batch_size", [1, 4, 8])
def test_deterministic_when_seeded(k: int, batch_size: int) -> None:
    """Port of test_deterministic_when_seeded (vLLM tests/v1/sample/test_rejection_sampler.py):
    vocab 1000, n-gram drafts (q one-hot), target softmax(rand). Trimmed: 2 repetitions, not
    vLLM's 20 (a seeded call is a pure function of its inputs: two calls show it)."""
    vocab_size, n_rep = 1000, 2
    setup = torch.Generator().manual_seed(0)
    target = F.softmax(torch.rand(batch_size, k, vocab_size, generator=setup), -1)
    drafts = torch.randint(0, vocab_size, (batch_size, k), generator=setup)
    q = F.one_hot(drafts, vocab_size).float()
    # gsd convention: one generator per call, not one per request (vLLM's frac_seeded);
    # a generator with the same seed gives the same tokens for every request.
    results = [verify(target, q, drafts, generator=torch.Generator().manual_seed(7)).tokens
               for _ in range(n_rep)]
    assert all(torch.equal(r, results[0]) for r in results[1:])


def test_rejection_sampling_approximates_target_distribution() -> None:
    """Port of test_rejection_sampling_approximates_target_distribution (vLLM
    tests/v1/sample/test_rejection_sampler.py): vocab 10, k = 2, sample sizes 10 .. 100,000,
    the distance to the target falls at least 20 times faster than to 100 reference laws."""
    vocab_size, k = 10, 2
    generator = torch.Generator().manual_seed(0)
    draft_probs = F.softmax(torch.rand(vocab_size, generator=generator), -1)
    target_probs = F.softmax(torch.rand(vocab_size, generator=generator), -1)
    reference_probs = F.softmax(torch.rand(100, vocab_size, generator=generator), -1)
    to_target, to_reference = [], []
    for num_samples in [10, 100, 1_000, 10_000, 100_000]:
        estimate = estimate_pdf(draft_probs, target_probs, k, num_samples, generator)
        to_reference.append(torch.dist(reference_probs, estimate).item() / 100)
        to_target.append(torch.dist(target_probs, estimate).item())
    assert to_target[0] / to_target[-1] > 20 * to_reference[0] / to_reference[-1]


def estimate_pdf(draft_probs: torch.Tensor, target_probs: torch.Tensor, k: int,
                 num_samples: int, generator: torch.Generator) -> torch.Tensor:
    """vLLM's estimate_rejection_sampling_pdf: histogram density of the tokens emitted at the
    k draft positions (no bonus row: gsd draws nothing after k accepted drafts)."""
    vocab = draft_probs.numel()
    drafts = torch.multinomial(draft_probs, num_samples * k, replacement=True,
                               generator=generator).view(num_samples, k)
    q = draft_probs.expand(k, vocab)  # rows broadcast over the batch of drafts [N, k]
    p = target_probs.expand(k, vocab)
    tokens = verify(p, q, drafts, generator=generator).tokens[:, :-1].flatten()
    return torch.histogram(tokens.float(), bins=vocab, range=(0, vocab), density=True).hist


def masked_logits_case(target_logits: torch.Tensor, kept: list[list[int]], seed: int) -> None:
    """vLLM's _test_masked_logits: batch 100 x 3 drafts from softmax(rand) drafts; every emitted
    token lies in its row's kept set. gsd takes p after the mask (the sampler's top-k / top-p)."""
    num_tokens, vocab = target_logits.shape
    generator = torch.Generator().manual_seed(seed)
    keep = torch.zeros(num_tokens, vocab, dtype=torch.bool)
    for i, ids in enumerate(kept):
        keep[i, ids] = True
    p = torch.softmax(target_logits.masked_fill(~keep, -torch.inf), -1).view(100, 3, vocab)
    q = F.softmax(torch.rand(num_tokens, vocab, generator=generator), -1)
    drafts = torch.multinomial(q, 1, generator=generator).view(100, 3)
    tokens = verify(p, q.view(100, 3, vocab), drafts, generator=generator).tokens[:, :-1]
    emitted = tokens.flatten()
    for i in range(num_tokens):
        assert emitted[i] == PLACEHOLDER or bool(keep[i, emitted[i]])


@pytest.mark.parametrize("top_k", [1, 5, 99])
def test_top_k(top_k: int) -> None:
    """Port of test_top_k (vLLM tests/v1/sample/test_rejection_sampler.py): vocab 100, batch 100,
    3 drafts; uniform logits with +0.1 on a random top-k set."""
    vocab_size, num_tokens = 100, 300
    generator = torch.Generator().manual_seed(top_k)
    top_k_indices = torch.stack([torch.randperm(vocab_size, generator=generator)[:top_k]
                                 for _ in range(num_tokens)])
    logits = torch.zeros(num_tokens, vocab_size)
    logits.scatter_add_(1, top_k_indices, torch.full(top_k_indices.shape, 0.1))
    masked_logits_case(logits, top_k_indices.tolist(), top_k)


@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.99])
def test_top_p(top_p: float) -> None:
    """Port of test_top_p (vLLM tests/v1/sample/test_rejection_sampler.py): randn logits, the
    kept set of each row from its ascending sort and cumulative sum <= 1 - top_p, at least one."""
    vocab_size, num_tokens = 100, 300
    generator = torch.Generator().manual_seed(int(top_p * 100))
    logits = torch.randn(num_tokens, vocab_size, generator=generator)
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    top_p_mask = logits_sort.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
    top_p_mask[:, -1] = False
    kept = [logits_idx[i][~top_p_mask[i]].tolist() for i in range(num_tokens)]
    masked_logits_case(logits, kept, int(top_p * 100))


@pytest.mark.parametrize("batch_size", [1, 100])
@pytest.mark.parametrize("vocab_size", [100, 10000])
@pytest.mark.parametrize("max_spec_len", [1, 3])
@pytest.mark.parametrize("no_draft_probs", [True, False])
def test_sample_recovered_tokens(batch_size: int, vocab_size: int, max_spec_len: int,
                                 no_draft_probs: bool) -> None:
    """Port of test_sample_recovered_tokens (vLLM tests/v1/sample/test_rejection_sampler.py):
    the token drawn at a rejection against a native reference on the same randomness. vLLM's
    reference is an exponential race over max(p - q, 0) (p with the draft zeroed without draft
    probs); gsd draws by inverse CDF, so the reference here is norm((p - q)+) by a float64
    cumulative sum, and the rejection is forced with u = 1 - 2^-53 (rows with a(x) < 1).
    Trimmed: vocab sizes 100 and 10,000, without vLLM's 8192 (its Triton kernel's tile width;
    gsd has no tiles)."""
    num_tokens = batch_size * max_spec_len
    generator = torch.Generator().manual_seed(vocab_size + batch_size)
    draft_probs = F.softmax(torch.rand(num_tokens, vocab_size, generator=generator), -1)
    target_probs = F.softmax(torch.rand(num_tokens, vocab_size, generator=generator), -1)
    drafts = torch.multinomial(draft_probs, 1, generator=generator).squeeze(-1)
    q = F.one_hot(drafts, vocab_size).float() if no_draft_probs else draft_probs
    u = torch.rand(num_tokens, 1, generator=generator, dtype=torch.float64)
    tests = torch.full((num_tokens, 1), 1 - 2.0**-53, dtype=torch.float64)
    result = verify(target_probs.unsqueeze(1), q.unsqueeze(1), drafts.unsqueeze(1),
                    uniforms=torch.cat([tests, u], -1))
    rejected = result.num_accepted == 0
    # the residual from the float32 target_probs - q (verify's working dtype), summed in float64
    if no_draft_probs:  # p with the draft zeroed, as vLLM's reference builds it
        residual = target_probs.scatter(-1, drafts.unsqueeze(-1), 0.0)
    else:
        residual = (target_probs - q).clamp(min=0)
    cdf = residual.cumsum(-1, dtype=torch.float64)
    reference = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(-1)
    assert torch.equal(rejected, result.accept_probs[:, 0] < 1)  # u = 1 - 2^-53 rejects a < 1
    assert torch.equal(result.tokens[rejected, 0], reference[rejected])


@pytest.mark.parametrize("no_draft_probs", [True, False])
@pytest.mark.parametrize("vocab_size", [100, 8193, 10000, 151936])
def test_sample_recovered_tokens_vocab_boundary(vocab_size: int, no_draft_probs: bool) -> None:
    """Port of test_sample_recovered_tokens_vocab_boundary (vLLM
    tests/v1/sample/test_rejection_sampler.py): targets zero on the last 8192-wide tile (or
    one-hot on token 0 with the draft 0, an empty residual); every recovered id is in [0, V).
    gsd convention: an empty residual (p == q) draws from p, so those rows give token 0."""
    block_size, num_tokens = 8192, 6
    generator = torch.Generator().manual_seed(42)
    last_tile_start = (vocab_size // block_size) * block_size
    target_probs = torch.rand(num_tokens, vocab_size, generator=generator)
    if last_tile_start > 0:
        target_probs[:, last_tile_start:] = 0.0
    else:
        target_probs = torch.zeros_like(target_probs)
        target_probs[:, 0] = 1.0
    target_probs = target_probs / target_probs.sum(dim=-1, keepdim=True)
    draft_probs = F.softmax(torch.rand(num_tokens, vocab_size, generator=generator), -1)
    if last_tile_start == 0:
        drafts = torch.zeros(num_tokens, dtype=torch.int64)
    else:
        drafts = torch.randint(0, vocab_size, (num_tokens,), generator=generator)
    q = F.one_hot(drafts, vocab_size).float() if no_draft_probs else draft_probs
    u = torch.rand(num_tokens, 1, generator=generator, dtype=torch.float64)
    recovered = draw(token_residual(target_probs, q), u).squeeze(-1)  # the draw at a rejection
    assert bool((recovered >= 0).all()) and bool((recovered < vocab_size).all())
    if last_tile_start == 0 and no_draft_probs:
        assert bool((recovered == 0).all())


@pytest.mark.parametrize("draw_all", [True, False])
def test_synthetic_all_accepted_and_all_rejected(draw_all: bool) -> None:
    """Ports test_synthetic_all_accepted and test_synthetic_all_rejected (vLLM
    tests/v1/sample/test_rejection_sampler.py): spec [[1, 2], [3]], output [[10, 20, 50],
    [30, 40]]. vLLM forces rates 1 or 0; here p = q (a = 1 for every draft) or p one-hot on the
    output tokens (a = 0)."""
    spec_tokens, output_tokens = [[1, 2], [3]], [[10, 20, 50], [30, 40]]
    rows = []
    for drafts, outputs in zip(spec_tokens, output_tokens):
        q = one_hot(drafts, 100)
        p = torch.cat([q if draw_all else one_hot(outputs[:-1], 100), one_hot(outputs[-1:], 100)])
        tokens = verify(p, q, torch.tensor(drafts), generator=torch.Generator()).tokens
        rows.append(F.pad(tokens, (0, 3 - tokens.numel()), value=PLACEHOLDER))
    result = torch.stack(rows)
    if draw_all:
        assert torch.equal(result, torch.tensor([[1, 2, 50], [3, 40, P]]))
    else:
        assert bool((result[:, 0] != P).all()) and bool((result[:, 1:] == P).all())


def test_placeholder_draft_token_rejected_random() -> None:
    """Port of test_placeholder_draft_token_rejected_random (vLLM
    tests/v1/sample/test_rejection_sampler.py): vLLM rejects a -1 draft and samples a recovered
    token. gsd convention: a -1 draft is not a token id, and verify raises."""
    vocab_size = 100
    p = torch.softmax(torch.rand(4, vocab_size), -1)
    q = one_hot([1, vocab_size - 1, 0], vocab_size)
    with pytest.raises(ValueError, match="out of range"):
        verify(p, q, torch.tensor([1, vocab_size - 1, PLACEHOLDER]), generator=torch.Generator())


def test_recovered_law_is_the_normalised_residual() -> None:
    """The law behind test_sample_recovered_tokens (vLLM): the recovered token follows
    norm((p - q)+); gsd's exact residual law, and the one-step output law is p."""
    generator = torch.Generator().manual_seed(3)
    p = F.softmax(torch.rand(8, 64, generator=generator, dtype=torch.float64), -1)
    q = F.softmax(torch.rand(8, 64, generator=generator, dtype=torch.float64), -1)
    excess = (p - q).clamp(min=0)
    assert torch.allclose(residual_distribution(p, q), excess / excess.sum(-1, keepdim=True),
                          rtol=0, atol=1e-15)
    assert torch.allclose(output_distribution(p, q), p, rtol=0, atol=1e-15)
