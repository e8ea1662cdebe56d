"""gsd_lab.decode.acceptance: the package's rules as specs, and every stored run key.

Every configuration key of the committed ``figures/records.npz`` and every method listed in the
figures' JSON sidecars reads back into a spec and serialises to the same bytes; each spec
round-trips tagged; a method is its spec (no flat fields); the command line's flags are the
specs'.
"""

from __future__ import annotations

import ast
import json
import pickle
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from gsd_lab.decode import acceptance
from gsd_lab.decode.acceptance import (
    AcceptanceSpec,
    AmplifyAcceptance,
    BudgetAcceptance,
    ClusterAcceptance,
    Flag,
    LanternAcceptance,
    RelaxationAcceptance,
    SDAcceptance,
    TransportAcceptance,
    register_acceptance,
)
from gsd_lab.decode.methods import DecodingMethod
from gsd_lab.experiments.runs import MethodSpec

FIGURES = Path(__file__).resolve().parents[3] / "figures"
SIDECARS = ("results.json", "frontier_nfe_vs_distortion.json", "distortion_vs_nfe.json",
            "table1_speed_quality.json", "fig10_nfe_vs_quality.json")


def _stored_keys() -> list[str]:
    index = json.loads(str(np.load(FIGURES / "records.npz")["index"]))
    return sorted({entry["key"] for entry in index["records"]})


def test_every_stored_record_key_is_computed_again_from_its_spec():
    keys = _stored_keys()
    assert len(keys) > 30  # the committed figures run: every configuration of notebook 04
    kinds = set()
    for stored in keys:
        method_key, seed_offset = ast.literal_eval(stored)
        method = DecodingMethod.from_dict(json.loads(method_key))
        kinds.add(type(method.acceptance).__name__)
        again = MethodSpec("any label", method, seed_offset)
        assert repr(again.key) == stored
        rebuilt = DecodingMethod(method.kind, acceptance=method.acceptance, window=method.window,
                                 init=method.init, draft=method.draft, residual=method.residual,
                                 filters=method.filters, preset=method.preset)
        assert rebuilt.key == method_key
    # The stored configurations exercise every rule of the package but LANTERN (quick sizes).
    assert {"SDAcceptance", "AmplifyAcceptance", "ClusterAcceptance", "RelaxationAcceptance",
            "TransportAcceptance", "BudgetAcceptance"} <= kinds


def test_a_changed_spec_changes_the_key():  # negative control of the test above
    method_key, _ = ast.literal_eval(_stored_keys()[0])
    method = DecodingMethod.from_dict(json.loads(method_key))
    assert replace(method, window=method.window + 1).key != method_key
    other = AmplifyAcceptance(3.0) if method.acceptance == SDAcceptance() else SDAcceptance()
    assert replace(method, acceptance=other).key != method_key


def _records(x):
    if isinstance(x, dict):
        if {"label", "method", "seed_offset"} <= set(x) and isinstance(x["method"], dict):
            yield x
            return
        for value in x.values():
            yield from _records(value)
    elif isinstance(x, list):
        for value in x:
            yield from _records(value)


def test_every_sidecar_method_reads_back_as_its_record():
    listed = [r for name in SIDECARS for r in _records(json.loads((FIGURES / name).read_text()))]
    assert len(listed) > 50
    for record in listed:
        method = DecodingMethod.from_dict(record["method"])
        assert MethodSpec(record["label"], method, record["seed_offset"]).to_record() == record


SPECS = [
    SDAcceptance(),
    AmplifyAcceptance(2.0),
    AmplifyAcceptance(1.5, ClusterAcceptance("rank-binned", 50)),
    ClusterAcceptance("dynamic", 25),
    LanternAcceptance(1001, 0.1),
    RelaxationAcceptance(0.05),
    TransportAcceptance(0.0),
    TransportAcceptance(0.1, 8),
    BudgetAcceptance(0.5),
    BudgetAcceptance(2.0, "w1", "sure", 1.5, 8),
]


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_each_spec_round_trips_tagged(spec):
    assert acceptance.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    kind = "gsd" if spec.is_partition or spec.uses_filters else "sjd"
    method = DecodingMethod(kind, acceptance=spec)
    assert method.to_dict()["acceptance"] == spec.to_dict()
    assert DecodingMethod.from_dict(json.loads(json.dumps(method.to_dict()))) == method


