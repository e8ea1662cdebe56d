"""The certified dial (proofs/11) in two more exact enumerations with test_budget_dial's harness:

- with **maximally coupled drafts** (``draft="maximal"``, MC-SJD; every measured dial run uses
  them): the coupling's step, "keep the previous draft d with probability
  min(1, q_new(d) / q_old(d)), else draw from norm((q_new - q_old)+)", is walked branch by branch
  with its exact probabilities, like every other draw; the joint law stays within B of the
  model's and every path's spend within B and equal to its recorded distortion (proofs/11,
  Claim 2 with proof 09's filtration). Negative control: a coupling that redraws from q_new
  instead of the residual (proofs/09, "What breaks it", 1) declares a q that is not the draft's
  law, and the same checks fail.
- the **saving is not bounded by B**: on a model that copies its first token (uniform over two
  tokens), window 3, fresh drafts always the first token, N = 12, the exact expected number of
  forward passes is 15/2 for SJD and 141/20 at B = 0.05: a saving of 9B, not "at most about B".
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

pytest.importorskip("transformers")
import test_budget_dial as dial  # noqa: E402

from gsd_lab.decode import coupling  # noqa: E402
from gsd_lab.decode.loop import generate  # noqa: E402
from gsd_lab.decode.methods import DecodingMethod  # noqa: E402
from gsd_lab.decode.methods import BudgetAcceptance
from gsd_lab.experiments.lossless import exact_joint  # noqa: E402

TOL = 1e-12

pytestmark = pytest.mark.usefixtures("one_thread")


def _normalised(weights: torch.Tensor) -> list[float]:
    w = weights.to(torch.float64)
    return (w / w.sum()).tolist()


def enumerated_coupling(chooser: dial.Chooser, *, wrong: bool = False):
    """``coupling.maximal_coupling`` with its randomness walked by ``chooser``: per row, keep the
    previous draft with probability min(1, q(d) / q_prev(d)) (never with no previous draft,
    a zero row), else draw from norm((q - q_prev)+). ``wrong``: redraw from q instead."""

    def maximal_coupling(previous, previous_q, q, generator):
        out = []
        for d, old, new in zip(previous.tolist(), previous_q, q):
            old, new = old.to(torch.float64), new.to(torch.float64)
            keep = 0.0 if float(old.sum()) == 0 else min(1.0, float(new[d] / old[d]))
            if chooser.choose([keep, 1 - keep]) == 0:
                out.append(d)
                continue
            residual = new if wrong or float(old.sum()) == 0 else (new - old).clamp_min(0)
            out.append(chooser.choose(_normalised(residual)))
        return torch.tensor(out, dtype=torch.long, device=q.device)

    return maximal_coupling


def enumerate_coupled(monkeypatch, adapter, method, *, wrong=False):
    """test_budget_dial's enumeration with the coupling's draws walked too."""

    def patch(mp, chooser):
        mp.setattr(coupling, "maximal_coupling", enumerated_coupling(chooser, wrong=wrong))

    return dial.enumerate_law(monkeypatch, adapter, method, patch=patch)


MODELS = {
    "context": (dial.context_table, "random", 2),
    "context-free": (dial.context_free_table, "repeat_row", 3),
}


@pytest.fixture(scope="module")
def models():
    out = {}
    for name, (table, init, window) in MODELS.items():
        adapter = dial.TableAdapter(dial.TableLM(table()), dial.ALLOWED, row_length=1)
        prompt = tuple(dial.PROMPT.tolist())
        joint = exact_joint(adapter, prompt=prompt, sequences=dial.SEQUENCES)
        out[name] = (adapter, joint, init, window)
    return out


@pytest.mark.parametrize("model", ["context", "context-free"])
def test_maximal_coupled_sjd_enumerates_to_the_ar_joint(models, monkeypatch, model):
    """The harness with the coupling walked: MC-SJD (and the dial at B = 0) give the AR joint."""
    adapter, joint, init, window = models[model]
    for rule in (None, BudgetAcceptance(budget=0.0)):
        method = DecodingMethod("sjd", window=window, init=init, draft="maximal", acceptance=rule)
        law, _books = enumerate_coupled(monkeypatch, adapter, method)
        assert dial.tv(law, joint) < TOL


@pytest.mark.parametrize("model", ["context", "context-free"])
@pytest.mark.parametrize("budget_value,policy,cap", dial.DIAL_CASES)
def test_coupled_dial_joint_law_within_the_budget_and_every_path_within_it(
    models, monkeypatch, model, budget_value, policy, cap
):
    adapter, joint, init, window = models[model]
    method = DecodingMethod("sjd", window=window, init=init, draft="maximal",
                            acceptance=BudgetAcceptance(budget=budget_value, policy=policy, cap=cap))
    law, books = enumerate_coupled(monkeypatch, adapter, method)
    dial.check_within_budget(law, joint, books, budget_value)


def test_a_coupling_that_breaks_c1_fails_the_joint_check(models, monkeypatch):
    """Negative control: redrawing from q_new instead of norm((q_new - q_old)+) makes the declared
    q wrong (proofs/09, item 1); at B = 0.05 the joint law then leaves the budget (B = 0: SJD's
    law is not even reproduced), though the books, which trust the declared q, stay within B."""
    adapter, joint, init, window = models["context-free"]
    for budget_value in (0.0, 0.05):
        method = DecodingMethod("sjd", window=window, init=init, draft="maximal",
                                acceptance=BudgetAcceptance(budget=budget_value))
        law, books = enumerate_coupled(monkeypatch, adapter, method, wrong=True)
        assert dial.tv(law, joint) > budget_value + 1e-3
        assert all(spent <= budget_value + TOL for spent, _ in books)


# --- the saving is not bounded by B -------------------------------------------------------------

COPY_TOKENS = 12


def copy_table(length: int) -> torch.Tensor:
    """Absolute position 2 (generated position 0): uniform over the two tokens; every later
    position copies the token before it exactly (the other token's logit is -inf)."""
    table = torch.full((length, 3, 3, 3), -40.0, dtype=torch.float64)
    table[..., 1:] = 0.0
    for position in range(3, length):
        for token, other in ((1, 2), (2, 1)):
            table[position, token, :, other] = -math.inf
    return table


def expected_nfe(monkeypatch, budget_value):
    model = dial.TableLM(copy_table(COPY_TOKENS + 8))
    adapter = dial.TableAdapter(model, dial.ALLOWED, row_length=1)
    chooser = dial.Chooser()
    dial.patch_randomness(monkeypatch, adapter, chooser)
    first = adapter.allowed_tokens[0]
    monkeypatch.setattr(  # fresh drafts: always the first token (a one-hot q, exact)
        adapter, "random_tokens",
        lambda positions, generator, *, respect_forced=True: first.repeat(positions.numel()),
    )
    rule = None if budget_value is None else BudgetAcceptance(budget=budget_value)
    method = DecodingMethod("sjd", window=3, acceptance=rule)
    mean, total, spends = 0.0, 0.0, []
    while True:
        result = generate(adapter, dial.PROMPT, method, num_tokens=COPY_TOKENS,
                          record_distortion=True, generator=torch.Generator())
        mean += chooser.weight * result.nfe
        total += chooser.weight
        spends.append(result.budget_spent)
        if not chooser.next():
            break
    assert abs(total - 1) < 1e-12
    return mean, spends


def test_a_tv_budget_can_save_more_than_b_forward_passes(monkeypatch):
    """Exact: if position 0 emits the drafted token (probability a) every later draft is right
    and 4 tokens come per pass (3 passes); otherwise every pass emits one token (12 passes).
    SJD: a = 1/2, E[NFE] = 15/2. The dial at B = 0.05 spends it all at position 0
    (T = 1/2 there): a = 1/2 + B, E[NFE] = 141/20, a saving of 9B."""
    budget_value = Fraction(1, 20)

    def by_hand(a: Fraction) -> Fraction:
        return a * 3 + (1 - a) * COPY_TOKENS

    assert by_hand(Fraction(1, 2)) == Fraction(15, 2)
    assert by_hand(Fraction(1, 2) + budget_value) == Fraction(141, 20)
    sjd, _ = expected_nfe(monkeypatch, None)
    dial, spends = expected_nfe(monkeypatch, float(budget_value))
    assert sjd == pytest.approx(15 / 2, abs=TOL)
    assert dial == pytest.approx(141 / 20, abs=TOL)
    assert all(spent <= float(budget_value) + TOL for spent in spends)
    saving = Fraction(15, 2) - Fraction(141, 20)
    assert saving == 9 * budget_value and saving > budget_value
    assert sjd - dial > 8 * float(budget_value)  # the measured saving, far above B
