"""SJD with block verification (``DecodingMethod(verifier="block")``, ``gsd_core.verify_block``)
through ``generate`` follows the exact AR joint (proofs/14), in the pattern of
test_decoding_lossless.py: a tiny random LlamaForCausalLM, 3 allowed tokens, N = 3, the AR joint
over all 27 sequences enumerated exactly, the decode's samples compared by a chi-square test
(significance 1e-3, fixed seeds). A grossly biased block verifier fails the same test; coupled
drafts are refused (their exactness is not proved)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("scipy.stats")

import gsd_lab.decode.loop as decoding  # noqa: E402
from gsd_lab.decode.batch import DecodeRequest, generate_batch  # noqa: E402
from gsd_lab.decode.methods import DecodingMethod  # noqa: E402
from gsd_lab.experiments.lossless import (ALLOWED, SEQUENCES, chi_square_pvalue,  # noqa: E402
                                          exact_joint, sample_counts, tiny_model)
from gsd_lab.models import CausalLMAdapter  # noqa: E402

SAMPLES = 800
SIGNIFICANCE = 1e-3

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return tiny_model(0)


CASES = {
    "window2": (dict(), dict(window=2), 41),
    "window_longer": (dict(), dict(window=8), 42),
    "cfg_topk": (dict(cfg_scale=2.0, top_k=2, temperature=0.8), dict(window=8), 43),
    "repeat_row": (dict(row_length=1), dict(window=8, init="repeat_row"), 44),
}


@pytest.mark.parametrize("case", list(CASES))
def test_block_sjd_matches_the_exact_ar_joint(model, case):
    adapter_kwargs, method_kwargs, seed = CASES[case]
    adapter = CausalLMAdapter(model, ALLOWED, **adapter_kwargs)
    uncond = torch.tensor([4]) if "cfg_scale" in adapter_kwargs else None
    joint = exact_joint(adapter, uncond)
    assert joint.max() > 2.5 / len(SEQUENCES)  # far from uniform, so the test has power
    method = DecodingMethod("sjd", verifier="block", **method_kwargs)
    counts = sample_counts(adapter, SAMPLES, seed, method, uncond)
    assert chi_square_pvalue(counts, joint) > SIGNIFICANCE


def test_a_biased_block_verifier_fails_the_same_test(model, monkeypatch):
    """Block verification told q := p accepts every draft: the output follows the drafts."""
    real = decoding.verify_block

    def wrong_q(p, q, drafts, **kwargs):
        return real(p, p[..., : q.shape[-2], :], drafts, **kwargs)

    monkeypatch.setattr(decoding, "verify_block", wrong_q)
    adapter = CausalLMAdapter(model, ALLOWED)
    counts = sample_counts(adapter, SAMPLES, 45, DecodingMethod("sjd", window=8, verifier="block"))
    assert chi_square_pvalue(counts, exact_joint(adapter)) < SIGNIFICANCE


def test_block_records_zero_distortion_and_at_least_one_token_per_forward(model):
    adapter = CausalLMAdapter(model, ALLOWED)
    result = decoding.generate(adapter, torch.tensor([1, 2]),
                               DecodingMethod("sjd", window=8, verifier="block"), num_tokens=3,
                               generator=torch.Generator().manual_seed(0), record_distortion=True)
    assert result.distortion.abs().max() <= 1e-12
    assert result.tokens.numel() == sum(result.accepted) + result.nfe


def test_block_verifier_is_refused_where_it_is_not_proved(model):
    for kwargs in (dict(draft="maximal"), dict(draft="gumbel"), dict(acceptance_scale=2.0),
                   dict(relaxation_delta=0.1)):
        with pytest.raises(ValueError, match="block"):
            DecodingMethod("sjd", verifier="block", **kwargs)
    with pytest.raises(ValueError, match="block"):
        DecodingMethod("gsd", clusters="dynamic", group_size=3, verifier="block")
    with pytest.raises(ValueError, match="verifier"):
        DecodingMethod("sjd", verifier="joint")
    adapter = CausalLMAdapter(model, ALLOWED)
    request = DecodeRequest(torch.tensor([1, 2]), DecodingMethod("sjd", verifier="block"), 3)
    with pytest.raises(ValueError, match="one image at a time"):
        generate_batch(adapter, [request])


def test_the_token_verifier_keeps_the_method_key():
    assert "verifier" not in DecodingMethod("sjd").to_dict()
    block = DecodingMethod("sjd", verifier="block")
    assert DecodingMethod.from_dict(block.to_dict()) == block
