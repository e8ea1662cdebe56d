"""``run_figures``: the paper job, plan -> decode -> figures -> results.json and results.md."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..experiments import records
from ..experiments.image_model import ImageModel, load_image_model
from ..io.provenance import inside_repository, provenance, require_clean_tree
from ..models.batched import default_batch_size
from .decode import compute, decoding_cache, stage
from .figures import save_figures, saver
from .plan import FigureSizes, affordable, decoding_configurations
from .render import write_report
from .results_json import base_config


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
    step (``compute``: decoding and analyses), the save step (``save_figures``), the report
    step (``write_report``: results.md from the template ``templates/results.md``, results.json
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
    sizes = affordable(sizes, model)
    configurations = decoding_configurations(sizes, model, preset)
    stages: dict[str, float] = {}
    with stage(stages, "decoding"):
        cache, bar = decoding_cache(
            model, prompts, sizes, configurations, out_dir, batch_size, progress, save_images,
            workers,
        )
    if isinstance(cache, dict):  # a streamed run's rank other than 0: its share is decoded
        return cache
    run = compute(model, prompts, sizes, preset, batch_size, cache, configurations, bar, stages)
    with stage(stages, "saving"):
        if not sizes.streamed:  # per-image records of every configuration: notebook 04 reads them
            records.save(cache, out_dir / "records.npz", git=git)
        seeds = {"generation_seeds": list(sizes.seeds), "prompts": prompts}
        config = base_config(run)
        saved = save_figures(run, saver(out_dir, model.name, seeds, config, git))
    seconds = time.perf_counter() - started
    record = provenance(model=model.name, seeds=seeds, config=config, git=git)
    return write_report(run, out_dir, record, saved, seconds)
