"""The claims' named judges, where a verdict needs more than one comparison of two rows
(``evidence.Compare``): GSD against Amplify at matched NFE, Table 2's ordering, Theorem 1's exact
counterexample, the top-1 share, the replacement study, the frontier's optimal rules, and the
lossless decoders beyond MC-SJD read from their committed benchmark files (``committed``, under
``BENCHMARK_RESULTS``; "not run" when a file is absent). Each is a function of a ``Run`` with the
results.json (or benchmark file) paths it reads (``paths``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import paper_values, tables, toy
from .evidence import NOT_RUN, PAPER_GROUP, QUALITY, Evidence, Run, difference, points, replacement
from .matched import MEASURES
from .verdicts import PairedDifference, paired_values, verdict

GSD50 = tables.gsd(PAPER_GROUP).label
MC_MAXIMAL = tables.coupled("maximal").label
MC_GSD50 = tables.coupled("maximal", PAPER_GROUP).label


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


@dataclass(frozen=True)
class MatchedPoints:
    """GSD against ``other`` at matched NFE on ``measure`` (``matched_points``), with the points
    that decide a "no" named in the note."""

    measure: str
    other: str = "Amplify"

    @property
    def paths(self) -> tuple[str, ...]:
        return (f"tables.matched_nfe[measure={self.measure} & other={self.other}]",)

    def __call__(self, run: Run) -> Evidence:
        found = matched_points(run, self.measure, self.other)
        deciding = [f"{p.at:.1f} NFE ({p.compared})" for p in found.parts if p.outcome == "no"]
        note = (
            f"GSD distorts more than {self.other} beyond the noise at {len(deciding)} of "
            f"{len(found.parts)} matched points, which decide the verdict: " + ", ".join(deciding)
            if found.outcome == "no"
            else {"noise": "no point separates them"}.get(found.outcome, "")
        )
        return replace(found, note=note)


def theorem1(_: Run) -> Evidence:
    """Theorem 1's conclusion for the package's dynamic clusters, in Fractions."""
    sd, dyn = toy.counterexample_acceptance()
    text = (
        f"exact counterexample (V = {len(toy.COUNTEREXAMPLE_P)}, G = "
        f"{toy.COUNTEREXAMPLE_GROUP_SIZE}): {dyn} = {float(dyn):.4f} < SD's {sd} = {float(sd):.4f}"
    )
    return Evidence("no" if dyn < sd else "yes", "exact", exact=text)


@dataclass(frozen=True)
class Table2Ordering:
    """(B) minus (C) and (D) on exact ``measure`` ("TV" or "W1"), for "(B) distorts the most"."""

    measure: str

    @property
    def key(self) -> str:
        return {"TV": "distortion", "W1": "w1"}[self.measure]

    @property
    def paths(self) -> tuple[str, ...]:
        labels = tables.table2_rows(PAPER_GROUP)
        return tuple(f"tables.table2[method={labels[k].label}].{self.key}"
                     for k in ("(B)", "(C)", "(D)"))

    def __call__(self, run: Run) -> Evidence:
        key = self.key
        rows = {k: run.table2(k) for k in ("(B)", "(C)", "(D)")}
        if self.measure == "W1" and not all((r or {}).get(key) is not None for r in rows.values()):
            return replace(NOT_RUN, note="W1 not recorded in this run")
        parts = [
            difference(rows["(B)"], rows[o], key, 1, f"(B) - {o}", digits=3) for o in ("(C)", "(D)")
        ]
        return points(parts, f"exact {self.measure}")


def top1_share(run: Run) -> Evidence:
    """AR's share of tokens with top-1 probability below the paper's threshold, inside its range."""
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


def top100(run: Run) -> Evidence:
    """The paired change of the replacement study (notebook 03, results.json's numbers)."""
    change = ((run.tables.get("replacement") or {}).get("paired_changes") or {}).get("top-k")
    if not change or QUALITY not in change:
        return replace(NOT_RUN, note="no replacement study with a quality metric in this run")
    return replacement(PairedDifference.from_dict(change[QUALITY]))


@dataclass(frozen=True)
class FewerThanOptimal:
    """At GSD's TV, GSD's NFE minus the optimal rule ``name``'s curve read there
    (``frontier.matched_distortion``; bootstrap SE), for "GSD needs fewer forwards" (sign -1).
    ``at``: GSD's TV; the note says when GSD's TV lies outside the curve (its nearest end)."""

    name: str

    @property
    def paths(self) -> tuple[str, ...]:
        return (f"tables.frontier.matched[measure={MEASURES['distortion']} & other={self.name}]",)

    def __call__(self, run: Run) -> Evidence:
        front = run.tables.get("frontier") or {}
        gsd = tables.gsd(front.get("group_size") or PAPER_GROUP).label
        found = next(
            (
                r
                for r in front.get("matched") or []
                if r["reference"] == gsd and r["measure"] == MEASURES["distortion"]
                and r["other"] == self.name
            ),
            None,
        )
        if found is None:
            return replace(NOT_RUN, note="no frontier in this run")
        outcome = verdict(found["difference"], found["se"], -1)
        edge = "" if found["inside"] else "GSD's TV lies outside its range: its nearest end"
        return Evidence(outcome, "difference", f"GSD - {self.name}, NFE", found["difference"],
                        found["se"], found["n"], at=found["distortion"], note=edge)


# ---- claims read from committed benchmark files ----------------------------------------------

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


BENCHMARK_MODEL = "standin"  # the model every committed benchmark file here was decoded on


def _other_model(run: Run, name: str) -> Evidence | None:
    """NOT_RUN with a note when ``run`` is not on the model the benchmark file ``name`` was
    decoded on (its numbers are no evidence about another model); None when it is."""
    if run.model == BENCHMARK_MODEL:
        return None
    return replace(NOT_RUN, note=f"{_where(name)} was decoded on the {BENCHMARK_MODEL}, this run "
                   f"on {run.model}")


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


@dataclass(frozen=True)
class LosslessTime:
    """The lossless decoder beyond MC-SJD with the least mean modelled GPU time among the
    frontier's (``tables.frontier.lossless``, ``experiments.lossless_frontier``) minus MC-SJD or
    MC-GSD (``against``), modelled time, image by image, judged for "less time" (-1). The note
    says it is a selected minimum and of how many."""

    against: str

    @property
    def paths(self) -> tuple[str, ...]:
        return ("tables.frontier.lossless.rows",)

    def __call__(self, run: Run) -> Evidence:
        lossless = (run.tables.get("frontier") or {}).get("lossless")
        if lossless is None:
            return replace(NOT_RUN, note="this run's frontier has no lossless rows (no MC-SJD and "
                           "MC-GSD curves, or a run before gsd_lab.experiments.lossless_frontier)")
        timed = [r for r in lossless["rows"]
                 if r["versus"][self.against]["modelled"]["difference"] is not None]
        if not timed:
            return replace(NOT_RUN, note=f"none of the {len(lossless['rows'])} paired lossless "
                           f"rows has per-image modelled time ({len(lossless['left_out'])} "
                           "sources left out: results.md says why)")
        best = min(timed, key=lambda r: r["modelled"])
        found = best["versus"][self.against]
        diff = PairedDifference.from_dict(found["modelled"])
        note = (f"the least modelled time of the {len(timed)} of {len(lossless['rows'])} paired "
                f"lossless decoders with per-image times (a selected minimum; every "
                f"configuration tried: docs/lossless-frontier.md): {best['method']}, "
                f"{best['modelled']:.1f} weight-read "
                f"times per image, {best['tokens_per_forward']:.1f} tokens per forward, "
                f"{found['modelled_ratio']['text']} {self.against}'s time ({best['file']})")
        compared = f"{best['method']} - {lossless['references'][self.against]}, modelled time"
        return Evidence(verdict(diff.difference, diff.se, -1), "difference", compared,
                        diff.difference, diff.se, diff.n, note=note)


def block_fewer_nfe_than_mc_sjd(run: Run) -> Evidence:
    """Block verification (independent drafts) minus MC-SJD (maximal), NFE, image by image: the
    file's block decodes against the stored MC-SJD records it was paired with."""
    other = _other_model(run, BLOCK_FILE)
    if other is not None:
        return other
    data = committed(BLOCK_FILE)
    if data is None:
        return replace(NOT_RUN, note=f"{_where(BLOCK_FILE)} absent (benchmarks/lossless_beyond.py)")
    block = data["per_image"]["block"]
    diff = paired_values([r["nfe"] for r in block], data["per_image"]["stored_nfe"][MC_MAXIMAL])
    processed = data["summary"][BLOCK_LABEL]["processed_per_forward"]
    return _from_file(diff, f"{BLOCK_LABEL} - {MC_MAXIMAL}, NFE", BLOCK_FILE, processed)


@dataclass(frozen=True)
class Multidraft:
    """k candidates per position (maximal drafts) minus MC-SJD or MC-GSD (``against``), NFE: the
    paired difference and SE the benchmark file stores for the row (n: the row's images)."""

    k: int
    against: str

    @property
    def paths(self) -> tuple[str, ...]:
        key = MULTIDRAFT_AGAINST[self.against][0]
        return (f"{_where(MULTIDRAFT_FILES[self.k])}:rows.MC-SJD, {self.k} candidates.{key}",)

    def __call__(self, run: Run) -> Evidence:
        k, (key, other), name = self.k, MULTIDRAFT_AGAINST[self.against], MULTIDRAFT_FILES[self.k]
        elsewhere = _other_model(run, name)
        if elsewhere is not None:
            return elsewhere
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
