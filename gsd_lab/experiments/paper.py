"""The paper's numbers, in one place, and the "paper against here" tables of notebooks 02-04.

Every number is cited to /work/shared/reference/paper.md (a digest of arXiv 2508.07747 and its
sources): section 1.2 (motivation), 1.3 (Fig. 4), 1.4 (Table 1, Parti, Lumina-mGPT 7B) and 1.5
(Table 2, Parti); the lossless frontier from 4.4 (SCD / MC-SJD) and 4.5 (SJD-PAC). A comparison
row states the paper's value, ours (computed from the run's rows), a verdict and, when it
does not reproduce, why.

Verdicts: one rule, ``verdicts.verdict``, on a measured difference and its paired standard
error (the same prompts and seeds on both sides): "noise" (shown "no difference detected", with
the smallest difference the run could have detected) when the difference is within two
standard errors (or has none), else "yes" / "no" by its sign against the claim's. A size claim
(a speed-up, a ratio of NFE) is judged as a ratio against the paper's ratio
(``verdicts.ratio_verdict``): "direction only" when R is beyond the noise on the paper's side
of 1 but R +- 2 SE(R) excludes the paper's ratio. "not run": a row is missing from this run.
Every row's "here" shows the interval its verdict was decided on (d or R, +- 2 SE).
The top-1 share (notebook 02) is a property of one run's tokens, compared with the paper's
range directly.

Absolute NFE and quality cannot match on another model (other token counts, codebooks and
metrics): speed is compared as NFE ratios, quality as differences, against the same run's AR.
Quality orderings the paper reads off CLIP, Table 2's "(B) hurts most", are judged here on the
exact distortion column (TV, and W1 where recorded), which ten images of a noisy proxy cannot
replace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .verdicts import (
    NOISE_Z,
    Decision,
    PairedDifference,
    PairedRatio,
    combined,
    paired_difference,
    paired_ratio,
    paired_values,
    ratio_verdict,
    verdict,
    word,
)

QUALITY = "condition_score"  # the stand-in's condition score, or the CLIP score on Lumina-mGPT


@dataclass(frozen=True)
class PaperNumber:
    """One reported value with its source in paper.md."""

    value: float
    source: str


AR_NFE = PaperNumber(2392, "paper.md 1.4, Table 1 (Parti): vanilla AR NFE")
SJD_NFE = PaperNumber(1035, "paper.md 1.4, Table 1 (Parti): SJD NFE")
GSD50_NFE = PaperNumber(637, "paper.md 1.4, Table 1 (Parti): GSD (G=50) NFE")
AMPLIFY3_NFE = PaperNumber(586, "paper.md 1.4, Table 1 (Parti): Amplify (k=3) NFE")
AR_CLIP = PaperNumber(32.091, "paper.md 1.4, Table 1 (Parti): vanilla AR CLIP")
GSD50_CLIP = PaperNumber(32.075, "paper.md 1.4, Table 1 (Parti): GSD (G=50) CLIP")
AMPLIFY3_CLIP = PaperNumber(31.774, "paper.md 1.4, Table 1 (Parti): Amplify (k=3) CLIP")
TOP1_SHARE_RANGE = (
    PaperNumber(0.50, "paper.md 1.2: 50-95% of tokens have top-1 < 5% (low end)"),
    PaperNumber(0.95, "paper.md 1.2: 50-95% of tokens have top-1 < 5% (high end)"),
)
SD_ACCEPTANCE_IMAGE = PaperNumber(
    0.40, "paper.md 1.2: SD acceptance about 40% in image AR models (70% in LLMs)"
)
TOP1_THRESHOLD = PaperNumber(0.05, "paper.md 1.2: the top-1 threshold")
REPLACED_CLIP = PaperNumber(
    32.089, "paper.md 1.3, Fig. 4: CLIP after replacing 50% of tokens with top-100 candidates"
)
TABLE2_NFE = {  # paper.md 1.5, Table 2 (Parti, G not stated in the digest)
    "(A)": PaperNumber(913.80, "paper.md 1.5, Table 2: (A) static, embedding distance"),
    "(B)": PaperNumber(685.31, "paper.md 1.5, Table 2: (B) dynamic, sorted by q"),
    "(C)": PaperNumber(636.24, "paper.md 1.5, Table 2: (C) dynamic, sorted by p"),
    "(D)": PaperNumber(636.75, "paper.md 1.5, Table 2: (D) sorted by p + filters"),
}
TABLE2_CLIP = {
    "(A)": PaperNumber(32.081, "paper.md 1.5, Table 2: (A) CLIP"),
    "(B)": PaperNumber(31.791, "paper.md 1.5, Table 2: (B) CLIP"),
    "(C)": PaperNumber(32.056, "paper.md 1.5, Table 2: (C) CLIP"),
    "(D)": PaperNumber(32.075, "paper.md 1.5, Table 2: (D) CLIP"),
}

# The lossless frontier (paper.md 4.4, 4.5; frontier.md): published on Lumina-mGPT 7B, COCO.
SCD_AR_NFE = PaperNumber(2390, "paper.md 4.4, SCD (arXiv 2510.24211), Lumina-mGPT COCO: AR NFE")
SCD_NFE = PaperNumber(
    568, "paper.md 4.4, SCD (MC-SJD, ICML 2026), Lumina-mGPT COCO: SCD NFE (4.21x)"
)
SCD_SJD_NFE = PaperNumber(1036, "paper.md 4.4, SCD, Lumina-mGPT COCO: SJD (L = 64) NFE")
SCD_GSD10_NFE = PaperNumber(701, "paper.md 4.4, SCD, Lumina-mGPT COCO: lossy GSD (G = 10) NFE")
SJD_PAC_STEP = PaperNumber(
    4.51, "paper.md 4.5, SJD-PAC (CVPR 2026) README, Lumina-mGPT COCO: step compression"
)
SJD_PAC_STEP_PARTI = PaperNumber(
    4.62, "paper.md 4.5, SJD-PAC README, Lumina-mGPT Parti: step compression"
)

COLUMNS = ["claim", "paper", "here", "verdict", "why not / note", "source"]

# The paper's analyses this package does not reproduce, with the reason: the one list (notebook
# 04 shows it; the claims ledger, `ledger.ledger`, lists them as "not run").
NOT_REPRODUCED_COLUMNS = ["analysis", "paper", "why not here"]
NOT_REPRODUCED = [
    {
        "id": "fig3_tsne_embeddings",
        "analysis": "Fig. 3: t-SNE of the token embeddings",
        "paper": "spread almost uniformly, hence no natural static clusters "
        "(paper.md 1.3; which table and how many points: not found)",
        "why not here": "a picture of Lumina-mGPT's embeddings says nothing about the stand-in's; "
        "the claim's consequence is tested instead: Table 2 (A), static k-means clusters "
        "of the input embeddings, against the dynamic rule (notebook 04)",
    },
    {
        "id": "fig8_token_context",
        "analysis": "Fig. 8: one token decodes to different pixels by context",
        "paper": "token similarity depends on context, so static clusters "
        "fit poorly (paper.md 1.3; details not found)",
        "why not here": "the stand-in decodes each code to a fixed patch (no context by "
        "construction), and Lumina-mGPT's VQGAN decoder "
        "needs weights that cannot be downloaded here",
    },
    {
        "id": "text_model_contrast",
        "analysis": "the text-model contrast: SD acceptance about 70% in LLMs against "
        "about 40% in image models; top-1 histograms of a text model",
        "paper": "paper.md 1.2 (which text model and data: not found)",
        "why not here": "no text LLM's weights can be downloaded here; notebook 05 computes "
        "acceptance = 1 - TV for any pair instead, and "
        "notebook 01 shows why flat pairs accept less",
    },
    {
        "id": "latency_speedup",
        "analysis": "latency (seconds per image) and latency speed-ups",
        "paper": "Table 1: 4.65x latency at 3.76x NFE on Parti (paper.md 1.4), on an A100",
        "why not here": "CPU wall time of a small model is noise-dominated and says nothing about "
        "a 7B model on a GPU: NFE is the hardware-independent cost (docs/lumina-mgpt.md "
        "section 5 has per-forward GPU times of the 7B shapes with random weights)",
    },
    {
        "id": "coco_fid_clip",
        "analysis": "MS-COCO FID and CLIP (5,000 captions)",
        "paper": "Table 1, COCO rows: GSD (G=25) FID 33.55, CLIP 31.24 (paper.md 1.4)",
        "why not here": "needs Lumina-mGPT on a GPU, the 5,000 COCO images and captions and the "
        "Inception weights, none of which can be downloaded here; scripts/gpu_reproduce.sh "
        "runs the Parti-style CLIP evaluation when the weights are present",
    },
]


def _row(claim: str, paper: str, here: str, outcome: str, why: str, source: str) -> dict[str, str]:
    """One comparison: ``outcome`` is the verdict's key ("noise", ...), ``verdict`` its words."""
    return {
        "claim": claim,
        "paper": paper,
        "here": here,
        "verdict": "-" if outcome == "-" else word(outcome),
        "why not / note": why,
        "source": source,
        "outcome": outcome,
    }


