"""A new acceptance rule is two places: its gsd_core-style rule and one spec.

Here, outside the package: ``ShiftedSD``, a toy lossy rule (accept min(1, (p(x) + s_i) / q(x)),
residual norm((p - q)+)) holding a tensor of shifts that its own ``rows`` method slices (what
``engine.capabilities.rows_of`` asks a rule first, so nothing is registered for it), and
``ShiftedAcceptance``, its spec, registered with ``register_acceptance``. With nothing else
changed it decodes through ``generate`` and ``generate_batch`` (the same tokens), serialises
tagged, and the command line offers its flag and refuses a bad value naming it. Negative controls: the rule changes the tokens of SJD, and an
unregistered rule is unknown to ``from_dict`` and the parser."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import torch
from torch import Tensor

from gsd_core.rules import token_residual
from gsd_lab.decode import acceptance
from gsd_lab.decode.acceptance import AcceptanceSpec, Flag, register_acceptance
from gsd_lab.decode.batch import DecodeRequest, generate_batch
from gsd_lab.decode.loop import generate
from gsd_lab.decode.methods import AmplifyAcceptance, DecodingMethod

NUM_TOKENS = 24


ROWS_ASKED: list[object] = []  # the indices ShiftedSD.rows was asked for


@dataclass(frozen=True, eq=False)
class ShiftedSD:
    """The toy rule, in gsd_core's interface: P(x) = p_i(x) + shift_i, Q(x) = q_i(x); shift [N]
    one per row, or [1] for every row."""

    shift: Tensor

    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        return p.gather(-1, x) + self.shift.to(p.dtype).unsqueeze(-1), q.gather(-1, x)

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        return token_residual(p, q)

    def rows(self, index: slice | list[int]) -> ShiftedSD:
        """The rule of some of its rows: a shift [1] is every row's, a shift [N] is sliced."""
        ROWS_ASKED.append(index)
        return self if self.shift.numel() == 1 else ShiftedSD(self.shift[index])


@dataclass(frozen=True)
class ShiftedAcceptance(AcceptanceSpec):
    """The toy rule's spec: its field, check, flag and build."""

    shift: float

    name: ClassVar[str] = "test-shifted"
    flags: ClassVar[tuple[Flag, ...]] = (
        Flag("--test-shift", float, 0.0, "toy: accept min(1, (p + s) / q)", field="shift"),
    )

    def __post_init__(self) -> None:
        if not 0 < self.shift <= 1:
            raise ValueError(f"shift must lie in (0, 1], got {self.shift!r}")

    def build(self, adapter: Any, cache: dict, *, method: Any, embeddings: Any) -> ShiftedSD:
        return ShiftedSD(torch.tensor([self.shift], dtype=torch.float64))


@pytest.fixture
def registered(monkeypatch):
    """The toy spec registered for one test (the registry restored after it)."""
    monkeypatch.setattr(acceptance, "ACCEPTANCES", dict(acceptance.ACCEPTANCES))
    register_acceptance(ShiftedAcceptance)
    return ShiftedAcceptance


@pytest.fixture(scope="module")
def tiny():
    from gsd_lab.experiments.image_model import tiny_random_model

    return tiny_random_model(top_k=20)


def _decode(tiny, method: DecodingMethod, seed: int) -> Tensor:
    prompt, uncond = tiny.encode("1")
    generator = torch.Generator().manual_seed(seed)
    return generate(
        tiny.adapter, prompt, method, num_tokens=NUM_TOKENS, uncond_prompt_ids=uncond,
        generator=generator,
    ).tokens


def test_a_new_rule_decodes_through_generate_and_generate_batch(registered, tiny):
    method = DecodingMethod("sjd", window=4, acceptance=ShiftedAcceptance(0.5))
    assert isinstance(method.resolve(tiny.adapter).rule, ShiftedSD)
    alone = [_decode(tiny, method, seed) for seed in (0, 1)]
    prompt, uncond = tiny.encode("1")
    requests = [
        DecodeRequest(prompt, method, NUM_TOKENS, torch.Generator().manual_seed(seed), uncond)
        for seed in (0, 1)
    ]
    batched = generate_batch(tiny.adapter, requests)
    assert all(torch.equal(a, b.tokens) for a, b in zip(alone, batched))
    sjd = [_decode(tiny, DecodingMethod("sjd", window=4), seed) for seed in (0, 1)]
    assert any(not torch.equal(a, b) for a, b in zip(alone, sjd))  # the rule is the one used


