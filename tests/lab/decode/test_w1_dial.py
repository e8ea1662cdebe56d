"""The W1 dial and the transport relaxation in decoding (gsd_lab.decode.budget measure "w1",
gsd_lab.decode.planned, proofs/13): the exact joint law of ``generate`` on a tiny model with
content, by enumerating every branch of its randomness (test_budget_dial's harness).

The model is test_budget_dial's two-token table; its codes decode to the content 0 and D_12
(d(1, 2) = D_12), so a sequence's additive content cost to another is D_12 times their Hamming
distance, and the joint W1 between the decoder's law and the AR law is POT's ``ot.emd2`` over the
2^4 sequences with that cost. That joint W1 stays within B on these two models is a measured fact
about them: per-path budgets do not bound it in general (proofs/13, the copy-model counterexample
at the end of this file).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
ot = pytest.importorskip("ot")
from test_budget_dial import (
    ALLOWED,
    NUM_TOKENS,
    PROMPT,
    SEQUENCES,
    Chooser,
    TableAdapter,
    TableLM,
    context_free_table,
    context_table,
    patch_randomness,
)

from gsd_lab.decode import budget
from gsd_lab.decode.loop import generate
from gsd_lab.decode.methods import AmplifyAcceptance, BudgetAcceptance, DecodingMethod, TransportAcceptance
from gsd_lab.experiments.lossless import exact_joint

D_12 = 0.7
TOL = 1e-9

pytestmark = pytest.mark.usefixtures("one_thread")


class ContentTableAdapter(TableAdapter):
    def code_content(self) -> torch.Tensor:
        return torch.tensor([[0.0], [D_12]], dtype=torch.float64)


@pytest.fixture(scope="module")
def models():
    out = {}
    for name, table in (("context", context_table), ("context-free", context_free_table)):
        adapter = ContentTableAdapter(TableLM(table()), ALLOWED, row_length=1)
        out[name] = (
            adapter,
            exact_joint(adapter, prompt=tuple(PROMPT.tolist()), sequences=SEQUENCES),
        )
    return out


def joint_w1(a: np.ndarray, b: np.ndarray) -> float:
    """W1 between two laws over SEQUENCES for the additive per-position content cost."""
    seqs = np.array(SEQUENCES)
    cost = D_12 * (seqs[:, None, :] != seqs[None, :, :]).sum(-1).astype(np.float64)
    return float(ot.emd2(a / a.sum(), b / b.sum(), cost))


def enumerate_w1(monkeypatch, adapter, method: DecodingMethod, *, record_w1: bool = True):
    """The decoder's exact joint law and, per branch, (spent, summed exact W1, summed TV)."""
    chooser = Chooser()
    patch_randomness(monkeypatch, adapter, chooser)
    index = {seq: i for i, seq in enumerate(SEQUENCES)}
    law, books = np.zeros(len(SEQUENCES)), []
    while True:
        result = generate(
            adapter,
            PROMPT,
            method,
            num_tokens=NUM_TOKENS,
            record_distortion=True,
            record_w1=record_w1,
            w1_draws=None,
            generator=torch.Generator(),
        )
        law[index[tuple(result.tokens.tolist())]] += chooser.weight
        w1 = float(result.w1.tokens.sum()) if record_w1 else float("nan")
        books.append((result.budget_spent, w1, float(result.distortion.sum())))
        if not chooser.next():
            break
    assert abs(law.sum() - 1) < 1e-9
    return law, books


