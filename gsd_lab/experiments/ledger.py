"""The claims ledger: every claim of the GSD paper (and of the lossless-frontier papers it is
compared with), run or not, in one table, read from a figures run's ``results.json``.

Each row: the claim, the paper's number, ours (computed here from the run's rows, never typed
in) with the interval its verdict was decided on (d or R, +- 2 paired SE), and the verdict in
the one vocabulary of ``verdicts.WORDS`` (the rule is ``verdicts.verdict``; size claims are
ratios against the paper's ratio, ``verdicts.ratio_verdict``):

- "yes": beyond two paired standard errors with the claim's sign (and, for a ratio, the paper's
  ratio inside ours +- 2 SE);
- "direction only": the claim's sign beyond the noise, but the paper's ratio outside ours +- 2 SE;
- "no": beyond the noise against the claim, the paper's ratio excluded without the direction
  shown, or disproved exactly (Theorem 1 for dynamic clusters);
- "no difference detected": within two paired standard errors: nothing was shown either way
  (never read as "equal"); the row names the smallest difference the run could have detected
  at 80% power;
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
    VERDICTS,
    PairedDifference,
    combined,
    paired_difference,
    paired_ratio,
    ratio_verdict,
    verdict,
    word,
)

COLUMNS = ["claim", "paper", "here", "verdict", "note", "source"]
REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "figures" / "results.json"
CLAIMS_MD = REPO / "docs" / "claims.md"


def _row(
    claim: str, paper_text: str, here: str, outcome: str, note: str, source: str
) -> dict[str, str]:
    """A ledger row; ``outcome`` is the verdict's key, shown as ``verdicts.word``."""
    return {
        "claim": claim,
        "paper": paper_text,
        "here": here,
        "verdict": word(outcome),
        "note": note,
        "source": source,
        "outcome": outcome,
    }


def _from_comparison(row: dict[str, str]) -> dict[str, str]:
    """A ``paper`` comparison row (notebooks 02-04) as a ledger row."""
    return _row(
        row["claim"], row["paper"], row["here"], row["outcome"], row["why not / note"], row["source"]
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
        "GSD - Amplify, condition score: " + paper.difference_text(diff, digits=1),
        outcome,
        note,
        paper.GSD50_CLIP.source,
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
        here = "GSD - Amplify at matched NFE (d [+- 2 bootstrap SE]): " + "; ".join(
            f"{r['nfe']:.1f} NFE: "
            + paper.difference_text(PairedDifference(r["difference"], r["se"], r["images"]))
            + f", {word(r['verdict'])}"
            for r in rows
        )
        deciding = [f"{r['nfe']:.1f}" for r in rows if r["verdict"] == "no"]
        note = {
            "no": "GSD distorts more than Amplify beyond the noise at "
            + ", ".join(deciding)
            + " NFE (the point(s) that decide the verdict)",
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
    claimed = paper.SJD_NFE.value / paper.GSD50_NFE.value
    ratio = paired_ratio(sjd, gsd, "nfe")
    outcome = ratio_verdict(ratio, claimed)
    note = {"direction only": "the paper's speed-up lies outside ours +- 2 SE"}.get(outcome, "")
    return _row(
        "GSD (G=50): NFE speed-up over SJD",
        f"{claimed:.2f}x",
        "SJD / GSD: " + paper.ratio_text(ratio),
        outcome,
        note,
        paper.GSD50_NFE.source,
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
            "noise": "no difference detected between lossless coupled SJD and lossy GSD",
            "no": "GSD needs fewer forwards",
            "yes": "SCD compares with GSD G = 10 on COCO; here G = 50",
        }.get(outcome, "not run")
        out.append(
            _row(
                f"{label}, lossless, needs fewer forwards than lossy GSD (G=50)",
                f"SCD {paper.SCD_NFE.value:g} < GSD (G=10) {paper.SCD_GSD10_NFE.value:g} NFE",
                f"{label} - GSD (G=50): {paper.difference_text(diff, 'NFE', digits=1)}",
                outcome,
                note,
                paper.SCD_GSD10_NFE.source,
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
        "noise": "no change detected: what the claim predicts, but not a proof of equality",
        "no": "quality moved beyond the noise",
    }.get(status, "")
    return _row(
        "GSD (G=50) keeps AR's quality",
        f"CLIP {paper.GSD50_CLIP.value} vs AR {paper.AR_CLIP.value}",
        "GSD - AR, condition score: " + paper.difference_text(diff, digits=1),
        status,
        note,
        paper.GSD50_CLIP.source,
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
    rows += [_from_comparison(r) for r in comparison if r["claim"].startswith("Table 2")]
    rows += frontier(table1)
    rows.append(quality_vs_ar(table1))
    for label in ("SJD", "Amplify (k=3)", "MC-SJD (maximal)", "MC-SJD (Gumbel)"):
        claim = next(c for c in by_claim if c.startswith(f"{label}: NFE speed-up over AR"))
        rows.append(_from_comparison(by_claim[claim]))
    rows += [_from_comparison(r) for r in comparison if r["claim"].startswith("(not in the papers)")]
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
    counts = {word(v): sum(r["outcome"] == v for r in rows) for v in VERDICTS}
    images = next((r.get("images") for r in results.get("tables", {}).get("table1", [])), None)
    commit = (results.get("git") or {}).get("commit")
    head = [
        "# Claims ledger: every claim of the paper, run or not",
        "",
        f"Generated from `figures/results.json` (model `{results.get('model')}`, "
        f"commit `{commit}`, "
        f"{images} images per method) by `gsd_lab.experiments.ledger`; do not edit by hand "
        "(`python -m gsd_lab readme` rewrites it). Status by the one verdict rule "
        "(`gsd_lab.experiments.verdicts`), in one vocabulary: yes / no beyond two paired standard "
        "errors (d +- 2 SE, printed with every number it judged), direction only (the claim's "
        "sign, but the paper's ratio outside ours +- 2 SE), no difference detected (within "
        "them; never read as equality: the row names the smallest difference the run could "
        "have detected at 80% power), not run (why). "
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
