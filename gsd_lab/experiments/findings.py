"""The README's findings box, rendered from a figures run's ``results.json`` so that no number in
it is typed by hand: ``render_findings(results)`` is the block, ``update_readme`` writes it
between the markers, ``python -m gsd_lab readme`` (and the figures job, writing into the
repository's ``figures/``) rewrites it together with the claims ledger (docs/claims.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import math

from . import ledger, paper
from .verdicts import (
    Decision,
    PairedDifference,
    combined,
    decide,
    NOT_RUN,
    minimum_detectable,
    paired_difference,
    paired_values,
    per_image,
    paired_ratio,
    ratio_verdict,
    verdict,
    word,
)

START, END = "<!-- findings:start (python -m gsd_lab readme) -->", "<!-- findings:end -->"
TABLE_START, TABLE_END = "<!-- table1:start (python -m gsd_lab readme) -->", "<!-- table1:end -->"
README = ledger.REPO / "README.md"


def _row(rows: list[dict[str, Any]], method: str) -> dict[str, Any]:
    row = next((r for r in rows if r["method"] == method), None)
    if row is None:
        raise ValueError(f"results.json's table1 has no row {method!r}: cannot render the findings")
    return row


COLUMNS = ["question", "answer", "A - B [+- 2 SE]", "n"]


def _signed(value: float, digits: int) -> str:
    return f"{value:+.{digits}f}"


def _span(diff: PairedDifference, digits: int) -> str:
    """ "+2.6 [-2.5, +7.7]": d [d - 2 SE, d + 2 SE], the interval every verdict decides on."""
    return Decision("noise", diff).span(digits)


def _detectable(diff: PairedDifference, digits: int) -> str:
    size = minimum_detectable(diff.se)
    return "" if size is None else f" (the run could detect |d| >= {size:.{digits}f})"


def _judged(decision: Decision, digits: int, yes: str, no: str) -> str:
    """The answer cell: the verdict's words, what "yes" / "no" mean here, the detectable size."""
    outcome = decision.outcome
    if outcome == "noise":
        return word(outcome) + _detectable(decision.diff, digits)
    return {"yes": f"yes: {yes}", "no": f"no: {no}"}.get(outcome, word(outcome))


def _line(question: str, answer: str, label: str, diff: PairedDifference, digits: int) -> dict:
    cell = "-" if not math.isfinite(diff.difference) else f"{label}: {_span(diff, digits)}"
    return {"question": question, "answer": answer, "A - B [+- 2 SE]": cell, "n": str(diff.n)}


def _matched_points(rows: list[dict[str, Any]], measure: str, other: str) -> tuple[str, str, int]:
    """(answer, A - B cell, n) of "GSD distorts less than ``other`` at matched NFE"."""
    picked = [r for r in rows if r["measure"] == measure and r["other"] == other]
    if not picked:
        return word("not run"), "-", 0
    outcome = combined([r["verdict"] for r in picked])
    beyond = [f"{r['nfe']:.1f}" for r in picked if r["verdict"] != "noise"]
    answer = {
        "yes": "yes: GSD lower at every matched point",
        "no": "no: GSD higher beyond the noise at " + ", ".join(beyond) + " NFE",
    }.get(outcome, word(outcome) + f" at {len(picked) - len(beyond)} of {len(picked)} points")
    cells = "; ".join(
        f"{r['nfe']:.1f} NFE: " + _span(PairedDifference(r["difference"], r["se"], r["images"]), 3)
        for r in picked
    )
    return answer, f"GSD - {other}, {measure}: {cells}", picked[0]["images"]


def frontier_lines(front: dict[str, Any] | None) -> list[dict[str, str]]:
    """The frontier's rows (``experiments.frontier``): at GSD's TV, GSD's NFE minus each optimal
    rule's curve, by the verdict on "GSD needs fewer forwards"; [] when the run has none."""
    if not front or not front.get("matched"):
        return []
    gsd = f"GSD (G={front['group_size']})"
    out = []
    for r in front["matched"]:
        if r["reference"] != gsd or r["measure"] != "TV":
            continue
        diff = PairedDifference(r["difference"], r["se"], r["n"])
        decision = Decision(r["verdict"], diff)
        edge = "" if r["inside"] else " (GSD's TV lies outside its range: its nearest end)"
        answer = _judged(decision, 1, "GSD needs fewer", f"the {r['other']} needs fewer") + edge
        out.append(
            _line(
                f"At GSD's TV ({r['distortion']:.3f}), does GSD need fewer forwards than the "
                f"{r['other']}?",
                answer,
                f"GSD - {r['other']}, NFE",
                diff,
                1,
            )
        )
    return out


