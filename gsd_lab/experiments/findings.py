"""The README's answer and the findings page, rendered from a figures run's ``results.json`` so
that no number in them is typed by hand. ``render_answer(results)`` is README's table (one row per
finding, at most eight, each linking to its entries of the claims ledger); ``render_findings`` the
full table of docs/findings.md (one row per compared pair) and ``render_table1`` its Table 1.
``update_readme`` writes every block between its markers; ``python -m gsd_lab readme`` (and the
figures job, writing into the repository's ``figures/``) rewrites them together with the claims
ledger (docs/claims.md).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from . import claims, ledger, tables
from .evidence import Evidence
from .paper_values import QUALITY, TOP1_SHARE_RANGE
from .verdicts import NOT_RUN, Decision, PairedDifference, paired_values
from .verdicts import per_image, word

START, END = "<!-- findings:start (python -m gsd_lab readme) -->", "<!-- findings:end -->"
TABLE_START, TABLE_END = "<!-- table1:start (python -m gsd_lab readme) -->", "<!-- table1:end -->"
ANSWER_START = "<!-- answer:start (python -m gsd_lab readme) -->"
ANSWER_END = "<!-- answer:end -->"
README = ledger.REPO / "README.md"
FINDINGS_MD = ledger.REPO / "docs" / "findings.md"
MODEL_WORDS = {"standin": "stand-in", "digits": "digits model"}  # the caveat's name for a model
ANSWER_COLUMNS = ["question (its entry in the ledger)", "answer: A - B [+- 2 SE]", "n"]
COLUMNS = ["question", "answer", "A - B [+- 2 SE]", "n"]


def _row(rows: list[dict[str, Any]], method: str) -> dict[str, Any]:
    row = next((r for r in rows if r["method"] == method), None)
    if row is None:
        raise ValueError(f"results.json's table1 has no row {method!r}: cannot render Table 1")
    return row


def _distortion(results: dict[str, Any], label: str) -> str:
    """ ", GSD distorts 0.124 TV per token"-style tail for a Table 1 row; "" when not run."""
    row = next((r for r in results["tables"]["table1"] if r["method"] == label), None)
    value = None if row is None else row.get("distortion")
    return "" if value is None else f"{value:.3f} TV per token"


def _span(diff: PairedDifference, digits: int) -> str:
    """ "+2.6 [-2.5, +7.7]": d [d - 2 SE, d + 2 SE], the interval every verdict decides on."""
    return Decision("noise", diff).span(digits)


def answer(found: Evidence, yes: str, no: str) -> str:
    """The answer cell: the verdict's words, what "yes" / "no" mean here and, for "no difference
    detected", the smallest difference the run could have detected at 80% power."""
    if found.outcome == "noise":
        size = found.detectable()
        if size is None:
            return word("noise")
        return word("noise") + f" (the run could detect |d| >= {size:.{found.digits}f})"
    return {"yes": f"yes: {yes}", "no": f"no: {no}"}.get(found.outcome, word(found.outcome))


def line(question: str, answer_text: str, found: Evidence) -> dict[str, str]:
    """A findings row: the question, the answer, A - B with its interval, n."""
    return {"question": question, "answer": answer_text, "A - B [+- 2 SE]": found.cell(),
            "n": str(found.n)}


def _points_answer(found: Evidence) -> str:
    beyond = [f"{p.at:.1f}" for p in found.parts if p.outcome != "noise"]
    return {
        "yes": "yes: GSD lower at every matched point",
        "no": "no: GSD higher beyond the noise at " + ", ".join(beyond) + " NFE",
    }.get(
        found.outcome,
        word(found.outcome) + f" at {len(found.parts) - len(beyond)} of {len(found.parts)} points",
    )


def frontier_lines(found: dict[str, Evidence]) -> list[dict[str, str]]:
    """The frontier's rows: at GSD's TV, GSD's NFE minus each optimal rule's curve (claims
    ``gsd_fewer_nfe_than_*``), by the verdict on "GSD needs fewer forwards"; only those run."""
    out = []
    for slug, other in claims.OPTIMAL_RULES.items():
        evidence = found[f"gsd_fewer_nfe_than_{slug}"]
        if evidence.value is None:
            continue
        edge = f" ({evidence.note})" if evidence.note else ""
        text = answer(evidence, "GSD needs fewer", f"the {other} needs fewer") + edge
        question = (
            f"At GSD's TV ({evidence.at:.3f}), does GSD need fewer forwards than the {other}?"
        )
        out.append(line(question, text, evidence))
    return out


