"""GSD's dynamic clusters on every path the lab has, against gsd_core's ``DynamicClusters``.

The same seeded random cases (ties, zero probabilities, windows clipped at both ends, G up to
beyond V, the gap and distance filters, ranked by p or by q) go through gsd_core's ``masses``
and ``verify`` and through each lab path: verify's window (``rules.clusters.dynamic_masses``
with the support counted, given as a size, or given as ids), the accounting's windows
(``ranked_window_masses``: plain, from the adjacency table, one token a chunk), the
registered dispatch (``window_masses``, ``support_masses``, through ``Amplify`` too), the
accounting's a(x) (``engine.support_accept``) and the engine's ``verify``. Every path must be
the reference bit for bit; a failure names the path and the case. Negative control: a path
with its window shifted by one rank is caught and named, and no other path is blamed.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import Tensor

import gsd_core
from gsd_core import Amplify, DynamicClusters, mass_ratio
from gsd_lab.accounting.distortion import embedding_adjacency
from gsd_lab.engine import capabilities, support_accept, verify
from gsd_lab.engine.ranking import SupportSize
from gsd_lab.rules import clusters

from rule_paths import RulePath, divergences

ROOT = Path(__file__).resolve().parents[3]
CASES = 60


@dataclass(frozen=True)
class Case:
    """Rows p, q [N, V] float64, tokens [N, T] (distinct per row), the rule, and its table."""

    rule: DynamicClusters
    p: Tensor
    q: Tensor
    tokens: Tensor
    adjacency: Tensor | None

    def __str__(self) -> str:
        rule = self.rule
        return (f"N={self.p.shape[0]} V={self.p.shape[1]} G={rule.group_size} "
                f"gap={rule.max_prob_gap} distance={rule.max_embedding_distance} "
                f"rank_by={rule.rank_by}")


def _rows(generator: torch.Generator, rows: int, vocab: int) -> Tensor:
    """Rows with ties (integer weights) and zeros (a random top-k), summing to 1."""
    weights = torch.randint(0, 4, (rows, vocab), generator=generator).to(torch.float64)
    keep = torch.rand(rows, vocab, generator=generator) < 0.7
    weights = torch.where(keep, weights, 0.0)
    weights[:, 0] += (weights.sum(-1) == 0).to(torch.float64)  # no empty row
    return weights / weights.sum(-1, keepdim=True)


def make_case(seed: int) -> Case:
    generator = torch.Generator().manual_seed(seed)
    pick = lambda n: int(torch.randint(n, (1,), generator=generator))  # noqa: E731
    rows, vocab = 1 + pick(3), 3 + pick(20)
    size = 1 + pick(min(vocab + 2, 16))
    gap = (None, 0.0, 0.1, 1 / 7)[pick(4)]
    embeddings = torch.randint(-2, 3, (vocab + pick(3), 2), generator=generator).double()
    distance = (None, 0.0, 2.0, 5.0)[pick(4)]
    rule = DynamicClusters(size, max_embedding_distance=distance, max_prob_gap=gap,
                           embeddings=embeddings if distance is not None else None,
                           rank_by=("p", "p", "q")[pick(3)])
    count = 1 + pick(vocab)
    tokens = torch.stack([torch.randperm(vocab, generator=generator)[:count] for _ in range(rows)])
    adjacency = None if distance is None else embedding_adjacency(embeddings, distance, vocab)
    p, q = _rows(generator, rows, vocab), _rows(generator, rows, vocab)
    return Case(rule, p, q, tokens, adjacency)


# -- the paths ----------------------------------------------------------------------------


def _masses(credited: Tensor, charged: Tensor) -> Tensor:
    return torch.stack([credited, charged])


def _window(case: Case, support: str) -> Tensor:
    """verify's window: draft t of row n against row (n, t), rows [N, T, V] (``dynamic_masses``
    where the rule ranks by p, the rule's own masses by q)."""
    shape = (*case.tokens.shape, case.p.shape[-1])
    p, q = case.p.unsqueeze(1).expand(shape), case.q.unsqueeze(1).expand(shape)
    count = (p > 0).sum(-1, dtype=torch.int32)
    given = {
        "counted": None,
        "a size": SupportSize(count, int(count.max())),
        "ids": torch.topk(p, int(count.max()), dim=-1).indices,
    }[support]
    credited, charged = capabilities.window_masses(case.rule, p, q, case.tokens, given)
    if credited.ndim == 3:  # the generic path: [N, T, 1]
        credited, charged = credited.squeeze(-1), charged.squeeze(-1)
    return _masses(credited, charged)