def findings_rows(results: dict[str, Any]) -> list[dict[str, str]]:
    """The findings table's rows, every number read from ``results`` (a results.json dict)."""
    tables = results["tables"]
    t1, matched = tables["table1"], tables.get("matched_nfe", [])
    ar, sjd, gsd = _row(t1, "AR"), _row(t1, "SJD"), _row(t1, "GSD (G=50)")
    mc_max, mc_gsd = _row(t1, "MC-SJD (maximal)"), _row(t1, "MC-GSD (G=50, maximal)")
    amp = _row(t1, "Amplify (k=3)")
    claimed = paper.SJD_NFE.value / paper.GSD50_NFE.value
    over_sjd = paired_ratio(sjd, gsd, "nfe")
    speed = decide(paired_difference(gsd, sjd, "nfe"), -1)
    speed_answer = (
        _judged(speed, 1, "GSD needs fewer", "GSD needs more")
        + f"; SJD / GSD = {over_sjd.text(2)} against the paper's {claimed:.2f}x: "
        + word(ratio_verdict(over_sjd, claimed))
        + f"; over AR {gsd['speedup_nfe']:.2f}x (paper "
        + f"{paper.AR_NFE.value / paper.GSD50_NFE.value:.2f}x)"
    )
    kept = paired_difference(gsd, ar, paper.QUALITY)
    moved = verdict(abs(kept.difference), kept.se, 1)  # "quality changed", either sign
    kept_answer = (
        word("noise") + _detectable(kept, 1)
        if moved == "noise"
        else {"yes": "no: it moved beyond the noise"}.get(moved, word(moved))
    )
    quality = decide(paired_difference(gsd, amp, paper.QUALITY), 1)
    lossless = decide(paired_difference(mc_max, gsd, "nfe"), -1)
    coupled = decide(paired_difference(mc_gsd, mc_max, "nfe"), -1)
    tv_answer, tv_cell, tv_n = _matched_points(matched, "TV", "Amplify")
    rows = [
        _line(
            "Does GSD (G = 50) need fewer forwards than SJD, as the paper says?",
            speed_answer,
            "GSD - SJD, NFE",
            speed.diff,
            1,
        ),
        _line(
            "Does GSD keep AR's quality (condition score)?",
            kept_answer,
            "GSD - AR, score",
            kept,
            1,
        ),
        _line(
            "Does GSD lose less quality than Amplify (k = 3), the naive relaxation?",
            _judged(quality, 1, "GSD scores higher", "Amplify scores higher"),
            "GSD - Amplify, score",
            quality.diff,
            1,
        ),
        {
            "question": "Does GSD distort less than Amplify at matched NFE (exact TV)?",
            "answer": tv_answer,
            "A - B [+- 2 SE]": tv_cell,
            "n": str(tv_n),
        },
        _line(
            "Does a lossless decoder (MC-SJD, coupled drafts) need fewer forwards than GSD?",
            _judged(lossless, 1, "MC-SJD needs fewer", "GSD needs fewer")
            + f"; MC-SJD is lossless, GSD distorts {gsd['distortion']:.3f} TV per token",
            "MC-SJD - GSD, NFE",
            lossless.diff,
            1,
        ),
        _line(
            "Do coupled drafts make GSD faster than lossless MC-SJD (MC-GSD)?",
            _judged(coupled, 1, "MC-GSD needs fewer", "MC-SJD needs fewer")
            + f", at {mc_gsd['distortion']:.3f} TV per token",
            "MC-GSD - MC-SJD, NFE",
            coupled.diff,
            1,
        ),
        *frontier_lines(tables.get("frontier")),
    ]
    top1 = tables.get("top1") or {}
    if top1:
        low, high = (bound.value for bound in paper.TOP1_SHARE_RANGE)
        share = top1["pooled_share_below"]
        inside = "yes" if low <= share <= high else "no"
        rows.append(
            {
                "question": f"Are image tokens flat (top-1 probability below {top1['threshold']:g})"
                "?",
                "answer": f"{inside}: {share:.1%} of AR's tokens (the paper: {low:.0%}-{high:.0%})",
                "A - B [+- 2 SE]": "-",
                "n": "-",
            }
        )
    return rows


def render_findings(results: dict[str, Any]) -> str:
    """The findings block: the stand-in caveat first, then the table of ``findings_rows``."""
    from ..io.figure_io import markdown_table

    commit = str(results["git"]["commit"])[:7]
    caveat = (
        f"All on the **stand-in** (`{results.get('model')}`, commit `{commit}`), a small model "
        "trained here: Lumina-mGPT's real weights have not run. Every paper claim, run or not: "
        "[docs/claims.md](docs/claims.md)."
    )
    return caveat + "\n\n" + markdown_table(findings_rows(results), COLUMNS)


TABLE1_LABELS = {"AR, second seed set (seed noise)": "AR, other seeds (noise)"}


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _minus_ar(row: dict[str, Any], ar: dict[str, Any]) -> PairedDifference:
    """The row's quality minus AR's, image by image on the same prompts (the seed-noise row is AR
    on other seeds, so seeds are not compared: runs.RunCache.table pairs the same way)."""
    x, y = per_image(row, paper.QUALITY), per_image(ar, paper.QUALITY)
    if x is None or y is None:
        return NOT_RUN
    if row["per_image"]["prompt"] != ar["per_image"]["prompt"]:
        raise ValueError(f"{row['method']} and AR are not paired: their images have other prompts")
    return paired_values(x, y)


def render_table1(results: dict[str, Any]) -> str:
    """Table 1 of the run as README shows it (the project's table renderer), every cell from
    ``results``: NFE (s.e.), speed-ups in NFE and CPU wall time, accepted / tested, TV, W1, the
    condition score and its paired difference to AR, d [d +- 2 SE] (``_span``). A run
    decoded at batch B > 1 names it in the wall column (each image's wall time is its share of
    its batch-B forwards: of its configuration's in ``gsd_lab.experiments.runs.RunCache``, of a
    chunk of prompts' configurations in the streamed run)."""
    from ..io.figure_io import markdown_table

    batch = int(results.get("config", {}).get("batch_size") or 1)
    wall = "speed-up (CPU wall)" if batch == 1 else f"speed-up (CPU wall, batch {batch})"
    rows = []
    ar = _row(results["tables"]["table1"], "AR")
    for r in results["tables"]["table1"]:
        diff = _minus_ar(r, ar)
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
                "minus AR [+- 2 SE]": "-"
                if r["method"] == "AR" or not math.isfinite(diff.difference)
                else _span(diff, 1),
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
        "minus AR [+- 2 SE]",
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