QUESTIONS = (  # (claim id, the README's question, what "yes" means there, what "no" means)
    (
        "gsd_quality_above_amplify",
        "Does GSD lose less quality than Amplify (k = 3), the naive relaxation?",
        "GSD scores higher",
        "Amplify scores higher",
    ),
    (
        "mc_sjd_maximal_fewer_nfe_than_gsd",
        "Does a lossless decoder (MC-SJD, coupled drafts) need fewer forwards than GSD?",
        "MC-SJD needs fewer",
        "GSD needs fewer",
    ),
    (
        "coupled_gsd_fewer_nfe_than_mc_sjd",
        "Do coupled drafts make GSD faster than lossless MC-SJD (MC-GSD)?",
        "MC-GSD needs fewer",
        "MC-SJD needs fewer",
    ),
)


BEYOND = "Does a lossless decoder beyond MC-SJD need fewer forwards?"
BEYOND_TIME = "Does a lossless decoder beyond MC-SJD need less modelled GPU time?"


def beyond_lines(found: dict[str, Evidence]) -> list[dict[str, str]]:
    """The lossless decoders beyond MC-SJD, read from the committed benchmark files
    (``claims.committed``): block verification (independent drafts) against MC-SJD, then k
    candidates per position (maximal drafts) against MC-SJD and against MC-GSD; each answer ends
    with its tokens processed per forward and the file (the evidence's note)."""
    asked = [("block_verification_fewer_nfe_than_mc_sjd", "block verification vs MC-SJD",
              "block verification needs fewer", "MC-SJD needs fewer")]
    for against, (_, other) in claims.MULTIDRAFT_AGAINST.items():
        short = other.split(" ")[0] + ("" if other == claims.MC_MAXIMAL else ", lossy")
        asked += [
            (f"multidraft_k{k}_fewer_nfe_than_{against}", f"k = {k} drafts vs {short}",
             f"k = {k} needs fewer", f"{other.split(' ')[0]} needs fewer")
            for k in claims.MULTIDRAFT_FILES
        ]
    asked = [(BEYOND, *ask) for ask in asked] + [
        (BEYOND_TIME, f"lossless_less_time_than_{slug}", f"vs {short}",
         "the lossless decoder needs less", f"{short.split(',')[0]} needs less")
        for slug, short in (("mc_sjd", "MC-SJD"), ("mc_gsd", "MC-GSD, lossy"))
    ]
    out = []
    for question, cid, what, yes, no in asked:
        evidence = found[cid]
        tail = f"; {evidence.note}" if evidence.note else ""
        out.append(line(f"{question} ({what})", answer(evidence, yes, no) + tail, evidence))
    return out


