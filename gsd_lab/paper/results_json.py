"""The paper job's tables step: a ``PaperRun`` as results.json's numbers (``results_tables``:
every table's rows with their per-image values; ``base_config``: the configuration every record
holds)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from .decode import PaperRun


def base_config(run: PaperRun) -> dict[str, Any]:
    """The configuration every figure's sidecar and results.json record."""
    model = run.model
    return {
        "sizes": asdict(run.sizes),
        "filters": asdict(run.filters),
        "distance_threshold": distance_threshold(run),
        "model": model.name,
        "weights": model.weights_info,
        "num_tokens": model.num_tokens,
        "cfg_scale": model.adapter.cfg_scale,
        "top_k": model.adapter.top_k,
        "temperature": model.adapter.temperature,
        "preset": run.preset,
        "quality": model.quality_config,
        "batch_size": run.batch_size,
    }


def distance_threshold(run: PaperRun) -> float:
    """The dynamic rule's squared embedding-distance filter as this run resolved it."""
    return run.filters.resolve(
        run.model.embeddings,
        run.model.image_vocabulary.cpu(),
        known=getattr(run.model.adapter, "distance_quantiles", None),
    )


def top1_per_class(stats: Any, stats_no_cfg: Any) -> list[dict[str, Any]]:
    """The top-1 table per prompt (class), with and without guidance side by side."""
    rows = stats.per_prompt()
    if stats_no_cfg is not None:
        other = {r["prompt"]: r for r in stats_no_cfg.per_prompt()}
        for row in rows:
            row["pooled_share_below_no_guidance"] = other[row["prompt"]]["pooled_share_below"]
            row["median_share_below_no_guidance"] = other[row["prompt"]]["median_share_below"]
    return rows


def results_tables(run: PaperRun) -> dict[str, Any]:
    """results.json's ``tables``: every table's rows with their per-image values."""
    study = run.replacement
    return {
        "table1": run.table1,
        "table2": run.table2,
        "pareto": run.pareto,
        "distortion_vs_nfe": run.distortion_points,
        "matched_nfe": run.matched_rows,
        "w1_draws": run.sizes.w1_draws if run.has_w1 else None,
        "real_images": run.real,
        "accounting_seconds": sum(run.cache.accounting_seconds()),
        "w1_seconds": sum(run.cache.w1_seconds()),
        "top1": run.stats.summary(),
        "top1_without_guidance": None if run.stats_no_cfg is None else run.stats_no_cfg.summary(),
        "top1_per_class": top1_per_class(run.stats, run.stats_no_cfg),
        "replacement": None
        if study is None
        else {
            "quality": study.quality,
            "mean_log_prob": study.mean_log_prob,
            "changes": study.rows(),
            "paired_changes": study.paired_changes(),
        },
        "frontier": run.frontier,
    }
