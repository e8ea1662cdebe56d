"""SJD is lossless: its samples follow the exact joint distribution of AR sampling.

A tiny random LlamaForCausalLM with 3 allowed tokens generates N = 3 tokens, so the AR joint
over all 27 sequences is enumerated exactly (the product of the adapter's conditionals).
SJD's samples are compared with it by a chi-square test (PyTorch's recipe: cells with an
expected count below 5 pooled; significance 1e-3; fixed seeds, so the outcome is
deterministic), for windows 1, 2 and longer than the generation (capped by the loop at the
N - 1 tokens still needed before the bonus token), with CFG + top-k (zero-probability drafts),
and with repeat-row drafts. A negative control (verifying against the wrong q) must fail the
same test. The test catches gross errors; subtler ones (a q slightly flatter than the true one)
need far more samples, which is why test_decoding.py also checks q by construction.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("scipy.stats")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import joint_law  # noqa: E402

import gsd_lab.decoding as decoding  # noqa: E402
from gsd_lab.decoding import generate  # noqa: E402
from gsd_lab.models import CausalLMAdapter  # noqa: E402
from joint_law import chi_square_pvalue  # noqa: E402

ALLOWED = (1, 2, 3)
PROMPT = torch.tensor([0, 5])
NUM_TOKENS = 3
SAMPLES = 800
SIGNIFICANCE = 1e-3


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=6, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                         initializer_range=0.5)
    return LlamaForCausalLM(config).eval()


SEQUENCES = list(itertools.product(ALLOWED, repeat=NUM_TOKENS))


def exact_joint(adapter: CausalLMAdapter, uncond=None) -> np.ndarray:
    return joint_law.exact_joint(adapter, PROMPT, SEQUENCES, uncond)


def sample_counts(adapter, seed: int, uncond=None, **kwargs) -> np.ndarray:
    generator = torch.Generator().manual_seed(seed)
    index = {seq: i for i, seq in enumerate(SEQUENCES)}
    counts = np.zeros(len(SEQUENCES))
    for _ in range(SAMPLES):
        result = generate(adapter, PROMPT, num_tokens=NUM_TOKENS, method="sjd", generator=generator,
                          uncond_prompt_ids=uncond, **kwargs)
        counts[index[tuple(result.tokens.tolist())]] += 1
    return counts


CASES = {
    "window1": (dict(), dict(window=1), 11),
    "window2": (dict(), dict(window=2), 12),
    "window_longer": (dict(), dict(window=8), 13),
    "cfg_topk": (dict(cfg_scale=2.0, top_k=2, temperature=0.8), dict(window=8), 14),
    "repeat_row": (dict(row_length=1), dict(window=8, init="repeat_row"), 15),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sjd_matches_the_exact_ar_joint(model, case):
    adapter_kwargs, generate_kwargs, seed = CASES[case]
    adapter = CausalLMAdapter(model, ALLOWED, **adapter_kwargs)
    uncond = torch.tensor([4]) if "cfg_scale" in adapter_kwargs else None
    joint = exact_joint(adapter, uncond)
    assert joint.max() > 2.5 / len(SEQUENCES)  # far from uniform, so the test has power
    counts = sample_counts(adapter, seed, uncond, **generate_kwargs)
    assert chi_square_pvalue(counts, joint) > SIGNIFICANCE


@pytest.mark.parametrize("window", [1, 8])
def test_negative_control_wrong_q_fails(model, monkeypatch, window):
    """Verifying every draft as if it had been drawn from the target (q := p) accepts it
    always: the output then follows the drafts, and the same test must reject it."""
    real_verify = decoding.verify

    def wrong_q_verify(p, q, drafts, *args, **kwargs):
        return real_verify(p, p[..., : q.shape[-2], :], drafts, *args, **kwargs)

    monkeypatch.setattr(decoding, "verify", wrong_q_verify)
    adapter = CausalLMAdapter(model, ALLOWED)
    joint = exact_joint(adapter)
    counts = sample_counts(adapter, 21 + window, window=window)
    assert chi_square_pvalue(counts, joint) < SIGNIFICANCE


def test_ar_matches_the_exact_joint(model):
    """The reference itself: AR sampling through the same loop (L = 0 steps)."""
    adapter = CausalLMAdapter(model, ALLOWED)
    joint = exact_joint(adapter)
    generator = torch.Generator().manual_seed(31)
    index = {seq: i for i, seq in enumerate(SEQUENCES)}
    counts = np.zeros(len(SEQUENCES))
    for _ in range(SAMPLES):
        tokens = generate(adapter, PROMPT, num_tokens=NUM_TOKENS, method="ar", generator=generator).tokens
        counts[index[tuple(tokens.tolist())]] += 1
    assert chi_square_pvalue(counts, joint) > SIGNIFICANCE
