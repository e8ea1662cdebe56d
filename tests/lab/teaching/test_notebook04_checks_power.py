"""Power of notebook 04's decoder-level checked cell, without running the notebook.

The cell (section "Is SJD lossless through the decoding loop?") prints the verdicts of
``lossless.check_joint`` (SJD through ``generate`` against AR's exact joint law; a lossy control)
and ``lossless.check_first_token`` (GSD through ``generate``: the first token against its exact
one-step law). Here the same calls, with the notebook's parameters (``decoder_check_samples``
1000, ``decoder_check_seed`` 0), run against mutated decoders, each wrapping the ``verify`` the
loop calls (``gsd_lab.decode.loop.verify``):

- a wrong cluster mass (the credited p(C) leaves out the drafted token),
- a wrong residual (after a rejection, a draw from p instead of norm((p - q)+)),
- an off-by-one acceptance (the first rejected draft is kept, and the emitted token follows it),
must each turn a printed verdict False (so nbval fails), while
- another seed (another random stream)
leaves every verdict True. A full nbval run of notebook 04 per mutant would decode the
stand-in's tables each time (minutes), so the cell's check functions are run directly, as
tests/lab/teaching/test_notebook_checks_power.py does for notebook 05. The other checked cells of 04
print exact invariants of the tables (AR's NFE, the acceptance measures' order, lossless rows
at distortion and W1 zero, re-decoded records equal to the stored ones); they guard the
accounting and the records, not the verification rule.
"""

from __future__ import annotations

import pytest
import torch

from gsd_core import VerifyResult
from gsd_core.rules import window_rule
from gsd_lab.experiments import lossless
from gsd_lab.decode.methods import DecodingMethod, ClusterAcceptance

SAMPLES, SEED = 1000, 0  # notebook 04's decoder_check_samples and decoder_check_seed


def cell_verdicts(which: tuple[str, ...], seed: int = SEED) -> dict[str, bool]:
    """The verdicts of notebook 04's decoder cell named in ``which`` (the same calls, the same
    parameters): "sjd", "sjd_repeat", "gsd_control" (check_joint), "gsd_window",
    "gsd_bins_cluster" (check_first_token)."""
    calls = {
        "sjd": lambda: lossless.check_joint("SJD, window 2", SAMPLES, seed,
                                            method=DecodingMethod("sjd", window=2)),
        "sjd_repeat": lambda: lossless.check_joint(
            "SJD, window 2, drafts repeat the previous token", SAMPLES, seed + 2,
            method=DecodingMethod("sjd", window=2, init="repeat_row")),
        "gsd_control": lambda: lossless.check_joint(
            "GSD, one rank bin of the 3 tokens (lossy)", SAMPLES, seed + 1, lossless_expected=False,
            method=DecodingMethod("gsd", acceptance=ClusterAcceptance(clusters="rank-binned", group_size=3), window=2)),
        "gsd_window": lambda: lossless.check_first_token(
            "GSD, dynamic window of 2 ranks (no filters)", SAMPLES, seed + 3,
            method=DecodingMethod("gsd", acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=2), window=2)),
        "gsd_bins_cluster": lambda: lossless.check_first_token(
            "GSD, rank bins of 2, cluster-exact residual", SAMPLES, seed + 4,
            method=DecodingMethod("gsd", acceptance=ClusterAcceptance(clusters="rank-binned", group_size=2), window=2,
                                  residual="cluster")),
    }
    return {name: calls[name]().passed for name in which}


class Mutant:
    """A rule wrapping ``base`` with one change: "mass" (the credited cluster mass leaves out the
    drafted token: p(C) - p(x)) or "residual" (resample from p)."""

    def __init__(self, base, change: str):
        self.base, self.change = base, change

    def masses(self, p, q, x):
        credited, charged = self.base.masses(p, q, x)
        if self.change == "mass":
            credited = credited - p.gather(-1, x)
        return credited, charged

    def residual_weights(self, p, q):
        return p.clone() if self.change == "residual" else self.base.residual_weights(p, q)


def _off_by_one(real_verify):
    """verify whose accepted count is one too many: the first rejected draft d_a is committed,
    and the token verify emitted there moves one position on."""
    def mutant(p, q, drafts, rule=None, **kwargs):
        result = real_verify(p, q, drafts, rule, **kwargs)
        a = int(result.num_accepted)
        if a >= drafts.shape[-1]:
            return result
        tokens = result.tokens.clone()
        tokens[a + 1], tokens[a] = result.tokens[a], drafts[a]
        return VerifyResult(result.num_accepted + 1, tokens, result.num_emitted + 1,
                            result.accept_probs)
    return mutant


def apply_mutation(monkeypatch, name: str) -> None:
    import gsd_lab.decode.loop as decoding

    real = decoding.verify
    if name in ("mass", "residual"):
        monkeypatch.setattr(decoding, "verify", lambda p, q, drafts, rule=None, **kwargs:
                            real(p, q, drafts, Mutant(window_rule(rule), name), **kwargs))
    elif name == "off_by_one":
        monkeypatch.setattr(decoding, "verify", _off_by_one(real))
    else:
        raise ValueError(name)


def test_first_token_law_is_the_averaged_one_step_law():
    """SD's first token is p(. | prompt) exactly; one rank bin holding the three tokens accepts
    every draft, so its first token is the uniform draft."""
    from gsd_core import SD, RankBinnedClusters
    from gsd_lab.models import CausalLMAdapter

    adapter = CausalLMAdapter(lossless.tiny_model(), lossless.ALLOWED,
                              row_length=lossless.ROW_LENGTH)
    prompt = torch.tensor(lossless.PROMPT)
    adapter.start(prompt)
    p0 = adapter.forward(prompt, num_rows=1)[0][list(lossless.ALLOWED)].numpy()
    assert abs(lossless.first_token_law(adapter, SD()) - p0).max() < 1e-15
    everything = lossless.first_token_law(adapter, RankBinnedClusters(3))
    assert abs(everything - 1 / 3).max() < 1e-15


@pytest.mark.slow  # 3000 decodes of the tiny model: about 15 s on an idle core
def test_first_token_checks_pass_on_the_real_decoder_and_another_seed():
    which = ("gsd_window", "gsd_bins_cluster")
    assert cell_verdicts(which) == {name: True for name in which}
    assert cell_verdicts(("gsd_window",), seed=SEED + 100) == {"gsd_window": True}


@pytest.mark.slow  # 1000 decodes each
@pytest.mark.parametrize("mutation, expect_fail", [
    ("mass", "gsd_window"),
    ("residual", "sjd_repeat"),
    ("off_by_one", "sjd"),
    ("off_by_one", "gsd_window"),
])
def test_a_checked_verdict_fails_on_a_wrong_decoder(monkeypatch, mutation, expect_fail):
    apply_mutation(monkeypatch, mutation)
    assert cell_verdicts((expect_fail,)) == {expect_fail: False}
