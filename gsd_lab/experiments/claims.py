"""Every claim, by a stable id: its statement, the paper's value and source, and what a run's
tables say about it (``Evidence``: the numbers, and the verdict of ``verdicts``).

``evaluate(tables)`` is a pure function of a figures run's tables (results.json's ``tables``:
rows with per-image values): one ``Evidence`` per id of ``IDS``, in the ledger's order
(headline claims first). The figures job stores ``as_json(...)`` in results.json under
``claims`` (numbers as numbers: the difference or ratio, its SE, n, the interval
d +- ``NOISE_Z`` SE it was decided on, the smallest difference detectable at 80% power); the
ledger (docs/claims.md), README's findings and the notebooks render from the same ``Evidence``.
Rows are found by the labels their specs build (``tables``), never by display text.

Kinds of evidence and their rule:

- "difference": d = mean(a_i - b_i) over paired images, ``verdicts.verdict`` with the claim's
  sign; a claim that something is *unchanged* is judged as "it changed" on |d| (a "yes" there
  reads "no": the change was detected);
- "ratio": R = mean(a) / mean(b) against the paper's ratio, ``verdicts.ratio_verdict``;
- "points": several differences (matched NFE points, (B) against (C) and (D)), one verdict by
  ``verdicts.combined``;
- "share": a run property inside the paper's range; "exact": proved in Fractions;
- "none": not run here, with the reason.

The lossless decoders beyond MC-SJD (block verification, multiple drafts) were measured
by their own benchmarks, not by the figures run: their claims read the committed benchmark files
(``committed``, under ``BENCHMARK_RESULTS``; "not run" when a file is absent) and are judged by
the same ``verdicts.verdict``, whatever ``tables`` holds.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from . import paper_values
from . import frontier, tables, toy
from .matched import MEASURES
from .verdicts import (
    NOISE_Z,
    Decision,
    PairedDifference,
    PairedRatio,
    combined,
    interval,
    minimum_detectable,
    paired_difference,
    paired_ratio,
    paired_values,
    ratio_verdict,
    verdict,
    word,
)

PAPER_GROUP = 50  # Table 1's GSD row: the paper's G
QUALITY = paper_values.QUALITY
AR, SJD = tables.AR.label, tables.SJD.label
GSD50 = tables.gsd(PAPER_GROUP).label
AMPLIFY3 = tables.amplify(3).label
MC_MAXIMAL, MC_GUMBEL = tables.coupled("maximal").label, tables.coupled("gumbel").label
MC_GSD50 = tables.coupled("maximal", PAPER_GROUP).label


@dataclass(frozen=True)
class Evidence:
    """What a run says about one claim. ``value``: d, R or a share; ``se``: its (paired) SE;
    ``parts``: the differences a "points" claim combines (``at``: a matched point's NFE)."""

    outcome: str
    kind: str
    compared: str = ""
    value: float | None = None
    se: float | None = None
    n: int = 0
    suffix: str = ""  # a ratio's: "x" for a speed-up
    digits: int = 1
    paper_value: float | None = None
    parts: tuple[Evidence, ...] = ()
    at: float | None = None
    exact: str = ""
    note: str = ""

    @property
    def diff(self) -> PairedDifference:
        value = math.nan if self.value is None else self.value
        return PairedDifference(value, self.se, self.n)

    def interval(self) -> tuple[float, float] | None:
        """value +- ``NOISE_Z`` SE, the interval the verdict was decided on."""
        return interval(self.diff) if self.kind in ("difference", "ratio") else None

    def span(self) -> str:
        """ "+2.6 [-2.5, +7.7]" (a ratio: "1.05x [0.98, 1.12]"); "-" when not run."""
        if self.kind == "ratio":
            ratio = PairedRatio(math.nan if self.value is None else self.value, self.se, self.n)
            return ratio.text(2, self.suffix)
        if self.kind == "difference":
            return Decision(self.outcome, self.diff).span(self.digits)
        return "-"

    def measured(self) -> str:
        """The numbers the verdict was decided on, without the verdict (the ledger's "here")."""
        if self.outcome == "not run" and self.kind != "exact":
            return "-"
        if self.kind == "difference":
            text = Decision(self.outcome, self.diff).text(self.digits)
            return f"{self.compared}: " + text.split(": ", 1)[1]
        if self.kind == "ratio":
            return f"{self.compared}: {self.span()} (n = {self.n})"
        if self.kind == "points":
            return f"{self.compared}: " + "; ".join(_part_text(p) for p in self.parts)
        if self.kind == "share":
            return f"{self.value:.1%}"
        return self.exact or "-"

    def as_dict(self) -> dict[str, Any]:
        """results.json's numbers for this evidence (None where a number does not apply)."""
        bounds = self.interval()
        finite = self.value is not None and math.isfinite(self.value)
        return {
            "outcome": self.outcome,
            "verdict": word(self.outcome),
            "kind": self.kind,
            "compared": self.compared,
            "value": self.value if finite else None,
            "se": self.se,
            "n": self.n,
            "low": None if bounds is None else bounds[0],
            "high": None if bounds is None else bounds[1],
            "detectable": minimum_detectable(self.se) if self.outcome == "noise" else None,
            "paper_value": self.paper_value,
            "at": self.at,
            "parts": [p.as_dict() for p in self.parts],
        }


def _part_text(part: Evidence) -> str:
    where = f"{part.compared}, {part.at:.1f} NFE: " if part.at is not None else f"{part.compared}: "
    return where + part.span() + f", {word(part.outcome)}"


NOT_RUN = Evidence("not run", "none")


@dataclass(frozen=True)
class Run:
    """A run's tables with its rows by label (``tables``' specs build every label)."""

    tables: dict[str, Any]
    table2_group: int = PAPER_GROUP

    def row(self, label: str, table: str = "table1") -> dict[str, Any] | None:
        return next((r for r in self.tables.get(table) or [] if r["method"] == label), None)

    def table2(self, key: str) -> dict[str, Any] | None:
        return self.row(tables.table2_rows(self.table2_group)[key].label, "table2")


# ---- the evidence builders ----------------------------------------------------------------------


def difference(
    a: dict | None, b: dict | None, key: str, sign: int, compared: str, digits: int = 1
) -> Evidence:
    """Row a minus row b on ``key``, paired over images, judged with the claim's ``sign``;
    ``compared`` names both and the measure ("GSD (G=50) - SJD, NFE")."""
    diff = paired_difference(a, b, key)
    outcome = verdict(diff.difference, diff.se, sign)
    value = diff.difference if math.isfinite(diff.difference) else None
    return Evidence(outcome, "difference", compared, value, diff.se, diff.n, digits=digits)


def unchanged(evidence: Evidence) -> Evidence:
    """A claim that nothing changed, judged as "it changed" on |d|: beyond the noise is "no"."""
    if evidence.value is None:
        return replace(evidence, outcome="not run")
    moved = verdict(abs(evidence.value), evidence.se, expected_sign=1)
    return replace(evidence, outcome={"yes": "no"}.get(moved, moved))


def ratio(a: dict | None, b: dict | None, claimed: float, compared: str, suffix="x") -> Evidence:
    """mean(a) / mean(b) in NFE against the paper's ratio ``claimed``."""
    found = paired_ratio(a, b, "nfe")
    value = found.ratio if math.isfinite(found.ratio) else None
    outcome = ratio_verdict(found, claimed)
    return Evidence(outcome, "ratio", compared, value, found.se, found.n, suffix, 2, claimed)


def points(parts: list[Evidence], compared: str) -> Evidence:
    """Several differences judged together (``verdicts.combined``)."""
    if not parts:
        return replace(NOT_RUN, compared=compared)
    outcome = combined([p.outcome for p in parts])
    return Evidence(outcome, "points", compared, n=parts[0].n, parts=tuple(parts))


def matched_points(run: Run, measure: str, other: str) -> Evidence:
    """GSD minus ``other``'s distortion at matched NFE (``matched.matched_nfe`` rows), each point
    re-judged from its difference and bootstrap SE for "GSD distorts less" (sign -1)."""
    parts = [
        Evidence(
            verdict(r["difference"], r["se"], -1),
            "difference",
            f"at {r['anchor']}",
            r["difference"],
            r["se"],
            r["images"],
            digits=3,
            at=r["nfe"],
        )
        for r in run.tables.get("matched_nfe") or []
        if r["measure"] == measure and r["other"] == other
    ]
    return points(parts, f"GSD - {other}, {measure} at matched NFE (d [+- 2 bootstrap SE])")


# ---- the claims ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """One claim: ``judge(run)`` gives its evidence; ``notes`` by outcome say why."""

    id: str
    text: str
    paper: str
    source: str
    judge: Callable[[Run], Evidence]
    notes: dict[str, str] = field(default_factory=dict)


def _quality_vs_amplify(run: Run) -> Evidence:
    return difference(
        run.row(GSD50), run.row(AMPLIFY3), QUALITY, 1, f"{GSD50} - {AMPLIFY3}, condition score"
    )


def _distortion_vs_amplify(measure: str) -> Callable[[Run], Evidence]:
    def judge(run: Run) -> Evidence:
        found = matched_points(run, measure, "Amplify")
        deciding = [f"{p.at:.1f} NFE ({p.compared})" for p in found.parts if p.outcome == "no"]
        note = (
            f"GSD distorts more than Amplify beyond the noise at {len(deciding)} of "
            f"{len(found.parts)} matched points, which decide the verdict: " + ", ".join(deciding)
            if found.outcome == "no"
            else {"noise": "no point separates them"}.get(found.outcome, "")
        )
        return replace(found, note=note)

    return judge


def _speedup(label: str, paper_ratio: float) -> Callable[[Run], Evidence]:
    return lambda run: ratio(run.row(AR), run.row(label), paper_ratio, f"AR / {label}")


def _theorem1(_: Run) -> Evidence:
    sd, dyn = toy.counterexample_acceptance()
    text = (
        f"exact counterexample (V = {len(toy.COUNTEREXAMPLE_P)}, G = "
        f"{toy.COUNTEREXAMPLE_GROUP_SIZE}): {dyn} = {float(dyn):.4f} < SD's {sd} = {float(sd):.4f}"
    )
    return Evidence("no" if dyn < sd else "yes", "exact", exact=text)


def _table2_ratio(key: str) -> Callable[[Run], Evidence]:
    claimed = paper_values.TABLE2_NFE[key].value / paper_values.SJD_NFE.value
    return lambda run: ratio(
        run.table2(key), run.row(SJD, "table2") or run.row(SJD), claimed, f"{key} / SJD", ""
    )


def _table2_ordering(measure: str) -> Callable[[Run], Evidence]:
    key = {"TV": "distortion", "W1": "w1"}[measure]

    def judge(run: Run) -> Evidence:
        rows = {k: run.table2(k) for k in ("(B)", "(C)", "(D)")}
        if measure == "W1" and not all((r or {}).get(key) is not None for r in rows.values()):
            return replace(NOT_RUN, note="W1 not recorded in this run")
        parts = [
            difference(rows["(B)"], rows[o], key, 1, f"(B) - {o}", digits=3) for o in ("(C)", "(D)")
        ]
        return points(parts, f"exact {measure}")

    return judge


def _fewer_forwards_than_gsd(label: str) -> Callable[[Run], Evidence]:
    return lambda run: difference(
        run.row(label), run.row(GSD50), "nfe", -1, f"{label} - {GSD50}, NFE"
    )


def _top1(run: Run) -> Evidence:
    top1 = run.tables.get("top1") or {}
    if not top1:
        return NOT_RUN
    low, high = (b.value for b in paper_values.TOP1_SHARE_RANGE)
    share = top1["pooled_share_below"]
    if top1["threshold"] != paper_values.TOP1_THRESHOLD.value:
        return replace(NOT_RUN, kind="share", value=share, note="the paper's threshold is 0.05")
    inside = low <= share <= high
    why = (
        ""
        if inside
        else f"the model's target distributions are {'sharper' if share < low else 'flatter'} "
        "than Lumina-mGPT's (another model, codebook, data and guidance): the share is a "
        "property of the model"
    )
    return Evidence("yes" if inside else "no", "share", value=share, note=why)


def replacement(change: PairedDifference, kind: str = "paired") -> Evidence:
    """Quality after top-100 replacement minus the original images' (``kind``: how the SE was
    found), judged as "it changed" (``unchanged``), with why it does or does not hold."""
    value = change.difference if math.isfinite(change.difference) else None
    found = unchanged(
        Evidence("noise", "difference", f"top-100 - original ({kind}), condition score",
                 value, change.se, change.n, digits=2)
    )
    beyond = f"beyond {NOISE_Z:g} {kind} standard errors"
    if found.outcome == "noise":
        note = (
            f"no change {beyond}: what the claim predicts, but a proxy this noisy could hide a "
            "small one" if change.se is not None
            else "one image: no standard error to tell a change from noise"
        )
    elif found.outcome == "no" and value < 0:
        note = (
            f"a drop {beyond}: this model's tokens are less redundant than Lumina-mGPT's, or the "
            "metric (not CLIP) is more sensitive"
        )
    elif found.outcome == "no":
        note = (
            f"a rise {beyond}: replacing tokens with top-100 candidates did not hurt (the paper's "
            "point), but the score moved, so 'barely changes' does not hold; the metric (not "
            "CLIP) may favour the resampled tokens"
        )
    else:
        note = "no quality metric in this run"
    return replace(found, note=note)


def _top100(run: Run) -> Evidence:
    """The paired change of the replacement study (notebook 03, results.json's numbers)."""
    change = ((run.tables.get("replacement") or {}).get("paired_changes") or {}).get("top-k")
    if not change or QUALITY not in change:
        return replace(NOT_RUN, note="no replacement study with a quality metric in this run")
    return replacement(PairedDifference.from_dict(change[QUALITY]))


def _fewer_than_optimal(name: str) -> Callable[[Run], Evidence]:
    """At GSD's TV, GSD's NFE minus the optimal rule ``name``'s curve read there
    (``frontier.matched_distortion``; bootstrap SE), for "GSD needs fewer forwards" (sign -1).
    ``at``: GSD's TV; the note says when GSD's TV lies outside the curve (its nearest end)."""

    def judge(run: Run) -> Evidence:
        front = run.tables.get("frontier") or {}
        gsd = tables.gsd(front.get("group_size") or PAPER_GROUP).label
        found = next(
            (
                r
                for r in front.get("matched") or []
                if r["reference"] == gsd and r["measure"] == MEASURES["distortion"]
                and r["other"] == name
            ),
            None,
        )
        if found is None:
            return replace(NOT_RUN, note="no frontier in this run")
        outcome = verdict(found["difference"], found["se"], -1)
        edge = "" if found["inside"] else "GSD's TV lies outside its range: its nearest end"
        return Evidence(outcome, "difference", f"GSD - {name}, NFE", found["difference"],
                        found["se"], found["n"], at=found["distortion"], note=edge)

    return judge


# ---- claims read from committed benchmark files ------------------------------------------------

BENCHMARK_RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
BLOCK_FILE = "lossless_beyond_standin.json"  # benchmarks/lossless_beyond.py
BLOCK_LABEL = "SJD + block verification"
# That these decoders are lossless rests on their proofs and on the exact law of whole decodes:
# through ``generate`` itself, every random read enumerated (the first file), and through a
# step-for-step transcription of the loop calling gsd_core's functions, on larger models (the
# second). Their benchmarks' per-token distortion is SD's TV formula per token, 0 by
# construction for them (and for lossy block verification with coupled drafts too): no evidence.
LOSSLESS_EVIDENCE = (
    "tests/lab/decode/test_decode_loop_exact.py; tests/lab/decode/test_decode_laws_exact.py"
)
MULTIDRAFT_FILES = {  # candidates k -> the file of benchmarks/lossless_beyond.py --candidates
    2: "multidraft_standin.json",
    4: "multidraft_standin.json",
    8: "multidraft_standin_k8.json",
}
MULTIDRAFT_AGAINST = {  # claim slug -> (the file's paired difference, the row it is against)
    "mc_sjd": ("difference_to_mc_sjd", MC_MAXIMAL),
    "mc_gsd": ("moonshot", MC_GSD50),
}


def committed(name: str) -> dict[str, Any] | None:
    """The committed benchmark file ``BENCHMARK_RESULTS / name`` as a dict; None when absent."""
    path = BENCHMARK_RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def _where(name: str) -> str:
    return f"benchmarks/results/{name}"


def _from_file(
    diff: PairedDifference, compared: str, name: str, processed: float
) -> Evidence:
    """A paired NFE difference read from a benchmark file, judged for "fewer forwards" (-1); the
    note names the tokens processed per forward and the file."""
    outcome = verdict(diff.difference, diff.se, -1)
    note = f"{processed:.1f} tokens processed per forward ({_where(name)})"
    return Evidence(outcome, "difference", compared, diff.difference, diff.se, diff.n, note=note)


def _modelled_time(row: dict[str, Any]) -> str:
    """The note's cost-model clause: the row's modelled time per image on the benchmark's roofline
    (weight-read times of a 7B forward), against MC-SJD's as decoded in the k = 2, 4 file (its
    thirty images); empty where a file lacks it."""
    base = ((committed(MULTIDRAFT_FILES[2]) or {}).get("rows") or {}).get("MC-SJD (decoded here)")
    modelled = row.get("modelled_read_times")
    if modelled is None or base is None or base.get("modelled_read_times") is None:
        return ""
    return (f"; its modelled time {modelled:.1f} weight-read times per image, MC-SJD's "
            f"(maximal, no candidates) {base['modelled_read_times']:.1f} (roofline cost model)")


def _block_fewer_nfe_than_mc_sjd(_: Run) -> Evidence:
    """Block verification (independent drafts) minus MC-SJD (maximal), NFE, image by image: the
    file's block decodes against the stored MC-SJD records it was paired with."""
    data = committed(BLOCK_FILE)
    if data is None:
        return replace(NOT_RUN, note=f"{_where(BLOCK_FILE)} absent (benchmarks/lossless_beyond.py)")
    block = data["per_image"]["block"]
    diff = paired_values([r["nfe"] for r in block], data["per_image"]["stored_nfe"][MC_MAXIMAL])
    processed = data["summary"][BLOCK_LABEL]["processed_per_forward"]
    return _from_file(diff, f"{BLOCK_LABEL} - {MC_MAXIMAL}, NFE", BLOCK_FILE, processed)


def _multidraft_fewer_nfe(k: int, against: str) -> Callable[[Run], Evidence]:
    """k candidates per position (maximal drafts) minus MC-SJD or MC-GSD, NFE: the paired
    difference and SE the benchmark file stores for the row (n: the row's images)."""
    key, other = MULTIDRAFT_AGAINST[against]
    name = MULTIDRAFT_FILES[k]

    def judge(_: Run) -> Evidence:
        data = committed(name)
        row = ((data or {}).get("rows") or {}).get(f"MC-SJD, {k} candidates")
        if row is None:
            return replace(NOT_RUN, note=f"{_where(name)} absent or without k = {k} "
                           "(benchmarks/lossless_beyond.py --candidates)")
        found = row[key]
        if found.get("scale", 1.0) != 1.0 or not other.startswith(found.get("against", other)):
            raise ValueError(f"{_where(name)}: {key} is not a plain difference to {other}")
        diff = PairedDifference(found["difference"], found["se"], int(row.get("images",
                                                                              data["images"])))
        compared = f"{MC_MAXIMAL}, {k} candidates - {other}, NFE"
        evidence = _from_file(diff, compared, name, row["tokens_processed_per_forward"])
        return replace(evidence, note=evidence.note + _modelled_time(row))

    return judge


def _not_run(why: str) -> Callable[[Run], Evidence]:
    return lambda run: replace(NOT_RUN, note=why)


def _speedup_notes(size_why: str) -> dict[str, str]:
    return {
        "not run": "row not in this run's Table 1",
        "direction only": size_why,
        "noise": "the speed-up is within two paired standard errors of 1",
        "no": "slower than AR, or the paper's speed-up excluded",
    }


OTHER_MODEL = "faster than AR but by another factor: other model, token count and acceptance"
_GSD_SPEEDUP = paper_values.AR_NFE.value / paper_values.GSD50_NFE.value
_SCD_SPEEDUP = paper_values.SCD_AR_NFE.value / paper_values.SCD_NFE.value
_SCD_TEXT = (
    f"SCD {paper_values.SCD_NFE.value:g} < GSD (G=10) {paper_values.SCD_GSD10_NFE.value:g} NFE"
)
_TABLE2_CLIP = "(B) lowest CLIP: {} vs {} (C), {} (D)".format(
    *(paper_values.TABLE2_CLIP[key].value for key in ("(B)", "(C)", "(D)"))
)
_LOSSLESS_NOTES = {
    "noise": "no difference detected between this lossless coupled SJD and lossy GSD",
    "no": "GSD's clusters accept more than coupling on this model",
    "yes": "SCD compares with GSD G = 10 on COCO; here G = 50 with the paper's filters",
    "not run": "rows not in this run's Table 1",
}
_TABLE2_RATIO_NOTES = {
    "not run": "row not in this run's Table 2",
    "noise": "the ratio is within two paired standard errors of 1",
    "direction only": "the paper's ratio lies outside ours +- 2 SE: another model, the share of "
    "drafts a cluster rescues differs",
    "no": "the paper's ratio lies outside ours +- 2 SE, on the other side of 1",
}
_ORDERING_NOTES = {
    "not run": "rows (B)-(D) or their per-image distortions missing",
    "noise": "a difference within two paired standard errors: cannot tell which distorts more",
    "no": "another row distorts more than (B) on this model",
}

OPTIMAL_RULES = {  # the frontier's optimal lossy rules by the slug of their claim id
    "tv_relaxation": frontier.RELAXATION,
    "tv_relaxation_maximal": frontier.RELAXATION_MAXIMAL,
    "tv_dial": frontier.DIAL,
    "w1_transport": frontier.TRANSPORT,
    "w1_dial": frontier.W1_DIAL,
}

CLAIMS: tuple[Claim, ...] = (
    Claim(
        "gsd_quality_above_amplify",
        f"{GSD50} loses less quality than {AMPLIFY3}",
        f"CLIP {paper_values.GSD50_CLIP.value} vs {paper_values.AMPLIFY3_CLIP.value} "
        f"(GSD {paper_values.GSD50_CLIP.value - paper_values.AMPLIFY3_CLIP.value:+.3f})",
        paper_values.GSD50_CLIP.source,
        _quality_vs_amplify,
        {
            "no": "Amplify scored higher than GSD",
            "noise": "the proxy cannot separate them",
            "not run": "rows or per-image quality missing",
        },
    ),
    *(
        Claim(
            f"gsd_distorts_less_than_amplify_{measure.lower()}",
            f"GSD distorts less than Amplify at matched NFE, exact {measure}",
            f"implied by Table 1 (CLIP at {paper_values.GSD50_NFE.value:g} vs "
            f"{paper_values.AMPLIFY3_NFE.value:g} NFE); distortion not measured",
            "gsd_lab.experiments.matched",
            _distortion_vs_amplify(measure),
        )
        for measure in MEASURES.values()
    ),
    Claim(
        "gsd_speedup_over_ar",
        f"{GSD50}: NFE speed-up over AR",
        f"{_GSD_SPEEDUP:.2f}x",
        paper_values.GSD50_NFE.source,
        _speedup(GSD50, _GSD_SPEEDUP),
        _speedup_notes(OTHER_MODEL),
    ),
    Claim(
        "gsd_speedup_over_sjd",
        f"{GSD50}: NFE speed-up over SJD",
        f"{paper_values.SJD_NFE.value / paper_values.GSD50_NFE.value:.2f}x",
        paper_values.GSD50_NFE.source,
        lambda run: ratio(
            run.row(SJD), run.row(GSD50), paper_values.SJD_NFE.value / paper_values.GSD50_NFE.value,
            f"SJD / {GSD50}",
        ),
        {"direction only": "the paper's speed-up lies outside ours +- 2 SE"},
    ),
    Claim(
        "gsd_fewer_nfe_than_sjd",
        f"{GSD50} needs fewer NFE than SJD",
        f"{paper_values.GSD50_NFE.value:.0f} < {paper_values.SJD_NFE.value:.0f}",
        paper_values.GSD50_NFE.source,
        lambda run: difference(run.row(GSD50), run.row(SJD), "nfe", -1, f"{GSD50} - SJD, NFE"),
        {
            "noise": "within two paired standard errors: this run cannot tell GSD's NFE from SJD's",
            "no": "GSD needed more forwards than SJD on these images",
            "not run": "SJD or per-image NFE missing",
        },
    ),
    Claim(
        "theorem1_dynamic_clusters",
        "Theorem 1's conclusion (acceptance >= SD's) carries over to this package's "
        "DynamicClusters (window clipped at the ends, no filters)",
        "stated for any partition of the vocabulary (GSD paper (arXiv 2508.07747), Theorem 1); "
        "dynamic clusters are not one",
        "proofs/04_dynamic_counterexample.md",
        _theorem1,
        {"no": "holds for fixed partitions and partitions chosen from p alone (proofs/01, 05, 07); "
         "the release's slice with its filters was not checked"},
    ),
    *(
        Claim(
            f"table2_{key[1].lower()}_nfe_over_sjd",
            f"Table 2 {key}: NFE / SJD's NFE",
            f"{paper_values.TABLE2_NFE[key].value / paper_values.SJD_NFE.value:.2f}",
            paper_values.TABLE2_NFE[key].source,
            _table2_ratio(key),
            _TABLE2_RATIO_NOTES,
        )
        for key in ("(A)", "(B)", "(C)", "(D)")
    ),
    *(
        Claim(
            f"table2_b_distorts_most_{measure.lower()}",
            f"Table 2: sorting by q (B) distorts the most of (B)-(D), exact {measure}",
            _TABLE2_CLIP,
            paper_values.TABLE2_CLIP["(B)"].source,
            _table2_ordering(measure),
            _ORDERING_NOTES,
        )
        for measure in MEASURES.values()
    ),
    *(
        Claim(
            f"mc_sjd_{draft}_fewer_nfe_than_gsd",
            f"{label}, lossless, needs fewer forwards than lossy {GSD50}",
            _SCD_TEXT,
            paper_values.SCD_GSD10_NFE.source,
            _fewer_forwards_than_gsd(label),
            _LOSSLESS_NOTES,
        )
        for draft, label in (("maximal", MC_MAXIMAL), ("gumbel", MC_GUMBEL))
    ),
    Claim(
        "gsd_keeps_ar_quality",
        f"{GSD50} keeps AR's quality",
        f"CLIP {paper_values.GSD50_CLIP.value} vs AR {paper_values.AR_CLIP.value}",
        paper_values.GSD50_CLIP.source,
        lambda run: unchanged(
            difference(run.row(GSD50), run.row(AR), QUALITY, 1, f"{GSD50} - AR, condition score")
        ),
        {
            "noise": "no change detected: what the claim predicts, but not a proof of equality",
            "no": "quality moved beyond the noise",
        },
    ),
    Claim(
        "sjd_speedup_over_ar",
        "SJD: NFE speed-up over AR",
        f"{paper_values.AR_NFE.value / paper_values.SJD_NFE.value:.2f}x",
        paper_values.SJD_NFE.source,
        _speedup(SJD, paper_values.AR_NFE.value / paper_values.SJD_NFE.value),
        _speedup_notes(OTHER_MODEL),
    ),
    Claim(
        "amplify_speedup_over_ar",
        f"{AMPLIFY3}: NFE speed-up over AR",
        f"{paper_values.AR_NFE.value / paper_values.AMPLIFY3_NFE.value:.2f}x",
        paper_values.AMPLIFY3_NFE.source,
        _speedup(AMPLIFY3, paper_values.AR_NFE.value / paper_values.AMPLIFY3_NFE.value),
        _speedup_notes(OTHER_MODEL),
    ),
    *(
        Claim(
            f"mc_sjd_{draft}_speedup_over_ar",
            f"{label}: NFE speed-up over AR (SCD)",
            f"{_SCD_SPEEDUP:.2f}x",
            paper_values.SCD_NFE.source,
            _speedup(label, _SCD_SPEEDUP),
            _speedup_notes("another model and window (SCD: L = 64 on COCO)"),
        )
        for draft, label in (("maximal", MC_MAXIMAL), ("gumbel", MC_GUMBEL))
    ),
    Claim(
        "coupled_drafts_speed_up_gsd",
        f"(not in the papers) coupled drafts speed up {GSD50} too",
        "-",
        "proofs/09_coupled_drafts.md",
        lambda run: difference(
            run.row(MC_GSD50), run.row(GSD50), "nfe", -1, f"{MC_GSD50} - {GSD50}, NFE"
        ),
        {
            "yes": "same rule, coupled re-drafts: the per-step law given the history is unchanged "
            "(proofs/09)",
            "not run": "rows not in this run's Table 1",
        },
    ),
    Claim(
        "coupled_gsd_fewer_nfe_than_mc_sjd",
        f"(not in the papers) {MC_GSD50} needs fewer forwards than lossless {MC_MAXIMAL}",
        "-",
        "proofs/09_coupled_drafts.md",
        lambda run: difference(
            run.row(MC_GSD50), run.row(MC_MAXIMAL), "nfe", -1, f"{MC_GSD50} - {MC_MAXIMAL}, NFE"
        ),
        {"not run": "rows not in this run's Table 1"},
    ),
    Claim(
        "block_verification_fewer_nfe_than_mc_sjd",
        f"(not in the papers) {BLOCK_LABEL} (independent drafts, lossless) needs fewer forwards "
        f"than {MC_MAXIMAL}",
        "-",
        f"{_where(BLOCK_FILE)}; proofs/14_block_verification.md; {LOSSLESS_EVIDENCE}",
        _block_fewer_nfe_than_mc_sjd,
    ),
    *(
        Claim(
            f"multidraft_k{k}_fewer_nfe_than_{against}",
            f"(not in the papers) {MC_MAXIMAL} with {k} candidates per position (lossless) needs "
            f"fewer forwards than {'' if against == 'mc_sjd' else 'lossy '}"
            f"{MULTIDRAFT_AGAINST[against][1]}",
            "-",
            f"{_where(MULTIDRAFT_FILES[k])}; proofs/15_multiple_drafts.md; {LOSSLESS_EVIDENCE}",
            _multidraft_fewer_nfe(k, against),
        )
        for against in MULTIDRAFT_AGAINST
        for k in MULTIDRAFT_FILES
    ),
    *(
        Claim(
            f"gsd_fewer_nfe_than_{slug}",
            f"(not in the papers) at GSD's TV, GSD needs fewer forwards than the {name}",
            "-",
            "gsd_lab.experiments.frontier; docs/optimal-lossy.md",
            _fewer_than_optimal(name),
        )
        for slug, name in OPTIMAL_RULES.items()
    ),
    Claim(
        "top1_share_below_5pct",
        "share of tokens with top-1 < 5%",
        "{:.0%}-{:.0%}".format(*(bound.value for bound in paper_values.TOP1_SHARE_RANGE)),
        paper_values.TOP1_SHARE_RANGE[0].source,
        _top1,
    ),
    Claim(
        "top100_replacement_keeps_quality",
        "top-100 replacement barely changes quality",
        f"CLIP {paper_values.REPLACED_CLIP.value - paper_values.AR_CLIP.value:+.3f}",
        paper_values.REPLACED_CLIP.source,
        _top100,
    ),
    Claim(
        "sjd_pac_step_compression",
        "SJD-PAC: step compression over AR",
        f"{paper_values.SJD_PAC_STEP.value:.2f}x",
        paper_values.SJD_PAC_STEP.source,
        _not_run(
            "its released tree verification is not lossless (an exact transcription, "
            "tests/lab/decode/test_sjd_pac.py; docs/lossless-frontier.md); its Adaptive "
            "Continuation on the chain is the maximal coupling, run as MC-SJD (maximal)"
        ),
    ),
    *(
        Claim(item["id"], item["analysis"], item["paper"], "paper_values.NOT_REPRODUCED",
              _not_run(item["why not here"]))
        for item in paper_values.NOT_REPRODUCED
    ),
)
IDS = tuple(c.id for c in CLAIMS)
BY_ID = {c.id: c for c in CLAIMS}


def evaluate(tables_: dict[str, Any], table2_group: int = PAPER_GROUP) -> dict[str, Evidence]:
    """Every claim's evidence from a run's tables, by id (``IDS`` order); a claim's note is its
    judge's, else its ``notes`` entry for the outcome."""
    run = Run(tables_, table2_group)
    out = {}
    for claim in CLAIMS:
        found = claim.judge(run)
        out[claim.id] = found if found.note else replace(
            found, note=claim.notes.get(found.outcome, "")
        )
    return out


def of_results(results: dict[str, Any]) -> dict[str, Evidence]:
    """``evaluate`` on a results.json dict (its Table 2 at the run's ``sizes.table2_group``)."""
    sizes = (results.get("config") or {}).get("sizes") or {}
    return evaluate(results.get("tables") or {}, int(sizes.get("table2_group") or PAPER_GROUP))


def as_json(evidence: dict[str, Evidence]) -> dict[str, dict[str, Any]]:
    """results.json's ``claims``: by id, the claim's statement, paper value and source with its
    evidence's numbers (``Evidence.as_dict``)."""
    return {
        cid: {
            "claim": BY_ID[cid].text,
            "paper": BY_ID[cid].paper,
            "source": BY_ID[cid].source,
            **found.as_dict(),
        }
        for cid, found in evidence.items()
    }


def row(claim_id: str, found: Evidence) -> dict[str, str]:
    """A claim as a table row: statement, the paper's value, ours ("here": the numbers the
    verdict was decided on), the verdict's words, why (the note), the source, its id, and the
    verdict's key ("outcome")."""
    claim = BY_ID[claim_id]
    return {
        "claim": claim.text,
        "paper": claim.paper,
        "here": found.measured(),
        "verdict": word(found.outcome),
        "note": found.note,
        "source": claim.source,
        "id": claim_id,
        "outcome": found.outcome,
    }


def rows(evidence: dict[str, Evidence], ids: tuple[str, ...] = IDS) -> list[dict[str, str]]:
    """``row`` for each of ``ids`` (default: every claim, in the ledger's order)."""
    return [row(cid, evidence[cid]) for cid in ids]
