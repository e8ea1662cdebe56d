"""The README's findings box, rendered from a figures run's ``results.json`` so that no number in
it is typed by hand: ``render_findings(results)`` is the block, ``update_readme`` writes it
between the markers, ``python -m gsd_lab readme`` (and the figures job, writing into the
repository's ``figures/``) rewrites it together with the claims ledger (docs/claims.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from . import ledger, paper
from .verdicts import NOISE_Z, PairedDifference, paired_difference, verdict

START, END = "<!-- findings:start (python -m gsd_lab readme) -->", "<!-- findings:end -->"
TABLE_START, TABLE_END = "<!-- table1:start (python -m gsd_lab readme) -->", "<!-- table1:end -->"
README = ledger.REPO / "README.md"


def _row(rows: list[dict[str, Any]], method: str) -> dict[str, Any]:
    row = next((r for r in rows if r["method"] == method), None)
    if row is None:
        raise ValueError(f"results.json's table1 has no row {method!r}: cannot render the findings")
    return row


def _diff(diff: PairedDifference, decimals: int = 1) -> str:
    """ "+1.4 (SE 3.2; +- 2 SE: [-5.0, +7.8])"."""
    if diff.se is None:
        return f"{diff.difference:+.{decimals}f} (no SE)"
    low, high = diff.difference - NOISE_Z * diff.se, diff.difference + NOISE_Z * diff.se
    return (
        f"{diff.difference:+.{decimals}f} (SE {diff.se:.{decimals}f}; +- 2 SE: "
        f"[{low:+.{decimals}f}, {high:+.{decimals}f}])"
    )


def _fewer(diff: PairedDifference, fewer: str, same: str, more: str) -> str:
    """One of three phrases by the verdict on a difference in NFE (negative: fewer forwards)."""
    outcome = verdict(diff.difference, diff.se, expected_sign=-1)
    return {"yes": fewer, "no": more}.get(outcome, same)


def _span(rows: list[dict[str, Any]], measure: str, other: str) -> str:
    picked = [r for r in rows if r["measure"] == measure and r["other"] == other]
    if not picked:
        return "not run"
    diffs = [r["difference"] for r in picked]
    lower = sum(r["verdict"] == "yes" for r in picked)
    higher = sum(r["verdict"] == "no" for r in picked)
    return (
        f"{min(diffs):+.3f} to {max(diffs):+.3f} over {len(picked)} points; beyond the noise, "
        f"GSD lower at {lower} of {len(picked)} and higher at {higher} of {len(picked)}"
    )


def frontier_line(front: dict[str, Any] | None) -> str | None:
    """The frontier's finding (``experiments.frontier``): GSD's NFE minus each optimal rule's at
    GSD's TV and at its W1, worded by the verdict; None when the run has no frontier."""
    from .frontier import VERDICT_WORDS

    if not front or not front.get("matched"):
        return None
    gsd = f"GSD (G={front['group_size']})"
    parts = []
    for measure in ("TV", "W1"):
        rows = [r for r in front["matched"] if r["reference"] == gsd and r["measure"] == measure]
        if not rows:
            continue
        clauses = [
            f"{r['other']} {PairedDifference(r['difference'], r['se'], r['n']).text(2)}: "
            f"{VERDICT_WORDS[r['verdict']]}" + ("" if r["inside"] else " (outside its range)")
            for r in rows
        ]
        parts.append(f"at its {measure} ({rows[0]['distortion']:.3g}), " + "; ".join(clauses))
    if not parts:
        return None
    images = len(front["prompts"]) * len(front["seeds"])
    return (
        f"- **Against the optimal lossy rules** ({images} images; {gsd}'s NFE minus the rule's "
        "curve read at GSD's distortion, paired SE): " + "; ".join(parts) + "."
    )


