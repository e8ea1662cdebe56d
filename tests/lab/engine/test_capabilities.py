"""The rules' optional capabilities (``gsd_lab.engine.capabilities``): Amplify answers with its
rule's, row slicing takes every per-row tensor field (a new one included), and a rule that lacks a
capability takes the documented generic path or is refused by name, never answered silently."""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor

from gsd_core import SD, Amplify, DynamicClusters, FixedPartition, OptimalRelaxation, tv_distance
from gsd_core import output_distribution
from gsd_core.rules import token_residual
from gsd_lab.accounting.distortion import exact_distortion, support_output_laws
from gsd_lab.accounting.transport import substitution_defined
from gsd_lab.decode.planned import PlannedTargets
from gsd_lab.decode.rule_parts import method_rule
from gsd_lab.engine import capabilities
from gsd_lab.engine.capabilities import rows_of, slice_rows


def _rows(n: int, vocab: int, seed: int) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    p, q = torch.rand(2, n, vocab, generator=g, dtype=torch.float64)
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


def test_amplify_answers_with_its_rules_capabilities():
    clusters = DynamicClusters(3, rank_by="p")
    amplified = Amplify(2.0, clusters)
    assert capabilities.unscaled(amplified) is clusters
    assert capabilities.uses_support(amplified) and not capabilities.uses_support(Amplify(2.0))
    assert not capabilities.uses_support(DynamicClusters(3, rank_by="q"))
    assert capabilities.member_slots(amplified, 10) == 3 == capabilities.member_slots(clusters, 10)
    assert capabilities.member_slots(Amplify(2.0), 10) is None  # SD: gsd_core's enumeration
    delta = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    sliced = rows_of(Amplify(2.0, OptimalRelaxation(delta)), [2])
    assert isinstance(sliced, Amplify) and torch.equal(sliced.rule.delta, delta[[2]])
    assert rows_of(amplified, slice(0, 1)) is amplified  # nothing per row: the rule itself


@dataclass(frozen=True, eq=False)
class WiderTargets(PlannedTargets):
    """PlannedTargets with one more per-row field, as a later change might add."""

    note: Tensor = None


def test_row_slicing_takes_every_per_row_field_including_a_new_one():
    p, _ = _rows(4, 6, 0)
    moved, cost = torch.tensor([0.0, 0.1, 0.2, 0.3]), torch.tensor([1.0, 2.0, 3.0, 4.0])
    rule = WiderTargets(p, moved, cost, note=torch.arange(4.0))
    part = rows_of(rule, slice(1, 3))
    assert type(part) is WiderTargets
    for name, full in (("targets", p), ("moved", moved), ("cost", cost), ("note", rule.note)):
        assert torch.equal(getattr(part, name), full[1:3]), name
    assert torch.equal(rows_of(rule, [3]).note, torch.tensor([3.0]))
    labels = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 1, 1, 2, 2, 2]])
    assert torch.equal(rows_of(FixedPartition(labels), [1]).labels, labels[[1]])
    shared = FixedPartition(labels[0])
    assert rows_of(shared, [1]) is shared  # labels [V]: every row's partition


def test_labels_of_one_row_broadcast_and_are_kept_whole():
    """labels [1, V] broadcast over every row: rows 2.. of them are the one row, not an
    IndexError (the old slicing indexed the single row with the caller's row index)."""
    p, q = _rows(4, 6, 3)
    one = FixedPartition(torch.tensor([[0, 0, 1, 1, 2, 2]]))
    assert rows_of(one, [3]) is one and rows_of(one, slice(2, 4)) is one
    chunked = exact_distortion(p, q, one, max_elements=6)  # one row a chunk: rows_of per chunk
    torch.testing.assert_close(chunked, exact_distortion(p, q, one), rtol=0, atol=1e-15)
    many = FixedPartition(torch.tensor([[0, 0, 1, 1, 2, 2], [0, 1, 1, 2, 2, 2]]))
    assert rows_of(many, [1]).labels.shape == (1, 6)  # N > 1: sliced (negative control)


@dataclass(frozen=True)
class PerRowShift:
    """An outside rule with a parameter per row: P(x) = p(x) + shift_i, Q(x) = q(x)."""

    shift: Tensor  # [N]

    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        return p.gather(-1, x) + self.shift.unsqueeze(-1), q.gather(-1, x)

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        return token_residual(p, q)


@dataclass(frozen=True)
class SlicedShift(PerRowShift):
    """The same rule, registered as its author would, next to it: its tensors run over rows."""


rows_of.register(SlicedShift, slice_rows)


def test_a_rule_holding_tensors_must_say_how_its_rows_slice():
    p, q = _rows(5, 7, 1)
    shift = torch.linspace(0.0, 0.2, 5, dtype=torch.float64)
    refused = r"PerRowShift holds tensors \['shift'\] but has no rows method"
    with pytest.raises(ValueError, match=refused):
        exact_distortion(p, q, PerRowShift(shift), max_elements=2 * 7)  # 2 rows a chunk
    rule = SlicedShift(shift)
    chunked = exact_distortion(p, q, rule, max_elements=2 * 7)
    whole = exact_distortion(p, q, rule)
    by_row = torch.stack([
        tv_distance(output_distribution(p[i], q[i], SlicedShift(shift[i])), p[i]) for i in range(5)
    ])
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-15)
    torch.testing.assert_close(chunked, by_row, rtol=0, atol=1e-12)
    assert float(chunked[0]) < 1e-15 < float(chunked[-1])  # shift 0 is SD; the rest distort