def findings_rows(results: dict[str, Any]) -> list[dict[str, str]]:
    """The findings table's rows, each a claim of ``claims`` by id (numbers from ``results``)."""
    found = claims.of_results(results)
    gsd_tv, mc_gsd_tv = _distortion(results, claims.GSD50), _distortion(results, claims.MC_GSD50)
    over_sjd, over_ar = found["gsd_speedup_over_sjd"], found["gsd_speedup_over_ar"]
    speed = answer(found["gsd_fewer_nfe_than_sjd"], "GSD needs fewer", "GSD needs more")
    for over, base in ((over_sjd, "SJD"), (over_ar, "AR")):
        if over.value is not None:
            speed += (
                f"; {base} / GSD = {over.span()} against the paper's {over.paper_value:.2f}x: "
                + word(over.outcome)
            )
    kept = found["gsd_keeps_ar_quality"]
    kept_answer = {"no": "no: it moved beyond the noise"}.get(kept.outcome) or answer(kept, "", "")
    tails = {}  # what an answer adds: the lossy side's distortion, where it was run
    if gsd_tv:
        tails["mc_sjd_maximal_fewer_nfe_than_gsd"] = f"; MC-SJD is lossless, GSD distorts {gsd_tv}"
    if mc_gsd_tv:
        tails["coupled_gsd_fewer_nfe_than_mc_sjd"] = f", at {mc_gsd_tv}"
    rows = [
        line("Does GSD (G = 50) need fewer forwards than SJD, as the paper says?", speed,
             found["gsd_fewer_nfe_than_sjd"]),
        line("Does GSD keep AR's quality (condition score)?", kept_answer, kept),
        line(
            "Does GSD distort less than Amplify at matched NFE (exact TV)?",
            _points_answer(found["gsd_distorts_less_than_amplify_tv"]),
            found["gsd_distorts_less_than_amplify_tv"],
        ),
        *(
            line(question, answer(found[cid], yes, no) + tails.get(cid, ""), found[cid])
            for cid, question, yes, no in QUESTIONS
        ),
        *beyond_lines(found),
        *frontier_lines(found),
    ]
    top1 = found["top1_share_below_5pct"]
    if top1.value is not None:
        low, high = (bound.value for bound in TOP1_SHARE_RANGE)
        rows.append(
            {
                "question": "Are image tokens flat (top-1 probability below 0.05)?",
                "answer": f"{word(top1.outcome)}: {top1.value:.1%} of AR's tokens (the paper: "
                f"{low:.0%}-{high:.0%})",
                "A - B [+- 2 SE]": "-",
                "n": "-",
            }
        )
    return rows


def _caveat(results: dict[str, Any], ledger_path: str) -> str:
    commit = str(results["git"]["commit"])[:7]
    name = MODEL_WORDS.get(str(results.get("model")), "model")
    return (
        f"All on the **{name}** (`{results.get('model')}`, commit `{commit}`), a small model "
        "trained here: Lumina-mGPT's real weights have not run. Every paper claim, run or not: "
        f"[{ledger_path}]({ledger_path})."
    )


def render_findings(results: dict[str, Any], ledger_path: str = "docs/claims.md") -> str:
    """The findings block: the stand-in caveat first, then the table of ``findings_rows``."""
    from ..io.figure_io import markdown_table

    return _caveat(results, ledger_path) + "\n\n" + markdown_table(findings_rows(results), COLUMNS)


def _entry(question: str, ids: list[str], ledger_path: str) -> str:
    """The question linked to its first ledger entry, the others numbered after it."""
    first, *rest = ids
    more = "".join(f" [{i}]({ledger_path}#{cid})" for i, cid in enumerate(rest, 2))
    return f"[{question}]({ledger_path}#{first})" + more


def _speed_answer(found: dict[str, Any]) -> str:
    """GSD against SJD in NFE, then its speed-ups over SJD and AR beside the paper's."""
    text = f"{found['gsd_fewer_nfe_than_sjd'].short()} NFE"
    for cid, base in (("gsd_speedup_over_sjd", "SJD"), ("gsd_speedup_over_ar", "AR")):
        over = found[cid]
        if over.value is not None:
            text += f"; {base} / GSD = {over.span()}, the paper's {over.paper_value:.2f}x: " + word(
                over.outcome)
    return text


def _amplify_answer(found: dict[str, Any]) -> str:
    """GSD against Amplify: exact TV at matched NFE (the points beyond the noise), then quality."""
    tv, quality = found["gsd_distorts_less_than_amplify_tv"], found["gsd_quality_above_amplify"]
    beyond = [p for p in tv.parts if p.outcome != "noise"]
    text = f"exact TV at matched NFE: {word(tv.outcome)}"
    if tv.parts:
        spans = "".join(f"; {p.span()} at {p.at:.1f} NFE" for p in beyond)
        text += (f" ({len(beyond)} of {len(tv.parts)} matched points beyond +- 2 bootstrap SE"
                 f"{spans})")
    return text + f"; condition score against k = 3: {quality.short()}"