def _find(rows: list[dict[str, Any]], prefix: str) -> dict[str, Any] | None:
    return next((r for r in rows if str(r["method"]).startswith(prefix)), None)


# ---- notebook 02 ---------------------------------------------------------------------------------


def top1_comparison(share_below: float, threshold: float, model_name: str) -> list[dict[str, str]]:
    """Notebook 02: the share of generated tokens whose target top-1 probability is below 5%."""
    low, high = (n.value for n in TOP1_SHARE_RANGE)
    if threshold != TOP1_THRESHOLD.value:
        return [
            _row(
                f"share of tokens with top-1 < {threshold:g}",
                f"{low:.0%}-{high:.0%} at 0.05",
                f"{share_below:.1%}",
                "not run",
                "the paper's threshold is 0.05",
                TOP1_SHARE_RANGE[0].source,
            )
        ]
    inside = low <= share_below <= high
    why = (
        ""
        if inside
        else f"{model_name}'s target distributions are "
        f"{'sharper' if share_below < low else 'flatter'} than Lumina-mGPT's (another "
        "model, codebook, data and guidance): the share is a property of the model"
    )
    return [
        _row(
            "share of tokens with top-1 < 5%",
            f"{low:.0%}-{high:.0%}",
            f"{share_below:.1%}",
            "yes" if inside else "no",
            why,
            TOP1_SHARE_RANGE[0].source,
        )
    ]


