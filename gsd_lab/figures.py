"""``python -m gsd_lab figures``: regenerate every figure and the results tables into one folder.

Each figure is saved as PNG + SVG + JSON sidecar (``figure_io.save_figure``); the tables go to
``results.md`` (and ``results.json``), the per-image decoding records to ``records.npz``
(``experiments.records``: notebook 04 reuses them). The analyses are the functions the notebooks
call (``gsd_lab.experiments``). Sizes: ``FigureSizes.default()`` for the stand-in on 2 CPU cores,
``FigureSizes.quick()`` for tests, ``FigureSizes.paper()`` for Lumina-mGPT on a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import string
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from gsd_core import tv_distance

from .runs.identity import weights_fingerprint
from .experiments import claims, findings, frontier, ledger, matched, plots, records, tables
from .experiments import toy, verdicts
from .experiments.image_model import ImageModel, load_image_model
from .experiments.replacement import replacement_study
from .experiments.runs import FilterSettings, MethodSpec, Recording, RunCache, real_image_baseline
from .experiments.stream import Configuration, StreamedRunCache, gpu_hours, measure_forward_seconds
from .experiments.top1 import top1_stats
from .models.batched import default_batch_size
from .experiments import prose
from .io.figure_io import markdown_table, save_figure, write_results_markdown
from .decode.methods import DecodingMethod, TransportAcceptance
from .decode.presets import preset as preset_settings
from .io.progress import duration
from .io.provenance import atomic_write_json, inside_repository, provenance, require_clean_tree
from .accounting.transport import DEFAULT_DRAWS


W1_COLUMNS = ["w1", "w1_sem", "w1_sampling_sem"]


@dataclass(frozen=True)
class FigureSizes:
    """How much to run. seeds x prompts images per decoding configuration."""

    seeds: tuple[int, ...] = (0,)  # the stand-in's 10 classes x 1 seed
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
    # Decode into result files per (configuration, prompt): resumable, sharded.
    streamed: bool = False
    # The top-1 statistics and AR without guidance: the first N prompts (None: all), AR on
    # top1_seeds (those not in seeds: extra).
    detail_images: int | None = None
    top1_seeds: tuple[int, ...] = (0, 1, 2)
    replacement_images: int | None = None  # the Fig. 4 study: first N AR images (None: all)
    # The frontier (experiments.frontier): its seeds (() for none; the tables' seeds are read
    # from their cache), GSD's G, the relaxation's deltas, the TV dial's budgets, whether the
    # naive rivals ("amplify": k = 2, "lantern": delta = 0.1) and the maximal-coupled curves
    # are in it. LANTERN is left out by default: its accounting would exceed the frontier's
    # share of the default figures job.
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
            # No LANTERN: its k = 1001 neighbourhood table over the stand-in's vocabulary is a
            # large share of the quick run; nbval's notebook 04 (its live check) builds that
            # table, test_experiments decodes LANTERN rows through the tables.
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


def guided_specs(model: ImageModel, labels: list[str]) -> list[MethodSpec]:
    """The specs of the figures' guided configurations (``decoding_configurations`` at
    ``FigureSizes.default()``) with these labels, in their order; ValueError names any unknown."""
    by_label = {
        c.spec.label: c.spec
        for c in decoding_configurations(FigureSizes.default(), model)
        if c.guided
    }
    unknown = [label for label in labels if label not in by_label]
    if unknown:
        raise ValueError(f"unknown configurations {unknown}; known: {sorted(by_label)}")
    return [by_label[label] for label in labels]


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
    seconds = estimate["device_hours"] * 3600
    cfg = model.adapter.uses_cfg
    per_forward = {k.upper(): f"{1000 * v:.1f} ms" for k, v in forward_seconds.items()}
    return fill(
        "plan",
        model=model.name,
        tokens=model.num_tokens,
        out_dir=out_dir,
        passes=len(configurations),
        configurations=len(configurations) - (1 if cfg else 0),
        no_guidance=fill("plan_no_guidance", prompts=sizes.detail_images or len(prompts))
        if cfg
        else "",
        prompts=len(prompts),
        seeds=len(sizes.seeds),
        **{k: estimate[k] for k in ("items", "done", "to_do")},
        source=source,
        per_forward=", ".join(f"{k} {v}" for k, v in per_forward.items()),
        forwards=f"{estimate['forwards']:,.0f}",
        hours=f"{estimate['device_hours']:,.1f}",
        one=duration(seconds),
        world=f", {duration(seconds / world_size)} on {world_size}" if world_size > 1 else "",
        terms=" + ".join(
            f"{k.upper()} {n:,.0f} x {per_forward[k.upper()]}"
            for k, n in estimate["forwards_by_method"].items()
            if n
        ),
        measured=estimate["configurations_with_measured_nfe"],
        per_configuration="\n".join(
            f"    {c.spec.label}{'' if c.guided else ' (no guidance)'}: "
            f"{cache.estimated_forwards(c):,.0f} forwards per image"
            for c in configurations
        ),
    )


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
    stage_seconds: dict[str, float]  # wall time of each step (``_stage``), results.json's

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
def _stage(stages: dict[str, float], name: str) -> Iterator[None]:
    """Adds the wall time of the block to ``stages[name]`` (results.json's ``stage_seconds``:
    where the main job's time goes)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - start


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
    """Run every analysis and write the figures and ``results.md`` into ``out_dir``: the compute
    step (``_compute``: decoding and analyses), the save step (``_save_figures``), the report
    step (``_write_report``: results.md from the template ``templates/results.md``, results.json
    with the claims by id, README and docs/claims.md when ``out_dir`` is the repository's).

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
    frontier's decoding is split over, one thread each (``gsd_lab.workers``: the same
    records for any number; None: the usable cores on a CPU; not with ``sizes.streamed``).
    Returns {"figures": [names], "results": path, "seconds": wall time, "tables": rows}."""
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
    configurations = decoding_configurations(sizes, model, preset)
    stages: dict[str, float] = {}
    with _stage(stages, "decoding"):
        cache, bar = _decoding_cache(
            model, prompts, sizes, configurations, out_dir, batch_size, progress, save_images,
            workers,
        )
    if isinstance(cache, dict):  # a streamed run's rank other than 0: its share is decoded
        return cache
    run = _compute(model, prompts, sizes, preset, batch_size, cache, configurations, bar, stages)
    with _stage(stages, "saving"):
        if not sizes.streamed:  # per-image records of every configuration: notebook 04 reads them
            records.save(cache, out_dir / "records.npz", git=git)
        seeds = {"generation_seeds": list(sizes.seeds), "prompts": prompts}
        config = _base_config(run)
        saved = _save_figures(run, _saver(out_dir, model.name, seeds, config, git))
    seconds = time.perf_counter() - started
    record = provenance(model=model.name, seeds=seeds, config=config, git=git)
    return _write_report(run, out_dir, record, saved, seconds)


def _decoding_cache(
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
        cache.plan(configurations)
        decoded = cache.run()
        if not cache.context.is_main:
            return {"rank": cache.context.rank, "decoded": decoded}, None
        cache.wait()
        return cache, None
    guided = 2 if model.adapter.uses_cfg else 1
    extra = images_per_method * guided  # replacement (+ AR without CFG)
    extra += len(prompts[: sizes.detail_images]) * len(_extra_top1_seeds(sizes)) * guided
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


def _compute(
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
    t1_specs, t2_specs, pareto_curves, distortion_curves = _specs(sizes, preset)
    ar_spec = configurations[0].spec  # AR (with the preset), the baseline of every table
    with _stage(stages, "tables"):
        table1 = tables.speed_quality_table(cache, t1_specs, ar_spec)
        table2 = cache.table(t2_specs, ar_spec)
        pareto = tables.pareto_points(cache, pareto_curves, ar_spec)
        distortion_points = tables.pareto_points(cache, distortion_curves, ar_spec)
    with _stage(stages, "frontier"):
        frontier_results = _frontier(sizes, cache, configurations, preset, bar)
    with _stage(stages, "top-1"):
        real = real_image_baseline(model, len(prompts) * len(sizes.seeds))
        stats, stats_no_cfg, ar_records = _top1(
            model, prompts, sizes, cache, ar_spec, batch_size, bar
        )
    with _stage(stages, "replacement"):
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
    with _stage(stages, "toy"):
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
        extra_seeds=_extra_top1_seeds(sizes),
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
    ``_extra_top1_seeds`` (only AR: cheap), and the AR detail records they read."""
    ar_records = cache.detail_records(ar_spec, sizes.detail_images)  # tokens, top-1, images
    caches = [cache]
    extra_seeds = _extra_top1_seeds(sizes)
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


def _base_config(run: PaperRun) -> dict[str, Any]:
    """The configuration every figure's sidecar and results.json record."""
    model = run.model
    return {
        "sizes": asdict(run.sizes),
        "filters": asdict(run.filters),
        "distance_threshold": _distance_threshold(run),
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


def _distance_threshold(run: PaperRun) -> float:
    """The dynamic rule's squared embedding-distance filter as this run resolved it."""
    return run.filters.resolve(
        run.model.embeddings,
        run.model.image_vocabulary.cpu(),
        known=getattr(run.model.adapter, "distance_quantiles", None),
    )


Saver = Callable[[Any, str, dict[str, Any], dict[str, Any]], None]


def _saver(out_dir: Path, model: str, seeds: dict, config: dict, git: dict) -> Saver:
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


def _save_figures(run: PaperRun, save: Saver) -> list[str]:
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
        shown = _with_preset(shown, sizes, run.preset)
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
                lambda: plots.frontier(front["curves"]),
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


def _transport_k(specs: dict[str, list[dict[str, Any]]]) -> str:
    """The neighbours per code (``TransportAcceptance.k``) of the transport curve's relaxed
    configurations, as recorded in the frontier's ``specs`` ("?" where none is recorded)."""
    rules = [DecodingMethod.from_dict(s["method"]).acceptance
             for s in specs.get(frontier.TRANSPORT, [])]
    ks = sorted({rule.k for rule in rules if isinstance(rule, TransportAcceptance)})
    return ", ".join(map(str, ks)) or "?"


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
    )


# ---- the report step: results.md from the template, results.json with the claims ----------------

TEMPLATE = Path(__file__).resolve().parent / "templates" / "results.md"


@functools.cache
def _template() -> dict[str, string.Template]:
    """The parts of ``templates/results.md`` by name (the lines after each "@@ name" line)."""
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in TEMPLATE.read_text().split("\n"):
        if line.startswith("@@ "):
            current = parts.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
    return {name: string.Template("\n".join(lines).rstrip("\n")) for name, lines in parts.items()}


def fill(part: str, **values: Any) -> str:
    """The template's ``part`` with its placeholders filled (KeyError for a missing one)."""
    return _template()[part].substitute(values)


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
        distance_threshold=f"{_distance_threshold(run):.4g}",
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
        per_class=markdown_table(_top1_per_class(stats, no_cfg), per_class),
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


def _results_tables(run: PaperRun) -> dict[str, Any]:
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
        "top1_per_class": _top1_per_class(run.stats, run.stats_no_cfg),
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


def _write_report(
    run: PaperRun, out_dir: Path, record: dict[str, Any], saved: list[str], seconds: float
) -> dict[str, Any]:
    """The report step: results.json (the tables and ``claims``, every claim's numbers by id),
    results.md, and, when ``out_dir`` is the repository's figures/, what ``python -m gsd_lab
    readme`` writes: README's findings block, docs/claims.md (``findings.update_repository``) and
    the value spans of README, docs, proofs and notebook markdown (``prose.update_documents``)."""
    all_tables = _results_tables(run)
    evidence = claims.evaluate(all_tables, run.sizes.table2_group)
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
