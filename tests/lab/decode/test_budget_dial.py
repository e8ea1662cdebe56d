"""The certified dial (gsd_lab.decode.budget, proofs/11): the exact joint law of ``generate`` on a tiny
model, by enumerating every branch of its randomness.

The model is test_coupled_drafts_lossless's lookup table over two tokens. ``generate`` runs as it
is; only its random draws are replaced by a chooser that walks every outcome with its exact
probability: the fresh random drafts (uniform over the two tokens), the independent Jacobi
re-drafts (a draw from the row), the L = 0 step's draw from p, and ``verify`` (the accepted count
n with P(n = k) = a_0 .. a_{k-1} (1 - a_k), then the residual's or the bonus row's token). Summing
the branches gives the decoder's joint law over the 2^4 sequences exactly (float64); it is
compared with the AR joint (``gsd_lab.experiments.lossless.exact_joint``). On every branch the
dial's spending is checked against the exact per-token distortions ``generate`` records.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
from test_coupled_drafts_lossless import TableAdapter, TableLM, context_free_table, context_table

from gsd_core import VerifyResult
from gsd_core.rules import mass_ratio
from gsd_lab.decode import budget, coupling
from gsd_lab.decode import loop as decoding
from gsd_lab.decode.loop import generate
from gsd_lab.decode.methods import DecodingMethod, BudgetAcceptance, RelaxationAcceptance
from gsd_lab.experiments.lossless import exact_joint

ALLOWED = (1, 2)
PROMPT = torch.tensor([0, 0])
NUM_TOKENS = 4
SEQUENCES = list(itertools.product(ALLOWED, repeat=NUM_TOKENS))
TOL = 1e-12

pytestmark = pytest.mark.usefixtures("one_thread")


class Chooser:
    """Replays a script of choices and extends it with the first possible outcome; ``next``
    moves to the next branch (an odometer over the choice tree). ``weight``: the branch's
    probability, the product of its choices' probabilities."""

    def __init__(self) -> None:
        self.script: list[int] = []
        self.options: list[list[float]] = []
        self.at, self.weight = 0, 1.0

    def choose(self, probs: list[float]) -> int:
        if self.at == len(self.script):
            self.script.append(next(i for i, w in enumerate(probs) if w > 0))
            self.options.append(probs)
        k = self.script[self.at]
        self.weight *= probs[k]
        self.at += 1
        return k

    def next(self) -> bool:
        while self.script:
            k, probs = self.script.pop(), self.options.pop()
            later = [i for i in range(k + 1, len(probs)) if probs[i] > 0]
            if later:
                self.script.append(later[0])
                self.options.append(probs)
                self.at, self.weight = 0, 1.0
                return True
        return False


def _normalised(weights: torch.Tensor) -> list[float]:
    w = weights.to(torch.float64)
    return (w / w.sum()).tolist()


def patch_randomness(monkeypatch, adapter, chooser: Chooser) -> None:
    def draw(weights, uniform):
        rows = weights.reshape(-1, weights.shape[-1])
        picks = [chooser.choose(_normalised(row)) for row in rows]
        return torch.tensor(picks, dtype=torch.long, device=weights.device).view(
            *weights.shape[:-1], 1
        )

    def random_tokens(positions, generator, *, respect_forced=True):
        allowed = adapter.allowed_tokens
        return allowed[
            [
                chooser.choose([1 / allowed.numel()] * allowed.numel())
                for _ in range(positions.numel())
            ]
        ]

    def verify(p, q, drafts, rule, *, generator=None, validate=True, support=None):
        window = q.shape[0]
        accept = mass_ratio(
            *rule.masses(p[:window].to(torch.float64), q, drafts.unsqueeze(-1))
        ).squeeze(-1)
        a = accept.tolist()
        probs, run = [], 1.0
        for k in range(window):
            probs.append(run * (1 - a[k]))
            run *= a[k]
        probs.append(run)
        n = chooser.choose(probs)
        if n < window:
            weights = rule.residual_weights(p[n : n + 1].to(torch.float64), q[n : n + 1])[0]
        else:
            weights = p[window]
        token = chooser.choose(_normalised(weights))
        tokens = torch.full((window + 1,), -1, dtype=torch.long)
        tokens[:n] = drafts[:n]
        tokens[n] = token
        return VerifyResult(torch.tensor(n), tokens, torch.tensor(n + 1), accept)

    monkeypatch.setattr(decoding, "draw", draw)
    monkeypatch.setattr(coupling, "draw", draw)
    monkeypatch.setattr(decoding, "verify", verify)
    monkeypatch.setattr(adapter, "random_tokens", random_tokens)