# ---- notebook 03 ---------------------------------------------------------------------------------


def replacement_comparison(
    quality: dict[str, dict[str, Any]],
    scores: dict[str, list[float] | None] | None = None,
    change: PairedDifference | None = None,
) -> list[dict[str, str]]:
    """Notebook 03: quality after replacing 50% of tokens with top-100 candidates, against the
    unmodified images (``replacement_study(...)``: ``quality`` per variant and, for the paired
    standard error, ``scores``: per-image scores per variant, image i of each from AR image i;
    or ``change``, the paired change itself, as a figures run's results.json gives it).

    The claim is that quality barely changes, so a difference within the noise is the outcome
    the claim predicts, but the one rule calls it "noise" (nothing was shown): only a change
    beyond two standard errors is decisive, and it says "no" ("barely changes" does not hold),
    whichever its sign. Without ``scores`` the standard error is the unpaired one (said so)."""
    paper_gap = REPLACED_CLIP.value - AR_CLIP.value
    original, top = quality.get("original", {}), quality.get("top-k", {})
    if original.get(QUALITY) is None or top.get(QUALITY) is None:
        return [
            _row(
                "top-100 replacement barely changes quality",
                f"CLIP {paper_gap:+.3f}",
                "-",
                "not run",
                "no quality metric in this run",
                REPLACED_CLIP.source,
            )
        ]
    paired = change is not None or (
        scores is not None
        and scores.get("top-k") is not None
        and scores.get("original") is not None
    )
    if change is not None:
        pass
    elif paired:
        change = paired_values(scores["top-k"], scores["original"])
    else:
        sems = [q.get(f"{QUALITY}_sem") for q in (top, original)]
        se = math.hypot(*sems) if all(v is not None for v in sems) else None
        change = PairedDifference(top[QUALITY] - original[QUALITY], se, 0)
    kind = "paired" if paired else "unpaired"
    here = difference_text(change, digits=2).replace("(n = ", f"({kind}, n = ", 1)
    # Either sign contradicts "barely changes": judge |change| as the claim "it changed".
    outcome = verdict(abs(change.difference), change.se, expected_sign=1)
    if outcome == "noise":
        verdict_text, why = (
            "noise",
            (
                f"no change beyond {NOISE_Z:g} {kind} standard errors: what the claim predicts, "
                "but a proxy this noisy could hide a small one"
                if change.se is not None
                else "one image: no standard error to tell a change from noise"
            ),
        )
    elif change.difference < 0:
        verdict_text, why = (
            "no",
            (
                f"a drop beyond {NOISE_Z:g} {kind} standard errors: this model's tokens are less "
                "redundant than Lumina-mGPT's, or the metric (not CLIP) is more sensitive"
            ),
        )
    else:
        verdict_text, why = (
            "no",
            (
                f"a rise beyond {NOISE_Z:g} {kind} standard errors: replacing tokens with top-100 "
                "candidates did not hurt (the paper's point), but the score moved, so 'barely "
                "changes' does not hold; the metric (not CLIP) may favour the resampled tokens"
            ),
        )
    rows = [
        _row(
            "top-100 replacement barely changes quality",
            f"CLIP {paper_gap:+.3f}",
            here,
            verdict_text,
            why,
            REPLACED_CLIP.source,
        )
    ]
    uniform = quality.get("uniform", {})
    if uniform.get(QUALITY) is not None:
        worse = uniform[QUALITY] < top[QUALITY]
        rows.append(
            _row(
                "(control, not in the paper) uniform replacement hurts more",
                "-",
                f"{uniform[QUALITY] - original[QUALITY]:+.2f}",
                "-",
                "as expected" if worse else "unexpected: the proxy does not see the damage",
                "notebook 03's control",
            )
        )
    return rows