def render_findings(results: dict[str, Any]) -> str:
    """At most 8 lines of findings, every number read from ``results`` (a results.json dict)."""
    tables = results["tables"]
    t1, matched = tables["table1"], tables.get("matched_nfe", [])
    ar, sjd, gsd = _row(t1, "AR"), _row(t1, "SJD"), _row(t1, "GSD (G=50)")
    mc_max, mc_gsd = _row(t1, "MC-SJD (maximal)"), _row(t1, "MC-GSD (G=50, maximal)")
    amp, noise = _row(t1, "Amplify (k=3)"), _row(t1, "AR, second seed set (seed noise)")
    frontier = paired_difference(mc_max, gsd, "nfe")
    coupled = paired_difference(mc_gsd, mc_max, "nfe")
    phrases = ("fewer forwards", "no difference detected (the interval above)", "more forwards")
    ar_nfe, sjd_nfe, gsd_nfe = paper.AR_NFE.value, paper.SJD_NFE.value, paper.GSD50_NFE.value

    def quality(row: dict[str, Any]) -> str:
        return f"{row['condition_score'] - ar['condition_score']:+.1f}"

    lines = [
        "- **The lossless frontier.** Coupled-draft SJD (MC-SJD maximal, lossless) against GSD "
        f"G = 50: {mc_max['nfe']:.1f} against {gsd['nfe']:.1f} NFE, paired difference "
        f"{_diff(frontier)} over {gsd['images']} images: {_fewer(frontier, *phrases)}, at zero "
        f"distortion against GSD's {gsd['distortion']:.3f} TV per token.",
        "- **Matched NFE, GSD minus the naive Amplify rule** (negative: GSD distorts less): "
        f"TV {_span(matched, 'TV', 'Amplify')}; W1 {_span(matched, 'W1', 'Amplify')}. "
        f"Against LANTERN: TV {_span(matched, 'TV', 'LANTERN')}.",
        f"- **GSD with coupled drafts (MC-GSD G = 50)** against MC-SJD: {mc_gsd['nfe']:.1f} NFE, "
        f"{_diff(coupled)}: {_fewer(coupled, *phrases)}, at {mc_gsd['distortion']:.3f} TV per "
        "token.",
        f"- Speed-ups over AR in forwards: SJD {sjd['speedup_nfe']:.2f}x, GSD G = 50 "
        f"{gsd['speedup_nfe']:.2f}x ({sjd['nfe'] / gsd['nfe']:.2f}x over SJD; the paper: "
        f"{ar_nfe / sjd_nfe:.2f}x, {ar_nfe / gsd_nfe:.2f}x, {sjd_nfe / gsd_nfe:.2f}x), Amplify "
        f"k = 3 {amp['speedup_nfe']:.2f}x. Quality (condition score) minus AR's: GSD "
        f"{quality(gsd)}, Amplify {quality(amp)}, AR on other seeds {quality(noise)} (the seed "
        "noise).",
    ]
    line = frontier_line(tables.get("frontier"))
    if line:
        lines.append(line)
    top1 = tables.get("top1") or {}
    if top1:
        low, high = (bound.value for bound in paper.TOP1_SHARE_RANGE)
        share = top1["pooled_share_below"]
        inside = "inside" if low <= share <= high else "outside"
        lines.append(
            f"- Flatness: {share:.1%} of AR tokens have top-1 probability below "
            f"{top1['threshold']:g}, {inside} the paper's {low:.0%}-{high:.0%}."
        )
    commit = str(results["git"]["commit"])[:7]
    lines.append(
        f"- All on the **stand-in** (`{results.get('model')}`, commit `{commit}`): "
        "Lumina-mGPT's real weights have not run. Every paper claim, run or not: "
        "[docs/claims.md](docs/claims.md)."
    )
    return "\n".join(lines)