def _beyond_answer(found: dict[str, Any]) -> tuple[list[str], str]:
    """The lossless decoders beyond MC-SJD: block verification, then k drafts against MC-SJD and
    MC-GSD, one answer; (claim ids, text)."""
    ids = ["block_verification_fewer_nfe_than_mc_sjd"]
    parts = [f"block verification: {found[ids[0]].short()}"]
    for against, (_, other) in claims.MULTIDRAFT_AGAINST.items():
        cids = [f"multidraft_k{k}_fewer_nfe_than_{against}" for k in claims.MULTIDRAFT_FILES]
        ids += cids
        lossy = "" if other == claims.MC_MAXIMAL else " (lossy)"
        parts.append(f"k drafts against {other.split(' ')[0]}{lossy}: " + "; ".join(
            f"k = {k}: {found[cid].short()}" for k, cid in zip(claims.MULTIDRAFT_FILES, cids)))
    timed = [f"lossless_less_time_than_{slug}" for slug in ("mc_sjd", "mc_gsd")]
    ids += timed
    parts.append("in modelled GPU time, the fastest lossless decoder against MC-SJD: "
                 f"{found[timed[0]].short()}, against MC-GSD (lossy): {found[timed[1]].short()}")
    return ids, "; ".join(parts)


def answer_rows(
    results: dict[str, Any], ledger_path: str = "docs/claims.md"
) -> list[dict[str, str]]:
    """README's answer: one row per finding (a finding's several comparisons, such as k = 2, 4, 8
    drafts against MC-SJD and MC-GSD, inside one answer), each the verdict's word with its number
    and interval, the question linked to its ledger entries (the anchors of docs/claims.md)."""
    found = claims.of_results(results)
    gsd_tv, mc_gsd_tv = _distortion(results, claims.GSD50), _distortion(results, claims.MC_GSD50)
    rows: list[dict[str, str]] = []

    def add(question: str, ids: list[str], text: str, n: int | str) -> None:
        rows.append({ANSWER_COLUMNS[0]: _entry(question, ids, ledger_path),
                     ANSWER_COLUMNS[1]: text, ANSWER_COLUMNS[2]: str(n)})

    add("Does GSD (G = 50) need fewer forwards than SJD?",
        ["gsd_fewer_nfe_than_sjd", "gsd_speedup_over_sjd", "gsd_speedup_over_ar"],
        _speed_answer(found), found["gsd_fewer_nfe_than_sjd"].n)
    kept = found["gsd_keeps_ar_quality"]
    add("Does GSD keep AR's quality (condition score)?", ["gsd_keeps_ar_quality"],
        kept.short(), kept.n)
    tv, quality = found["gsd_distorts_less_than_amplify_tv"], found["gsd_quality_above_amplify"]
    add("Does GSD beat the naive relaxation Amplify?",
        ["gsd_distorts_less_than_amplify_tv", "gsd_quality_above_amplify"], _amplify_answer(found),
        tv.n or quality.n)
    mc = found["mc_sjd_maximal_fewer_nfe_than_gsd"]
    add("Does lossless MC-SJD (coupled drafts) need fewer forwards than GSD?",
        ["mc_sjd_maximal_fewer_nfe_than_gsd"],
        f"{mc.short()} NFE" + (f"; GSD distorts {gsd_tv}" if gsd_tv else ""), mc.n)
    coupled = found["coupled_gsd_fewer_nfe_than_mc_sjd"]
    add("Do coupled drafts make GSD faster than MC-SJD (MC-GSD)?",
        ["coupled_gsd_fewer_nfe_than_mc_sjd"],
        f"{coupled.short()} NFE" + (f", at {mc_gsd_tv}" if mc_gsd_tv else ""), coupled.n)
    ids, text = _beyond_answer(found)
    add("Does a lossless decoder beyond MC-SJD need fewer forwards than MC-SJD (and MC-GSD)?",
        ids, text, found[ids[0]].n)
    rules = [(slug, other) for slug, other in claims.OPTIMAL_RULES.items()
             if found[f"gsd_fewer_nfe_than_{slug}"].value is not None]
    if rules:
        first = found[f"gsd_fewer_nfe_than_{rules[0][0]}"]
        add(f"At GSD's TV ({first.at:.3f}), does GSD need fewer forwards than the optimal lossy "
            "rules?", [f"gsd_fewer_nfe_than_{slug}" for slug, _ in rules],
            "; ".join(f"{other}: {found[f'gsd_fewer_nfe_than_{slug}'].short()}"
                      for slug, other in rules), first.n)
    top1 = found["top1_share_below_5pct"]
    if top1.value is not None:
        low, high = (bound.value for bound in TOP1_SHARE_RANGE)
        add("Are image tokens flat (top-1 probability below 0.05)?", ["top1_share_below_5pct"],
            f"{word(top1.outcome)}: {top1.value:.1%} of AR's tokens (the paper: "
            f"{low:.0%}-{high:.0%})", "-")
    return rows


