"""The claims ledger: every claim of the GSD paper (and of the lossless-frontier papers it is
compared with), run or not, in one table, read from a figures run's ``results.json``.

Each row: the claim, the paper's number, ours (computed here from the run's rows, never typed
in), a status and, for a difference the run cannot resolve, its interval. Statuses, from
``verdicts.verdict`` (the one rule):

- "reproduced": the difference is beyond two paired standard errors with the claim's sign (and
  size, where one is tested);
- "not reproduced": beyond the noise against the claim, or the right sign at another size
  ("direction only" in the note), or disproved exactly (Theorem 1 for dynamic clusters);
- "noise": within two paired standard errors: nothing was shown either way; the interval
  d +- 2 SE says how large a difference the run cannot exclude (an equivalence reads there);
- "not run": not measured here, with the reason.

Headline claims come first: GSD's quality against the naive Amplify relaxation, its distortion
against Amplify at matched NFE, its NFE speed-up, Theorem 1 for the paper's dynamic clusters,
Table 2, and the lossless frontier (MC-SJD against GSD).
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

from . import paper
from .verdicts import (
    NOISE_Z,
    PairedDifference,
    combined,
    paired_difference,
    verdict,
)

COLUMNS = ["claim", "paper", "here", "status", "interval", "note", "source"]
STATUS = {
    "yes": "reproduced",
    "no": "not reproduced",
    "direction only": "not reproduced",
    "noise": "noise",
    "not run": "not run",
}
REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "figures" / "results.json"
CLAIMS_MD = REPO / "docs" / "claims.md"


def interval(diff: PairedDifference, digits: int = 3) -> str:
    """ "[d - 2 SE, d + 2 SE]" (the noise band of ``verdicts.verdict``); "-" without an SE."""
    if diff.se is None or diff.difference != diff.difference:
        return "-"
    low, high = diff.difference - NOISE_Z * diff.se, diff.difference + NOISE_Z * diff.se
    return f"[{low:+.{digits}g}, {high:+.{digits}g}]"


def _row(
    claim: str,
    paper_text: str,
    here: str,
    outcome: str,
    note: str,
    source: str,
    diff: PairedDifference | None = None,
    span: str | None = None,
) -> dict[str, str]:
    if outcome == "direction only":
        note = "right direction, another size" + (f": {note}" if note else "")
    if span is None:
        span = interval(diff) if diff is not None and outcome == "noise" else "-"
    return {
        "claim": claim,
        "paper": paper_text,
        "here": here,
        "status": STATUS.get(outcome, outcome),
        "interval": span,
        "note": note,
        "source": source,
    }


def _from_comparison(row: dict[str, str], diff: PairedDifference | None = None) -> dict[str, str]:
    """A ``paper`` comparison row (notebooks 02-04) as a ledger row; ``diff``: the paired
    difference it judged, for the interval of a "noise" verdict."""
    return _row(
        row["claim"],
        row["paper"],
        row["here"],
        row["reproduces"],
        row["why not / note"],
        row["source"],
        diff,
    )


def _prefixed(rows: list[dict[str, Any]], prefix: str) -> dict[str, Any] | None:
    return next((r for r in rows if str(r["method"]).startswith(prefix)), None)


def _find(rows: list[dict[str, Any]], method: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["method"] == method), None)


# ---- headline claims -----------------------------------------------------------------------------


def quality_vs_amplify(table1: list[dict[str, Any]]) -> dict[str, str]:
    """Table 1: GSD (G = 50) loses less quality than Amplify (k = 3) (CLIP 32.075 vs 31.774)."""
    gsd, amp = _find(table1, "GSD (G=50)"), _find(table1, "Amplify (k=3)")
    diff = paired_difference(gsd, amp, paper.QUALITY)
    outcome = verdict(diff.difference, diff.se, expected_sign=1)
    paper_text = (
        f"CLIP {paper.GSD50_CLIP.value} vs {paper.AMPLIFY3_CLIP.value} "
        f"(GSD {paper.GSD50_CLIP.value - paper.AMPLIFY3_CLIP.value:+.3f})"
    )
    note = {
        "no": "Amplify scored higher than GSD",
        "noise": "the proxy cannot separate them",
        "not run": "rows or per-image quality missing",
    }.get(outcome, "")
    return _row(
        "GSD (G=50) loses less quality than Amplify (k=3)",
        paper_text,
        "GSD - Amplify, condition score: " + diff.text(3),
        outcome,
        note,
        paper.GSD50_CLIP.source,
        diff,
    )


def distortion_vs_amplify(matched_rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """GSD distorts less than Amplify at equal NFE (the paper's case for its rule against the naive
    relaxation, argued through CLIP at Table 1's NFE), on each measure of ``matched_nfe``."""
    out = []
    for measure in dict.fromkeys(r["measure"] for r in matched_rows):
        rows = [r for r in matched_rows if r["measure"] == measure and r["other"] == "Amplify"]
        if not rows:
            continue
        outcome = combined([r["verdict"] for r in rows])
        diffs = [r["difference"] for r in rows]
        higher = sum(d > 0 for d in diffs)
        here = (
            f"GSD - Amplify at {len(rows)} matched NFE: {min(diffs):+.3g} to "
            f"{max(diffs):+.3g} (GSD higher at {higher}); verdicts "
            + ", ".join(r["verdict"] for r in rows)
        )
        anchor = next((r for r in rows if r["anchor"] == "GSD (G=50)"), rows[0])
        span = (
            f"[{anchor['low']:+.3g}, {anchor['high']:+.3g}] at {anchor['anchor']} "
            "(95% paired bootstrap)"
        )
        note = {
            "no": "at one point or more GSD distorts more than Amplify beyond the noise",
            "noise": "no point separates them",
        }.get(outcome, "")
        implied = (
            f"implied by Table 1 (CLIP at {paper.GSD50_NFE.value:g} vs "
            f"{paper.AMPLIFY3_NFE.value:g} NFE); distortion not measured"
        )
        out.append(
            _row(
                f"GSD distorts less than Amplify at matched NFE, exact {measure}",
                implied,
                here,
                outcome,
                note,
                "gsd_lab.experiments.matched",
                span=span,
            )
        )
    return out


def theorem1_dynamic() -> dict[str, str]:
    """Theorem 1 (grouping never lowers acceptance) applied to the paper's dynamic clusters:
    proofs/04's exact counterexample (course.counterexample_table, in Fractions)."""
    from ..teaching.course import counterexample_table

    table = counterexample_table()
    sd, dyn = Fraction(table.alpha_sd), Fraction(table.alpha_dynamic)
    outcome = "no" if dyn < sd else "yes"
    here = (
        f"exact counterexample (V = 5, G = 3): {dyn} = {float(dyn):.4f} < SD's {sd} = "
        f"{float(sd):.4f}"
    )
    return _row(
        "Theorem 1 holds for the paper's dynamic clusters (acceptance >= SD's)",
        "stated for GSD's clusters (paper.md 1.3)",
        here,
        outcome,
        "holds for fixed partitions and partitions chosen from p alone (proofs/01, 05, 07)",
        "proofs/04_dynamic_counterexample.md",
    )


def gsd_over_sjd(table1: list[dict[str, Any]]) -> dict[str, str]:
    """Table 1: GSD (G = 50) needs 1035 / 637 = 1.62x fewer NFE than SJD."""
    gsd, sjd = _find(table1, "GSD (G=50)"), _find(table1, "SJD")
    diff = paired_difference(gsd, sjd, "nfe")
    claimed = paper.SJD_NFE.value / paper.GSD50_NFE.value
    ours = sjd["nfe"] / gsd["nfe"] if gsd is not None and sjd is not None else float("nan")
    outcome = verdict(
        diff.difference, diff.se, expected_sign=-1, size_ok=paper.within_ratio(ours, claimed)
    )
    return _row(
        "GSD (G=50): NFE speed-up over SJD",
        f"{claimed:.2f}x",
        f"{ours:.2f}x (GSD - SJD: {diff.text(4)} NFE)",
        outcome,
        "",
        paper.GSD50_NFE.source,
        diff,
    )


def frontier(table1: list[dict[str, Any]]) -> list[dict[str, str]]:
    """SCD: lossless MC-SJD needs fewer forwards than lossy GSD; ours against GSD (G = 50)."""
    gsd = _find(table1, "GSD (G=50)")
    out = []
    for label in ("MC-SJD (maximal)", "MC-SJD (Gumbel)"):
        row = _find(table1, label)
        diff = paired_difference(row, gsd, "nfe")
        outcome = verdict(diff.difference, diff.se, expected_sign=-1)
        note = {
            "noise": "lossless coupled SJD and lossy GSD: equal forwards within the interval",
            "no": "GSD needs fewer forwards",
            "yes": "SCD compares with GSD G = 10 on COCO; here G = 50",
        }.get(outcome, "not run")
        out.append(
            _row(
                f"{label}, lossless, needs fewer forwards than lossy GSD (G=50)",
                f"SCD {paper.SCD_NFE.value:g} < GSD (G=10) {paper.SCD_GSD10_NFE.value:g} NFE",
                f"{label} - GSD (G=50): {diff.text(3)} NFE",
                outcome,
                note,
                paper.SCD_GSD10_NFE.source,
                diff,
            )
        )
    return out


def quality_vs_ar(table1: list[dict[str, Any]]) -> dict[str, str]:
    """Table 1: GSD (G = 50) keeps AR's quality (CLIP 32.075 against 32.091): an equivalence."""
    gsd, ar = _find(table1, "GSD (G=50)"), _find(table1, "AR")
    diff = paired_difference(gsd, ar, paper.QUALITY)
    outcome = verdict(abs(diff.difference), diff.se, expected_sign=1)  # "it changed", either sign
    status = {"yes": "no"}.get(outcome, outcome)
    note = {
        "noise": "no change beyond the noise: what the claim predicts, within the interval",
        "no": "quality moved beyond the noise",
    }.get(status, "")
    return _row(
        "GSD (G=50) keeps AR's quality",
        f"CLIP {paper.GSD50_CLIP.value} vs AR {paper.AR_CLIP.value}",
        "GSD - AR, condition score: " + diff.text(3),
        status,
        note,
        paper.GSD50_CLIP.source,
        diff,
    )


# ---- the ledger ---------------------------------------------------------------------------


def ledger(results: dict[str, Any]) -> list[dict[str, str]]:
    """Every claim, headline claims first, from a figures run's ``results.json`` (as a dict)."""
    tables = results.get("tables", {})
    table1, table2 = tables.get("table1", []), tables.get("table2", [])
    comparison = paper.speed_quality_comparison(table1, table2)
    by_claim = {row["claim"]: row for row in comparison}
    rows = [quality_vs_amplify(table1), *distortion_vs_amplify(tables.get("matched_nfe", []))]
    rows.append(_from_comparison(by_claim["GSD (G=50): NFE speed-up over AR"]))
    rows.append(gsd_over_sjd(table1))
    rows.append(theorem1_dynamic())
    sjd = _prefixed(table2, "SJD") or _find(table1, "SJD")
    for r in comparison:
        if r["claim"].startswith("Table 2 ("):  # "Table 2 (A): NFE / SJD's NFE": paired NFE
            key = r["claim"].split(":")[0].removeprefix("Table 2 ")
            diff = paired_difference(_prefixed(table2, key + " "), sjd, "nfe")
            rows.append(_from_comparison(r, diff))
        elif r["claim"].startswith("Table 2"):
            rows.append(_from_comparison(r))
    rows += frontier(table1)
    rows.append(quality_vs_ar(table1))
    for label in ("SJD", "Amplify (k=3)", "MC-SJD (maximal)", "MC-SJD (Gumbel)"):
        claim = next(c for c in by_claim if c.startswith(f"{label}: NFE speed-up over AR"))
        rows.append(_from_comparison(by_claim[claim]))
    coupled = paired_difference(
        _prefixed(table1, "MC-GSD (G=50"), _find(table1, "GSD (G=50)"), "nfe"
    )
    rows += [
        _from_comparison(r, coupled)
        for r in comparison
        if r["claim"].startswith("(not in the papers)")
    ]
    top1 = tables.get("top1") or {}
    if top1:
        rows += [
            _from_comparison(r)
            for r in paper.top1_comparison(
                top1["pooled_share_below"], top1["threshold"], str(results.get("model"))
            )
        ]
    replacement = tables.get("replacement") or {}
    quality = replacement.get("quality")
    if quality:
        # The paired change over images (notebook 03's), not the two means' unpaired one.
        top = (replacement.get("paired_changes") or {}).get("top-k")
        change = PairedDifference.from_dict(top["condition_score"]) if top else None
        rows += [
            _from_comparison(r)
            for r in paper.replacement_comparison(quality, change=change)
            if not r["claim"].startswith("(control")
        ]
    rows += [_from_comparison(r) for r in comparison if r["claim"].startswith("SJD-PAC")]
    rows += [
        _row(
            item["analysis"],
            item["paper"],
            "-",
            "not run",
            item["why not here"],
            "paper.NOT_REPRODUCED",
        )
        for item in paper.NOT_REPRODUCED
    ]
    return rows


def load_results(path: str | Path = RESULTS) -> dict[str, Any]:
    """A figures run's ``results.json`` (default: the repository's)."""
    return json.loads(Path(path).read_text())


def ledger_markdown(results: dict[str, Any]) -> str:
    """The ledger as one markdown page (the project's table renderer), with the run it reads."""
    from ..io.figure_io import markdown_table

    rows = ledger(results)
    counts = {s: sum(r["status"] == s for r in rows) for s in dict.fromkeys(STATUS.values())}
    images = next((r.get("images") for r in results.get("tables", {}).get("table1", [])), None)
    commit = (results.get("git") or {}).get("commit")
    head = [
        "# Claims ledger: every claim of the paper, run or not",
        "",
        f"Generated from `figures/results.json` (model `{results.get('model')}`, "
        f"commit `{commit}`, "
        f"{images} images per method) by `gsd_lab.experiments.ledger`; do not edit by hand "
        "(`python -m gsd_lab readme` rewrites it). Status by the one verdict rule "
        "(`gsd_lab.experiments.verdicts`): reproduced / not reproduced beyond two paired "
        "standard errors, "
        "noise within them (the interval d +- 2 SE is what the run cannot exclude), not run (why). "
        "Headline claims first. Every number here is from the stand-in unless stated: "
        "**Lumina-mGPT's real weights have not run.**",
        "",
        "Counts: " + ", ".join(f"{s} {n}" for s, n in counts.items()) + ".",
        "",
        "",
    ]
    return "\n".join(head) + markdown_table(rows, COLUMNS) + "\n"


def write_claims(results: dict[str, Any], path: str | Path = CLAIMS_MD) -> Path:
    """Write ``ledger_markdown(results)`` to ``path`` (default docs/claims.md); the figures job and
    ``python -m gsd_lab readme`` call it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ledger_markdown(results))
    return path


def show_ledger(results: dict[str, Any] | None = None) -> None:
    """Display the ledger (in a notebook as markdown, else printed); default: the repository's
    run."""
    from ..io.figure_io import markdown_table

    text = markdown_table(ledger(results if results is not None else load_results()), COLUMNS)
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:  # pragma: no cover - IPython is in the notebooks extra
        print(text)
        return
    if get_ipython() is None:
        print(text)
    else:
        display(Markdown(text))
