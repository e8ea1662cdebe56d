"""LANTERN on every path the lab has, against gsd_core's ``Lantern``.

The same seeded random cases (ties, zero probabilities, k from 1 to V, budgets from 0 to 1,
neighbourhoods cut by a distance or not) go through gsd_core's ``masses``, ``verify`` and
``output_distribution`` and through each lab path: the accounting's support masses
(``rules.lantern``'s registration: one chunk, or one token a chunk), a(x) on the support of q
(``engine.support_accept``), the engine's ``verify``, and the distortion without the law
(``rules.lantern.lantern_distortion`` in blocks of 1, 3 and 64 neighbours, and
``accounting.distortion.exact_distortion``, which dispatches to it). The masses, a(x) and verify
must be gsd_core's bit for bit; the distortion is another formula (proofs/08's identity), so it
must equal TV(gsd_core's law, p) within 1e-14. A failure names the path and the case. Negative
control: a distortion scaled by 1 + 1e-9 is caught and named, and no other path is blamed.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import gsd_core
from gsd_core import Lantern, latent_neighbourhoods, mass_ratio, output_distribution
from gsd_lab.accounting.distortion import exact_distortion
from gsd_lab.engine import capabilities, support_accept, verify
from gsd_lab.rules import lantern

from rule_paths import RulePath, divergences

CASES = 40
TV_TOLERANCE = 1e-14


class Case:
    """Rows p, q [N, V] float64, tokens [N, T] (distinct per row) and the rule."""

    def __init__(self, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        pick = lambda n: int(torch.randint(n, (1,), generator=generator))  # noqa: E731
        rows, vocab = 1 + pick(3), 3 + pick(18)
        embeddings = torch.randint(-2, 3, (vocab, 2), generator=generator).double()
        k, distance = 1 + pick(vocab), (None, None, 1.5)[pick(3)]
        self.rule = Lantern(latent_neighbourhoods(embeddings, k, distance),
                            (0.0, 0.1, 0.3, 1.0)[pick(4)])
        self.p, self.q = _rows(generator, rows, vocab), _rows(generator, rows, vocab)
        count = 1 + pick(vocab)
        self.tokens = torch.stack(
            [torch.randperm(vocab, generator=generator)[:count] for _ in range(rows)])
        self.text = f"N={rows} V={vocab} k={k} delta={self.rule.delta} distance={distance}"

    def __str__(self) -> str:
        return self.text


def _rows(generator: torch.Generator, rows: int, vocab: int) -> Tensor:
    """Rows with ties (integer weights) and zeros, summing to 1."""
    weights = torch.randint(0, 4, (rows, vocab), generator=generator).to(torch.float64)
    weights = torch.where(torch.rand(rows, vocab, generator=generator) < 0.7, weights, 0.0)
    weights[:, 0] += (weights.sum(-1) == 0).to(torch.float64)
    return weights / weights.sum(-1, keepdim=True)


def _support(case: Case, chunk: int) -> Tensor:
    return torch.stack(capabilities.support_masses(
        case.rule, case.p, case.q, case.tokens, chunk_elements=chunk))


def _reference_accept(case: Case) -> Tensor:
    every = torch.arange(case.p.shape[-1]).expand(case.p.shape)
    return torch.where(case.q > 0, mass_ratio(*case.rule.masses(case.p, case.q, every)), 0.0)


def _verify(case: Case, engine: bool) -> Tensor:
    shape = (*case.tokens.shape, case.p.shape[-1])
    p = case.p.unsqueeze(1).expand(shape[0], shape[1] + 1, shape[2])
    q = case.q.unsqueeze(1).expand(shape)
    uniforms = torch.rand(shape[0], shape[1] + 1, generator=torch.Generator().manual_seed(1),
                          dtype=torch.float64)
    result = (verify if engine else gsd_core.verify)(p, q, case.tokens, case.rule,
                                                      uniforms=uniforms)
    return torch.cat([result.accept_probs.flatten(), result.tokens.flatten().double(),
                      result.num_accepted.flatten().double()])


def _tv_of_the_law(case: Case) -> Tensor:
    return 0.5 * (output_distribution(case.p, case.q, case.rule) - case.p).abs().sum(-1)


MASSES, TV = "gsd_core Lantern.masses", "TV(gsd_core output_distribution, p)"
PATHS: list[RulePath] = [
    ("engine.capabilities.support_masses (rules.lantern), one chunk",
     lambda c: _support(c, 1 << 24), MASSES, lambda c: torch.stack(c.rule.masses(c.p, c.q, c.tokens)), 0.0),
    ("engine.capabilities.support_masses (rules.lantern), one token a chunk",
     lambda c: _support(c, 1), MASSES, lambda c: torch.stack(c.rule.masses(c.p, c.q, c.tokens)), 0.0),
    ("engine.support_accept", lambda c: support_accept(c.rule, c.p, c.q),
     "gsd_core's a(x) = mass_ratio(Lantern.masses)", _reference_accept, 0.0),
    ("engine.verify", lambda c: _verify(c, True), "gsd_core.verify", lambda c: _verify(c, False), 0.0),
    *[(f"rules.lantern.lantern_distortion, blocks of {block}",
       lambda c, block=block: lantern.lantern_distortion(c.p, c.q, c.rule, block=block),
       TV, _tv_of_the_law, TV_TOLERANCE) for block in (1, 3, 64)],
    ("accounting.distortion.exact_distortion (direct_tv)",
     lambda c: exact_distortion(c.p, c.q, c.rule), TV, _tv_of_the_law, TV_TOLERANCE),
]


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return [Case(seed) for seed in range(CASES)]


def test_the_cases_reach_the_corners(cases):
    assert {c.rule.delta for c in cases} == {0.0, 0.1, 0.3, 1.0}
    assert any(c.rule.neighbourhoods.k == 1 for c in cases)
    assert any(c.rule.neighbourhoods.k == c.p.shape[-1] for c in cases)
    assert any((c.p == 0).any() for c in cases) and any((c.q > c.p).any() for c in cases)
    assert any(float(_tv_of_the_law(c).max()) > 0.05 for c in cases)  # lossy: TV to get right


def test_every_path_is_gsd_cores(cases):
    assert divergences(PATHS, cases) == []


def test_a_scaled_distortion_is_caught_and_named(cases, monkeypatch):
    """Negative control: ``lantern_distortion``'s final sum scaled by 1 + 1e-9 is caught on it
    and on ``exact_distortion`` (which dispatches to it), and on no other path."""
    exact_sum = lantern.fixed_order_sum
    monkeypatch.setattr(lantern, "fixed_order_sum", lambda x: exact_sum(x) * (1 + 1e-9))
    found = divergences(PATHS, cases)
    blamed = {message.split(" differs from ")[0] for message in found}
    assert blamed == {name for name, *_ in PATHS if "distortion" in name}, found
    assert any(message.startswith(
        "rules.lantern.lantern_distortion, blocks of 1 differs from TV(gsd_core "
        "output_distribution, p) by more than 1e-14 at case ") for message in found), found


def test_the_registrations_are_the_family_module_s():
    assert capabilities.support_masses.dispatch(Lantern).__module__ == lantern.__name__
    assert capabilities.direct_tv.dispatch(Lantern).__module__ == lantern.__name__
    assert capabilities.member_slots.dispatch(Lantern).__module__ == lantern.__name__