def test_a_method_is_its_spec():
    assert DecodingMethod("sjd", acceptance=LanternAcceptance(k=5, delta=0.1)) == DecodingMethod(
        "sjd", acceptance=LanternAcceptance(5, 0.1))
    amplified = DecodingMethod("gsd", acceptance=AmplifyAcceptance(2, ClusterAcceptance(group_size=10)))
    assert amplified.acceptance == AmplifyAcceptance(2.0, ClusterAcceptance("dynamic", 10))
    assert amplified.acceptance.inner.group_size == 10
    # dataclasses.replace changes the spec as a whole
    assert replace(amplified, acceptance=ClusterAcceptance()).acceptance == ClusterAcceptance()
    assert replace(DecodingMethod("sjd"), acceptance=BudgetAcceptance(0.5)).acceptance == BudgetAcceptance(0.5)
    with pytest.raises(TypeError, match=r"acceptance=BudgetAcceptance\(budget=0.5\)"):
        replace(DecodingMethod("sjd"), budget=0.5)
    assert pickle.loads(pickle.dumps(amplified)) == amplified  # workers receive methods pickled
    with pytest.raises(ValueError, match="acceptance must be a gsd_lab.decode.acceptance spec"):
        DecodingMethod("sjd", acceptance="lantern")
    for name in ("group_size", "clusters", "acceptance_scale", "lantern_k", "budget"):
        with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
            getattr(amplified, name)  # the rule's fields live on the spec only


def test_specs_refuse_what_their_rule_cannot_do():
    with pytest.raises(ValueError, match="Amplify's scale 1 is the rule itself"):
        AmplifyAcceptance(1.0)
    with pytest.raises(ValueError, match="replaces SJD"):
        DecodingMethod("sjd", acceptance=AmplifyAcceptance(2.0, RelaxationAcceptance(0.1)))
    with pytest.raises(ValueError, match="the relaxation's delta must be a number in"):
        RelaxationAcceptance(0.0)  # 0 is SD: SDAcceptance()
    with pytest.raises(ValueError, match="transport neighbours"):
        BudgetAcceptance(1.0, k=4)


def test_a_bad_tagged_rule_is_refused_by_name():
    with pytest.raises(ValueError, match="acceptance rule 'lantern': bad fields"):
        acceptance.from_dict({"rule": "lantern", "kk": 3})
    with pytest.raises(ValueError, match="'rule' one of"):
        acceptance.from_dict({"rule": {"rule": "sd"}})


def test_the_registry_refuses_a_taken_name_or_flag(monkeypatch):
    monkeypatch.setattr(acceptance, "ACCEPTANCES", dict(acceptance.ACCEPTANCES))

    @dataclass(frozen=True)
    class Taken(AcceptanceSpec):
        name: ClassVar[str] = "budget"

    @dataclass(frozen=True)
    class SameFlag(AcceptanceSpec):
        name: ClassVar[str] = "same-flag"
        flags: ClassVar[tuple[Flag, ...]] = (Flag("--budget", float, None, "again"),)

    with pytest.raises(ValueError, match="acceptance rule 'budget' is taken"):
        register_acceptance(Taken)
    with pytest.raises(ValueError, match=r"flags \['--budget'\]"):
        register_acceptance(SameFlag)
    with pytest.raises(ValueError, match="an AcceptanceSpec with a name"):
        register_acceptance(DecodingMethod)


def test_the_command_line_flags_are_the_specs():
    from gsd_lab.cli import build_parser

    generate = build_parser()._subparsers._group_actions[0].choices["generate"]
    actions = {a.option_strings[0]: a for a in generate._actions if a.option_strings}
    flags = acceptance.command_line_flags()
    assert {"--amplify", "--group-size", "--clusters", "--budget", "--transport-k"} <= {
        f.name for f in flags}
    for flag in flags:
        action = actions[flag.name]
        assert (action.default, action.choices, action.help) == (flag.default, flag.choices,
                                                                 flag.help)


def _decode_imports() -> dict[str, set[str]]:
    """Module -> the decode modules it imports, at module level or deferred in a function."""
    import ast

    folder = Path(acceptance.__file__).parent
    graph = {}
    for path in folder.glob("*.py"):
        tree = ast.parse(path.read_text())
        graph[path.stem] = {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        }
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found = []

    def walk(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                found.append(path[path.index(nxt):] + [nxt])
            else:
                walk(nxt, path + [nxt])

    for start in sorted(graph):
        walk(start, [start])
    return found


def test_decode_imports_have_no_cycle():
    graph = _decode_imports()
    assert {"acceptance", "methods", "relaxation_w1", "planned", "budget"} <= set(graph)
    assert _cycles(graph) == []
    assert _cycles({**graph, "planned": graph["planned"] | {"relaxation_w1"}})  # the old cycle
