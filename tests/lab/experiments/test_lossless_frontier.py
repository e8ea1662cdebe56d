"""The lossless decoders on the frontier: the committed benchmark rows paired with the committed
frontier, the same numbers the benchmarks printed, and every reason a source is left out."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gsd_lab.experiments import lossless_frontier as lf
from gsd_lab.experiments.verdicts import verdict
from gsd_lab.paper import render

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def front() -> dict:
    return json.loads((ROOT / "figures/results.json").read_text())["tables"]["frontier"]


def test_every_committed_source_pairs_with_the_committed_frontier(front):
    out = lf.lossless_results(front, "standin")
    assert out["left_out"] == [] and len(out["rows"]) == len(lf.SOURCES)
    for row in out["rows"]:
        stored = json.loads((ROOT / row["file"]).read_text())["rows"][row["method"]]
        assert row["per_image"]["nfe"] == stored["per_image"]["nfe"]
        for name, versus in row["versus"].items():
            for key in ("nfe", "modelled"):
                v = versus[key]
                if v["difference"] is not None:
                    assert v["verdict"] == verdict(v["difference"], v["se"], expected_sign=-1)
        # The benchmark's own ratio to MC-SJD, where it stored one, is the one computed here.
        if "modelled_ratio_to_mc_sjd" in stored:
            ratio = row["versus"]["MC-SJD"]["modelled_ratio"]["ratio"]
            assert ratio == pytest.approx(stored["modelled_ratio_to_mc_sjd"], rel=1e-12)


def test_a_mean_only_modelled_time_is_not_paired(front):
    """8 candidates pass the ridge: the file keeps only its mean modelled time, so no paired
    time verdict is made up for it; below the ridge the per-image time is the NFE."""
    out = lf.lossless_results(front, "standin")
    (k8,) = [r for r in out["rows"] if r["method"] == "MC-SJD, 8 candidates"]
    assert k8["per_image"]["modelled"] is None and k8["modelled"] > k8["nfe"]
    assert k8["versus"]["MC-SJD"]["modelled"]["verdict"] == "not run"
    (k4,) = [r for r in out["rows"] if r["method"] == "MC-SJD, 4 candidates"]
    assert k4["per_image"]["modelled"] == k4["per_image"]["nfe"]


def test_sources_that_cannot_be_paired_are_left_out_with_their_reason(front, tmp_path):
    tree = lf.LosslessSource("benchmarks/results/token_trees_standin_6.json",
                             "MC-SJD, tree (6,), window 16")
    cases = {
        "not in this checkout": (lf.LosslessSource("benchmarks/results/none.json", "x"), front),
        "decoded on standin, this frontier on digits": (tree, front),
        "has no row": (lf.LosslessSource(tree.path, "MC-SJD, tree (9,)"), front),
    }
    for reason, (source, frontier) in cases.items():
        model = "digits" if "digits" in reason else "standin"
        out = lf.lossless_results(frontier, model, sources=(source,))
        assert out["rows"] == [] and reason in out["left_out"][0]["reason"], reason
    # Negative control: one image's MC-SJD NFE changed (other code) is caught and named.
    changed = copy.deepcopy(front)
    changed["curves"]["MC-SJD (maximal)"][0]["per_image"]["nfe"][1] += 1
    out = lf.lossless_results(changed, "standin", sources=(tree,))
    assert out["rows"] == [] and "did not reproduce" in out["left_out"][0]["reason"]
    # Other images: the frontier's generator seeds reordered.
    other = copy.deepcopy(front)
    other["curves"]["MC-SJD (maximal)"][0]["per_image"]["seed"].reverse()
    out = lf.lossless_results(other, "standin", sources=(tree,))
    assert "other images" in out["left_out"][0]["reason"]


def test_results_md_shows_the_rows_and_the_verdicts(front):
    text = render._lossless_text(lf.lossless_results(front, "standin"))
    assert "**Lossless decoders beyond MC-SJD**" in text
    assert "| MC-SJD, tree (6,), window 16 | MC-SJD | yes:" in text
    assert render._lossless_text(None) == ""
    # On another model nothing pairs: one line and the reasons, no empty tables.
    none = render._lossless_text(lf.lossless_results(front, "digits"))
    assert "none of the committed" in none and "|---|" not in none
    assert none.count("decoded on standin, this frontier on digits") == len(lf.SOURCES)


def test_benchmark_files_speak_for_their_own_model_only():
    """The committed lossless benchmark files were decoded on the stand-in: a run on another
    model (the digits) gets "not run" for every claim they decide, with the reason, and the
    stand-in's run keeps its verdicts."""
    from gsd_lab.experiments import claims

    stored = json.loads((ROOT / "figures/results.json").read_text())
    file_claims = ["block_verification_fewer_nfe_than_mc_sjd", "multidraft_k2_fewer_nfe_than_mc_sjd",
                   "multidraft_k8_fewer_nfe_than_mc_gsd"]
    here = claims.of_results(stored)
    assert all(here[c].outcome != "not run" for c in file_claims)
    elsewhere = claims.of_results({**stored, "model": "digits"})
    for cid in file_claims:
        assert elsewhere[cid].outcome == "not run"
        assert "decoded on the standin, this run on digits" in elsewhere[cid].note
