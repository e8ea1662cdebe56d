"""The paper job's render step: results.json (tables and claims by id) and results.md from the
template (``templates/results.md``), then, for the repository's figures/, what ``python -m
gsd_lab readme`` writes (``update_documents``)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ..decode.methods import DecodingMethod, TransportAcceptance
from ..experiments import claims, findings, frontier, ledger, matched, prose, tables, verdicts
from ..io.figure_io import markdown_table, write_results_markdown
from ..io.provenance import atomic_write_json
from . import results_json
from .decode import PaperRun
from .results_json import distance_threshold, top1_per_class
from .template import fill


W1_COLUMNS = ["w1", "w1_sem", "w1_sampling_sem"]


def _transport_k(specs: dict[str, list[dict[str, Any]]]) -> str:
    """The neighbours per code (``TransportAcceptance.k``) of the transport curve's relaxed
    configurations, as recorded in the frontier's ``specs`` ("?" where none is recorded)."""
    rules = [DecodingMethod.from_dict(s["method"]).acceptance
             for s in specs.get(frontier.TRANSPORT, [])]
    ks = sorted({rule.k for rule in rules if isinstance(rule, TransportAcceptance)})
    return ", ".join(map(str, ks)) or "?"


def _curve_texts(specs: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """results.md's sentence for each optimal curve, by its name in ``frontier`` (``specs``: the
    frontier's recorded configurations, which give the transport curve's k)."""
    return {
        frontier.RELAXATION: fill("curve_relaxation"),
        frontier.RELAXATION_MAXIMAL: fill("curve_relaxation_maximal"),
        frontier.DIAL: fill(
            "curve_dial", policy=frontier.DIAL_POLICY, cap=f"{frontier.DIAL_CAP:g}"
        ),
        frontier.TRANSPORT: fill("curve_transport", k=_transport_k(specs)),
        frontier.W1_DIAL: fill(
            "curve_w1_dial", policy=frontier.W1_DIAL_POLICY, cap=f"{frontier.W1_DIAL_CAP:g}"
        ),
    }


FRONTIER_COLUMNS = ["measure", "reference", "other", "distortion", "reference_nfe", "other_nfe"]
FRONTIER_COLUMNS += ["difference", "se", "low", "high", "n", "inside", "verdict", "detectable"]


def _worded(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as results.md shows them: ``verdict`` in the one vocabulary (``verdicts.word``), and
    on a "no difference detected" row ``detectable``, the smallest |difference| the run could
    have detected (``verdicts.minimum_detectable`` of its SE). results.json keeps the keys."""
    shown = []
    for row in rows:
        detectable = verdicts.minimum_detectable(row.get("se"))
        shown.append({
            **row,
            "verdict": verdicts.word(row["verdict"]),
            "detectable": detectable if row["verdict"] == "noise" else None,
        })
    return shown


def _frontier_text(results: dict[str, Any]) -> str:
    """results.md's frontier section: what was run, the rows per curve, the matched rows."""
    shared = results["shared_seeds"]
    columns = ["method", "images", "nfe", "nfe_sem", "distortion", "distortion_sem"] + W1_COLUMNS
    rows = results["matched"]
    return fill(
        "frontier",
        images=len(results["prompts"]) * len(results["seeds"]),
        prompts=len(results["prompts"]),
        seeds=", ".join(map(str, results["seeds"])),
        shared=f"; seed(s) {', '.join(map(str, shared))} shared with the tables" if shared else "",
        seconds=f"{results['seconds']:.0f}",
        curves="".join(
            text
            for name, text in _curve_texts(results.get("specs", {})).items()
            if name in results["curves"]
        ),
        tables="\n\n".join(
            f"**{name}**\n\n" + markdown_table(curve, columns)
            for name, curve in results["curves"].items()
        ),
        matched="\n\n" + markdown_table(_worded(rows), FRONTIER_COLUMNS)
        if rows
        else fill("frontier_unmatched"),
    ) + _lossless_text(results.get("lossless"))


LOSSLESS_COLUMNS = ["method", "images", "nfe", "tokens_per_forward", "modelled", "distortion_max"]


def _lossless_text(lossless: dict[str, Any] | None) -> str:
    """results.md's lossless decoders beyond MC-SJD (``experiments.lossless_frontier``): their
    rows, then each against MC-SJD and MC-GSD on NFE and modelled time; "" without them."""
    if not lossless or not (lossless["rows"] or lossless["left_out"]):
        return ""
    left = "".join(f"\n- {r['method']} ({r['file']}): {r['reason']}" for r in lossless["left_out"])
    if not lossless["rows"]:
        return "\n\n" + fill("frontier_lossless_none", left_out=left)
    versus = [
        {"method": row["method"], "against": name, "nfe": v["nfe"]["text"],
         "modelled": v["modelled"]["text"], "modelled_ratio": v["modelled_ratio"]["text"]}
        for row in lossless["rows"] for name, v in row["versus"].items()
    ]
    return "\n\n" + fill(
        "frontier_lossless",
        files=", ".join(sorted({f"`{r['file']}`" for r in lossless["rows"]})),
        rows=markdown_table(lossless["rows"], LOSSLESS_COLUMNS),
        versus=markdown_table(versus, ["method", "against", "nfe", "modelled", "modelled_ratio"]),
        left_out=f"\n\nLeft out:{left}" if left else "",
    )





def _headers(run: PaperRun) -> dict[str, str]:
    """results.md's column names: rows keep the key condition_score (the notebooks read it);
    the columns name what it is (clip_score on Lumina-mGPT)."""
    keys = ("", "_sem", "_diff_ar", "_diff_ar_low", "_diff_ar_high")
    column = run.model.quality_column
    return {f"condition_score{k}": f"{column}{k}" for k in keys}


def _table_columns(run: PaperRun) -> list[str]:
    """Table 1's and 2's columns in results.md."""
    columns = ["method", "images", "nfe", "nfe_sem", "speedup_nfe", "accepted_per_tested"]
    columns += ["acceptance_rate", "wall_seconds", "speedup_wall", "distortion", "distortion_sem"]
    columns += ["w1", "w1_sem"] if run.has_w1 else []
    for key, _ in run.quality_metrics():
        columns += [key, "condition_score_sem"] if key == "condition_score" else [key]
    if run.has_quality_difference():
        columns += [f"condition_score_diff_ar{k}" for k in ("", "_low", "_high")]
    return columns


def _table1_text(run: PaperRun) -> str:
    headers, sizes = _headers(run), run.sizes
    table = functools.partial(markdown_table, headers=headers)
    if run.batch_size == 1:
        batch_text = fill("batch_one")
    else:
        how = fill("batched_streamed" if sizes.streamed else "batched_one_configuration")
        batch_text = fill(  # a window of W drafts is a forward of W + 1 tokens (models/static)
            "batch_many", batch=run.batch_size, batched_how=how, window_tokens=sizes.window + 1
        )
    metrics = run.quality_metrics()
    proxies = ", ".join(f"`{headers.get(k, k)}` = {' '.join(name.split())}" for k, name in metrics)
    column = run.model.quality_column
    real = run.real
    real_columns = ["method", "images", "condition_score", "condition_score_sem"]
    real_text = "" if real is None else fill(
        "real_images",
        frechet_images=real["frechet_images"],
        table=table([real], real_columns + ["frechet_distance", "frechet_images"]),
    )
    return fill(
        "table1",
        batch_text=batch_text,
        diff_column=headers["condition_score_diff_ar"],
        seed_noise_label=tables.AR_SEED_NOISE.label,
        proxies=proxies or "none for this model",
        quality_column=f" (`{column}` is the `condition_score` field of results.json)"
        if column != "condition_score" and metrics
        else "",
        table=table(run.table1, _table_columns(run)),
        real_images=real_text,
    )


def _table2_text(run: PaperRun) -> str:
    filters = run.filters
    rule = (
        fill("distance_released")
        if filters.max_embedding_distance is not None
        else fill("distance_quantile", quantile=f"{filters.distance_quantile:g}")
    )
    return fill(
        "table2",
        group=run.sizes.table2_group,
        max_prob_gap=filters.max_prob_gap,
        distance_threshold=f"{distance_threshold(run):.4g}",
        distance_rule=rule,
        table=markdown_table(run.table2, _table_columns(run), headers=_headers(run)),
    )


def _distortion_text(run: PaperRun, seconds: float) -> str:
    accounting, w1 = run.cache.accounting_seconds(), run.cache.w1_seconds()
    columns = ["method", "images", "nfe", "speedup_nfe", "distortion", "distortion_sem"]
    columns += W1_COLUMNS if run.has_w1 else []
    return fill(
        "distortion",
        w1_text=fill("w1", draws=run.sizes.w1_draws) if run.has_w1 else "",
        accounting=f"{sum(accounting):.1f}",
        slowest=f"{max(accounting, default=0.0):.2f}",
        w1_seconds=f"{sum(w1):.1f}",
        w1_share=f"{sum(w1) / (seconds - sum(w1)):.1%}",
        rest=f"{seconds - sum(w1):.0f}",
        tables="\n\n".join(
            f"**{name}**\n\n" + markdown_table(rows, columns)
            for name, rows in run.distortion_points.items()
        ),
    )


MATCHED_COLUMNS = ["measure", "nfe", "anchor", "other", "reference_value", "other_value"]
MATCHED_COLUMNS += ["difference", "se", "low", "high", "verdict", "detectable"]


def _matched_text(run: PaperRun) -> str:
    rows = run.matched_rows
    return fill(
        "matched",
        summary=matched.matched_summary(rows),
        table="\n\n" + markdown_table(_worded(rows), MATCHED_COLUMNS) if rows else "",
    )


def _top1_text(run: PaperRun) -> str:
    stats, no_cfg = run.stats, run.stats_no_cfg
    rows = [{"guidance": run.model.adapter.cfg_scale, **stats.summary()}]
    rows += [{"guidance": "none", **no_cfg.summary()}] if no_cfg else []
    per_class = ["prompt", "images", "pooled_share_below", "median_share_below"]
    if no_cfg:
        per_class += ["pooled_share_below_no_guidance", "median_share_below_no_guidance"]
    return fill(
        "top1",
        table=markdown_table(rows, ["guidance"] + list(stats.summary())),
        seeds=", ".join(str(x) for x in sorted(set(run.sizes.seeds) | set(run.extra_seeds))),
        per_class=markdown_table(top1_per_class(stats, no_cfg), per_class),
    )


def _replacement_text(run: PaperRun) -> str:
    study = run.replacement
    quality = [
        {
            "variant": k,
            **study.quality[k],
            "mean_log_prob": study.mean_log_prob[k],
            "changed_share": study.changed_share[k],
        }
        for k in study.images
    ]
    return fill(
        "replacement",
        fraction=f"{run.sizes.replacement_fraction:.0%}",
        top_k=run.sizes.replacement_top_k,
        quality=markdown_table(quality, list(quality[0]), headers=_headers(run)),
        changes=markdown_table(study.rows(), list(study.rows()[0])),
    )


def _run_text(run: PaperRun, saved: list[str], seconds: float, out_dir: Path) -> str:
    return fill(
        "run",
        figures=len(saved),
        seconds=f"{seconds:.0f}",
        images=run.images_per_method,
        passes=len(run.configurations),
        cfg="AR without guidance included; " if run.model.adapter.uses_cfg else "",
        top1_images=run.stats.per_image.shape[0],
        replacement=f", replacement study on {len(run.replacement.prompts)}"
        if run.replacement
        else "",
        device=run.model.adapter.device,
        streamed=f"; result files in `{out_dir / 'decoding'}`" if run.sizes.streamed else "",
    )


def _sections(
    run: PaperRun, saved: list[str], seconds: float, out_dir: Path, ledger_rows: list[dict]
) -> list[tuple[str, str]]:
    """results.md's (heading, body) sections, every body a part of the template."""
    columns = _table_columns(run)
    toy_rows = [{"pair": k, "tv": v, "acceptance": 1 - v} for k, v in run.toy["tvs"].items()]
    sections = [
        ("Table 1 analogue: speed and quality", _table1_text(run)),
        ("Table 2 analogue: clustering ablation", _table2_text(run)),
        (
            "Fig. 10 analogue: NFE against quality",
            "\n\n".join(
                f"**{name}**\n\n" + markdown_table(rows, columns, headers=_headers(run))
                for name, rows in run.pareto.items()
            ),
        ),
        ("Exact distortion against NFE", _distortion_text(run, seconds)),
        ("Distortion at matched NFE", _matched_text(run)),
        ("Top-1 probability of the target distribution (AR tokens)", _top1_text(run)),
    ]
    if run.frontier is not None:
        sections.append(("The frontier: NFE against TV and W1", _frontier_text(run.frontier)))
    if run.replacement is not None:
        sections.append(("Fig. 4 analogue: top-100 replacement", _replacement_text(run)))
    toy_text = fill(
        "toy",
        table=markdown_table(toy_rows, ["pair", "tv", "acceptance"]),
        violation=f"{run.toy['theorem1'].max_violation:.3g}",
        trials=run.toy["theorem1"].tv_tokens.numel(),
    )
    sections.append(("Toy TV pairs (Fig. 6 idea) and Theorem 1", toy_text))
    sections.append((ledger.SECTION, ledger.claims_section(ledger_rows)))
    sections.append(("Run", _run_text(run, saved, seconds, out_dir)))
    return sections


def update_documents(results_json: Path) -> list[Path]:
    """What ``python -m gsd_lab readme`` writes, from ``results_json``: README's findings block,
    docs/claims.md and results.md's claims section (``findings.update_repository``), then the
    value spans of README, docs, proofs and notebook markdown (``prose.update_documents``). A
    part that cannot be rendered from this run (e.g. --quick sizes lack a row) is reported and
    left as it was; the paths written."""
    loaded, written = ledger.load_results(results_json), []
    try:
        written += findings.update_repository(loaded)
    except ValueError as error:
        print(f"README's findings and docs/claims.md NOT updated: {error}")
    try:  # every span is evaluated before any document is written
        written += prose.update_documents(loaded)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as error:
        print(f"value spans in README, docs, proofs and notebooks NOT updated: {error!r}")
    for path in written:
        print(f"wrote {path}")
    return written


def write_report(
    run: PaperRun, out_dir: Path, record: dict[str, Any], saved: list[str], seconds: float
) -> dict[str, Any]:
    """The report step: results.json (the tables and ``claims``, every claim's numbers by id),
    results.md, and, when ``out_dir`` is the repository's figures/, what ``python -m gsd_lab
    readme`` writes: README's findings block, docs/claims.md (``findings.update_repository``) and
    the value spans of README, docs, proofs and notebook markdown (``prose.update_documents``)."""
    all_tables = results_json.results_tables(run)
    evidence = claims.evaluate(all_tables, run.sizes.table2_group, run.model.name)
    results = {**record, "seconds": seconds, "stage_seconds": run.stage_seconds}
    results["tables"] = all_tables
    results["claims"] = claims.as_json(evidence)
    sections = _sections(run, saved, seconds, out_dir, claims.rows(evidence))
    markdown = write_results_markdown(
        out_dir / "results.md", f"GSD results ({run.model.name})", sections, record=record
    )
    atomic_write_json(out_dir / "results.json", results)
    if Path(out_dir).resolve() == (ledger.REPO / "figures").resolve():  # README, ledger follow
        update_documents(out_dir / "results.json")
    return {"figures": saved, "results": str(markdown), "seconds": seconds, "tables": all_tables}