def test_a_new_rule_serialises_tagged_and_checks_itself(registered):
    method = DecodingMethod("sjd", acceptance=ShiftedAcceptance(0.25))
    data = json.loads(json.dumps(method.to_dict()))
    assert data["acceptance"] == {"rule": "test-shifted", "shift": 0.25}
    again = DecodingMethod.from_dict(data)
    assert again == method and again.key == method.key
    with pytest.raises(ValueError, match="shift must lie in"):
        ShiftedAcceptance(2.0)
    with pytest.raises(ValueError, match="verifies methods"):
        DecodingMethod("gsd", acceptance=ShiftedAcceptance(0.25))
    with pytest.raises(ValueError, match="replaces SJD's acceptance test"):
        DecodingMethod("sjd", acceptance=AmplifyAcceptance(2.0, ShiftedAcceptance(0.25)))


def test_an_unregistered_rule_is_unknown():
    data = {"kind": "sjd", "acceptance": {"rule": "test-shifted", "shift": 0.25}}
    with pytest.raises(ValueError, match="an acceptance rule is a dict with 'rule' one of"):
        DecodingMethod.from_dict(data)
    from gsd_lab.cli import build_parser

    assert "--test-shift" not in build_parser()._subparsers._group_actions[0].choices[
        "generate"
    ].format_help()


def _generate_parser():
    from gsd_lab.cli import build_parser

    return build_parser()._subparsers._group_actions[0].choices["generate"]


def test_the_command_line_offers_the_new_rule(registered, capsys):
    from gsd_lab.cli import main

    assert "--test-shift" in _generate_parser().format_help()
    base = ["generate", "--model", "tiny-random", "--class", "1", "--seed", "0", "--threads", "1"]
    base += ["--method", "sjd", "--window", "4"]
    assert main([*base, "--test-shift", "0.5", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["acceptance"] == {"rule": "test-shifted", "shift": 0.5}
    with pytest.raises(SystemExit) as caught:
        main([*base, "--test-shift", "2"])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and "Traceback" not in err
    assert "--test-shift 2.0: shift must lie in (0, 1]" in err
    with pytest.raises(SystemExit) as caught:  # two rules at once
        main([*base, "--test-shift", "0.5", "--relaxation-delta", "0.1"])
    assert caught.value.code == 2
    assert "--relaxation-delta and --test-shift" in capsys.readouterr().err


def test_a_new_rule_goes_through_the_exact_accounting(registered, tiny):
    """With no capability registered, the accounting takes the generic paths: the exact TV by
    gsd_core's enumeration of the law (checked against the formula out = q a + (1 - alpha) r),
    W1 of that law, and no substitution cost (the rule couples no Y ~ p)."""
    from gsd_lab.accounting.distortion import exact_distortion
    from gsd_lab.accounting.transport import substitution_defined

    g = torch.Generator().manual_seed(0)
    p, q = torch.rand(2, 3, 8, generator=g, dtype=torch.float64).softmax(-1)
    accept = ((p + 0.1) / q).clamp(max=1.0)
    alpha = (q * accept).sum(-1, keepdim=True)
    excess = (p - q).clamp(min=0)
    out = q * accept + (1 - alpha) * excess / excess.sum(-1, keepdim=True)
    formula = 0.5 * (out - p).abs().sum(-1)
    tv = exact_distortion(p, q, ShiftedSD(torch.tensor([0.1], dtype=torch.float64)))
    torch.testing.assert_close(tv, formula, rtol=0, atol=1e-12)
    assert bool((tv > 1e-3).all()) and float(exact_distortion(p, q).abs().max()) < 1e-15
    assert not substitution_defined(ShiftedSD(torch.tensor([0.1], dtype=torch.float64)))
    per_row = ShiftedSD(torch.tensor([0.0, 0.1, 0.2], dtype=torch.float64))  # shift [3]
    ROWS_ASKED.clear()
    chunked = exact_distortion(p, q, per_row, max_elements=8)  # a row a chunk: its own rows
    assert ROWS_ASKED == [slice(0, 1), slice(1, 2), slice(2, 3)]
    torch.testing.assert_close(chunked, exact_distortion(p, q, per_row), rtol=0, atol=1e-15)
    assert float(chunked[0]) < 1e-15 < float(chunked[2])  # shift 0 is SD; shift 0.2 distorts

    prompt, uncond = tiny.encode("1")
    method = DecodingMethod("sjd", window=4, acceptance=ShiftedAcceptance(0.5))
    ROWS_ASKED.clear()
    result = generate(
        tiny.adapter, prompt, method, num_tokens=NUM_TOKENS, uncond_prompt_ids=uncond,
        generator=torch.Generator().manual_seed(0), record_distortion=True, record_w1=True,
        w1_draws=None,
    )
    assert ROWS_ASKED  # the loop asked the rule for its window's rows (no registration)
    assert torch.equal(result.tokens, _decode(tiny, method, 0))  # accounting draws nothing
    assert float(result.distortion.max()) > 1e-3  # the lossy rule distorts, by its exact TV
    assert result.w1.draws is None and result.w1.mean > 0 and result.w1.substitution is None
