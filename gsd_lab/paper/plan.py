"""The paper job's plan: how much to run (``FigureSizes``), the method specs of every table and
curve, the distinct decoding configurations, and the dry run of a streamed run (``paper_plan``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..accounting.transport import DEFAULT_DRAWS
from ..decode.presets import preset as preset_settings
from ..runs.identity import weights_fingerprint
from ..experiments import tables
from ..experiments.image_model import ImageModel
from ..experiments.runs import FilterSettings, MethodSpec
from ..experiments.stream import Configuration, StreamedRunCache, gpu_hours, measure_forward_seconds
from ..io.progress import duration
from .template import fill


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


def table_specs(
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
        return with_preset(specs, sizes, preset_name)

    return (
        fix(t1),
        fix(t2),
        {k: fix(v) for k, v in pareto.items()},
        {k: fix(v) for k, v in distortion.items()},
    )


def with_preset(specs: list[MethodSpec], sizes: FigureSizes, preset_name: str) -> list[MethodSpec]:
    """``specs`` decoded with the preset (its window, or the sizes' window)."""
    window = preset_settings(preset_name).window or sizes.window
    return [s.with_method(window=window, preset=preset_name) for s in specs]


def extra_top1_seeds(sizes: FigureSizes) -> tuple[int, ...]:
    """The top-1 statistics' seeds that the tables do not decode (none for streamed runs)."""
    return () if sizes.streamed else tuple(s for s in sizes.top1_seeds if s not in sizes.seeds)


def decoding_configurations(
    sizes: FigureSizes, model: ImageModel, preset_name: str = "default"
) -> list[Configuration]:
    """Every decoding pass of a figures run, once each: the distinct configurations of the
    tables and curves (the same key decoded once), then AR without guidance (models with CFG,
    for the top-1 statistics; on the first ``sizes.detail_images`` prompts)."""
    t1_specs, t2_specs, pareto_curves, distortion_curves = table_specs(sizes, preset_name)
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


def affordable(sizes: FigureSizes, model: ImageModel) -> FigureSizes:
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
    sizes = affordable(sizes, model)
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
    cache.storage.plan(configurations, dry=True)
    source = "given"
    if forward_seconds is None:
        forward_seconds, source = (
            measure_forward_seconds(model),
            f"measured now on {model.adapter.device}",
        )
    estimate = gpu_hours(cache.storage, forward_seconds)
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
            f"{cache.storage.estimated_forwards(c):,.0f} forwards per image"
            for c in configurations
        ),
    )