def test_a_missing_capability_is_refused_by_name():
    p, q = _rows(2, 6, 2)
    with pytest.raises(ValueError, match="has no members per token"):
        support_output_laws(p, q, OptimalRelaxation(0.1))
    with pytest.raises(ValueError, match="the cluster-exact residual needs a partition"):
        method_rule(DynamicClusters(3), "cluster")
    assert method_rule(None, "cluster") == SD()  # SD's singletons: the same residual
    partition = method_rule(torch.tensor([0, 0, 1, 1, 2, 2]), "cluster")
    assert partition.residual == "cluster" and substitution_defined(partition)
    assert not substitution_defined(Amplify(2.0, partition)) and substitution_defined(None)
    assert not substitution_defined(method_rule(torch.tensor([0, 0, 1, 1, 2, 2])))


def _imports(path) -> set[str]:
    """The gsd_lab modules a file imports, at module level or deferred (resolved absolute)."""
    import ast

    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            name = f"{base}.{node.module}" if node.level else node.module
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("gsd_lab")}


ROOT = __import__("pathlib").Path(__file__).resolve().parents[3]


def test_no_import_cycle_between_the_weight_checks_nor_back_from_the_engine():
    modules = {
        path.relative_to(ROOT).with_suffix("").as_posix().replace("/", "."): path
        for path in (ROOT / "gsd_lab").rglob("*.py")
    }
    graph = {name: _imports(path) & set(modules) for name, path in modules.items()}
    families = {f"gsd_lab.checks.{name}" for name in ("lumina", "janus", "families")}
    for name in families:  # each reads the shared modules, none another family's
        assert "gsd_lab.checks.items" in graph[name], name
        assert not graph[name] & families - {name}, name
    assert families <= graph["gsd_lab.cli.check_weights"]
    checks = {name for name in modules if name.startswith("gsd_lab.checks")}
    assert not any(m.startswith("gsd_lab.cli") for name in checks for m in graph[name])
    engine = {name for name in modules if name.startswith("gsd_lab.engine")}
    for name in engine:  # the capabilities' layer imports nothing above it
        assert not {m for m in graph[name] if not m.startswith("gsd_lab.engine")}, name


def test_the_engine_alone_takes_the_families_fast_paths_on_first_dispatch():
    # A fresh process importing only the engine: the first verify of dynamic clusters ranked by
    # p loads gsd_lab.rules and runs its registered window (SupportRanking), not rule.masses.
    code = (
        "import sys, torch; from gsd_core import DynamicClusters; "
        "from gsd_lab.engine import verify; from gsd_lab.engine import capabilities as c; "
        "assert 'gsd_lab.rules' not in sys.modules; "
        "g = torch.Generator().manual_seed(0); "
        "p, q = torch.rand(2, 4, 8, generator=g, dtype=torch.float64).softmax(-1); "
        "verify(p, q[:3], torch.tensor([1, 2, 3]), DynamicClusters(3), generator=g); "
        "print('gsd_lab.rules' in sys.modules, "
        "c.window_masses.dispatch(DynamicClusters) is not c.window_masses.dispatch(object))"
    )
    # check=False: a failure shows the child's stderr (the assertion below)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "True"]


def test_a_failed_family_import_is_tried_again(monkeypatch):
    # A first import that fails must not leave the generic paths answering for good. The last
    # call finds gsd_lab.rules already imported (its registrations stand), so it only sets the
    # flag again.
    monkeypatch.setattr(capabilities, "_LOADED", threading.Event())
    monkeypatch.setattr(capabilities, "_IMPORTING", threading.local())
    monkeypatch.setattr(capabilities, "FAMILY_MODULES", ("gsd_lab.no_such_family_module",))
    with pytest.raises(ModuleNotFoundError):
        capabilities.load_families()
    monkeypatch.setattr(capabilities, "FAMILY_MODULES", ("gsd_lab.rules",))
    assert capabilities.load_families() is True
    assert capabilities.load_families() is False


def _family_module(tmp_path, monkeypatch, name: str, body: str) -> None:
    """A stand-in family module ``name`` on sys.path; the loader's state fresh."""
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(capabilities, "_LOADED", threading.Event())
    monkeypatch.setattr(capabilities, "_IMPORTING", threading.local())
    monkeypatch.setattr(capabilities, "FAMILY_MODULES", (name,))


def test_a_dispatch_while_the_families_import_takes_the_generic_path(tmp_path, monkeypatch):
    # A family module that dispatches at import time re-enters the loader from the importing
    # thread: it must get False (no second import of a half-loaded module), and the outer call
    # True once the module is whole.
    _family_module(tmp_path, monkeypatch, "gsd_family_reentrant", (
        "from gsd_lab.engine import capabilities\n"
        "INNER = capabilities.load_families()\n"
    ))
    assert capabilities.load_families() is True
    assert sys.modules["gsd_family_reentrant"].INNER is False


def test_concurrent_first_calls_import_the_families_once(tmp_path, monkeypatch):
    # Two threads reach the loader while the family module is still importing: the second
    # waits in the import system's module lock, both see the families loaded, and the module's
    # body runs once.
    runs = tmp_path / "runs.txt"
    _family_module(tmp_path, monkeypatch, "gsd_family_slow", (
        "import time\n"
        f"open({str(runs)!r}, 'a').write('x')\n"
        "time.sleep(0.5)\n"
    ))
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(capabilities.load_families()))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "the loader hung"
    assert runs.read_text() == "x"
    assert True in results and capabilities._LOADED.is_set()