def _ranked(case: Case, *, table: bool = False, chunk: int = 1 << 24) -> Tensor:
    adjacency = case.adjacency if table else None
    return _masses(*clusters.ranked_window_masses(
        case.rule, case.p, case.q, case.tokens, adjacency=adjacency, chunk_elements=chunk))


def _amplified(case: Case) -> Tensor:
    shape = (*case.tokens.shape, case.p.shape[-1])
    p, q = case.p.unsqueeze(1).expand(shape), case.q.unsqueeze(1).expand(shape)
    credited, charged = capabilities.window_masses(Amplify(2.5, case.rule), p, q, case.tokens, None)
    return _masses(credited.reshape(case.tokens.shape), charged.reshape(case.tokens.shape))


def _reference_masses(case: Case) -> Tensor:
    return _masses(*case.rule.masses(case.p, case.q, case.tokens))


def _reference_amplified(case: Case) -> Tensor:
    return _masses(*Amplify(2.5, case.rule).masses(case.p, case.q, case.tokens))


def _reference_accept(case: Case) -> Tensor:
    """gsd_core's a(x) of every token, 0 off the support of q."""
    every = torch.arange(case.p.shape[-1]).expand(case.p.shape)
    return torch.where(case.q > 0, mass_ratio(*case.rule.masses(case.p, case.q, every)), 0.0)