TABLE1_LABELS = {"AR, second seed set (seed noise)": "AR, other seeds (noise)"}


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render_table1(results: dict[str, Any]) -> str:
    """Table 1 of the run as README shows it (the project's table renderer), every cell from
    ``results``: NFE (s.e.), speed-ups in NFE and CPU wall time, accepted / tested, TV, W1, the
    condition score and its difference to AR with the 95% paired-bootstrap interval. A run
    decoded at batch B > 1 names it in the wall column (each image's wall time is its share of
    its batch-B forwards: of its configuration's in ``gsd_lab.experiments.runs.RunCache``, of a
    chunk of prompts' configurations in the streamed run)."""
    from ..io.figure_io import markdown_table

    batch = int(results.get("config", {}).get("batch_size") or 1)
    wall = "speed-up (CPU wall)" if batch == 1 else f"speed-up (CPU wall, batch {batch})"
    rows = []
    for r in results["tables"]["table1"]:
        low, high = r.get("condition_score_diff_ar_low"), r.get("condition_score_diff_ar_high")
        diff = r.get("condition_score_diff_ar")
        rows.append(
            {
                "method": TABLE1_LABELS.get(r["method"], r["method"]),
                "NFE (s.e.)": f"{r['nfe']:.1f}"
                + (f" ({r['nfe_sem']:.1f})" if r.get("nfe_sem") else ""),
                "speed-up (NFE)": f"{r['speedup_nfe']:.2f}x",
                wall: f"{r['speedup_wall']:.2f}x",
                "accepted / tested": _cell(r.get("accepted_per_tested"), ".3f"),
                "TV": _cell(r.get("distortion"), ".3f"),
                "W1": _cell(r.get("w1"), ".3f"),
                "condition score": _cell(r.get("condition_score"), ".1f"),
                "minus AR [95% CI]": "-"
                if r["method"] == "AR" or diff is None
                else f"{diff:+.1f} [{low:+.1f}, {high:+.1f}]",
            }
        )
    real = results["tables"].get("real_images")
    if real:
        rows.append(
            {
                "method": f"real held-out crops ({real['images']})",
                "condition score": _cell(real.get("condition_score"), ".1f"),
            }
        )
    columns = [
        "method",
        "NFE (s.e.)",
        "speed-up (NFE)",
        wall,
        "accepted / tested",
        "TV",
        "W1",
        "condition score",
        "minus AR [95% CI]",
    ]
    config, sizes = results.get("config", {}), results.get("config", {}).get("sizes", {})
    caption = (
        f"Model `{results.get('model')}` at commit `{str(results['git']['commit'])[:7]}`: "
        f"{results['tables']['table1'][0]['images']} images per method, "
        f"{config.get('num_tokens')} tokens "
        f"each, CFG {config.get('cfg_scale'):g}, top-k {config.get('top_k')}, temperature "
        f"{config.get('temperature'):g}, Jacobi window {sizes.get('window')}; W1 from "
        f"{results['tables'].get('w1_draws')} rows per image."
        + (
            ""
            if batch == 1
            else f" Decoded {batch} images "
            + (
                "per forward, every configuration of a chunk of prompts in one stream (the "
                "streamed run: an AR image shares forwards with other methods' windows)"
                if sizes.get("streamed")
                else "of a configuration per forward"
            )
            + ": an image's CPU wall time is its share of those forwards (a throughput ratio at "
            f"batch {batch}), not its latency alone: the papers' wall speed-ups are batch-1 "
            "latency."
        )
        + "\n\n"
    )
    cells = [{c: row.get(c, "-") for c in columns} for row in rows]
    return caption + markdown_table(cells, columns)


def replace_block(text: str, block: str, start: str = START, end: str = END) -> str:
    """``text`` with the part between ``start`` and ``end`` replaced by ``block``; ValueError
    without the markers."""
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise ValueError(f"README has no markers {start} ... {end}")
    return pattern.sub(lambda _: f"{start}\n{block}\n{end}", text, count=1)


def committed_block(text: str, start: str = START, end: str = END) -> str:
    """The block currently between the markers of ``text``."""
    match = re.search(re.escape(start) + r"\n(.*?)\n" + re.escape(end), text, re.S)
    if match is None:
        raise ValueError(f"README has no block between {start} and {end}")
    return match.group(1)


def rendered_blocks(results: dict[str, Any]) -> dict[tuple[str, str], str]:
    """Every README block rendered from ``results``, by its markers."""
    return {
        (START, END): render_findings(results),
        (TABLE_START, TABLE_END): render_table1(results),
    }


def update_readme(results: dict[str, Any], readme: str | Path = README) -> Path:
    """Rewrite the rendered blocks of ``readme`` from ``results``."""
    readme = Path(readme)
    text = readme.read_text()
    for (start, end), block in rendered_blocks(results).items():
        text = replace_block(text, block, start, end)
    readme.write_text(text)
    return readme


def update_repository(results: dict[str, Any] | None = None) -> list[Path]:
    """README's rendered blocks and docs/claims.md from ``results`` (default:
    figures/results.json)."""
    results = results if results is not None else ledger.load_results()
    return [update_readme(results), ledger.write_claims(results)]


def stale_outputs(
    results: dict[str, Any], readme: str | Path = README, claims: str | Path = ledger.CLAIMS_MD
) -> list[str]:
    """Which of README's findings block and docs/claims.md differ from ``results``' rendering."""
    stale, text = [], Path(readme).read_text()
    blocks = rendered_blocks(results).items()
    if any(committed_block(text, *markers) != block for markers, block in blocks):
        stale.append(str(readme))
    if not Path(claims).exists() or Path(claims).read_text() != ledger.ledger_markdown(results):
        stale.append(str(claims))
    return stale