def render_answer(results: dict[str, Any]) -> str:
    """README's answer block: the stand-in caveat first, then ``answer_rows`` and where the full
    table lies."""
    from ..io.figure_io import markdown_table

    return (
        _caveat(results, "docs/claims.md") + " A is the decoder a question names first, B the "
        "second; negative NFE: A needs fewer forwards. A verdict "
        "is decided on d +- 2 SE paired by image (a paired bootstrap SE over images for the "
        "matched-NFE and matched-TV curves; no difference detected: the interval holds 0, never "
        "equality). One row per compared pair: [docs/findings.md](docs/findings.md).\n\n"
        + markdown_table(answer_rows(results), ANSWER_COLUMNS)
    )


TABLE1_LABELS = {tables.AR_SEED_NOISE.label: "AR, other seeds (noise)"}  # shorter in README


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _minus_ar(row: dict[str, Any], ar: dict[str, Any]) -> PairedDifference:
    """The row's quality minus AR's, image by image on the same prompts (the seed-noise row is AR
    on other seeds, so seeds are not compared: runs.RunStore.table pairs the same way)."""
    x, y = per_image(row, QUALITY), per_image(ar, QUALITY)
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
    columns = list(rows[0])  # every row of table1 has every column
    if real:
        rows.append(
            {
                "method": f"real held-out crops ({real['images']})",
                "condition score": _cell(real.get("condition_score"), ".1f"),
            }
        )
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


def rendered_blocks(results: dict[str, Any]) -> dict[Path, dict[tuple[str, str], str]]:
    """Every rendered block from ``results``, by document and markers: README's answer,
    docs/findings.md's full findings table and Table 1."""
    return {
        README: {(ANSWER_START, ANSWER_END): render_answer(results)},
        FINDINGS_MD: {
            (START, END): render_findings(results, ledger_path="claims.md"),
            (TABLE_START, TABLE_END): render_table1(results),
        },
    }


def update_readme(results: dict[str, Any]) -> list[Path]:
    """Rewrite the rendered blocks of README and docs/findings.md from ``results``."""
    written = []
    for path, blocks in rendered_blocks(results).items():
        text = path.read_text()
        for (start, end), block in blocks.items():
            text = replace_block(text, block, start, end)
        path.write_text(text)
        written.append(path)
    return written


def update_repository(results: dict[str, Any] | None = None) -> list[Path]:
    """README's rendered blocks, docs/claims.md and figures/results.md's claims section from
    ``results`` (default: figures/results.json)."""
    results = results if results is not None else ledger.load_results()
    return [
        *update_readme(results),
        ledger.write_claims(results),
        ledger.write_results_claims(results),
    ]


def stale_outputs(
    results: dict[str, Any],
    claims: str | Path = ledger.CLAIMS_MD,
    results_md: str | Path = ledger.RESULTS_MD,
) -> list[str]:
    """Which of README's and docs/findings.md's blocks, docs/claims.md and results.md's claims
    section differ from ``results``' rendering."""
    stale = []
    for path, blocks in rendered_blocks(results).items():
        text = path.read_text()
        if any(committed_block(text, *markers) != block for markers, block in blocks.items()):
            stale.append(str(path))
    if not Path(claims).exists() or Path(claims).read_text() != ledger.ledger_markdown(results):
        stale.append(str(claims))
    page = Path(results_md).read_text()
    if ledger.with_claims_section(page, results) != page:
        stale.append(str(results_md))
    return stale