# ---- notebook 04 ---------------------------------------------------------------------------------


def difference_text(diff: PairedDifference, unit: str = "", digits: int = 3) -> str:
    """ "+0.12 NFE [-0.3, +0.5] (n = 10)": the difference with the interval a verdict on it is
    decided on (and, were it "noise", the size the run could have detected)."""
    if not math.isfinite(diff.difference):
        return "-"
    return Decision(verdict(diff.difference, diff.se, 1), diff).text(digits, unit).split(": ", 1)[1]


def ratio_text(ratio: PairedRatio, suffix: str = "x") -> str:
    return ratio.text(2, suffix) + (f" (n = {ratio.n})" if math.isfinite(ratio.ratio) else "")


def _speedup_row(
    claim: str,
    row: dict[str, Any] | None,
    ar: dict[str, Any] | None,
    paper: float,
    size_why: str,
    source: str,
) -> dict[str, str]:
    """ "``row`` needs ``paper`` times fewer forwards than AR": the speed-up AR / ``row`` in mean
    NFE with its paired SE, against the paper's ratio (``verdicts.ratio_verdict``)."""
    ratio = paired_ratio(ar, row, "nfe")
    outcome = ratio_verdict(ratio, paper)
    why = {
        "yes": "",
        "not run": "row not in this run's Table 1",
        "direction only": size_why,
        "noise": "the speed-up is within two paired standard errors of 1",
    }.get(outcome, "slower than AR, or the paper's speed-up excluded")
    return _row(claim, f"{paper:.2f}x", ratio_text(ratio), outcome, why, source)


