"""A claim's evidence: what a run's tables say about it (``Evidence``: the numbers and the verdict
of ``verdicts``), the builders that judge paired rows, and the declarative verdict rules claims
are written in: ``Compare`` (a - b on a key, with the claim's sign), ``Ratio`` (mean(a) / mean(b)
in NFE against the paper's ratio), ``NotRun``. Rows are found by the labels their specs build
(``tables``: ``Row``, ``Table2Row``), never by display text; each rule names the results.json
paths it reads (``paths``; ``resolve`` reads one back).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from . import paper_values, tables
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
    ratio_verdict,
    verdict,
    word,
)

PAPER_GROUP = 50  # Table 1's GSD row: the paper's G
QUALITY = paper_values.QUALITY

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

    def detectable(self) -> float | None:
        """On "no difference detected", the smallest |d| the run could have detected at 80%
        power (``verdicts.minimum_detectable`` of its SE); None otherwise."""
        return minimum_detectable(self.se) if self.outcome == "noise" else None

    def short(self) -> str:
        """ "yes, -18.4 [-27.3, -9.5]": the verdict's word and the interval it was decided on,
        with the detectable size on "no difference detected" (README's answer)."""
        if self.value is None:
            return word(self.outcome)
        size = self.detectable()
        detect = "" if size is None else f" (detectable: |d| >= {size:.{self.digits}f})"
        return f"{word(self.outcome)}, {self.span()}{detect}"

    def cell(self) -> str:
        """ "A - B, NFE: -18.4 [-27.3, -9.5]": what was compared and the interval ("-" when not
        run; a "points" claim: every point, ``measured``)."""
        if self.kind == "points":
            return self.measured()
        return "-" if self.value is None else f"{self.compared}: {self.span()}"

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
            "detectable": self.detectable(),
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
    model: str = "standin"  # the run's model: a committed benchmark file speaks for its own only

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


# ---- the declarative rules ----------------------------------------------------------------------

MEASURE_NAMES = {"nfe": "NFE", QUALITY: "condition score"}  # a comparison's measure, as named


@dataclass(frozen=True)
class Row:
    """The row ``label`` of a run's ``table`` (results.json's ``tables.<table>``); ``fallback``: the
    table read where ``table`` lacks it."""

    label: str
    table: str = "table1"
    fallback: str | None = None

    @property
    def name(self) -> str:
        return self.label

    def find(self, run: Run) -> dict[str, Any] | None:
        found = run.row(self.label, self.table)
        return found if found is not None or self.fallback is None else run.row(
            self.label, self.fallback)

    def path(self, key: str) -> str:
        return f"tables.{self.table}[method={self.label}].{key}"


@dataclass(frozen=True)
class Table2Row:
    """Table 2's row ``key`` ("(A)" ... "(D)") at the run's cluster size (``Run.table2_group``)."""

    key: str

    @property
    def name(self) -> str:
        return self.key

    def find(self, run: Run) -> dict[str, Any] | None:
        return run.table2(self.key)

    def path(self, key: str) -> str:
        label = tables.table2_rows(PAPER_GROUP)[self.key].label
        return f"tables.table2[method={label}].{key}"


@dataclass(frozen=True)
class Compare:
    """a - b on ``key``, paired over images, judged with the claim's ``sign`` (``difference``);
    ``unchanged``: a claim that nothing changed (``unchanged``)."""

    a: Row | Table2Row
    b: Row | Table2Row
    key: str
    sign: int
    digits: int = 1
    unchanged: bool = False

    @property
    def compared(self) -> str:
        return f"{self.a.name} - {self.b.name}, {MEASURE_NAMES.get(self.key, self.key)}"

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.a.path(self.key), self.b.path(self.key))

    def __call__(self, run: Run) -> Evidence:
        found = difference(
            self.a.find(run), self.b.find(run), self.key, self.sign, self.compared, self.digits)
        return unchanged(found) if self.unchanged else found


@dataclass(frozen=True)
class Ratio:
    """mean(a) / mean(b) in NFE against the paper's ratio ``claimed`` (``ratio``)."""

    a: Row | Table2Row
    b: Row | Table2Row
    claimed: float
    suffix: str = "x"

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.a.path("nfe"), self.b.path("nfe"))

    def __call__(self, run: Run) -> Evidence:
        compared = f"{self.a.name} / {self.b.name}"
        return ratio(self.a.find(run), self.b.find(run), self.claimed, compared, self.suffix)


@dataclass(frozen=True)
class NotRun:
    """Not run here, and why."""

    why: str
    paths: tuple[str, ...] = ()

    def __call__(self, run: Run) -> Evidence:
        return replace(NOT_RUN, note=self.why)


def resolve(results: dict[str, Any], path: str) -> Any:
    """The value at a rule's ``path`` in ``results``: dotted keys, ``[k=v & k2=v2]`` picks the
    rows of a list with those values (one row: that row; several: the list); KeyError if absent."""
    value: Any = results
    for key, where in re.findall(r"([^.\[]+)(?:\[([^\]]*)\])?", path):
        value = value[key]
        if where:
            wanted = [part.split("=", 1) for part in where.split(" & ")]
            rows = [r for r in value if all(str(r.get(k)) == v for k, v in wanted)]
            if not rows:
                raise KeyError(f"{path}: no row with {where}")
            value = rows[0] if len(rows) == 1 else rows
    return value
