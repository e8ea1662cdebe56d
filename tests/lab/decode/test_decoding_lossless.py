"""SJD is lossless: its samples follow the exact joint distribution of AR sampling.

A tiny random LlamaForCausalLM with 3 allowed tokens generates N = 3 tokens, so the AR joint
over all 27 sequences is enumerated exactly (the product of the adapter's conditionals).
SJD's samples are compared with it by a chi-square test (PyTorch's recipe: cells with an
expected count below 5 pooled; significance 1e-3; fixed seeds, so the outcome is
deterministic), for windows 1, 2 and longer than the generation (capped by the loop at the
N - 1 tokens still needed before the bonus token), with CFG + top-k (zero-probability drafts),
and with repeat-row drafts; with token-wise and with block verification. A negative control (verifying against the wrong q) must fail the
same test. The test catches gross errors; subtler ones (a q slightly flatter than the true one)
need far more samples, which is why test_decoding.py also checks q by construction.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("scipy.stats")

import gsd_lab.decode.loop as decoding  # noqa: E402
from gsd_lab.experiments.lossless import (ALLOWED, SEQUENCES, chi_square_pvalue, exact_joint,  # noqa: E402
                                          sample_counts, tiny_model)
from gsd_lab.decode.methods import DecodingMethod  # noqa: E402
from gsd_lab.models import CausalLMAdapter  # noqa: E402

SAMPLES = 800
SIGNIFICANCE = 1e-3


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return tiny_model(0)


CASES = {
    "window1": (dict(), dict(window=1), 11),
    "window2": (dict(), dict(window=2), 12),
    "window_longer": (dict(), dict(window=8), 13),
    "cfg_topk": (dict(cfg_scale=2.0, top_k=2, temperature=0.8), dict(window=8), 14),
    "repeat_row": (dict(row_length=1), dict(window=8, init="repeat_row"), 15),
}


# Block verification with one draft is ``verify`` (tests/core/test_block_verification.py).
VERIFIED = [(case, "token") for case in CASES] + [(c, "block") for c in CASES if c != "window1"]


@pytest.mark.parametrize("case, verifier", VERIFIED)
def test_sjd_matches_the_exact_ar_joint(model, case, verifier):
    """Both verifiers: token by token (``gsd_core.verify``) and block verification
    (``gsd_core.verify_block``, proofs/14; seeds offset by 30)."""
    adapter_kwargs, generate_kwargs, seed = CASES[case]
    adapter = CausalLMAdapter(model, ALLOWED, **adapter_kwargs)
    uncond = torch.tensor([4]) if "cfg_scale" in adapter_kwargs else None
    joint = exact_joint(adapter, uncond)
    assert joint.max() > 2.5 / len(SEQUENCES)  # far from uniform, so the test has power
    method = DecodingMethod("sjd", verifier=verifier, **generate_kwargs)
    seed += 30 if verifier == "block" else 0
    counts = sample_counts(adapter, SAMPLES, seed, method, uncond)
    assert chi_square_pvalue(counts, joint) > SIGNIFICANCE


@pytest.mark.parametrize("window, verifier", [(1, "token"), (8, "token"), (8, "block")])
def test_negative_control_wrong_q_fails(model, monkeypatch, window, verifier):
    """Verifying every draft as if it had been drawn from the target (q := p) accepts it
    always: the output then follows the drafts, and the same test must reject it."""
    name = "verify" if verifier == "token" else "verify_block"
    real_verify = getattr(decoding, name)

    def wrong_q_verify(p, q, drafts, *args, **kwargs):
        return real_verify(p, p[..., : q.shape[-2], :], drafts, *args, **kwargs)

    monkeypatch.setattr(decoding, name, wrong_q_verify)
    adapter = CausalLMAdapter(model, ALLOWED)
    joint = exact_joint(adapter)
    method = DecodingMethod("sjd", window=window, verifier=verifier)
    counts = sample_counts(adapter, SAMPLES, 21 + window, method)
    assert chi_square_pvalue(counts, joint) < SIGNIFICANCE


def test_ar_matches_the_exact_joint(model):
    """The reference itself: AR sampling through the same loop (L = 0 steps)."""
    adapter = CausalLMAdapter(model, ALLOWED)
    counts = sample_counts(adapter, SAMPLES, 31, DecodingMethod("ar"))
    assert chi_square_pvalue(counts, exact_joint(adapter)) > SIGNIFICANCE