def speed_quality_comparison(
    table1: list[dict[str, Any]], table2: list[dict[str, Any]]
) -> list[dict[str, str]]:
    """Notebook 04: Table 1 and Table 2 (NFE ratios against AR or SJD, quality and distortion
    differences), each judged by ``verdicts.verdict`` on a paired difference (module docstring).
    Rows need ``per_image`` values (``runs.summarize``) for their standard errors."""
    ar, sjd = _find(table1, "AR"), _find(table1, "SJD")
    gsd50, amp3 = _find(table1, "GSD (G=50)"), _find(table1, "Amplify (k=3)")
    rows = []
    for label, row, paper_nfe in (
        ("SJD", sjd, SJD_NFE),
        ("GSD (G=50)", gsd50, GSD50_NFE),
        ("Amplify (k=3)", amp3, AMPLIFY3_NFE),
    ):
        rows.append(
            _speedup_row(
                f"{label}: NFE speed-up over AR",
                row,
                ar,
                AR_NFE.value / paper_nfe.value,
                "faster than AR but by another factor: other model, token count and acceptance",
                paper_nfe.source,
            )
        )

    diff = paired_difference(gsd50, amp3, QUALITY)
    paper_text = (
        f"CLIP {GSD50_CLIP.value - AR_CLIP.value:+.3f} "
        f"vs {AMPLIFY3_CLIP.value - AR_CLIP.value:+.3f}"
    )
    outcome = verdict(diff.difference, diff.se, expected_sign=1)
    why = {
        "yes": "",
        "not run": "rows or per-image quality scores missing",
        "noise": "the two losses differ by less than two paired "
        "standard errors: more images needed",
    }.get(outcome, "Amplify lost less quality than GSD on this model and metric")
    rows.append(
        _row(
            "quality loss vs AR: GSD (G=50) smaller than Amplify (k=3)",
            paper_text,
            "GSD - Amplify: " + difference_text(diff, digits=1),
            outcome,
            why,
            GSD50_CLIP.source,
        )
    )

    rows += frontier_comparison(table1)

    t2_sjd = _find(table2, "SJD") or sjd
    found = {key: _find(table2, key + " ") for key in TABLE2_NFE}
    for key in ("(A)", "(B)", "(C)", "(D)"):
        row = found[key]
        paper = TABLE2_NFE[key].value / SJD_NFE.value
        ratio = paired_ratio(row, t2_sjd, "nfe")
        outcome = ratio_verdict(ratio, paper)
        why = {
            "yes": "",
            "not run": "row not in this run's Table 2",
            "noise": "the ratio is within two paired standard errors of 1",
        }.get(
            outcome,
            "the paper's ratio lies outside ours +- 2 SE: another model, the share of drafts a "
            "cluster rescues differs",
        )
        rows.append(
            _row(
                f"Table 2 {key}: NFE / SJD's NFE",
                f"{paper:.2f}",
                ratio_text(ratio, suffix=""),
                outcome,
                why,
                TABLE2_NFE[key].source,
            )
        )
    rows += table2_ordering(found)
    return rows