@pytest.mark.parametrize("model", ["context", "context-free"])
@pytest.mark.parametrize(
    "budget_value,policy,cap",
    [(0.05, "cap", 1.0), (0.2, "cap", 0.07), (0.25, "sure", 1.0), (0.7, "cap", 1.0)],
)
def test_w1_dial_joint_law_within_the_budget(models, monkeypatch, model, budget_value, policy, cap):
    adapter, joint = models[model]
    method = DecodingMethod(
        "sjd",
        window=2,
        acceptance=BudgetAcceptance(budget=budget_value, measure="w1", policy=policy, cap=cap, k=1),
    )
    law, books = enumerate_w1(monkeypatch, adapter, method)
    # a measured fact of this model (proofs/13 Claim 2: not implied in general); the per-path
    # checks below are the certificate
    assert joint_w1(law, joint) <= budget_value + TOL
    for spent, w1, tv in books:
        assert spent <= budget_value + TOL
        # two codes: the plan is optimal, W1(r, p) = its cost = D_12 TV(r, p), token by token
        assert spent == pytest.approx(w1, abs=1e-12)
        assert w1 == pytest.approx(D_12 * tv, abs=1e-12)
    assert max(spent for spent, _, _ in books) > 0  # the dial spends
    if model == "context":
        assert joint_w1(law, joint) > 0  # and the law moved (the context-free one can stay)


def test_w1_dial_at_zero_is_sjd_and_lossless(models, monkeypatch):
    adapter, joint = models["context"]
    for method in (
        DecodingMethod("sjd", window=2, acceptance=BudgetAcceptance(budget=0.0, measure="w1", k=1)),
        DecodingMethod("sjd", window=2, acceptance=TransportAcceptance(eps=0.0, k=1)),
    ):
        law, books = enumerate_w1(monkeypatch, adapter, method)
        assert joint_w1(law, joint) < 1e-12
        assert all(w1 == 0 for _, w1, _ in books)


def test_transport_relaxation_law_moves_and_accounts_exactly(models, monkeypatch):
    """The transport relaxation at a fixed eps: each token's exact W1 is D_12 times its TV and at
    most eps. The joint W1 at most eps per token is a measured fact of this two-code model, not
    a theorem (proofs/13 Claim 2: per-token bounds do not bound the joint W1 in general)."""
    adapter, joint = models["context"]
    eps = 0.05
    law, books = enumerate_w1(
        monkeypatch, adapter, DecodingMethod("sjd", window=2, acceptance=TransportAcceptance(eps=eps, k=1))
    )
    for spent, w1, tv in books:
        assert spent is None and w1 <= NUM_TOKENS * eps + TOL
        assert w1 == pytest.approx(D_12 * tv, abs=1e-12)
    assert 0 < joint_w1(law, joint) <= NUM_TOKENS * eps + TOL


def test_tv_dial_w1_is_recorded_exactly(models, monkeypatch):
    """record_w1 with the TV dial (a rule that changes every step): each token's W1 is D_12
    times its exact TV, the direct computation on two codes."""
    adapter, _joint = models["context"]
    method = DecodingMethod("sjd", window=2, acceptance=BudgetAcceptance(budget=0.3, policy="cap", cap=0.1))
    _law, books = enumerate_w1(monkeypatch, adapter, method)
    assert any(tv > 0 for _, _, tv in books)
    for spent, w1, tv in books:
        assert w1 == pytest.approx(D_12 * tv, abs=1e-12)
        assert spent == pytest.approx(tv, abs=1e-12)


def _overspending(p, q, totals, left, policy, cap, neighbours, solver, forced=None):
    """A wrong rule: every position of a window may use what was left before the window."""
    from gsd_lab.decode.planned import PlannedTargets
    from gsd_lab.decode.relaxation_w1 import plan_rows

    room = max(0.0, min(cap, left))
    r, moved, cost = plan_rows(
        neighbours, p, q, torch.full((q.shape[0],), room, dtype=torch.float64), solver
    )
    return PlannedTargets(r, moved, cost)


