"""The one verdict rule (gsd_lab.experiments.verdicts) and the matched-NFE comparison built on it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gsd_lab.experiments import matched
from gsd_lab.experiments.verdicts import (
    NOISE_Z,
    NOT_RUN,
    combined,
    paired_difference,
    paired_values,
    verdict,
)


def test_verdict_rule_edge_cases():
    assert verdict(math.nan, 1.0, -1) == "not run"
    assert verdict(-5.0, None, -1) == "noise"  # no standard error: nothing shown
    assert verdict(-5.0, math.nan, -1) == "noise"
    assert verdict(-NOISE_Z * 1.0, 1.0, -1) == "noise"  # exactly at the threshold: still noise
    assert verdict(-NOISE_Z * 1.0 - 1e-9, 1.0, -1) == "yes"
    assert verdict(NOISE_Z * 1.0 + 1e-9, 1.0, -1) == "no"
    assert verdict(0.0, 0.0, 1) == "noise"  # equal on every image: neither side is larger
    assert verdict(1e-12, 0.0, 1) == "yes"  # a constant difference on every image is decisive
    assert verdict(-3.0, 1.0, -1, size_ok=False) == "direction only"
    assert verdict(3.0, 1.0, -1, size_ok=False) == "no"  # the wrong sign fails before the size
    assert verdict(-1.0, 1.0, -1, size_ok=True) == "noise"  # the size cannot rescue noise
    with pytest.raises(ValueError, match="expected_sign"):
        verdict(1.0, 1.0, 0)
    with pytest.raises(ValueError, match="se"):
        verdict(1.0, -1.0, 1)


def test_combined_verdicts():
    assert combined(["yes", "yes"]) == "yes"
    assert combined(["yes", "noise"]) == "noise"
    assert combined(["yes", "no"]) == combined(["noise", "no"]) == "no"
    assert combined(["yes", "direction only"]) == "direction only"
    assert combined(["yes", "not run"]) == combined([]) == "not run"


def test_paired_differences():
    diff = paired_values([3.0, 5.0, 4.0], [1.0, 2.0, 2.0])  # differences 2, 3, 2
    assert diff.difference == pytest.approx(7 / 3) and diff.n == 3
    assert diff.se == pytest.approx(np.std([2, 3, 2], ddof=1) / math.sqrt(3))
    assert paired_values([1.0], [0.0]).se is None
    with pytest.raises(ValueError, match="paired"):
        paired_values([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        paired_values([1.0, math.nan], [1.0, 2.0])
    a = {"method": "a", "per_image": {"prompt": ["x", "y"], "seed": [0, 1], "nfe": [10, 12]}}
    b = {"method": "b", "per_image": {"prompt": ["x", "y"], "seed": [0, 1], "nfe": [11, 15]}}
    assert paired_difference(a, b, "nfe").difference == pytest.approx(-2.0)
    assert paired_difference(a, None, "nfe") is NOT_RUN and paired_difference(a, b, "w1") is NOT_RUN
    with pytest.raises(ValueError, match="not paired"):
        paired_difference(a, {**b, "per_image": {**b["per_image"], "seed": [0, 2]}}, "nfe")


def _curve(name: str, points: list[tuple[float, float]], noise: np.ndarray | None = None, images: int = 4) -> list[dict]:
    """Rows of one rule: per configuration (NFE, distortion), the same on every image unless
    ``noise`` [configurations, images] is added to the distortion."""
    rows = []
    for i, (nfe, value) in enumerate(points):
        values = np.full(images, value) + (0 if noise is None else noise[i])
        rows.append({"method": f"{name} {i}", "nfe": nfe, "distortion": float(values.mean()),
                     "per_image": {"prompt": [f"p{j % 2}" for j in range(images)], "seed": list(range(images)),
                                   "nfe": [nfe] * images, "distortion": values.tolist(), "w1": [None] * images}})
    return rows


def test_matched_nfe_reads_both_curves_at_every_anchor():
    amplify = _curve("Amplify", [(100.0, 0.10), (80.0, 0.20), (60.0, 0.30), (60.0, 0.34)])  # a tie at 60: 0.32
    gsd = _curve("GSD", [(110.0, 0.0), (90.0, 0.17), (70.0, 0.24), (60.0, 0.35)])
    rows = matched.matched_nfe({"GSD": gsd, "Amplify": amplify}, "distortion", resamples=50)
    # GSD at 110 lies outside Amplify's range; each NFE once (60 is GSD's and twice Amplify's).
    assert [r["nfe"] for r in rows] == [100.0, 90.0, 80.0, 70.0, 60.0]
    assert [r["anchor"] for r in rows] == ["Amplify 0", "GSD 1", "Amplify 1", "GSD 2", "GSD 3"]
    assert [r["reference_value"] for r in rows] == pytest.approx([0.085, 0.17, 0.205, 0.24, 0.35])
    assert [r["other_value"] for r in rows] == pytest.approx([0.10, 0.15, 0.20, 0.26, 0.32])
    assert [r["difference"] for r in rows] == pytest.approx([-0.015, 0.02, 0.005, -0.02, 0.03])
    # The same values on every image: no spread, every nonzero difference is decisive.
    assert [r["verdict"] for r in rows] == ["yes", "no", "no", "yes", "no"]
    assert all(r["se"] <= 1e-12 for r in rows)
    assert rows[0]["measure"] == "TV" and rows[0]["other"] == "Amplify" and rows[0]["images"] == 4
    assert matched.matched_nfe({"GSD": gsd, "Amplify": amplify}, "w1") == []  # no W1 recorded: no rows
    text = matched.matched_summary(rows)
    assert "on TV, GSD vs Amplify: lower at 2 and higher at 3 of 5 matched points" in text


def test_matched_nfe_calls_image_noise_noise():
    g = torch.Generator().manual_seed(0)
    image_effect = 0.05 * torch.randn(20, generator=g, dtype=torch.float64).numpy()  # shared: paired images
    own = 0.02 * torch.randn(4, 20, generator=g, dtype=torch.float64).numpy()  # each configuration's own noise
    amplify = _curve("Amplify", [(100.0, 0.10), (80.0, 0.20), (60.0, 0.30)], own[:3] + image_effect, images=20)
    gsd = _curve("GSD", [(80.0, 0.20)], own[3:] + image_effect, images=20)  # no true difference
    (row,) = matched.matched_nfe({"GSD": gsd, "Amplify": amplify}, "distortion", resamples=400)
    assert row["verdict"] == "noise" and abs(row["difference"]) <= NOISE_Z * row["se"]
    assert row["low"] < row["difference"] < row["high"]
    # Pairing: the shared image effect (0.05) cancels; the SE is that of the own noise (~0.02 sqrt(2) / sqrt(20)).
    assert 0.003 < row["se"] < 0.012
    shifted = _curve("GSD", [(80.0, 0.25)], own[3:] + image_effect, images=20)  # 0.05 higher
    assert matched.matched_nfe({"GSD": shifted, "Amplify": amplify}, resamples=400)[0]["verdict"] == "no"
    bad = [{**r, "per_image": {**r["per_image"], "seed": [0, 1, 2, 4] + list(range(5, 21))}} for r in gsd]
    with pytest.raises(ValueError, match="same images"):
        matched.matched_nfe({"GSD": bad, "Amplify": amplify})
    with pytest.raises(ValueError, match="measure"):
        matched.matched_nfe({"GSD": gsd, "Amplify": amplify}, "clip")


def test_paired_difference_round_trips_through_its_numbers_exactly():
    """results.json keeps a paired change as numbers (``as_dict``); ``from_dict`` reads them back
    exactly (the ledger does), and a change not run stays NOT_RUN."""
    import json

    from gsd_lab.experiments.verdicts import NOT_RUN, PairedDifference

    for diff in (PairedDifference(3.9702, 2.9731, 10), PairedDifference(-0.0991, 0.126, 7),
                 PairedDifference(12.0, None, 1)):
        assert PairedDifference.from_dict(json.loads(json.dumps(diff.as_dict()))) == diff
    assert NOT_RUN.as_dict() == {"difference": None, "se": None, "n": 0}
    assert PairedDifference.from_dict(NOT_RUN.as_dict()) is NOT_RUN
    assert PairedDifference.from_dict(None) is NOT_RUN


def test_ledger_judges_top100_by_the_paired_change():
    """The ledger's top-100 row reads the paired change of results.json's replacement study (its
    numbers, ``paired_changes``), not the unpaired difference of the two means."""
    import copy
    import json
    from pathlib import Path

    from gsd_lab.experiments import claims, ledger
    from gsd_lab.experiments.verdicts import minimum_detectable

    results = json.loads((Path(__file__).parents[3] / "figures" / "results.json").read_text())
    replacement = copy.deepcopy(results["tables"]["replacement"])
    changes = {"difference": -3.2468, "se": 1.1, "n": 10}
    replacement["paired_changes"] = {"top-k": {"condition_score": changes}}
    results["tables"]["replacement"] = replacement
    claim = "top100_replacement_keeps_quality"
    row = next(r for r in ledger.ledger(results) if r["id"] == claim)
    assert "(paired)" in row["here"] and "unpaired" not in row["here"]
    # The interval the verdict was decided on, d +- 2 SE, is the paired change's.
    assert "-3.25 [-5.45, -1.05] (n = 10)" in row["here"] and row["outcome"] == "no"
    stored = claims.as_json(claims.of_results(results))[claim]
    assert stored["value"] == changes["difference"] and stored["se"] == changes["se"]
    assert stored["low"] == pytest.approx(-3.2468 - 2.2) and stored["high"] == pytest.approx(-1.0468)
    replacement["paired_changes"]["top-k"]["condition_score"] = {**changes, "difference": 0.5}
    moved = claims.as_json(claims.of_results(results))[claim]
    assert moved["value"] == 0.5 and moved["outcome"] == "noise"
    assert moved["detectable"] == pytest.approx(minimum_detectable(1.1))