def _window_verify(case: Case, engine: bool) -> Tensor:
    """One window per row: drafts = the case's tokens, rows p, q repeated, the bonus row p."""
    drafts = case.tokens
    shape = (*drafts.shape, case.p.shape[-1])
    p = case.p.unsqueeze(1).expand(shape[0], shape[1] + 1, shape[2])
    q = case.q.unsqueeze(1).expand(shape)
    uniforms = torch.rand(*drafts.shape[:-1], drafts.shape[-1] + 1,
                          generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    run = verify if engine else gsd_core.verify
    result = run(p, q, drafts, case.rule, uniforms=uniforms)
    return torch.cat([result.accept_probs.flatten(), result.tokens.flatten().double(),
                      result.num_accepted.flatten().double()])


REFERENCE = "gsd_core DynamicClusters.masses"
_EXACT_PATHS = [
    ("engine.capabilities.window_masses (rules.clusters.dynamic_masses), support counted",
     lambda c: _window(c, "counted"), REFERENCE, _reference_masses),
    ("engine.capabilities.window_masses (rules.clusters.dynamic_masses), a SupportSize",
     lambda c: _window(c, "a size"), REFERENCE, _reference_masses),
    ("engine.capabilities.window_masses (rules.clusters.dynamic_masses), support ids",
     lambda c: _window(c, "ids"), REFERENCE, _reference_masses),
    ("rules.clusters.ranked_window_masses", _ranked, REFERENCE, _reference_masses),
    ("rules.clusters.ranked_window_masses, adjacency table",
     lambda c: _ranked(c, table=True), REFERENCE, _reference_masses),
    ("rules.clusters.ranked_window_masses, one token a chunk",
     lambda c: _ranked(c, table=True, chunk=1), REFERENCE, _reference_masses),
    ("engine.capabilities.support_masses",
     lambda c: _masses(*capabilities.support_masses(c.rule, c.p, c.q, c.tokens)),
     REFERENCE, _reference_masses),
    ("engine.capabilities.window_masses of Amplify", _amplified,
     "gsd_core Amplify(DynamicClusters).masses", _reference_amplified),
    ("engine.support_accept", lambda c: support_accept(c.rule, c.p, c.q),
     "gsd_core's a(x) = mass_ratio(DynamicClusters.masses)", _reference_accept),
    ("engine.verify", lambda c: _window_verify(c, True),
     "gsd_core.verify", lambda c: _window_verify(c, False)),
]
PATHS: list[RulePath] = [(*path, 0.0) for path in _EXACT_PATHS]  # bit for bit


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return [make_case(seed) for seed in range(CASES)]


def test_the_cases_reach_the_corners(cases):
    """The cases hold what the paths could get wrong: ties, zeros, windows wider than V, both
    filters, both rankings, rows whose support is narrower than another's."""
    assert any(c.rule.group_size > c.p.shape[-1] for c in cases)
    assert any(c.rule.group_size == 1 for c in cases)
    assert {c.rule.rank_by for c in cases} == {"p", "q"}
    assert any(c.rule.max_prob_gap == 0.0 for c in cases)
    assert sum(c.adjacency is not None for c in cases) >= 10
    assert any((c.p == 0).any() for c in cases)  # zero probabilities
    assert any(len(set(c.p[0].tolist())) < c.p.shape[-1] for c in cases)  # ties
    assert any(len(set((c.p > 0).sum(-1).tolist())) > 1 for c in cases)  # uneven supports


def test_every_path_is_gsd_cores_bit_for_bit(cases):
    assert divergences(PATHS, cases) == []


def test_a_shifted_window_is_caught_and_named(cases, monkeypatch):
    """Negative control: verify's window read one rank too low (``_offsets`` + 1) diverges on
    every path through ``dynamic_masses`` (its three supports, Amplify's, ``engine.verify``),
    each named with its case, and no other path is blamed."""
    shifted = lambda size, vocab, device: DynamicClusters(size).offsets(vocab, device) + 1  # noqa: E731
    monkeypatch.setattr(clusters, "_offsets", shifted)
    found = divergences(PATHS, cases)
    blamed = {message.split(" differs from ")[0] for message in found}
    through = ("engine.capabilities.window_masses", "engine.verify")
    assert blamed == {name for name, *_ in PATHS if name.startswith(through)}
    assert any(message.startswith(
        "engine.capabilities.window_masses (rules.clusters.dynamic_masses), support counted "
        "differs from gsd_core DynamicClusters.masses at case ") for message in found), found


def test_the_registrations_are_the_family_module_s():
    """The dispatch reaches this module's paths for dynamic clusters (not the generic ones)."""
    assert capabilities.support_masses.dispatch(DynamicClusters) is clusters.ranked_window_masses
    assert capabilities.window_masses.dispatch(DynamicClusters).__module__ == clusters.__name__
    assert capabilities.rows_of(clusters.ReleaseDistanceClusters(2, None), [0]) is not None


@pytest.mark.parametrize("entry", ["gsd_lab.decode.loop", "gsd_lab.accounting.distortion",
                                   "gsd_lab.accounting.transport"])
def test_decoding_and_accounting_load_the_registrations(entry):
    """A fresh interpreter that imports only ``entry`` dispatches dynamic clusters and
    partitions to this family's paths; importing the engine alone does not register them before
    a dispatch reaches a generic path (the control: ``dispatch`` lookups only)."""
    probe = (
        "import sys\nimport gsd_lab.engine.capabilities as c\n"
        "from gsd_core import DynamicClusters, RankBinnedClusters\n"
        "before = c.support_masses.dispatch(DynamicClusters) is c.support_masses.dispatch(object)\n"
        f"import {entry}\n"
        "after = c.support_masses.dispatch(DynamicClusters) is not c.support_masses.dispatch(object)\n"
        "c.cluster_residual(RankBinnedClusters(2))\n"
        "print(before and after)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"