def test_a_wrong_allowance_rule_fails(models, monkeypatch):
    """Negative control: with every position of a window allowed what was left before it, some
    path spends more than B (and its recorded W1 with it)."""
    adapter, _joint = models["context"]
    monkeypatch.setattr(budget, "transport_allowances", _overspending)
    method = DecodingMethod(
        "sjd", window=2, acceptance=BudgetAcceptance(budget=0.2, measure="w1", cap=1.0, k=1))
    _law, books = enumerate_w1(monkeypatch, adapter, method)
    assert max(spent for spent, _, _ in books) > 0.2 + 1e-3
    assert max(w1 for _, w1, _ in books) > 0.2 + 1e-3


def test_method_validation_and_keys():
    with pytest.raises(ValueError, match="the transport's eps"):
        DecodingMethod("sjd", acceptance=TransportAcceptance(eps=-1.0))
    with pytest.raises(ValueError, match="replaces SJD"):
        DecodingMethod("gsd", acceptance=TransportAcceptance(eps=0.1))
    with pytest.raises(ValueError, match="replaces SJD"):
        DecodingMethod("sjd", acceptance=AmplifyAcceptance(2.0, TransportAcceptance(eps=0.1)))
    with pytest.raises(ValueError, match="transport neighbours"):
        DecodingMethod("sjd", acceptance=BudgetAcceptance(budget=1.0, k=4))
    with pytest.raises(ValueError, match="the transport's k"):
        DecodingMethod("sjd", acceptance=TransportAcceptance(eps=0.1, k=0))
    with pytest.raises(ValueError, match="the budget's cap"):
        DecodingMethod("sjd", acceptance=BudgetAcceptance(budget=1.0, cap=2.0))  # TV: at most 1
    with pytest.raises(ValueError, match="the budget's cap"):
        DecodingMethod("sjd", acceptance=BudgetAcceptance(budget=1.0, measure="w1", cap=float("inf")))
    w1 = DecodingMethod("sjd", acceptance=BudgetAcceptance(budget=2.0, measure="w1", cap=1.5, k=8))
    assert DecodingMethod.from_dict(w1.to_dict()) == w1
    transport = DecodingMethod("sjd", acceptance=TransportAcceptance(eps=0), draft="maximal")
    assert transport.acceptance.eps == 0.0 and transport.to_dict()["acceptance"]["eps"] == 0.0
    assert DecodingMethod.from_dict(transport.to_dict()) == transport
    assert DecodingMethod("sjd").to_dict()["acceptance"] == {"rule": "sd"}


def test_w1_allowances_by_hand(models):
    """Two codes at distance D_12, rows with T = 0.3, 0.5, 0.1 and B = 0.3: a plan within eps
    moves min(T, eps / D_12) at cost D_12 times that; "cap" gives row 1 what row 0 left, "sure"
    skips row 1 (all of T would cost 0.35) and spends on row 2."""
    adapter, _joint = models["context"]
    from gsd_lab.decode.rule_parts import content_neighbours_of

    hood = content_neighbours_of(adapter, 1)
    p = torch.tensor([[0, 0.5, 0.5], [0, 0.2, 0.8], [0, 0.6, 0.4]], dtype=torch.float64)
    q = torch.tensor([[0, 0.8, 0.2], [0, 0.7, 0.3], [0, 0.5, 0.5]], dtype=torch.float64)
    totals = [0.3, 0.5, 0.1]
    planned = budget.transport_allowances(p, q, totals, 0.3, "cap", 1.0, hood)
    assert planned.cost.tolist() == pytest.approx([D_12 * 0.3, 0.3 - D_12 * 0.3, 0.0], abs=1e-12)
    assert planned.moved.tolist() == pytest.approx([0.3, (0.3 - D_12 * 0.3) / D_12, 0.0])
    planned = budget.transport_allowances(p, q, totals, 0.3, "sure", 1.0, hood)
    # sure: row 0 fits (cost 0.21 moves all of T), row 1 needs 0.35 > 0.09 left: 0, row 2 0.07
    assert planned.cost.tolist() == pytest.approx([D_12 * 0.3, 0.0, D_12 * 0.1], abs=1e-12)
    assert planned.moved.tolist() == pytest.approx([0.3, 0.0, 0.1], abs=1e-12)
    # a forced row is allotted 0 (r = p); the row after it gets what row 0 left
    planned = budget.transport_allowances(
        p, q, totals, 0.3, "cap", 1.0, hood, forced=[False, True, False]
    )
    assert planned.cost.tolist() == pytest.approx([D_12 * 0.3, 0.0, D_12 * 0.1], abs=1e-12)
    assert torch.equal(planned.targets[1], p[1])


