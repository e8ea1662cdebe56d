"""The paper job's figures: which figures a ``PaperRun`` has, each drawn (``experiments.plots``)
and saved as PNG + SVG + JSON sidecar (``figure_io.save_figure``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..experiments import plots, tables
from ..io.figure_io import save_figure
from .decode import THEOREM1_TRIALS, PaperRun
from .plan import FigureSizes, with_preset


Saver = Callable[[Any, str, dict[str, Any], dict[str, Any]], None]


def saver(out_dir: Path, model: str, seeds: dict, config: dict, git: dict) -> Saver:
    """save(fig, name, config, data): one figure as PNG + SVG + JSON sidecar in ``out_dir``."""

    def save(fig: Any, name: str, extra: dict[str, Any], data: dict[str, Any]) -> None:
        save_figure(
            fig,
            out_dir,
            name,
            model=model,
            seeds=seeds,
            config={**config, **extra},
            data=data,
            git=git,
        )

    return save


def save_figures(run: PaperRun, save: Saver) -> list[str]:
    """The save step: every figure of the run, in order; returns their names."""
    saved = []
    for fig, name, config, data in [*_toy_figures(run.toy, run.sizes), *_run_figures(run)]:
        save(fig(), name, config, data)
        saved.append(name)
    return saved


def _toy_figures(toy_: dict[str, Any], sizes: FigureSizes) -> list[tuple]:
    """(draw, name, config, data) of the four model-free figures."""
    t = toy_
    check = t["theorem1"]
    return [
        (
            lambda: plots.tv_flat_vs_peaked(t["pairs"], t["tvs"]),
            "fig6_tv_flat_vs_peaked",
            {"vocab_size": 1000},
            {"tv": t["tvs"]},
        ),
        (
            lambda: plots.tv_against_viable(t["viable"], t["masses"], t["grid"], t["noise"]),
            "fig6_tv_vs_viable_tokens",
            {"noise": t["noise"], "vocab_size": 4096, "num_pairs": sizes.toy_pairs},
            {
                "viable_counts": t["viable"],
                "top1_masses": t["masses"],
                "mean_tv": t["grid"].tolist(),
            },
        ),
        (
            lambda: plots.grouping_and_theorem1(t["groups"], t["tv_by_group"], check),
            "theorem1_grouping_shrinks_tv",
            {
                "viable": 1024,
                "top1_mass": 0.05,
                "noise": t["noise"],
                "theorem1": {
                    "vocab_size": 32,
                    "num_clusters": "uniform in 2..32",
                    "num_trials": THEOREM1_TRIALS,
                },
            },
            {
                "group_sizes": t["groups"],
                "mean_tv": t["tv_by_group"].mean(axis=1).tolist(),
                "theorem1_max_violation": check.max_violation,
            },
        ),
        (
            lambda: plots.distortion(
                t["cluster_sizes"],
                {k: v.numpy() for k, v in t["distortion"].items()},
                "mean TV(output, p) per step",
            ),
            "gsd_distortion_vs_group_size",
            {"vocab_size": 32, "pairs": 256, "alpha": 0.3},
            {
                "cluster_sizes": t["cluster_sizes"],
                "distortion": {k: v.tolist() for k, v in t["distortion"].items()},
                "acceptance": {k: v.tolist() for k, v in t["acceptance"].items()},
            },
        ),
    ]


def _bar_panels(run: PaperRun) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Table 1's and 2's bar panels after NFE: distortion (TV, W1), quality, quality - AR."""
    distortion = [("distortion", "exact distortion\nmean TV(output law, p)")]
    if run.has_w1:
        distortion.append(("w1", "similarity-aware distortion\nmean W1(output law, p)"))
    quality_word = " ".join(
        run.model.quality_names.get("condition_score", "condition score").split("\n")[0].split()
    )
    difference = (
        [("condition_score_diff_ar", f"{quality_word} - AR\n(+- 2 paired SE)")]
        if run.has_quality_difference()
        else []
    )
    return distortion, run.quality_metrics() + difference


