"""The paper job's decode step: the plan's configurations decoded through the run store
(``RunCache``, or ``StreamedRunCache`` when streamed) and every analysis on them (tables, frontier,
top-1 statistics, replacement study, toy examples) into one ``PaperRun``; nothing written."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from gsd_core import tv_distance

from ..runs.identity import weights_fingerprint
from ..experiments import frontier, lossless_frontier, matched, tables, toy
from ..experiments.image_model import ImageModel
from ..experiments.replacement import replacement_study
from ..experiments.runs import FilterSettings, MethodSpec, Recording, RunCache, real_image_baseline
from ..experiments.stream import Configuration, StreamedRunCache
from ..experiments.top1 import top1_stats
from .plan import FigureSizes, extra_top1_seeds, table_specs, with_preset


@dataclass
class PaperRun:
    """What the compute step of ``run_figures`` produced; the save and report steps read it."""

    model: ImageModel
    sizes: FigureSizes
    prompts: list[str]
    preset: str
    batch_size: int
    filters: FilterSettings
    cache: RunCache
    configurations: list[Configuration]
    specs: dict[str, Any]  # "table1", "table2" (spec lists), "pareto", "distortion" (curves)
    toy: dict[str, Any]
    table1: list[dict[str, Any]]
    table2: list[dict[str, Any]]
    pareto: dict[str, list[dict[str, Any]]]
    distortion_points: dict[str, list[dict[str, Any]]]
    matched_rows: list[dict[str, Any]]
    frontier: dict[str, Any] | None
    real: dict[str, Any] | None
    stats: Any
    stats_no_cfg: Any
    extra_seeds: tuple[int, ...]
    replacement: Any
    stage_seconds: dict[str, float]  # wall time of each step (``stage``), results.json's

    @property
    def images_per_method(self) -> int:
        return len(self.prompts) * len(self.sizes.seeds)

    @property
    def has_w1(self) -> bool:
        return any(r.get("w1") is not None for r in self.table1)

    def quality_metrics(self) -> list[tuple[str, str]]:
        """The quality proxies the run's Table 1 has, with the model's names for them."""
        names = self.model.quality_names
        candidates = [
            ("condition_score", "condition score x100 (higher better)"),
            ("frechet_distance", "Frechet distance (lower better)"),
        ]
        return [
            (key, names.get(key, default))
            for key, default in candidates
            if any(r.get(key) is not None for r in self.table1)
        ]

    def has_quality_difference(self) -> bool:
        return any(r.get("condition_score_diff_ar") is not None for r in self.table1)


@contextlib.contextmanager
def stage(stages: dict[str, float], name: str) -> Iterator[None]:
    """Adds the wall time of the block to ``stages[name]`` (results.json's ``stage_seconds``:
    where the main job's time goes)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - start


def decoding_cache(
    model: ImageModel,
    prompts: list[str],
    sizes: FigureSizes,
    configurations: list[Configuration],
    out_dir: Path,
    batch_size: int,
    progress: bool,
    save_images: bool,
    workers: int | None,
) -> tuple[RunCache | dict[str, int], Any]:
    """The run cache every table reads and the progress bar (None when streamed). Streamed
    (``sizes.streamed``): decodes this rank's share first; a rank other than 0 gets
    {"rank", "decoded"} back instead of a cache."""
    from tqdm.auto import tqdm

    filters = FilterSettings.for_model(model.name)
    images_per_method = len(prompts) * len(sizes.seeds)
    if sizes.streamed:
        cache = StreamedRunCache(
            model,
            prompts,
            list(sizes.seeds),
            filters,
            out_dir,
            weights=weights_fingerprint(model.weights_info, model.adapter.model),
            save_images=save_images,
            recording=Recording(
                distortion=True, w1=None, w1_draws=sizes.w1_draws, batch_size=batch_size
            ),
            progress=progress,
        )
        files = cache.storage
        files.plan(configurations)
        decoded = files.run()
        if not files.context.is_main:
            return {"rank": files.context.rank, "decoded": decoded}, None
        files.wait()
        return cache, None
    guided = 2 if model.adapter.uses_cfg else 1
    extra = images_per_method * guided  # replacement (+ AR without CFG)
    extra += len(prompts[: sizes.detail_images]) * len(extra_top1_seeds(sizes)) * guided
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
        recording=Recording(
            top1=True, distortion=True, w1=None, w1_draws=sizes.w1_draws, batch_size=batch_size
        ),
        progress=bar,
        workers=workers,
    )
    # Batched: each guided configuration in a batch stream of its own (RunCache).
    cache.prefetch([c.spec for c in configurations if c.guided])
    return cache, bar