@pytest.mark.parametrize("draft", ["independent", "maximal"])
def test_zero_budgets_are_sjd_through_generate(draft):
    """transport_eps = 0 and the W1 dial at B = 0 give SJD's tokens and NFE exactly on the tiny
    random model (real randomness, the same seed), and record no distortion."""
    from gsd_lab.experiments.image_model import tiny_random_model

    model = tiny_random_model(top_k=20)
    prompt, uncond = model.encode("2")
    methods = [
        DecodingMethod("sjd", window=6, draft=draft),
        DecodingMethod("sjd", window=6, draft=draft, acceptance=TransportAcceptance(eps=0.0, k=4)),
        DecodingMethod(
            "sjd", window=6, draft=draft, acceptance=BudgetAcceptance(budget=0.0, measure="w1", k=4)),
    ]
    results = [
        generate(
            model.adapter,
            prompt,
            method,
            num_tokens=40,
            uncond_prompt_ids=uncond,
            generator=torch.Generator().manual_seed(5),
            record_distortion=True,
        )
        for method in methods
    ]
    for result in results[1:]:
        assert torch.equal(result.tokens, results[0].tokens)
        assert result.nfe == results[0].nfe and result.accepted == results[0].accepted
        assert float(result.distortion.abs().max()) <= 1e-12  # SD: 0 up to rounding
    assert results[2].budget_spent == 0.0
    # a positive eps moves the law (a control that the zero case is not vacuous)
    moved = generate(
        model.adapter,
        prompt,
        DecodingMethod("sjd", window=6, draft=draft, acceptance=TransportAcceptance(eps=0.2, k=4)),
        num_tokens=40,
        uncond_prompt_ids=uncond,
        generator=torch.Generator().manual_seed(5),
        record_distortion=True,
    )
    assert float(moved.distortion.max()) > 0


def copy_table() -> torch.Tensor:
    """Position 0: P(token 1) = 0.79; every later position copies the token before it (up to
    1e-15): the model's conditionals depend on the prefix as strongly as they can."""
    import math

    table = torch.full((8, 3, 3, 3), -40.0, dtype=torch.float64)
    table[..., 1:] = 0.0
    table[2, :, :, 1], table[2, :, :, 2] = math.log(0.79), math.log(0.21)
    for position in range(3, 8):
        for token, other in ((1, 2), (2, 1)):
            table[position, token, :, token] = math.log(1 - 1e-15)
            table[position, token, :, other] = math.log(1e-15)
    return table


def test_per_path_w1_budgets_do_not_bound_the_joint_w1_in_general(monkeypatch):
    """The counterexample of proofs/13: on a model that copies its first token, the W1 dial keeps
    every path's spend within B, yet the joint W1 for the additive cost exceeds B (a shift of the
    first token's law is paid again at every copied position). The per-path certificate bounds
    the expected per-step substitution along the decoder's path, not the joint W1."""
    adapter = ContentTableAdapter(TableLM(copy_table()), ALLOWED, row_length=1)
    joint = exact_joint(adapter, prompt=tuple(PROMPT.tolist()), sequences=SEQUENCES)
    method = DecodingMethod(
        "sjd", window=2, acceptance=BudgetAcceptance(budget=0.35, measure="w1", cap=1.0, k=1))
    law, books = enumerate_w1(monkeypatch, adapter, method)
    assert all(spent <= 0.35 + TOL and w1 <= spent + 1e-12 for spent, w1, _ in books)
    assert joint_w1(law, joint) > 0.35 + 0.01
    assert joint_w1(law, joint) == pytest.approx(0.558, abs=5e-4)  # the value proofs/13 quotes