def frontier_comparison(table1: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Notebook 04: the lossless frontier against GSD, by the one rule (``verdicts.verdict``) on
    paired NFE differences. SCD (MC-SJD) reports its NFE speed-up and fewer forwards than lossy
    GSD (its G = 10 on COCO; ours: GSD G = 50 with the paper's filters, Table 1's row); SJD-PAC
    reports 4.51x, but its released verification is not lossless (tests/lab/test_sjd_pac.py), so
    it is not run here. Rows "MC-SJD (maximal)" etc. of Table 1."""
    ar = _find(table1, "AR")
    maximal, gumbel = _find(table1, "MC-SJD (maximal)"), _find(table1, "MC-SJD (Gumbel)")
    gsd50, coupled_gsd = _find(table1, "GSD (G=50)"), _find(table1, "MC-GSD (G=50")
    rows = []
    paper = SCD_AR_NFE.value / SCD_NFE.value
    for label, row in (("MC-SJD (maximal)", maximal), ("MC-SJD (Gumbel)", gumbel)):
        rows.append(
            _speedup_row(
                f"{label}: NFE speed-up over AR (SCD)",
                row,
                ar,
                paper,
                "another model and window (SCD: L = 64 on COCO)",
                SCD_NFE.source,
            )
        )
    # Each coupling judged on its own (picking the faster one on the same images would bias "yes").
    paper_text = f"SCD {SCD_NFE.value:g} < GSD (G=10) {SCD_GSD10_NFE.value:g} NFE"
    for label, row in (("MC-SJD (maximal)", maximal), ("MC-SJD (Gumbel)", gumbel)):
        diff = paired_difference(row, gsd50, "nfe")
        outcome = verdict(diff.difference, diff.se, expected_sign=-1)
        why = {
            "yes": "SCD compares with GSD G = 10 on COCO; here G = 50 with the paper's filters",
            "not run": "rows not in this run's Table 1",
            "noise": "no difference detected between this lossless coupled SJD and lossy GSD "
            "(not a proof that they are equal: see the interval)",
        }.get(outcome, "GSD's clusters accept more than coupling on this model")
        here = (
            "-"
            if row is None or gsd50 is None
            else (f"{label} - GSD (G=50): {difference_text(diff, 'NFE', digits=1)}")
        )
        rows.append(
            _row(
                f"{label}, lossless, needs fewer forwards than lossy GSD (G=50)",
                paper_text,
                here,
                outcome,
                why,
                SCD_GSD10_NFE.source,
            )
        )
    if coupled_gsd is not None and gsd50 is not None:
        diff = paired_difference(coupled_gsd, gsd50, "nfe")
        rows.append(
            _row(
                "(not in the papers) coupled drafts speed up GSD (G=50) too",
                "-",
                f"{coupled_gsd['method']} - GSD (G=50): {difference_text(diff, 'NFE', digits=1)}",
                verdict(diff.difference, diff.se, expected_sign=-1),
                "same rule, coupled re-drafts: the per-step law "
                "given the history is unchanged (proofs/09)",
                "proofs/09_coupled_drafts.md",
            )
        )
    rows.append(
        _row(
            "SJD-PAC: step compression over AR",
            f"{SJD_PAC_STEP.value:.2f}x",
            "-",
            "not run",
            "its released tree verification is not lossless (an exact transcription, "
            "tests/lab/test_sjd_pac.py; docs/lossless-frontier.md); its Adaptive "
            "Continuation on the chain is the maximal coupling, run as MC-SJD (maximal)",
            SJD_PAC_STEP.source,
        )
    )
    return rows


def table2_ordering(found: dict[str, dict[str, Any] | None]) -> list[dict[str, str]]:
    """Table 2's quality ordering, "sorting by q (B) loses the most of (B)-(D)" (paper: CLIP),
    judged on the exact distortion: (B) minus (C) and (B) minus (D), paired over images, both
    beyond the noise and positive for "yes" (``verdicts.combined``); one row per distortion
    column the rows carry (TV; W1 where recorded)."""
    rows = []
    paper = (
        f"(B) lowest CLIP: {TABLE2_CLIP['(B)'].value} vs {TABLE2_CLIP['(C)'].value} (C), "
        f"{TABLE2_CLIP['(D)'].value} (D)"
    )
    for key, name in (("distortion", "TV"), ("w1", "W1")):
        if key == "w1" and not all(
            (found[k] or {}).get("w1") is not None for k in ("(B)", "(C)", "(D)")
        ):
            continue
        diffs = {
            other: paired_difference(found["(B)"], found[other], key) for other in ("(C)", "(D)")
        }
        outcome = combined([verdict(d.difference, d.se, expected_sign=1) for d in diffs.values()])
        here = "; ".join(f"(B) - {other}: {difference_text(d)}" for other, d in diffs.items())
        why = {
            "yes": "",
            "not run": "rows (B)-(D) or their per-image distortions missing",
            "noise": "a difference within two paired standard "
            "errors: cannot tell which distorts more",
            "no": "another row distorts more than (B) on this model",
        }.get(outcome, "")
        rows.append(
            _row(
                f"Table 2: sorting by q (B) distorts the most of (B)-(D), exact {name}",
                paper,
                here,
                outcome,
                why,
                TABLE2_CLIP["(B)"].source,
            )
        )
    return rows


def nfe_below_sjd(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """ "GSD needs fewer NFE than SJD", measured for every GSD row of a table: the paired difference
    GSD(G) - SJD in NFE per image with its standard error and the one rule's verdict (not a
    check: a sampled inequality). The paper reports G = 50 (637 against 1035); for other G it
    reports no NFE."""
    sjd = _find(rows, "SJD")
    out = []
    for row in rows:
        if not str(row["method"]).startswith("GSD"):
            continue
        diff = paired_difference(row, sjd, "nfe")
        outcome = verdict(diff.difference, diff.se, expected_sign=-1)
        paper = (
            f"{GSD50_NFE.value:.0f} < {SJD_NFE.value:.0f}" if row["method"] == "GSD (G=50)" else "-"
        )
        why = {
            "yes": "",
            "not run": "SJD or per-image NFE missing",
            "noise": "within two paired standard errors: this run cannot tell GSD's NFE from SJD's",
        }.get(outcome, "GSD needed more forwards than SJD on these images")
        out.append(
            _row(
                f"{row['method']} needs fewer NFE than SJD",
                paper,
                "GSD - SJD: " + difference_text(diff, "NFE", digits=1),
                outcome,
                why,
                GSD50_NFE.source
                if paper != "-"
                else "not in the paper (its Table 1 reports G = 50)",
            )
        )
    return out


def show_ledger(results: dict[str, Any] | None = None) -> None:
    """Display the claims ledger (``ledger.show_ledger``): every claim, run or not, headline first;
    default: the repository's figures/results.json."""
    from .ledger import show_ledger as show

    show(results)