def _run_figures(run: PaperRun) -> list[tuple]:
    """(draw, name, config, data) of the decoding figures the run has."""
    distortion, quality = _bar_panels(run)
    speed = [("nfe", "NFE per image"), ("speedup_nfe", "NFE speed-up over AR")]
    out = [
        (
            lambda: plots.top1_histograms(run.stats, list(run.stats.prompts)),
            "top1_probability_histograms",
            {"threshold": run.stats.threshold},
            {
                "summary": run.stats.summary(),
                "share_below_per_image": run.stats.share_below.tolist(),
                "summary_without_guidance": None
                if run.stats_no_cfg is None
                else run.stats_no_cfg.summary(),
            },
        ),
        (
            lambda: plots.bars(run.table1, speed + distortion + quality),
            "table1_speed_quality",
            {"specs": [s.to_record() for s in run.specs["table1"]]},
            {"rows": run.table1, "real_images": run.real},
        ),
        (
            lambda: plots.bars(run.table2, speed[:1] + distortion + quality),
            "table2_clustering_ablation",
            {"specs": [s.to_record() for s in run.specs["table2"]]},
            {"rows": run.table2},
        ),
        (
            lambda: plots.distortion_vs_nfe(run.distortion_points),
            "distortion_vs_nfe",
            {
                "curves": {
                    k: [s.to_record() for s in v] for k, v in run.specs["distortion"].items()
                },
                "w1_draws": run.sizes.w1_draws,
            },
            run.distortion_points,
        ),
    ]
    return out + _optional_figures(run)


def _optional_figures(run: PaperRun) -> list[tuple]:
    """Fig. 10 (with quality proxies), the samples (with a pixel decoder), the frontier and the
    replacement study, where the run has them."""
    out = []
    if run.quality_metrics():
        noise_row = next(
            (r for r in run.table1 if r["method"] == tables.AR_SEED_NOISE.label), None
        )
        references = {"real crops": run.real, "AR, other seeds": noise_row}
        out.append(
            (
                lambda: plots.pareto(run.pareto, run.quality_metrics(), references),
                "fig10_nfe_vs_quality",
                {"curves": {k: [s.to_record() for s in v] for k, v in run.specs["pareto"].items()}},
                run.pareto,
            )
        )
    if run.model.decode is not None:
        sizes = run.sizes
        shown = [tables.AR, tables.SJD, tables.gsd(max(sizes.table1_groups))]
        shown += [tables.amplify(max(sizes.table1_amplify))] if sizes.table1_amplify else []
        shown = with_preset(shown, sizes, run.preset)
        records = {s.label: run.cache.detail_records(s, 8) for s in shown}
        samples = {label: [r.image for r in rs] for label, rs in records.items()}
        columns = _sample_columns(records)
        out.append(
            (
                lambda: plots.image_grid(samples, columns=columns),
                "samples_by_method",
                {"methods": list(samples)},
                {"prompts": run.prompts},
            )
        )
    if run.frontier is not None:
        front = run.frontier
        out.append(
            (
                lambda: plots.frontier(
                    front["curves"], (front.get("lossless") or {}).get("rows", ())
                ),
                "frontier_nfe_vs_distortion",
                {"frontier": front["specs"], "w1_draws": run.sizes.w1_draws},
                {"curves": front["curves"], "matched": front["matched"]},
            )
        )
    if run.replacement is not None:
        study = run.replacement
        out.append(
            (
                lambda: plots.image_grid({k: v[:8] for k, v in study.images.items()}),
                "fig4_top100_replacement",
                study.config,
                {
                    "quality": study.quality,
                    "mean_log_prob": study.mean_log_prob,
                    "changed_share": study.changed_share,
                },
            )
        )
    return out


def _sample_columns(records: dict[str, list[Any]]) -> list[str]:
    """The samples figure's column labels, "prompt (first 24 characters)\nseed s" (two lines, so
    that long class names do not run into the next column's): every row (method) shows the same
    prompts and seeds in the same order, else ValueError."""
    keys = {label: [(r.prompt, r.seed) for r in rs] for label, rs in records.items()}
    first = next(iter(keys.values()))
    if any(k[: len(first)] != first[: len(k)] for k in keys.values()):
        raise ValueError(f"the sample rows show different prompts or seeds: {keys}")
    longest = max(keys.values(), key=len)
    return [f"{prompt[:24]}\nseed {seed}" for prompt, seed in longest]