def enumerate_law(
    monkeypatch, adapter, method: DecodingMethod, patch=None
) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """The decoder's exact joint law over SEQUENCES and, per branch, (spent, summed distortion).
    ``patch(monkeypatch, chooser)``: more draws to walk (test_budget_dial_exact's coupling)."""
    chooser = Chooser()
    patch_randomness(monkeypatch, adapter, chooser)
    if patch is not None:
        patch(monkeypatch, chooser)
    index = {seq: i for i, seq in enumerate(SEQUENCES)}
    law, books = np.zeros(len(SEQUENCES)), []
    while True:
        result = generate(
            adapter,
            PROMPT,
            method,
            num_tokens=NUM_TOKENS,
            record_distortion=True,
            generator=torch.Generator(),
        )
        law[index[tuple(result.tokens.tolist())]] += chooser.weight
        books.append((result.budget_spent, float(result.distortion.sum())))
        if not chooser.next():
            break
    assert abs(law.sum() - 1) < 1e-9  # every branch was walked once
    return law, books


@pytest.fixture(scope="module")
def models():
    out = {}
    for name, table in (("context", context_table), ("context-free", context_free_table)):
        adapter = TableAdapter(TableLM(table()), ALLOWED, row_length=1)
        out[name] = (
            adapter,
            exact_joint(adapter, prompt=tuple(PROMPT.tolist()), sequences=SEQUENCES),
        )
    return out


def tv(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a - b).sum())


def test_the_enumeration_gives_sjd_s_joint_law_exactly(models, monkeypatch):
    """The harness itself: SJD (and the dial at B = 0) reproduce the AR joint to 1e-12."""
    adapter, joint = models["context"]
    for method in (DecodingMethod("sjd", window=2), DecodingMethod("sjd", window=2, acceptance=BudgetAcceptance(budget=0.0))):
        law, _books = enumerate_law(monkeypatch, adapter, method)
        assert tv(law, joint) < TOL


DIAL_CASES = [(0.05, "cap", 1.0), (0.3, "cap", 0.1), (0.35, "sure", 1.0), (1.0, "cap", 1.0)]


@pytest.mark.parametrize("model", ["context", "context-free"])
@pytest.mark.parametrize("budget_value,policy,cap", DIAL_CASES)
def test_joint_law_within_the_budget_and_every_path_within_it(
    models, monkeypatch, model, budget_value, policy, cap
):
    adapter, joint = models[model]
    method = DecodingMethod(
        "sjd", window=2, acceptance=BudgetAcceptance(budget=budget_value, policy=policy, cap=cap))
    law, books = enumerate_law(monkeypatch, adapter, method)
    check_within_budget(law, joint, books, budget_value)


def check_within_budget(law, joint, books, budget_value) -> None:
    """Joint TV within B; on every path spent within B and equal to the emitted tokens' exact
    distortions; below B = 1 the law moved (the dial spends)."""
    assert tv(law, joint) <= budget_value + TOL
    for spent, distortion in books:
        assert spent <= budget_value + TOL
        assert spent == pytest.approx(distortion, abs=1e-12)
    if budget_value < 1:
        assert tv(law, joint) > 0


