"""Claims as data: every claim's rule is a declarative comparison or a named judge (no lambda),
and every results.json (or benchmark file) path a claim names is there in the committed run."""

from __future__ import annotations

import pytest

from gsd_lab.experiments import claims, ledger
from gsd_lab.experiments.evidence import Compare, Ratio, Row, Table2Row, resolve


def test_every_rule_is_named_and_every_run_claim_names_its_evidence():
    for claim in claims.CLAIMS:
        assert getattr(claim.rule, "__name__", type(claim.rule).__name__) != "<lambda>", claim.id
        if not isinstance(claim.rule, claims.NotRun) and claim.id != "theorem1_dynamic_clusters":
            assert claim.paths, claim.id  # only the exact proof and the not-run claims read none


def test_every_evidence_path_is_in_the_committed_run():
    results = ledger.load_results()
    missing = []
    for claim in claims.CLAIMS:
        for path in claim.paths:
            try:
                claims.read(path, results)
            except KeyError as error:
                missing.append(f"{claim.id}: {error}")
    assert missing == []


def test_a_path_to_a_row_the_run_lacks_is_refused():
    results = {"tables": {"table1": [{"method": "AR", "nfe": 1024.0}]}}
    assert resolve(results, "tables.table1[method=AR].nfe") == 1024.0
    with pytest.raises(KeyError, match="no row"):
        resolve(results, "tables.table1[method=GSD (G=50)].nfe")
    with pytest.raises(KeyError):
        claims.read("benchmarks/results/no_such_file.json:rows", results)


def test_declarative_rules_name_what_they_compare():
    """The compared text the ledger prints comes from the rows and the measure."""
    gsd, sjd = Row(claims.GSD50), Row(claims.SJD)
    assert Compare(gsd, sjd, "nfe", -1).compared == "GSD (G=50) - SJD, NFE"
    assert Compare(gsd, Row("AR"), claims.QUALITY, 1).compared == "GSD (G=50) - AR, condition score"
    assert Ratio(Table2Row("(B)"), sjd, 1.0).paths[0].startswith("tables.table2[method=")
    run = claims.Run({"table1": [{"method": "SJD", "nfe": 1.0}], "table2": []})
    assert Row("SJD", "table2", fallback="table1").find(run) == {"method": "SJD", "nfe": 1.0}
    assert Row("SJD", "table2").find(run) is None
