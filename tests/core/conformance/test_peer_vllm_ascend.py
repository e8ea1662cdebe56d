"""Ports of vllm-ascend's ``tests/ut/sample/test_rejection_sampler.py``
(vllm-project/vllm-ascend at commit 05dd267b, ``TestAscendRejectionSampler``) to
``gsd_core.verify`` and ``gsd_core.verify_block``: same inputs, uniforms and assertions,
adapted to gsd's API.

vllm-ascend passes recovered and bonus token ids in from outside; gsd draws them from the
residual and the bonus row, so each port gives the bonus row one-hot on a bonus id inside the
vocabulary. The reduce-sampling (candidate subset) and entropy-verify cases have no gsd
counterpart and are not ported, nor is the test that the sampler keeps the placeholder
distribution (a vllm-ascend buffer; gsd has none).
"""

from __future__ import annotations

import pytest
import torch
from peers import PLACEHOLDER, one_hot

from gsd_core import residual_distribution, verify, verify_block


def test_rejection_greedy_sample_pytorch() -> None:
    """Port of test_rejection_greedy_sample_pytorch (vllm-ascend
    tests/ut/sample/test_rejection_sampler.py): drafts [10, 11] and [20, 21] against target
    argmax [10, 99] and [20, 22]; the first mismatch emits the argmax and ends the window."""
    vocab = 256
    out = []
    for drafts, argmax, bonus in (([10, 11], [10, 99], 100), ([20, 21], [20, 22], 200)):
        p = one_hot(argmax + [bonus], vocab)
        out.append(verify(p, one_hot(drafts, vocab), torch.tensor(drafts),
                          generator=torch.Generator()).tokens)
    assert out[0][0].item() == 10
    assert out[0][1].item() == 99
    assert out[1][0].item() == 20
    assert out[1][2].item() == PLACEHOLDER


def test_rejection_random_sample_pytorch() -> None:
    """Port of test_rejection_random_sample_pytorch (vllm-ascend
    tests/ut/sample/test_rejection_sampler.py), its first request: drafts [1, 0], uniforms
    0.7 and 0.6, a = min(1, 0.8 / 0.6) = 1 and min(1, 0.2 / 0.1) = 1: both accepted, then the
    bonus token (here the bonus row is one-hot on 3: vllm-ascend's bonus id 100 is outside V)."""
    q = torch.tensor([[0.0, 0.6, 0.0, 0.4], [0.1, 0.2, 0.3, 0.4]])
    p = torch.tensor([[0.0, 0.8, 0.0, 0.2], [0.2, 0.1, 0.3, 0.4], [0.0, 0.0, 0.0, 1.0]])
    uniforms = torch.tensor([0.7, 0.6, 0.5])
    tokens = verify(p, q, torch.tensor([1, 0]), uniforms=uniforms).tokens
    assert tokens[0].item() == 1
    assert tokens[1].item() == 0
    assert tokens[2].item() == 3


@pytest.mark.parametrize("window", [1, 3])
def test_rejection_random_sample_pytorch_rejects_placeholder(window: int) -> None:
    """Ports test_rejection_random_sample_pytorch_rejects_placeholder and
    test_rejection_random_sample_pytorch_rejects_all_placeholder_mtp3 (vllm-ascend
    tests/ut/sample/test_rejection_sampler.py): vllm-ascend rejects -1 drafts and emits the
    recovered token. gsd convention: a -1 draft is not a token id, and verify raises."""
    p = torch.tensor([[0.0, 0.0, 1.0]]).expand(window + 1, 3)
    q = torch.full((window, 3), 1 / 3)
    with pytest.raises(ValueError, match="out of range"):
        verify(p, q, torch.full((window,), PLACEHOLDER), uniforms=torch.zeros(window + 1))


def test_sample_recovered_tokens_pytorch_ngram() -> None:
    """Port of test_sample_recovered_tokens_pytorch_ngram (vllm-ascend
    tests/ut/sample/test_rejection_sampler.py): n-gram drafts 1 and 2 (q one-hot), targets
    [0.1, 0.2, 0.7] and [0.3, 0.3, 0.4]. vllm-ascend races fixed noise [0.1, 0.2, 0.7] and
    [0.5, 0.4, 0.1] over p with the draft zeroed and gets 0 and 1; gsd draws by inverse CDF, so
    the port asserts the law that race samples from, p with the draft zeroed, renormalised (0
    and 1 are in its support)."""
    p = torch.tensor([[0.1, 0.2, 0.7], [0.3, 0.3, 0.4]], dtype=torch.float64)
    q = one_hot([1, 2], 3).double()
    law = residual_distribution(p, q)
    expected = torch.tensor([[0.125, 0.0, 0.875], [0.5, 0.5, 0.0]], dtype=torch.float64)
    assert torch.allclose(law, expected, rtol=0, atol=1e-15)
    assert law[0, 0] > 0 and law[1, 1] > 0


def test_rejection_random_sample_block_verify_pytorch_standard() -> None:
    """Port of test_rejection_random_sample_block_verify_pytorch_standard (vllm-ascend
    tests/ut/sample/test_rejection_sampler.py) against ``verify_block``: request 0 drafts [1, 0]
    with uniforms 0.7, 0.6; request 1 draft [2] with uniform 0.5.

    Subscripts as in block_verification's docstring: p_i, q_i are rows i = 0, 1, .. of p and q,
    w_i the weight after i drafts (w_1 = min(1, 0.8 / 0.6) = 1, w_2 = min(1, w_1 0.1 / 0.2) =
    0.5), h_i and eta_i 1-based (eta_1, eta_2 = 0.7, 0.6). gsd convention: Sun et al.'s stop
    probabilities h_1 = 1 (w_1 = 1) and h_2 = w_2 = 0.5, tested by eta_i < h_i; vllm-ascend
    tests cumulative products of the ratios against cumulative products of the uniforms
    (1 >= 0.7, 0.5 >= 0.42) and keeps both drafts. Here eta_2 = 0.6 >= 0.5: tau = 1, and the
    token is drawn from norm((w_1 p_1 - q_1)_+), one-hot on token 3 ((p_1 - q_1)_+ is 0.1 on
    token 3, 0 elsewhere; vllm-ascend: 1, 0, bonus). Request 1 (L = 1, token-wise): 2, then
    the bonus."""
    q = torch.tensor([[0.0, 0.6, 0.0, 0.4], [0.2, 0.0, 0.3, 0.5]])
    p = torch.tensor([[0.0, 0.8, 0.0, 0.2], [0.1, 0.0, 0.3, 0.6], [1.0, 0.0, 0.0, 0.0]])
    first = verify_block(p, q, torch.tensor([1, 0]), uniforms=torch.tensor([0.7, 0.6, 0.5]))
    assert first.tokens.tolist() == [1, 3, PLACEHOLDER]
    assert torch.allclose(first.accept_probs, torch.tensor([1.0, 0.5]))
    p_second = torch.tensor([[0.0, 0.0, 0.9, 0.1], [0.0, 1.0, 0.0, 0.0]])
    second = verify_block(p_second, torch.tensor([[0.0, 0.0, 0.5, 0.5]]), torch.tensor([2]),
                          uniforms=torch.tensor([0.5, 0.5]))
    assert second.tokens.tolist() == [2, 1]