def test_the_budget_buys_distortion_where_plain_relaxation_exceeds_it(models, monkeypatch):
    """The relaxation with the same per-token delta but no total exceeds the total B on some
    path (its distortions add up along the sequence), which the dial never does."""
    adapter, _joint = models["context"]
    _law, books = enumerate_law(
        monkeypatch, adapter, DecodingMethod("sjd", window=2, acceptance=RelaxationAcceptance(delta=0.1))
    )
    assert max(distortion for _, distortion in books) > 0.1 + 1e-3


def _overspending(totals, left, policy, cap, forced=None):
    """A wrong rule: every position of a window may use what was left before the window."""
    deltas = [max(0.0, min(cap, left))] * len(totals)
    return deltas, [min(d, t) for d, t in zip(deltas, totals)]


def _not_releasing(self, accepted):
    """A wrong book: the positions after the stop are charged too."""
    charged = sum(self._spends)
    self.spent += charged
    self._spends = []
    return charged


def _rejection_free(self, accepted):
    """A wrong book: the rejected position's resampled token is not charged."""
    charged = sum(self._spends[:accepted])
    self.spent += charged
    self._spends = []
    return charged


@pytest.mark.parametrize(
    "mutant,cap", [("overspending", 1.0), ("not releasing", 0.1), ("rejection free", 0.1)]
)
def test_wrong_allowance_rules_fail_the_same_checks(models, monkeypatch, mutant, cap):
    """Each wrong rule breaks a per-path check of the test above on some branch (the cap chosen
    so that the branch exists: a window whose positions share the budget). The joint check
    alone has no power here: the overspending rule's paths spend up to 0.6, yet its joint TV
    (0.11, measured) stays below B = 0.3; the bound is loose on this model."""
    adapter, _joint = models["context"]
    if mutant == "overspending":
        monkeypatch.setattr(budget, "allowances", _overspending)
    else:
        monkeypatch.setattr(
            budget.BudgetDial,
            "charge",
            _not_releasing if mutant == "not releasing" else _rejection_free,
        )
    method = DecodingMethod("sjd", window=2, acceptance=BudgetAcceptance(budget=0.3, policy="cap", cap=cap))
    _law, books = enumerate_law(monkeypatch, adapter, method)
    within = all(
        spent <= 0.3 + TOL and spent == pytest.approx(d, abs=1e-12) and d <= 0.3 + TOL
        for spent, d in books
    )
    assert not within


def test_budget_validation():
    with pytest.raises(ValueError, match="budget"):
        DecodingMethod("sjd", acceptance=BudgetAcceptance(budget=-1.0))
    with pytest.raises(ValueError, match="budget measure"):
        DecodingMethod("sjd", acceptance=BudgetAcceptance(budget=1.0, measure="kl"))
    with pytest.raises(ValueError, match="replaces SJD"):
        DecodingMethod("gsd", acceptance=BudgetAcceptance(budget=1.0))
    method = DecodingMethod("sjd", acceptance=BudgetAcceptance(budget=2, policy="sure"))
    assert DecodingMethod.from_dict(method.to_dict()) == method
    assert DecodingMethod("sjd").to_dict()["acceptance"] == {"rule": "sd"}


def test_allowances_by_hand():
    assert budget.allowances([0.2, 0.5, 0.1], 0.4, "cap", 1.0) == ([0.4, 0.2, 0.0], [0.2, 0.2, 0.0])
    deltas, spends = budget.allowances([0.2, 0.5, 0.1], 0.4, "cap", 0.15)
    assert deltas == pytest.approx([0.15, 0.15, 0.1]) and spends == pytest.approx([0.15, 0.15, 0.1])
    assert budget.allowances([0.2, 0.5, 0.1], 0.4, "sure", 1.0) == (
        [0.2, 0.0, 0.1],
        [0.2, 0.0, 0.1],
    )
    # a forced position is allotted 0 and spends 0; the next one gets what it would have spent
    forced = [False, True, False]
    assert budget.allowances([0.2, 0.5, 0.1], 0.4, "cap", 1.0, forced) == (
        [0.4, 0.0, 0.2],
        [0.2, 0.0, 0.1],
    )