def test_cli_transport_and_w1_dial_flags(capsys):
    """--transport-eps and --budget-measure w1 on the tiny model: reported, spent within B; a
    transport on GSD is refused before any model loads."""
    import json

    from gsd_lab.cli import main

    base = ["generate", "--model", "tiny-random", "--class", "1", "--seed", "3", "--json"]
    base += ["--threads", "1", "--method", "sjd", "--transport-k", "4"]
    assert main([*base, "--budget", "0.3", "--budget-measure", "w1", "--budget-cap", "0.1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["acceptance"]["measure"] == "w1" and report["acceptance"]["k"] == 4
    assert 0 < report["budget_spent"] <= 0.3
    assert main([*base, "--transport-eps", "0.05"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["acceptance"] == {"rule": "transport", "eps": 0.05, "k": 4}
    with pytest.raises(SystemExit):
        main(
            ["generate", "--model", "tiny-random", "--class", "1", "--method", "gsd"]
            + ["--transport-eps", "0.1"]
        )
    assert "replaces SJD" in capsys.readouterr().err


@pytest.mark.parametrize("policy", ["cap", "sure"])
def test_w1_dial_recorded_w1_is_exact_on_the_tiny_model(monkeypatch, policy):
    """The W1 dial on the tiny random model (64 codes with content): each emitted token's
    recorded W1 (``record_w1``, exact) equals POT's W1 between the window's planned target r_i and
    p_i computed directly from the captured rows, is at most the token's charge (the plan's cost),
    and the charges of the emitted tokens sum to ``budget_spent``."""
    from gsd_lab.accounting.transport import w1_from_laws
    from gsd_lab.decode import loop as decoding
    from gsd_lab.experiments.image_model import tiny_random_model

    model = tiny_random_model(top_k=20)
    adapter = model.adapter
    captured = []
    commit = decoding.DecodeLoop.commit

    def capturing(self, p, accepted, L, forced):
        if L > 0:
            captured.append((self.done, p.clone(), self.step_rule, accepted, L))
        return commit(self, p, accepted, L, forced)

    monkeypatch.setattr(decoding.DecodeLoop, "commit", capturing)
    prompt, uncond = model.encode("1")
    method = DecodingMethod(
        "sjd",
        window=5,
        acceptance=BudgetAcceptance(budget=0.6, measure="w1", policy=policy, cap=0.08 if policy == "cap" else 0.5, k=6 if policy == "cap" else 64),  # "sure" needs plans that move all of T
    )
    result = generate(
        adapter,
        prompt,
        method,
        num_tokens=40,
        uncond_prompt_ids=uncond,
        generator=torch.Generator().manual_seed(2),
        record_distortion=True,
        record_w1=True,
        w1_draws=None,
    )
    content, tokens = adapter.code_content(), adapter.allowed_tokens
    charges = 0.0
    checked = 0
    for start, p, rule, accepted, L in captured:
        for i in range(min(accepted + 1, L)):
            if start + i >= 40:
                continue
            target = p[i].to(torch.float64)
            target = target / target.sum()
            law = rule.targets[i] if float(rule.moved[i]) > 0 else target
            direct = float(w1_from_laws(target[None], (law / law.sum())[None], content, tokens)[0])
            recorded = float(result.w1.tokens[start + i])
            assert recorded == pytest.approx(direct, abs=1e-9)
            assert recorded <= float(rule.cost[i]) + 1e-9
            charges += float(rule.cost[i])
            checked += direct > 0
    assert checked > 0  # the dial moved some laws
    assert charges == pytest.approx(result.budget_spent, abs=1e-12)
    assert result.budget_spent <= 0.6 + 1e-12