def compute(
    model: ImageModel,
    prompts: list[str],
    sizes: FigureSizes,
    preset: str,
    batch_size: int,
    cache: RunCache,
    configurations: list[Configuration],
    bar: Any,
    stages: dict[str, float],
) -> PaperRun:
    """The compute step: the toy examples, every table, the frontier, the top-1 statistics and
    the replacement study (``experiments``), nothing written; each step's wall time added to
    ``stages``."""
    t1_specs, t2_specs, pareto_curves, distortion_curves = table_specs(sizes, preset)
    ar_spec = configurations[0].spec  # AR (with the preset), the baseline of every table
    with stage(stages, "tables"):
        table1 = tables.speed_quality_table(cache, t1_specs, ar_spec)
        table2 = cache.table(t2_specs, ar_spec)
        pareto = tables.pareto_points(cache, pareto_curves, ar_spec)
        distortion_points = tables.pareto_points(cache, distortion_curves, ar_spec)
    with stage(stages, "frontier"):
        frontier_results = _frontier(sizes, cache, configurations, preset, bar)
    with stage(stages, "top-1"):
        real = real_image_baseline(model, len(prompts) * len(sizes.seeds))
        stats, stats_no_cfg, ar_records = _top1(
            model, prompts, sizes, cache, ar_spec, batch_size, bar
        )
    with stage(stages, "replacement"):
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
    with stage(stages, "toy"):
        toy_results = _toy(sizes)
    if bar is not None:
        bar.update(bar.total - bar.n)
        bar.close()
    specs = {"table1": t1_specs, "table2": t2_specs, "pareto": pareto_curves}
    return PaperRun(
        model=model,
        sizes=sizes,
        prompts=prompts,
        preset=preset,
        batch_size=batch_size,
        filters=cache.filters,
        cache=cache,
        configurations=configurations,
        specs={**specs, "distortion": distortion_curves},
        toy=toy_results,
        table1=table1,
        table2=table2,
        pareto=pareto,
        distortion_points=distortion_points,
        matched_rows=[
            row
            for measure in ("distortion", "w1")
            for row in matched.matched_nfe(distortion_points, measure)
        ],
        frontier=frontier_results,
        real=real,
        stats=stats,
        stats_no_cfg=stats_no_cfg,
        extra_seeds=extra_top1_seeds(sizes),
        replacement=replacement,
        stage_seconds=stages,
    )


def _top1(
    model: ImageModel,
    prompts: list[str],
    sizes: FigureSizes,
    cache: RunCache,
    ar_spec: MethodSpec,
    batch_size: int,
    bar: Any,
) -> tuple[Any, Any, list[Any]]:
    """AR's top-1 statistics (with and, under CFG, without guidance) on the tables' seeds and
    ``extra_top1_seeds`` (only AR: cheap), and the AR detail records they read."""
    ar_records = cache.detail_records(ar_spec, sizes.detail_images)  # tokens, top-1, images
    caches = [cache]
    extra_seeds = extra_top1_seeds(sizes)
    if extra_seeds:
        caches.append(
            RunCache(
                model,
                prompts[: sizes.detail_images],
                list(extra_seeds),
                cache.filters,
                recording=Recording(top1=True, batch_size=batch_size),
                progress=bar,
            )
        )
    stats = top1_stats([r for c in caches for r in c.detail_records(ar_spec, sizes.detail_images)])
    stats_no_cfg = None
    if model.adapter.uses_cfg:  # the same AR runs without guidance: how much CFG sharpens p
        stats_no_cfg = top1_stats(
            [
                r
                for c in caches
                for r in c.detail_records(ar_spec, sizes.detail_images, guided=False)
            ]
        )
    return stats, stats_no_cfg, ar_records


THEOREM1_TRIALS = 2000  # random (pair, partition) draws of the toy's Theorem 1 check


def _toy(sizes: FigureSizes) -> dict[str, Any]:
    """The model-free, exact parts: Fig. 6's TV pairs and grid, grouping's TV and Theorem 1 on
    random partitions, GSD's distortion and acceptance against the cluster size G."""
    pairs = toy.flat_and_peaked_pairs(1000)
    viable, masses, noise = [1, 2, 4, 16, 64, 256, 1024, 4096], [0.05, 0.5, 0.9], 0.5
    grid = toy.tv_grid(
        viable, masses, vocab_size=4096, noise=noise, num_pairs=sizes.toy_pairs, seed=0
    ).numpy()
    p_noisy, q_noisy = toy.noisy_pairs(
        1024,
        0.05,
        vocab_size=4096,
        noise=noise,
        num_pairs=sizes.toy_pairs,
        generator=torch.Generator().manual_seed(1),
    )
    groups = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    p_d, q_d = toy.dirichlet_pairs(32, 256, alpha=0.3, seed=2)
    cluster_sizes = [1, 3, 5, 9, 17, 31]  # tokens per cluster G
    return {
        "pairs": pairs,
        "tvs": {name: float(tv_distance(p, q)) for name, (p, q) in pairs.items()},
        "viable": viable,
        "masses": masses,
        "noise": noise,
        "grid": grid,
        "groups": groups,
        "tv_by_group": toy.rank_binned_tv(p_noisy, q_noisy, groups).numpy(),
        "theorem1": toy.theorem1_random_partitions(
            vocab_size=32, num_trials=THEOREM1_TRIALS, seed=0
        ),
        "cluster_sizes": cluster_sizes,
        "distortion": toy.distortion_by_cluster_size(p_d, q_d, cluster_sizes),
        "acceptance": toy.acceptance_by_cluster_size(p_d, q_d, cluster_sizes),
    }


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
    curves = {name: with_preset(specs, sizes, preset) for name, specs in curves.items()}
    runs = frontier.FrontierRuns(cache, tuple(sizes.frontier_seeds), progress=bar)
    if bar is not None:
        bar.total += runs.images_to_decode(curves, {c.spec.key for c in configurations})
        bar.refresh()
    out = frontier.frontier_results(runs, curves, sizes.frontier_group)
    out["specs"] = {name: [s.to_record() for s in specs] for name, specs in curves.items()}
    out["lossless"] = lossless_frontier.lossless_results(out, cache.model.name)
    out["seconds"] = time.perf_counter() - started
    return out