def test_cli_budget_flags(capsys):
    """--budget on the tiny model: the certified spend is reported and within B; a bad flag
    combination is refused before any model loads."""
    import json

    from gsd_lab.cli import main

    args = [
        "generate",
        "--model",
        "tiny-random",
        "--class",
        "1",
        "--seed",
        "3",
        "--method",
        "sjd",
        "--json",
        "--threads",
        "1",
        "--budget",
        "0.5",
        "--budget-policy",
        "sure",
        "--budget-cap",
        "0.2",
    ]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["acceptance"] == {
        "rule": "budget", "budget": 0.5, "measure": "tv", "policy": "sure", "cap": 0.2, "k": 16
    }
    assert 0 < report["budget_spent"] <= 0.5
    with pytest.raises(SystemExit):
        main(
            [
                "generate",
                "--model",
                "tiny-random",
                "--class",
                "1",
                "--method",
                "gsd",
                "--budget",
                "0.5",
            ]
        )
    assert "replaces SJD" in capsys.readouterr().err


def _row_end_model():
    """A tiny random Llama whose adapter forces token 45 (no image code) at the end of every row
    of 6: with the release preset the fresh drafts there are random codes (T = 1)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from gsd_lab.models import CausalLMAdapter

    class RowEndAdapter(CausalLMAdapter):
        def forced_tokens(self, generated_positions):
            return torch.where((generated_positions + 1) % 6 == 0, 45, -1)

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=48, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         initializer_range=0.3)
    model = LlamaForCausalLM(config).eval()
    return RowEndAdapter(model, list(range(2, 42)), top_k=12, row_length=6,
                         compute_dtype=torch.float64)


def test_a_forced_position_spends_nothing_under_the_release_preset(monkeypatch):
    """With random drafts at row ends (preset "release") the forced token is emitted there
    whatever the rule does (its law is p, distortion 0), so the dial allots it 0: every decode
    spends exactly its recorded distortion. Negative control: allotting forced positions as any
    other (the former rule) charges more than the emitted tokens' distortion."""
    adapter = _row_end_model()
    method = DecodingMethod("sjd", window=15, preset="release", acceptance=BudgetAcceptance(budget=6.0, cap=1.0))

    def books() -> list[tuple[float, float]]:
        out = []
        for seed in range(4):
            result = generate(adapter, torch.tensor([0, 44, 3]), method, num_tokens=60,
                              record_distortion=True, generator=torch.Generator().manual_seed(seed))
            out.append((result.budget_spent, float(result.distortion.sum())))
        return out

    for spent, distortion in books():
        assert 0 < spent <= 6.0 + TOL
        assert spent == pytest.approx(distortion, abs=1e-12)
    monkeypatch.setattr(decoding.DecodeLoop, "_random_forced_rows", lambda self: None)
    assert any(spent > distortion + 0.1 for spent, distortion in books())


def test_the_dial_refuses_forced_flags_that_are_not_a_bool_vector():
    """Forced-token ids (-1 where free) passed for the flags would mark every free position as
    forced: refused by dtype; a short flag vector by shape."""
    p = torch.full((3, 4), 0.25, dtype=torch.float64)
    q = torch.tensor([[0.7, 0.1, 0.1, 0.1]] * 2, dtype=torch.float64)
    dial = budget.BudgetDial(0.5)
    with pytest.raises(ValueError, match="forced must be a bool"):
        dial.step(p, q, torch.tensor([-1, 3]))
    with pytest.raises(ValueError, match="forced must be a bool"):
        dial.step(p, q, torch.tensor([False]))
    assert dial.step(p, q, torch.tensor([False, True])) is not None  # the accepted form
