"""The frontier (gsd_lab.experiments.frontier): its configurations share the tables' decodes,
its matched-distortion verdicts follow the numbers, the one-step Pareto line holds every rule
below it (the relaxation on it) and catches a rule that beats it, and the findings word it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from gsd_lab.experiments import claims, findings, frontier, ledger, plots, toy
from gsd_lab.experiments.runs import MethodSpec, Recording


def _curve(points, noise, images=30, seed=0):
    """Rows (runs.summarize's shape) of configurations at mean (nfe, tv, w1), each image shifted
    by the same per-image effect (paired) plus its own noise of size ``noise``."""
    rng = np.random.default_rng(seed)
    effect = rng.normal(0, 5, images)
    rows = []
    for i, (label, nfe, tv, w1) in enumerate(points):
        own = np.random.default_rng(seed + 100 + i).normal(0, noise, images)
        per_nfe = (nfe + effect + own).tolist()
        per_tv = np.full(images, tv).tolist()
        per_w1 = None if w1 is None else np.full(images, w1).tolist()
        rows.append(
            {
                "method": label,
                "images": images,
                "nfe": float(np.mean(per_nfe)),
                "distortion": tv,
                "w1": w1,
                "per_image": {
                    "prompt": [f"c{j % 10}" for j in range(images)],
                    "seed": list(range(images)),
                    "nfe": per_nfe,
                    "distortion": per_tv,
                    "w1": [None] * images if per_w1 is None else per_w1,
                },
            }
        )
    return rows


def _curves(gsd_nfe=50.0, noise=1.0):
    return {
        "GSD (G=50)": _curve([("GSD (G=50)", gsd_nfe, 0.12, 0.02)], noise, seed=1),
        frontier.RELAXATION: _curve(
            [("SJD", 80.0, 0.0, 0.0), ("d=0.1", 65.0, 0.1, 0.03), ("d=0.3", 55.0, 0.3, 0.09)],
            noise,
            seed=1,
        ),
        frontier.DIAL: _curve(
            [("MC-SJD", 58.0, 0.0, 0.0), ("B=8", 55.0, 0.03, None), ("B=32", 51.0, 0.08, None)],
            noise,
            seed=1,
        ),
    }


def test_matched_distortion_interpolates_the_curve_at_gsd_and_judges_the_sign():
    curves = _curves()
    pairs = frontier.comparisons(curves)
    assert pairs == [("GSD (G=50)", frontier.RELAXATION), ("GSD (G=50)", frontier.DIAL)]
    rows = frontier.matched_distortion(curves, pairs, "distortion", resamples=400)
    relax = next(r for r in rows if r["other"] == frontier.RELAXATION)
    # At TV 0.12 the relaxation's curve reads 65 + (55 - 65) * 0.02 / 0.2 = 64 (noise aside).
    expected = curves["GSD (G=50)"][0]["nfe"] - (
        curves[frontier.RELAXATION][1]["nfe"]
        + (curves[frontier.RELAXATION][2]["nfe"] - curves[frontier.RELAXATION][1]["nfe"]) * 0.1
    )
    assert relax["difference"] == pytest.approx(expected, abs=1e-9)
    assert relax["inside"] and relax["verdict"] == "yes" and relax["n"] == 30
    assert 0 < relax["se"] < 1.0  # paired: the shared per-image effect (sd 5) cancels
    dial = next(r for r in rows if r["other"] == frontier.DIAL)
    assert not dial["inside"]  # GSD's TV beyond the dial's largest: its nearest end is read
    assert dial["other_nfe"] == pytest.approx(curves[frontier.DIAL][2]["nfe"])
    # GSD much slower: the same comparison turns to "no"; equal up to noise: "noise".
    slow = frontier.matched_distortion(_curves(gsd_nfe=75.0), pairs[:1], resamples=400)
    assert slow[0]["verdict"] == "no"
    tie = frontier.matched_distortion(_curves(gsd_nfe=64.0, noise=8.0), pairs[:1], resamples=400)
    assert tie[0]["verdict"] == "noise"


def test_w1_matching_skips_curves_without_w1_and_other_images_raise():
    curves = _curves()
    rows = frontier.matched_distortion(curves, frontier.comparisons(curves), "w1", resamples=50)
    assert [r["other"] for r in rows] == [
        frontier.RELAXATION
    ]  # a curve whose rows have no W1 is skipped
    assert rows[0]["measure"] == "W1" and rows[0]["distortion"] == pytest.approx(0.02)
    bad = copy.deepcopy(curves)
    bad[frontier.RELAXATION][0]["per_image"]["seed"][3] = 99
    with pytest.raises(ValueError, match="same images"):
        frontier.matched_distortion(bad, frontier.comparisons(bad))
    with pytest.raises(ValueError, match="measure"):
        frontier.matched_distortion(curves, [], "clip")


def test_frontier_configurations_share_the_tables_keys():
    """Seed 0 of the frontier's GSD, MC-SJD, MC-GSD, Amplify, LANTERN and SJD is the tables'
    decode: the same ``MethodSpec.key`` once both pass through the preset."""
    from gsd_lab.paper.plan import FigureSizes, table_specs, with_preset

    sizes = FigureSizes.default()
    t1, t2, pareto, distortion = table_specs(sizes)
    table_keys = {
        s.key for s in t1 + t2 + [s for c in (pareto, distortion) for v in c.values() for s in v]
    }
    curves = frontier.frontier_curves(
        sizes.frontier_group, sizes.frontier_deltas, sizes.frontier_budgets, rivals=frontier.RIVALS
    )
    specs = {s.key: s for v in curves.values() for s in with_preset(v, sizes, "default")}
    shared = {s.label for k, s in specs.items() if k in table_keys}
    assert shared == {
        "GSD (G=50)",
        "MC-SJD (maximal)",
        "MC-GSD (G=50, maximal)",
        "Amplify (k=2)",
        "LANTERN k=1001 (delta=0.1)",
        "SJD",
    }
    with pytest.raises(ValueError, match="rivals"):
        frontier.frontier_curves(rivals=("medusa",))
    # An optimal rule's curve starts at the lossless configuration under its table key, never
    # under a second name that would decode it again: the relaxation at delta 0 is SJD's key
    # (MC-SJD's with maximal drafts), the dials' and the transport's zero points are MC-SJD.
    sjd, mc_sjd = frontier.tables.SJD.key, frontier.tables.coupled("maximal").key
    assert frontier.relaxation(0.0).key == sjd
    assert frontier.relaxation(0.0, "maximal").key == mc_sjd
    assert {curves[name][0].key for name in frontier.OPTIMAL if name in curves} == {sjd, mc_sjd}
    new = {s.label for k, s in specs.items() if k not in table_keys}
    assert len(new) == 2 * len(sizes.frontier_deltas) + len(sizes.frontier_budgets)
    w1_curves = frontier.frontier_curves(
        sizes.frontier_group,
        (),
        (),
        sizes.frontier_transport_eps,
        sizes.frontier_w1_budgets,
        rivals=(),
    )
    assert [s.method.acceptance.eps for s in w1_curves[frontier.TRANSPORT][1:]] == list(
        sizes.frontier_transport_eps
    )
    assert all(s.method.draft == "maximal" for s in w1_curves[frontier.TRANSPORT])
    dial_methods = [s.method for s in w1_curves[frontier.W1_DIAL][1:]]
    assert [(m.acceptance.budget, m.acceptance.measure) for m in dial_methods] == [
        (b, "w1") for b in sizes.frontier_w1_budgets
    ]
    quick = FigureSizes.quick()
    q_curves = frontier.frontier_curves(
        quick.frontier_group,
        quick.frontier_deltas,
        quick.frontier_budgets,
        rivals=quick.frontier_rivals,
        coupled=quick.frontier_coupled,
    )
    assert sum(len(v) for v in q_curves.values()) <= 3
    assert FigureSizes.paper().frontier_seeds == ()


class _Cache:
    """A RunCache stand-in that records which (seeds, spec) it was asked to decode."""

    calls: list = []

    def __init__(self, model, prompts, seeds, filters=None, **options):
        self.model, self.prompts, self.seeds, self.filters = model, prompts, seeds, filters
        self.recording = options.get("recording", Recording(distortion=True, w1=True, w1_draws=2))
        self.progress_lines, self.workers = False, options.get("workers", 1)

    def prefetch(self, specs):
        _Cache.calls.append(("prefetch", tuple(self.seeds), self.workers, [s.label for s in specs]))

    def records(self, spec):
        _Cache.calls.append((tuple(self.seeds), self.recording.w1, spec.label))
        return [(seed, p, spec.label) for seed in self.seeds for p in self.prompts]


def test_frontier_runs_reads_shared_seeds_from_the_tables_cache(monkeypatch):
    monkeypatch.setattr(frontier, "RunCache", _Cache)
    _Cache.calls = []
    main = _Cache(None, ["a", "b"], [0])
    runs = frontier.FrontierRuns(main, (0, 1, 2))
    gsd, dial = MethodSpec("GSD", frontier.tables.gsd(50).method), frontier.dial(8.0)
    records = runs.records(gsd)
    assert [r[0] for r in records] == [0, 0, 1, 1, 2, 2]
    assert _Cache.calls == [((0,), True, "GSD"), ((1, 2), True, "GSD")]
    _Cache.calls = []
    assert [r[0] for r in runs.records(dial)] == [0, 0, 1, 1, 2, 2]
    assert _Cache.calls == [((0,), True, dial.label), ((1, 2), True, dial.label)]  # W1 too
    curves = {"GSD": [gsd], "dial": [dial]}
    assert runs.images_to_decode(curves, {gsd.key}) == 2 * 2 + 2 * 3  # dial: all 3 seeds
    assert runs.images_to_decode(curves, set()) == 2 * 3 + 2 * 3
    # rows: every distinct configuration prefetched once per cache (split over main's workers),
    # GSD on two curves included once.
    main.workers = 2
    runs = frontier.FrontierRuns(main, (0, 1, 2))
    _Cache.calls = []
    monkeypatch.setattr(frontier, "summarize", lambda model, records, quality_row: len(records))
    assert runs.rows({"GSD": [gsd], "dial": [gsd, dial]}) == {"GSD": [6], "dial": [6, 6]}
    assert _Cache.calls[:2] == [
        ("prefetch", (0,), 2, ["GSD", dial.label]),
        ("prefetch", (1, 2), 2, ["GSD", dial.label]),
    ]
    other = frontier.FrontierRuns(_Cache(None, ["a"], [0, 5]), (0, 1))  # seed 5 is no frontier seed
    assert other.shared_seeds == () and other.own_seeds == (0, 1)
    with pytest.raises(ValueError, match="distinct"):
        frontier.FrontierRuns(main, (0, 0))


# ---- the one-step Pareto line ---------------------------------------------------------------


def _rows():
    p, q = toy.dirichlet_pairs(12, 300, alpha=0.5, seed=3)
    embeddings = torch.randn(12, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return p, q, embeddings


@pytest.mark.parametrize("delta", [0.0, 0.05, 0.2, 1.0])
def test_relaxation_lies_on_the_line_and_no_rule_is_above_it(delta):
    p, q, embeddings = _rows()
    rules = frontier.standard_rules(3, delta=delta, embeddings=embeddings)
    points = frontier.one_step_points(p, q, rules)
    assert frontier.line_violations(p, q, points) == {name: 0 for name in rules}
    relaxed = next(k for k in points if k.startswith("TV-optimal"))
    assert frontier.line_gap(p, q, points[relaxed]) <= 1e-12
    above, checked, gap = frontier.check_rules(p, q, rules)
    assert (above, checked) == (0, 300 * len(rules)) and gap <= 1e-12
    # A rule that accepts every x with at least min(1, p/q) and keeps SD's residual lies on the
    # line (TV(out, p) = alpha - (1 - T) exactly; proofs/10 Claim 3): SD, Amplify (k=2); LANTERN
    # is on it too. GSD's clusters and rank bins accept some tokens less often, so they sit
    # strictly below on some rows: the line has power.
    for name in ("SD", "Amplify (k=2)", "LANTERN (k=3, delta=0.1)"):
        assert frontier.line_gap(p, q, points[name]) <= 1e-12, name
    T = frontier.tv_distance(p, q)
    for name in ("GSD (G=3)", "rank bins (G=3)", "rank bins, cluster residual (G=3)"):
        tv, acceptance = points[name]
        assert float((frontier.pareto_bound(T, tv) - acceptance).max()) > 1e-2, name


def test_a_rule_that_beats_the_line_is_caught():
    """Negative control: a fake rule that claims a lossless output (TV 0) while accepting as
    the relaxation does, or the relaxation's points with a sliver more acceptance."""
    p, q, _ = _rows()
    relaxed = frontier.one_step_points(
        p, q, {"r": frontier.standard_rules(delta=0.1)["TV-optimal relaxation (delta=0.1)"]}
    )["r"]
    fake = {
        "lossless claim": (torch.zeros_like(relaxed[0]), relaxed[1]),
        "greedy": (relaxed[0], relaxed[1] + 1e-9),
    }
    counts = frontier.line_violations(p, q, fake)
    assert counts["greedy"] == 300 and counts["lossless claim"] > 0


def test_one_step_points_need_float64():
    p, q, _ = _rows()
    with pytest.raises(ValueError, match="float64"):
        frontier.one_step_points(p.float(), q.float(), {"SD": None})


# ---- figure and findings --------------------------------------------------------------------


def test_frontier_figure_names_the_better_corner():
    fig = plots.frontier(_curves())
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert ax.get_title().startswith("better: down-left")
        assert ax.get_ylabel() == "NFE per image (lower better)"
        assert ax.get_xlabel().endswith("(lower better)")


def _front(gsd_nfe):
    curves = _curves(gsd_nfe=gsd_nfe)
    pairs = frontier.comparisons(curves)
    matched = [
        row
        for m in ("distortion", "w1")
        for row in frontier.matched_distortion(curves, pairs, m, resamples=200)
    ]
    return {
        "seeds": [0, 1, 2],
        "prompts": [f"c{j}" for j in range(10)],
        "shared_seeds": [0],
        "group_size": 50,
        "curves": curves,
        "matched": matched,
    }


def test_findings_word_the_frontier_by_its_verdicts():
    """README's frontier rows are the claims gsd_fewer_nfe_than_* (one per optimal rule at
    GSD's TV), each answered by its verdict with the interval it was decided on."""
    results = copy.deepcopy(ledger.load_results())
    results["tables"].pop("frontier", None)  # the committed run's own frontier: rendered below
    assert findings.frontier_lines(claims.of_results(results)) == []
    base = findings.findings_rows(results)
    results["tables"]["frontier"] = _front(50.0)
    fast = findings.frontier_lines(claims.of_results(results))
    tv = [r for r in results["tables"]["frontier"]["matched"] if r["measure"] == "TV"]
    assert len(fast) == len(tv) and len(findings.findings_rows(results)) == len(base) + len(tv)
    assert all(r["answer"].startswith("yes: GSD needs fewer") and r["n"] == "30" for r in fast)
    outside = [row for row, m in zip(fast, tv) if not m["inside"]]
    assert outside and all("outside its range" in row["answer"] for row in outside)
    assert all(f"At GSD's TV ({m['distortion']:.3f})" in row["question"] for row, m in zip(fast, tv))
    results["tables"]["frontier"] = _front(75.0)
    slow = findings.frontier_lines(claims.of_results(results))
    assert all(r["answer"].startswith("no: the ") and "GSD needs fewer" not in r["answer"]
               for r in slow)
    for row, m in zip(slow, (r for r in results["tables"]["frontier"]["matched"]
                             if r["measure"] == "TV")):
        assert f": {m['difference']:+.1f} [{m['difference'] - 2 * m['se']:+.1f}, " in row[
            "A - B [+- 2 SE]"]


def _stored(front):
    """A stored frontier (results.json's shape) with its specs (as figures lists them)."""
    specs = {
        frontier.RELAXATION: [
            frontier.tables.SJD,
            frontier.relaxation(0.1),
            frontier.relaxation(0.3),
        ],
        frontier.DIAL: [
            frontier.tables.coupled("maximal"),
            frontier.dial(8.0),
            frontier.dial(32.0),
        ],
        "GSD (G=50)": [frontier.tables.gsd(50)],
    }
    return {**front, "specs": {k: [s.to_record() for s in v] for k, v in specs.items()}}


def test_invariant_lines_hold_on_honest_rows_and_catch_broken_ones():
    front = _stored(_front(50.0))
    front["curves"][frontier.RELAXATION][0]["per_image"]["distortion"] = [0.0] * 30  # SJD
    front["curves"][frontier.DIAL][0]["per_image"]["distortion"] = [0.0] * 30  # MC-SJD
    front["curves"][frontier.DIAL][1]["per_image"]["distortion"] = [8.0 / 256] * 30  # B spent
    front["curves"][frontier.DIAL][2]["per_image"]["distortion"] = [0.08] * 30
    lines = frontier.invariant_lines(front, 256)
    assert lines == [
        "lossless rows (2): TV 0 on every image (1e-12): True",
        "relaxation rows (2): every image's mean TV per token <= delta (1e-12): True",
        "dial rows (2): every image's summed TV <= B (1e-9): True",
        f"matched rows ({len(front['matched'])}): verdicts by the one rule: True",
        "transport and W1-dial rows (0): W1 estimated, no exact invariant",
    ]
    broken = copy.deepcopy(front)
    broken["curves"][frontier.DIAL][1]["per_image"]["distortion"][4] = 8.01 / 256  # over B
    broken["curves"][frontier.RELAXATION][1]["per_image"]["distortion"][0] = 0.1 + 1e-9
    broken["curves"][frontier.RELAXATION][0]["per_image"]["distortion"][2] = 1e-9
    broken["matched"][0]["verdict"] = "yes" if broken["matched"][0]["verdict"] != "yes" else "no"
    assert all(line.endswith("False") for line in frontier.invariant_lines(broken, 256)[:4])
