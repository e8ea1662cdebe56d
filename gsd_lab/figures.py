"""``python -m gsd_lab figures``: regenerate every figure and the results tables into one folder.

Each figure is saved as PNG + SVG + JSON sidecar (``figure_io.save_figure``); the tables go to
``results.md`` (and ``results.json``), the per-image decoding records to ``records.npz``
(``experiments.records``: notebook 04 reuses them). The analyses are the functions the notebooks
call (``gsd_lab.experiments``). Sizes: ``FigureSizes.default()`` for the stand-in on 2 CPU cores,
``FigureSizes.quick()`` for tests, ``FigureSizes.paper()`` for Lumina-mGPT on a GPU.
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from gsd_core import tv_distance

from .evaluate import weights_fingerprint
from .experiments import findings, frontier, ledger, matched, plots, records, tables, toy
from .experiments.image_model import ImageModel, load_image_model
from .experiments.replacement import replacement_study
from .experiments.runs import FilterSettings, MethodSpec, RunCache, real_image_baseline
from .experiments.stream import Configuration, StreamedRunCache, gpu_hours, measure_forward_seconds
from .experiments.top1 import top1_stats
from .models.batched import default_batch_size
from .io.figure_io import markdown_table, save_figure, write_results_markdown
from .decode.presets import preset as preset_settings
from .io.progress import duration
from .io.provenance import atomic_write_json, inside_repository, provenance, require_clean_tree
from .accounting.transport import DEFAULT_DRAWS


W1_COLUMNS = ["w1", "w1_sem", "w1_sampling_sem"]
W1_TEXT = (
    "`w1`: the similarity-aware distortion, per image the mean over its tokens of W1(one-step "
    "output law, p) with ground cost the RMS difference per coordinate between the codes' decoded "
    "content (the adapter's `code_content()`: on the stand-in each code's patch, pixel values in "
    "[-1, 1], so W1 reads in that scale; x 127.5 for 8-bit levels), then the mean over images; "
    "each image's mean is estimated from {draws} rows drawn with probability proportional to their "
    "exact TV, each row's W1 exact (POT; gsd_lab.accounting.transport): `w1_sem` its standard "
    "error over images (sampling noise included), `w1_sampling_sem` the estimator's part of it. "
)


@dataclass(frozen=True)
class FigureSizes:
    """How much to run. seeds x prompts images per decoding configuration."""

    seeds: tuple[int, ...] = (
        0,
    )  # 10 classes x 1 seed: each image costs seconds in float64 on a CPU
    max_prompts: int | None = None
    table1_groups: tuple[int, ...] = (3, 10, 25, 50)
    table1_amplify: tuple[float, ...] = (2.0, 3.0)
    table2_group: int = 50
    pareto_groups: tuple[int, ...] = (3, 10, 25, 50, 100)
    pareto_amplify: tuple[float, ...] = (1.5, 2.0, 3.0, 4.0)
    table1_lantern: tuple[float, ...] = (0.1, 0.4)
    pareto_lantern: tuple[float, ...] = tables.LANTERN_DELTAS
    distortion_rank_groups: tuple[int, ...] = (10, 50)
    coupled_drafts: tuple[str, ...] = ("maximal", "gumbel")  # MC-SJD rows and points (lossless)
    table1_coupled_groups: tuple[int, ...] = (50,)  # MC-GSD (maximal) rows of Table 1
    pareto_coupled_groups: tuple[int, ...] = (10, 50)  # the MC-GSD (maximal) curve
    seed_noise: bool = True  # AR on a second seed set: the AR-against-AR noise row
    window: int = 16
    replacement_fraction: float = 0.5
    replacement_top_k: int = 100
    toy_pairs: int = 64
    # rows per image whose W1 is solved (gsd_lab.accounting.transport's estimator)
    w1_draws: int = DEFAULT_DRAWS
    streamed: bool = (
        False  # decode into result files per (configuration, prompt): resumable, sharded
    )
    detail_images: int | None = (
        None  # top-1 statistics, AR without guidance: first N prompts (None: all)
    )
    top1_seeds: tuple[int, ...] = (
        0,
        1,
        2,
    )  # the top-1 statistics: AR on these seeds (those not in seeds: extra)
    replacement_images: int | None = None  # the Fig. 4 study: first N AR images (None: all)
    # The frontier (experiments.frontier): its seeds (() for none; the tables' seeds are read
    # from their cache), GSD's G, the relaxation's deltas, the TV dial's budgets, whether the
    # naive rivals ("amplify": k = 2, "lantern": delta = 0.1) and the maximal-coupled curves
    # are in it. LANTERN is left out by default: about 100 s more (its accounting), over the
    # frontier's budget of about 12 minutes on the default figures job.
    frontier_seeds: tuple[int, ...] = (0, 1, 2)
    frontier_group: int = 50
    frontier_deltas: tuple[float, ...] = (0.1, 0.3)
    frontier_budgets: tuple[float, ...] = (8.0, 32.0)
    frontier_transport_eps: tuple[float, ...] = (0.003, 0.03)  # W1 transport, maximal drafts
    frontier_w1_budgets: tuple[float, ...] = (0.25,)  # the W1 dial (cap 0.04), maximal drafts
    frontier_rivals: tuple[str, ...] = ("amplify",)
    frontier_coupled: bool = True

    @classmethod
    def default(cls) -> "FigureSizes":
        return cls()

    @classmethod
    def quick(cls) -> "FigureSizes":
        return cls(
            seeds=(0,),
            max_prompts=2,
            table1_groups=(3, 25),
            table1_amplify=(2.0,),
            table2_group=25,
            pareto_groups=(3, 25),
            pareto_amplify=(2.0,),
            # No LANTERN: its k = 1001 neighbourhood table over the stand-in's vocabulary and its
            # rows took 27 s of 264 (cProfile, loaded 2-core CPU); nbval's notebook 04 (its live
            # check) builds that table, test_experiments decodes LANTERN rows through the tables.
            table1_lantern=(),
            pareto_lantern=(),
            distortion_rank_groups=(25,),
            toy_pairs=8,
            coupled_drafts=("maximal",),
            table1_coupled_groups=(),
            pareto_coupled_groups=(),
            w1_draws=2,
            top1_seeds=(0, 1),
            frontier_seeds=(0,),  # GSD (G=25) and SJD from the tables, one new relaxation
            frontier_group=25,
            frontier_deltas=(0.3,),
            frontier_budgets=(),
            frontier_transport_eps=(),
            frontier_w1_budgets=(),
            frontier_rivals=(),
            frontier_coupled=False,
        )

    @classmethod
    def paper(cls) -> "FigureSizes":
        """Lumina-mGPT on a GPU: one image per prompt (the paper: 1,600 Parti prompts), streamed to
        result files (``gsd_lab.experiments.stream``). No LANTERN (its neighbourhood table over the
        full 65,536-token vocabulary costs O(V^2 D)) and no second AR seed set (another AR pass
        over every prompt). The detail analyses read back tokens and pixels, so they take a
        bounded number of images: top-1 statistics and AR without guidance on the first 256
        prompts, the Fig. 4 replacement study on the first 64 AR images. No frontier: its
        relaxation and dial rows would be new configurations on every prompt, and its cache is
        not streamed."""
        return cls(
            seeds=(0,),
            frontier_seeds=(),
            table1_lantern=(),
            pareto_lantern=(),
            seed_noise=False,
            streamed=True,
            detail_images=256,
            replacement_images=64,
            top1_seeds=(0,),
        )


def _specs(
    sizes: FigureSizes, preset_name: str = "default"
) -> tuple[
    list[MethodSpec], list[MethodSpec], dict[str, list[MethodSpec]], dict[str, list[MethodSpec]]
]:
    t1 = tables.table1_specs(
        sizes.table1_groups,
        sizes.table1_amplify,
        sizes.table1_lantern,
        sizes.seed_noise,
        sizes.coupled_drafts,
        sizes.table1_coupled_groups,
    )
    t2 = tables.table2_specs(sizes.table2_group)
    pareto = tables.pareto_specs(
        sizes.pareto_groups,
        sizes.pareto_amplify,
        sizes.pareto_lantern,
        sizes.coupled_drafts,
        sizes.pareto_coupled_groups,
    )
    distortion = tables.distortion_specs(
        sizes.pareto_groups,
        sizes.distortion_rank_groups,
        sizes.pareto_amplify,
        sizes.pareto_lantern,
        sizes.coupled_drafts,
        sizes.pareto_coupled_groups,
    )

    def fix(specs: list[MethodSpec]) -> list[MethodSpec]:
        return _with_preset(specs, sizes, preset_name)

    return (
        fix(t1),
        fix(t2),
        {k: fix(v) for k, v in pareto.items()},
        {k: fix(v) for k, v in distortion.items()},
    )


def _with_preset(specs: list[MethodSpec], sizes: FigureSizes, preset_name: str) -> list[MethodSpec]:
    """``specs`` decoded with the preset (its window, or the sizes' window)."""
    window = preset_settings(preset_name).window or sizes.window
    return [s.with_method(window=window, preset=preset_name) for s in specs]


def _extra_top1_seeds(sizes: FigureSizes) -> tuple[int, ...]:
    """The top-1 statistics' seeds that the tables do not decode (none for streamed runs)."""
    return () if sizes.streamed else tuple(s for s in sizes.top1_seeds if s not in sizes.seeds)


def decoding_configurations(
    sizes: FigureSizes, model: ImageModel, preset_name: str = "default"
) -> list[Configuration]:
    """Every decoding pass of a figures run, once each: the distinct configurations of the
    tables and curves (the same key decoded once), then AR without guidance (models with CFG,
    for the top-1 statistics; on the first ``sizes.detail_images`` prompts)."""
    t1_specs, t2_specs, pareto_curves, distortion_curves = _specs(sizes, preset_name)
    specs = (
        t1_specs
        + t2_specs
        + [s for c in (pareto_curves, distortion_curves) for v in c.values() for s in v]
    )
    unique: dict[tuple, MethodSpec] = {}
    for spec in specs:
        unique.setdefault(spec.key, spec)  # the first label of a configuration names it
    configurations = [Configuration(s) for s in unique.values()]
    if model.adapter.uses_cfg:
        ar = next(
            c.spec for c in configurations if c.spec.method.kind == "ar" and not c.spec.seed_offset
        )
        configurations.append(Configuration(ar, guided=False, max_prompts=sizes.detail_images))
    return configurations


def _affordable(sizes: FigureSizes, model: ImageModel) -> FigureSizes:
    if not tables.lantern_affordable(model.adapter.vocab_size, model.adapter.device):
        return replace(sizes, table1_lantern=(), pareto_lantern=())
    return sizes


def paper_plan(
    out_dir: str | Path,
    model: ImageModel,
    prompts: list[str],
    sizes: FigureSizes,
    *,
    forward_seconds: dict[str, float] | None = None,
    world_size: int = 1,
    preset: str = "default",
) -> str:
    """The dry run of a streamed figures run: what it decodes (configurations, prompts, items
    done and to do in ``out_dir``, read only) and the device time left, from per-forward times
    given or measured now on the model's device (``stream.measure_forward_seconds``)."""
    sizes = _affordable(sizes, model)
    configurations = decoding_configurations(sizes, model, preset)
    cache = StreamedRunCache(
        model,
        prompts,
        list(sizes.seeds),
        FilterSettings.for_model(model.name),
        out_dir,
        weights=weights_fingerprint(model.weights_info, model.adapter.model),
        progress=False,
    )
    cache.plan(configurations, dry=True)
    source = "given"
    if forward_seconds is None:
        forward_seconds, source = (
            measure_forward_seconds(model),
            f"measured now on {model.adapter.device}",
        )
    estimate = gpu_hours(cache, forward_seconds)
    hours = estimate["device_hours"]
    lines = [
        (
            f"figures --paper plan for {model.name} ({model.num_tokens} "
            f"tokens per image) into {out_dir}:"
        ),
        f"  {len(configurations)} decoding passes per prompt: "
        f"{len(configurations) - (1 if model.adapter.uses_cfg else 0)} "
        "configurations of the tables and curves"
        + (
            f", and AR without guidance on the first {sizes.detail_images or len(prompts)} prompts"
            if model.adapter.uses_cfg
            else ""
        ),
        (
            f"  {len(prompts)} prompts x {len(sizes.seeds)} seed(s): {estimate['items']} "
            f"images; {estimate['done']} done in {out_dir}, {estimate['to_do']} to do"
        ),
        "  per forward ("
        + source
        + "): "
        + ", ".join(f"{k.upper()} {1000 * v:.1f} ms" for k, v in forward_seconds.items()),
        f"  left: about {estimate['forwards']:,.0f} forwards = {hours:,.1f} device-hours "
        f"({duration(hours * 3600)} on one device"
        + (f", {duration(hours * 3600 / world_size)} on {world_size}" if world_size > 1 else "")
        + ")",
        "    = "
        + " + ".join(
            f"{k.upper()} {n:,.0f} x {1000 * forward_seconds[k]:.1f} ms"
            for k, n in estimate["forwards_by_method"].items()
            if n
        )
        + " (forwards x time each)",
        (
            "  forwards per image: measured where rows exist "
            f"({estimate['configurations_with_measured_nfe']} of {len(configurations)} "
            f"configurations), else {model.num_tokens} (AR's: an upper bound for the "
            "others); dry-run again after some prompts for a measured estimate"
        ),
    ]
    for config in configurations:
        lines.append(
            f"    {config.spec.label}{'' if config.guided else ' (no guidance)'}: "
            f"{cache.estimated_forwards(config):,.0f} forwards per image"
        )
    return "\n".join(lines)


def run_figures(
    out_dir: str | Path = "figures",
    *,
    model: ImageModel | None = None,
    model_name: str = "standin",
    weights: str | None = None,
    vqgan: str | None = None,
    clip: str | None = None,
    prompts: list[str] | None = None,
    sizes: FigureSizes | None = None,
    device: str | None = None,
    progress: bool = True,
    allow_dirty: bool = False,
    save_images: bool = False,
    preset: str = "default",
    batch_size: int | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Run every analysis and write the figures and ``results.md`` into ``out_dir``.

    An ``out_dir`` inside the checkout (e.g. the committed ``figures/``) needs a clean tree:
    ``provenance.DirtyTreeError`` otherwise, unless ``allow_dirty`` (or GSD_ALLOW_DIRTY=1), which
    warns; elsewhere a dirty tree only warns. Every record holds the git state read here.
    ``sizes.streamed`` (``FigureSizes.paper()``): the images are decoded into result files under
    ``out_dir/decoding`` (``gsd_lab.experiments.stream``: resumable, sharded over torchrun's
    processes, ``save_images`` keeps a PNG per image); ``preset``: "release" decodes every
    configuration with the GSD release's settings (``decode.presets``); a rank other than 0 returns
    {"rank": r, "decoded": n} when its share is done, rank 0 writes the figures. batch_size:
    images per forward (``gsd_lab.decode.batch``: the same tokens and NFE; wall times become
    each image's share of its batch's, each configuration batched on its own,
    ``RunCache``); 1 decodes one image at a time, the papers' latency setting; None: the
    device's default (``gsd_lab.models.batched.default_batch_size``: 8 on a CPU and on a GPU);
    with ``sizes.streamed`` too (``StreamedRunCache``). workers: processes the tables' and the
    frontier's decoding is split over, one thread each (``experiments.workers``: the same
    records for any number; None: the usable cores on a CPU; not with ``sizes.streamed``).
    Returns {"figures": [names], "results": path, "seconds": wall time, "tables": rows}."""
    from tqdm.auto import tqdm

    if batch_size is not None and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise ValueError(f"batch_size must be an int >= 1 or None, got {batch_size!r}")
    started = time.perf_counter()
    # Read once, before writing: the regenerated files themselves make the tree dirty.
    git = require_clean_tree(
        f"figures into {out_dir}", allow_dirty=allow_dirty or not inside_repository(out_dir)
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if model is None:
        model = load_image_model(model_name, weights=weights, vqgan=vqgan, clip=clip, device=device)
    if batch_size is None:
        batch_size = default_batch_size(model.adapter.device)
    sizes = sizes or FigureSizes.default()
    prompts = list(prompts or model.default_prompts)
    if sizes.max_prompts is not None:
        prompts = prompts[: sizes.max_prompts]
    sizes = _affordable(sizes, model)
    extra_seeds = _extra_top1_seeds(sizes)  # the top-1 statistics' seeds the tables do not decode
    t1_specs, t2_specs, pareto_curves, distortion_curves = _specs(sizes, preset)
    configurations = decoding_configurations(sizes, model, preset)
    ar_spec = configurations[0].spec  # AR (with the preset), the baseline of every table
    images_per_method = len(prompts) * len(sizes.seeds)
    filters = FilterSettings.for_model(model.name)
    bar = None
    if sizes.streamed:
        cache: RunCache = StreamedRunCache(
            model,
            prompts,
            list(sizes.seeds),
            filters,
            out_dir,
            weights=weights_fingerprint(model.weights_info, model.adapter.model),
            save_images=save_images,
            progress=progress,
            w1_draws=sizes.w1_draws,
            batch_size=batch_size,
        )
        cache.plan(configurations)
        decoded = cache.run()
        if not cache.context.is_main:
            return {"rank": cache.context.rank, "decoded": decoded}
        cache.wait()
    else:
        extra = images_per_method * (
            2 if model.adapter.uses_cfg else 1
        )  # replacement (+ AR without CFG)
        extra += (
            len(prompts[: sizes.detail_images])
            * len(extra_seeds)
            * (2 if model.adapter.uses_cfg else 1)
        )  # the top-1 statistics' other seeds
        bar = tqdm(
            total=(len(configurations) - (1 if model.adapter.uses_cfg else 0)) * images_per_method
            + extra,
            unit="img",
            desc="figures",
            disable=not progress,
        )
        cache = RunCache(
            model,
            prompts,
            list(sizes.seeds),
            filters,
            progress=bar,
            w1_draws=sizes.w1_draws,
            batch_size=batch_size,
            workers=workers,
        )
        # Batched: each guided configuration in a batch stream of its own (RunCache).
        cache.prefetch([c.spec for c in configurations if c.guided])
    distance_threshold = filters.resolve(
        model.embeddings,
        model.image_vocabulary.cpu(),
        known=getattr(model.adapter, "distance_quantiles", None),
    )
    distance_rule = (
        "the released code's value"
        if filters.max_embedding_distance is not None
        else f"the {filters.distance_quantile:g} quantile of "
        "the squared distances between image-token pairs"
    )
    seeds = {"generation_seeds": list(sizes.seeds), "prompts": prompts}
    base_config = {
        "sizes": asdict(sizes),
        "filters": asdict(filters),
        "distance_threshold": distance_threshold,
        "model": model.name,
        "weights": model.weights_info,
        "num_tokens": model.num_tokens,
        "cfg_scale": model.adapter.cfg_scale,
        "top_k": model.adapter.top_k,
        "temperature": model.adapter.temperature,
        "preset": preset,
        "quality": model.quality_config,
        "batch_size": batch_size,
    }
    saved: list[str] = []

    def save(fig: Any, name: str, config: dict[str, Any], data: dict[str, Any]) -> None:
        save_figure(
            fig,
            out_dir,
            name,
            model=model.name,
            seeds=seeds,
            config={**base_config, **config},
            data=data,
            git=git,
        )
        saved.append(name)

    # --- toy TV examples and Theorem 1 (model-free, exact) ---
    pairs = toy.flat_and_peaked_pairs(1000)
    tvs = {name: float(tv_distance(p, q)) for name, (p, q) in pairs.items()}
    save(
        plots.tv_flat_vs_peaked(pairs, tvs),
        "fig6_tv_flat_vs_peaked",
        {"vocab_size": 1000},
        {"tv": tvs},
    )
    viable, masses, noise = [1, 2, 4, 16, 64, 256, 1024, 4096], [0.05, 0.5, 0.9], 0.5
    grid = toy.tv_grid(
        viable, masses, vocab_size=4096, noise=noise, num_pairs=sizes.toy_pairs, seed=0
    ).numpy()
    save(
        plots.tv_against_viable(viable, masses, grid, noise),
        "fig6_tv_vs_viable_tokens",
        {"noise": noise, "vocab_size": 4096, "num_pairs": sizes.toy_pairs},
        {"viable_counts": viable, "top1_masses": masses, "mean_tv": grid.tolist()},
    )
    p_noisy, q_noisy = toy.noisy_pairs(
        1024,
        0.05,
        vocab_size=4096,
        noise=noise,
        num_pairs=sizes.toy_pairs,
        generator=torch.Generator().manual_seed(1),
    )
    groups = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    tv_by_group = toy.rank_binned_tv(p_noisy, q_noisy, groups).numpy()
    check = toy.theorem1_random_partitions(vocab_size=32, num_trials=2000, seed=0)
    save(
        plots.grouping_and_theorem1(groups, tv_by_group, check),
        "theorem1_grouping_shrinks_tv",
        {
            "viable": 1024,
            "top1_mass": 0.05,
            "noise": noise,
            "theorem1": {"vocab_size": 32, "num_clusters": "uniform in 2..32", "num_trials": 2000},
        },
        {
            "group_sizes": groups,
            "mean_tv": tv_by_group.mean(axis=1).tolist(),
            "theorem1_max_violation": check.max_violation,
        },
    )
    p_d, q_d = toy.dirichlet_pairs(32, 256, alpha=0.3, seed=2)
    sizes_d = [1, 3, 5, 9, 17, 31]  # tokens per cluster G
    dist = toy.distortion_by_cluster_size(p_d, q_d, sizes_d)
    acc = toy.acceptance_by_cluster_size(p_d, q_d, sizes_d)
    save(
        plots.distortion(
            sizes_d, {k: v.numpy() for k, v in dist.items()}, "mean TV(output, p) per step"
        ),
        "gsd_distortion_vs_group_size",
        {"vocab_size": 32, "pairs": 256, "alpha": 0.3},
        {
            "cluster_sizes": sizes_d,
            "distortion": {k: v.tolist() for k, v in dist.items()},
            "acceptance": {k: v.tolist() for k, v in acc.items()},
        },
    )

    # --- decoding experiments ---
    table1 = tables.speed_quality_table(cache, t1_specs, ar_spec)
    table2 = cache.table(t2_specs, ar_spec)
    pareto = tables.pareto_points(cache, pareto_curves, ar_spec)
    distortion_points = tables.pareto_points(cache, distortion_curves, ar_spec)
    frontier_results = _frontier(sizes, cache, configurations, preset, bar)
    real = real_image_baseline(model, images_per_method)
    ar_records = cache.detail_records(ar_spec, sizes.detail_images)  # tokens, top-1 vectors, images
    top1_caches = [cache]
    if extra_seeds:  # the statistics on more seeds than the tables (only AR: cheap)
        top1_caches.append(
            RunCache(
                model,
                prompts[: sizes.detail_images],
                list(extra_seeds),
                filters,
                progress=bar,
                record_distortion=False,
                batch_size=batch_size,
            )
        )
    stats = top1_stats(
        [r for c in top1_caches for r in c.detail_records(ar_spec, sizes.detail_images)]
    )
    stats_no_cfg = None
    if model.adapter.uses_cfg:  # the same AR runs without guidance: how much CFG sharpens p
        stats_no_cfg = top1_stats(
            [
                r
                for c in top1_caches
                for r in c.detail_records(ar_spec, sizes.detail_images, guided=False)
            ]
        )
    replacement = (
        replacement_study(
            model,
            ar_records[: sizes.replacement_images],
            fraction=sizes.replacement_fraction,
            top_k=sizes.replacement_top_k,
            seed=0,
        )
        if model.decode
        else None
    )
    if bar is not None:
        bar.update(bar.total - bar.n)
        bar.close()
    if (
        not sizes.streamed
    ):  # per-image records of every configuration: notebook 04 builds its tables from them
        records.save(cache, out_dir / "records.npz", git=git)

    save(
        plots.top1_histograms(stats, list(stats.prompts)),
        "top1_probability_histograms",
        {"threshold": stats.threshold},
        {
            "summary": stats.summary(),
            "share_below_per_image": stats.share_below.tolist(),
            "summary_without_guidance": None if stats_no_cfg is None else stats_no_cfg.summary(),
        },
    )
    quality_metrics = [
        (
            "condition_score",
            model.quality_names.get("condition_score", "condition score x100 (higher better)"),
        ),
        (
            "frechet_distance",
            model.quality_names.get("frechet_distance", "Frechet distance (lower better)"),
        ),
    ]
    metrics = [m for m in quality_metrics if any(r.get(m[0]) is not None for r in table1)]
    distortion_panel = [("distortion", "exact distortion\nmean TV(output law, p)")]
    has_w1 = any(r.get("w1") is not None for r in table1)
    if has_w1:
        distortion_panel.append(("w1", "similarity-aware distortion\nmean W1(output law, p)"))
    quality_word = " ".join(
        model.quality_names.get("condition_score", "condition score").split("\n")[0].split()
    )
    diff_panel = (
        [("condition_score_diff_ar", f"{quality_word} - AR\n(95% paired bootstrap)")]
        if any(r.get("condition_score_diff_ar") is not None for r in table1)
        else []
    )
    save(
        plots.bars(
            table1,
            [("nfe", "NFE per image"), ("speedup_nfe", "NFE speed-up over AR")]
            + distortion_panel
            + metrics
            + diff_panel,
        ),
        "table1_speed_quality",
        {"specs": [s.to_record() for s in t1_specs]},
        {"rows": table1, "real_images": real},
    )
    save(
        plots.bars(table2, [("nfe", "NFE per image")] + distortion_panel + metrics + diff_panel),
        "table2_clustering_ablation",
        {"specs": [s.to_record() for s in t2_specs]},
        {"rows": table2},
    )
    save(
        plots.distortion_vs_nfe(distortion_points),
        "distortion_vs_nfe",
        {
            "curves": {k: [s.to_record() for s in v] for k, v in distortion_curves.items()},
            "w1_draws": sizes.w1_draws,
        },
        distortion_points,
    )
    matched_rows = [
        row
        for measure in ("distortion", "w1")
        for row in matched.matched_nfe(distortion_points, measure)
    ]
    if metrics:
        noise_row = next((r for r in table1 if r["method"] == tables.AR_SEED_NOISE.label), None)
        references = {"real crops": real, "AR, other seeds": noise_row}
        save(
            plots.pareto(pareto, metrics, references),
            "fig10_nfe_vs_quality",
            {"curves": {k: [s.to_record() for s in v] for k, v in pareto_curves.items()}},
            pareto,
        )
    if model.decode is not None:
        shown = [tables.AR, tables.SJD, tables.gsd(max(sizes.table1_groups))]
        shown += [tables.amplify(max(sizes.table1_amplify))] if sizes.table1_amplify else []
        shown = _with_preset(shown, sizes, preset)
        samples = {spec.label: [r.image for r in cache.detail_records(spec, 8)] for spec in shown}
        save(
            plots.image_grid(samples),
            "samples_by_method",
            {"methods": list(samples)},
            {"prompts": prompts},
        )
    if frontier_results is not None:
        save(
            plots.frontier(frontier_results["curves"]),
            "frontier_nfe_vs_distortion",
            {"frontier": frontier_results["specs"], "w1_draws": sizes.w1_draws},
            {"curves": frontier_results["curves"], "matched": frontier_results["matched"]},
        )
    if replacement is not None:
        save(
            plots.image_grid({k: v[:8] for k, v in replacement.images.items()}),
            "fig4_top100_replacement",
            replacement.config,
            {
                "quality": replacement.quality,
                "mean_log_prob": replacement.mean_log_prob,
                "changed_share": replacement.changed_share,
            },
        )

    seconds = time.perf_counter() - started
    record = provenance(model=model.name, seeds=seeds, config=base_config, git=git)
    columns = [
        "method",
        "images",
        "nfe",
        "nfe_sem",
        "speedup_nfe",
        "accepted_per_tested",
        "acceptance_rate",
        "wall_seconds",
        "speedup_wall",
        "distortion",
        "distortion_sem",
    ] + (["w1", "w1_sem"] if has_w1 else [])
    columns += [
        c
        for m in metrics
        for c in ((m[0], "condition_score_sem") if m[0] == "condition_score" else (m[0],))
    ]
    if diff_panel:
        columns += [
            "condition_score_diff_ar",
            "condition_score_diff_ar_low",
            "condition_score_diff_ar_high",
        ]
    accounting, w1_accounting = cache.accounting_seconds(), cache.w1_seconds()
    # Rows keep the key condition_score (the notebooks read it); results.md names the column
    # after what it is (clip_score on Lumina-mGPT).
    headers = {
        c: c.replace("condition_score", model.quality_column)
        for c in (
            "condition_score",
            "condition_score_sem",
            "condition_score_diff_ar",
            "condition_score_diff_ar_low",
            "condition_score_diff_ar_high",
        )
    }
    table = functools.partial(markdown_table, headers=headers)
    real_text = (
        ""
        if real is None
        else "\n\nReal images (the proxies' reference points): `condition_score` of the fixed "
        "held-out real crops (never seen by the classifier), `frechet_distance` of "
        f"{real['frechet_images']} real training-split crops (the "
        "size of one method's set) to the held-out reference.\n\n"
        + table(
            [real],
            [
                "method",
                "images",
                "condition_score",
                "condition_score_sem",
                "frechet_distance",
                "frechet_images",
            ],
        )
    )
    sections = [
        (
            "Table 1 analogue: speed and quality",
            "Same prompts and generator seeds for every method. NFE = forward passes per image (a "
            "CFG pair counts once), `nfe_sem` its standard error over images; speed-ups are ratios "
            "of means against AR. `accepted_per_tested`: accepted drafts / drafts tested (up to "
            "and including each window's first rejection), the empirical E[min(1, p(C)/q(C))]; "
            "`acceptance_rate`: accepted drafts / all drafted positions, counting untested "
            "positions after a rejection (a throughput measure). CPU wall time (`wall_seconds`, "
            "`speedup_wall`) is noise-dominated on a shared CPU: quote NFE; "
            + (
                "each image's own decoding time (batch 1). "
                if batch_size == 1
                else f"decoded {batch_size} images "
                + (
                    "per forward, every configuration of a chunk of prompts in one stream (an AR "
                    "image shares forwards with other methods' windows)"
                    if sizes.streamed
                    else "of one configuration per forward"
                )
                + ", an image's `wall_seconds` is its share of those forwards (each step's "
                f"time split equally between its images): time per image at batch "
                f"{batch_size}, not an image's latency alone (a throughput ratio: AR's 1-token "
                "forwards batch almost for free while 17-token windows are compute-bound on a "
                "CPU, so it is not the papers' batch-1 latency speed-up). "
            )
            + "Amplify (k) is our "
            "definition of the naive lossy relaxation: SJD accepting with min(1, k p/q). LANTERN k "
            "(delta): the peer rule (Jang et al. 2025; gsd_core.lantern), neighbourhoods of k "
            "tokens in the input embeddings, budget delta. `distortion`: the exact distortion, per "
            "image the mean over its tokens of TV(one-step output law, p) "
            "(gsd_lab.accounting.distortion; 0 for AR and SJD), then the mean over images, "
            "`distortion_sem` its standard error; noise-free given the tokens. "
            f"`{headers['condition_score_diff_ar']}`: mean per-image difference to AR (same "
            "prompts and seeds) with its 95% paired bootstrap interval (`_low`, `_high`); the row "
            f"`{tables.AR_SEED_NOISE.label}` is AR decoded with other seeds, so its difference is "
            "sampling noise alone: a method's difference inside that "
            "range cannot be told from noise. Quality proxies: "
            + (
                ", ".join(
                    f"`{headers.get(m[0], m[0])}` = {' '.join(m[1].split())}" for m in metrics
                )
                or "none for this model"
            )
            + (
                f" (`{model.quality_column}` is the `condition_score` field of results.json)"
                if model.quality_column != "condition_score" and metrics
                else ""
            )
            + ".\n\n"
            + table(table1, columns)
            + real_text,
        ),
        (
            "Table 2 analogue: clustering ablation",
            f"GSD at G = {sizes.table2_group}. Filters of the dynamic rule (rows D and Table 1's "
            f"GSD): |p(y) - p(x)| <= {filters.max_prob_gap} and squared input-embedding "
            f"distance <= {distance_threshold:.4g} ({distance_rule}).\n\n" + table(table2, columns),
        ),
        (
            "Fig. 10 analogue: NFE against quality",
            "\n\n".join(f"**{name}**\n\n" + table(rows, columns) for name, rows in pareto.items()),
        ),
        (
            "Exact distortion against NFE",
            "The exact distortion (mean TV(one-step output law, p) per token) of every lossy rule "
            "against its NFE (figure `distortion_vs_nfe`). Rank bins: our provable "
            "partition with the token-level and the cluster-exact residual. "
            + (W1_TEXT.format(draws=sizes.w1_draws) if has_w1 else "")
            + "Accounting is a measurement outside decoding (its time is not in `wall_seconds`): "
            f"{sum(accounting):.1f} s in all, {max(accounting, default=0.0):.2f} s for the slowest "
            f"image; W1's part {sum(w1_accounting):.1f} s, adding "
            f"{sum(w1_accounting) / (seconds - sum(w1_accounting)):.1%} to the "
            f"rest of this run ({seconds - sum(w1_accounting):.0f} s).\n\n"
            + "\n\n".join(
                f"**{name}**\n\n"
                + markdown_table(
                    rows,
                    ["method", "images", "nfe", "speedup_nfe", "distortion", "distortion_sem"]
                    + (W1_COLUMNS if has_w1 else []),
                )
                for name, rows in distortion_points.items()
            ),
        ),
        (
            "Distortion at matched NFE",
            "GSD's distortion minus the other rule's at matched NFE: at each configuration "
            "(`anchor`) of either curve "
            "inside the other's NFE range, both curves interpolated linearly in NFE "
            "(gsd_lab.experiments.matched); "
            "`se`, `low`, `high`: paired bootstrap over the images (the same "
            'prompts and seeds for every rule), 95% interval; `verdict` for the claim "GSD '
            'distorts less": yes / '
            "no beyond two standard errors, else noise.\n\n"
            + matched.matched_summary(matched_rows)
            + (
                "\n\n"
                + markdown_table(
                    matched_rows,
                    [
                        "measure",
                        "nfe",
                        "anchor",
                        "other",
                        "reference_value",
                        "other_value",
                        "difference",
                        "se",
                        "low",
                        "high",
                        "verdict",
                    ],
                )
                if matched_rows
                else ""
            ),
        ),
        (
            "Top-1 probability of the target distribution (AR tokens)",
            "Share of generated tokens whose target distribution has top-1 probability below the "
            "threshold (paper: 50-95% on Lumina-mGPT). Second row: "
            "the same prompts and seeds without guidance.\n\n"
            + markdown_table(
                [{"guidance": model.adapter.cfg_scale, **stats.summary()}]
                + ([{"guidance": "none", **stats_no_cfg.summary()}] if stats_no_cfg else []),
                ["guidance"] + list(stats.summary()),
            )
            + "\n\nPer class (seeds "
            + ", ".join(str(x) for x in sorted(set(sizes.seeds) | set(extra_seeds)))
            + "):\n\n"
            + markdown_table(
                _top1_per_class(stats, stats_no_cfg),
                ["prompt", "images", "pooled_share_below", "median_share_below"]
                + (
                    ["pooled_share_below_no_guidance", "median_share_below_no_guidance"]
                    if stats_no_cfg
                    else []
                ),
            ),
        ),
    ]
    if frontier_results is not None:
        sections.append(("The frontier: NFE against TV and W1", _frontier_text(frontier_results)))
    if replacement is not None:
        rep_rows = [
            {
                "variant": k,
                **replacement.quality[k],
                "mean_log_prob": replacement.mean_log_prob[k],
                "changed_share": replacement.changed_share[k],
            }
            for k in replacement.images
        ]
        sections.append(
            (
                "Fig. 4 analogue: top-100 replacement",
                f"{sizes.replacement_fraction:.0%} of each AR image's tokens replaced by a uniform "
                f"draw from the top-{sizes.replacement_top_k} of the teacher-forced target "
                "distribution, from GSD's cluster around the token, or uniformly at random. "
                "mean_log_prob: each image's own log-likelihood per token (teacher-forced on the "
                "altered sequence, full softmax); the changes against the original "
                "are paired over images (`gsd_lab.experiments.replacement`).\n\n"
                + table(rep_rows, list(rep_rows[0]))
                + "\n\n"
                + markdown_table(replacement.rows(), list(replacement.rows()[0])),
            )
        )
    toy_rows = [{"pair": k, "tv": v, "acceptance": 1 - v} for k, v in tvs.items()]
    sections.append(
        (
            "Toy TV pairs (Fig. 6 idea) and Theorem 1",
            markdown_table(toy_rows, ["pair", "tv", "acceptance"])
            + f"\n\nTheorem 1 on 2000 random pairs and partitions: max(TV(p', q') - TV(p, q)) = "
            f"{check.max_violation:.3g} (must be <= 0).",
        )
    )
    sections.append(
        (
            "Run",
            f"{len(saved)} figures in {seconds:.0f} s; {images_per_method} images per "
            f"configuration, {len(configurations)} decoding passes per prompt ("
            + ("AR without guidance included; " if model.adapter.uses_cfg else "")
            + f"top-1 statistics on {stats.per_image.shape[0]} images"
            + (f", replacement study on {len(replacement.prompts)}" if replacement else "")
            + f"); device `{model.adapter.device}`"
            + (f"; result files in `{out_dir / 'decoding'}`" if sizes.streamed else "")
            + ".",
        )
    )
    results = write_results_markdown(
        out_dir / "results.md", f"GSD results ({model.name})", sections, record=record
    )
    all_tables = {
        "table1": table1,
        "table2": table2,
        "pareto": pareto,
        "distortion_vs_nfe": distortion_points,
        "matched_nfe": matched_rows,
        "w1_draws": sizes.w1_draws if has_w1 else None,
        "real_images": real,
        "accounting_seconds": sum(accounting),
        "w1_seconds": sum(w1_accounting),
        "top1": stats.summary(),
        "top1_without_guidance": None if stats_no_cfg is None else stats_no_cfg.summary(),
        "top1_per_class": _top1_per_class(stats, stats_no_cfg),
        "replacement": None
        if replacement is None
        else {
            "quality": replacement.quality,
            "mean_log_prob": replacement.mean_log_prob,
            "changes": replacement.rows(),
            "paired_changes": replacement.paired_changes(),
        },
        "frontier": frontier_results,
    }
    atomic_write_json(
        out_dir / "results.json", {**record, "seconds": seconds, "tables": all_tables}
    )
    if Path(out_dir).resolve() == (ledger.REPO / "figures").resolve():  # README, ledger follow
        try:
            for path in findings.update_repository(ledger.load_results(out_dir / "results.json")):
                print(f"wrote {path}")
        except ValueError as error:  # e.g. --quick sizes lack a row the findings read
            print(f"README's findings and docs/claims.md NOT updated: {error}")
    return {"figures": saved, "results": str(results), "seconds": seconds, "tables": all_tables}


def _top1_per_class(stats: Any, stats_no_cfg: Any) -> list[dict[str, Any]]:
    """The top-1 table per prompt (class), with and without guidance side by side."""
    rows = stats.per_prompt()
    if stats_no_cfg is not None:
        other = {r["prompt"]: r for r in stats_no_cfg.per_prompt()}
        for row in rows:
            row["pooled_share_below_no_guidance"] = other[row["prompt"]]["pooled_share_below"]
            row["median_share_below_no_guidance"] = other[row["prompt"]]["median_share_below"]
    return rows


def _frontier(
    sizes: FigureSizes,
    cache: RunCache,
    configurations: list[Configuration],
    preset: str,
    bar: Any,
) -> dict[str, Any] | None:
    """The frontier's results (``experiments.frontier.frontier_results``) on ``sizes``'
    frontier seeds, seed by seed shared with the tables' ``cache``; None without frontier
    seeds or on a streamed run. Adds its images to the progress bar ``bar``."""
    if not sizes.frontier_seeds or sizes.streamed:
        return None
    started = time.perf_counter()
    curves = frontier.frontier_curves(
        sizes.frontier_group,
        sizes.frontier_deltas,
        sizes.frontier_budgets,
        sizes.frontier_transport_eps,
        sizes.frontier_w1_budgets,
        rivals=sizes.frontier_rivals,
        coupled=sizes.frontier_coupled,
    )
    curves = {name: _with_preset(specs, sizes, preset) for name, specs in curves.items()}
    runs = frontier.FrontierRuns(cache, tuple(sizes.frontier_seeds), progress=bar)
    if bar is not None:
        bar.total += runs.images_to_decode(curves, {c.spec.key for c in configurations})
        bar.refresh()
    out = frontier.frontier_results(runs, curves, sizes.frontier_group)
    out["specs"] = {name: [s.to_record() for s in specs] for name, specs in curves.items()}
    out["seconds"] = time.perf_counter() - started
    return out


def _curve_texts() -> dict[str, str]:
    """results.md's sentence for each optimal curve, by its name in ``frontier``."""
    return {
        frontier.RELAXATION: "The TV-optimal relaxation (gsd_core.OptimalRelaxation) at "
        "per-token budget delta from SJD (delta = 0). ",
        frontier.RELAXATION_MAXIMAL: "The same with maximal-coupled drafts, from MC-SJD. ",
        frontier.DIAL: f"The certified TV dial (budget B per image, policy "
        f"`{frontier.DIAL_POLICY}`, cap {frontier.DIAL_CAP:g}, maximal drafts) from MC-SJD "
        "(B = 0). ",
        frontier.TRANSPORT: "The W1 transport relaxation (per-token budget eps, k = 16 content "
        "neighbours, maximal drafts) from MC-SJD (eps = 0). ",
        frontier.W1_DIAL: f"The W1 dial (budget B per image, policy `{frontier.W1_DIAL_POLICY}`, "
        f"cap {frontier.W1_DIAL_CAP:g}, maximal drafts) from MC-SJD; it certifies the per-path "
        "substitution cost, not the joint law's W1 (proofs/13). ",
    }


def _frontier_text(results: dict[str, Any]) -> str:
    """results.md's frontier section: what was run, the rows per curve, the matched rows."""
    images = len(results["prompts"]) * len(results["seeds"])
    shared = results["shared_seeds"]
    head = (
        f"Every configuration on the same {images} images ({len(results['prompts'])} prompts x "
        f"seeds {', '.join(map(str, results['seeds']))}"
        + (f"; seed(s) {', '.join(map(str, shared))} shared with the tables" if shared else "")
        + f"), figure `frontier_nfe_vs_distortion`; {results['seconds']:.0f} s of this run. "
        + "".join(text for name, text in _curve_texts().items() if name in results["curves"])
        + "NFE at matched distortion: each optimal rule's curve read by "
        "linear interpolation in the distortion at the reference's mean distortion; `difference`"
        " = the reference's NFE minus the curve's there (negative: the reference needs fewer "
        "forwards), `se`, `low`, `high`: paired bootstrap over the images; `inside`: whether "
        "the reference lies in the curve's range (else its nearest end is read); `verdict` for "
        '"the reference needs fewer forwards" by gsd_lab.experiments.verdicts.\n\n'
    )
    tables_text = "\n\n".join(
        f"**{name}**\n\n"
        + markdown_table(
            rows,
            ["method", "images", "nfe", "nfe_sem", "distortion", "distortion_sem"] + W1_COLUMNS,
        )
        for name, rows in results["curves"].items()
    )
    matched_rows = results["matched"]
    matched_text = (
        "\n\n"
        + markdown_table(
            matched_rows,
            [
                "measure",
                "reference",
                "other",
                "distortion",
                "reference_nfe",
                "other_nfe",
                "difference",
                "se",
                "low",
                "high",
                "n",
                "inside",
                "verdict",
            ],
        )
        if matched_rows
        else "\n\nNo matched-distortion row: the run lacks GSD or an optimal rule's curve."
    )
    return head + tables_text + matched_text
