"""``evaluate``: a prompt list sharded over processes (torchrun), resumable: a re-run into the
same --out resumes the same run only (another configuration is refused, exit 2). Prompt i runs
on rank i mod N with seed + i; rank 0 merges summary.json (``gsd_lab.runs.shards``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from .common import USAGE_ERRORS  # noqa: F401 (cli.main reads it)
from .common import Fail, add_batching_args, check_batching, check_prompt
from .decoding_flags import add_decoding_args, check_decoding, method_spec
from .model_flags import check_model_args, load_model, takes_text


def add_parser(sub: Any) -> None:
    """``evaluate``: a sharded, resumable evaluation."""
    ev = sub.add_parser(
        "evaluate",
        help="sharded, resumable evaluation over a prompt file (use torchrun)",
        description="Sharded, resumable evaluation: prompt i runs on rank i mod N with seed "
        "seed + i; one result file per prompt; rank 0 merges summary.json.",
    )
    add_decoding_args(ev)
    ev.add_argument(
        "--prompts", type=Path, required=True, help="prompt file (one per line or PartiPrompts TSV)"
    )
    ev.add_argument(
        "--out",
        type=Path,
        required=True,
        help="results folder. A re-run with the same model, weights, decoding flags, seed and "
        "prompt file resumes (finished prompts are skipped, any number of processes); anything "
        "else is refused, naming what differs: use a new folder for a new configuration",
    )
    ev.add_argument("--seed", type=int, default=0, help="base seed >= 0: prompt i uses seed + i")
    add_batching_args(ev)
    ev.add_argument("--no-images", action="store_true", help="do not save images")
    ev.add_argument("--no-progress", action="store_true")


def check(args: argparse.Namespace, fail: Fail) -> None:
    """The model and decoding flags, then batching, prompts and --out."""
    check_model_args(args, fail)
    check_decoding(args, fail)
    check_batching(args, fail)


def run(args: argparse.Namespace) -> int:
    """Check --out's run identity, load, then decode this rank's share of the prompts."""
    from ..runs.ranks import init_distributed
    from ..runs.shards import BatchedWork, evaluate
    from ..runs.store import check_run
    from ..experiments.stream import CHUNK_BATCHES
    from ..workers import default_workers
    from ..models.batched import default_batch_size

    fail = args.command_parser.error
    prompts = args.prompt_list
    spec = method_spec(args)
    try:  # before loading: another configuration or prompt list in --out fails now
        check_run(args.out, _partial_identity(args), prompts, partial=True)
    except ValueError as error:
        fail(str(error))
    # The stand-in runs on the CPU unless told otherwise; Lumina-mGPT takes cuda:LOCAL_RANK.
    context = init_distributed(args.device or (None if takes_text(args) else "cpu"))
    args.device = context.device
    model = load_model(args)
    for index, prompt in enumerate(prompts):
        check_prompt(model, prompt, f"--prompts {args.prompts}: prompt {index}", fail)
    batch_size = args.batch_size or default_batch_size(context.device)
    work = _work(args, model, spec, batch_size)
    identity = run_identity(args, model, spec)
    if model.adapter.device.type != "cpu":
        # On a GPU, batched and static forwards round differently from batch 1 eager, so the
        # tokens can depend on them: a resumed run must keep both (on a CPU in float64 they are
        # the same tokens, tested).
        identity["rounding"] = {"runner": args.runner, "batch_size": batch_size}
    summary = evaluate(
        prompts,
        args.out,
        BatchedWork(work, 1 if batch_size == 1 else CHUNK_BATCHES * batch_size),
        context,
        identity=identity,
        config=_config(args, model, spec, context, batch_size),
        metadata=_metadata(args, model),
        progress=not args.no_progress,
        # torchrun's ranks share the cores: by default each rank takes its share of them.
        workers=max(1, default_workers(context.device) // context.world_size)
        if args.workers is None
        else args.workers,
    )
    if summary is not None:
        print(json.dumps({k: summary[k] for k in ("num_prompts", "finished", "complete", "mean")}))
    return 0


def _work(
    args: argparse.Namespace, model: Any, spec: Any, batch_size: int
) -> Callable[[list[tuple[int, str]], Callable[[int, dict], None]], None]:
    """``work(items, write)`` for ``BatchedWork``: decode (index, prompt) items, each written as
    its row (``stream.record_row``: label, generator seed, counts, times, tokens, device,
    condition score, image file) as soon as it is decoded."""
    from ..experiments.runs import Recording, RunItem, decode_items, resolve_for
    from ..experiments.stream import record_row

    resolved = resolve_for(model, spec.method)
    image_dir = args.out / "images"
    recording = Recording(batch_size=batch_size, runner=args.runner)

    def row_of(index: int, record: Any) -> dict[str, Any]:
        image_file = None if args.no_images else image_dir / f"{index:06d}.png"
        return record_row(record, model, image_file)  # label, generator_seed, device: once

    def work(items: list[tuple[int, str]], write: Callable[[int, dict], None]) -> None:
        # prompt i's generator is seeded seed + i (docs/run-store.md)
        runs = [RunItem(spec.label, resolved, prompt, args.seed + i) for i, prompt in items]

        def finished(position: int, record: Any) -> None:
            write(items[position][0], row_of(items[position][0], record))
            record.image = None  # host memory: pixels only until the row is written

        decode_items(model, runs, recording, on_record=finished)

    return work


def _config(
    args: argparse.Namespace, model: Any, spec: Any, context: Any, batch_size: int
) -> dict[str, Any]:
    """The summary's configuration: label, processes, device, runner, batch size and what the
    rows' condition_score is (e.g. CLIP score)."""
    config = {
        "label": spec.label,
        "world_size": context.world_size,
        "device": str(context.device),
        "runner": args.runner,
        "batch_size": batch_size,
    }
    if model.condition_scores is not None:
        config["condition_score"] = " ".join(
            model.quality_names.get("condition_score", "condition score").split()
        )
    return config


def _metadata(args: argparse.Namespace, model: Any) -> dict[str, Any]:
    """Provenance of the run: weights, git commit, package versions, prompt file."""
    from ..io.provenance import git_commit, package_versions

    return {
        "weights_info": model.weights_info,
        "git": git_commit(),
        "versions": package_versions(),
        "prompts_file": str(args.prompts),
    }


def _partial_identity(args: argparse.Namespace) -> dict[str, Any]:
    """The part of the run identity known before the model loads (checked early, so that a
    mismatching re-run fails before minutes of loading)."""
    decoding: dict[str, Any] = {"method": args.decoding_method.to_dict()}
    if args.cfg is not None:
        decoding["cfg_scale"] = float(args.cfg)
    if args.top_k is not None:
        decoding["top_k"] = args.top_k
    return {"model": args.model, "decoding": decoding, "seed": args.seed}


def run_identity(args: argparse.Namespace, model: Any, spec: Any) -> dict[str, Any]:
    """What an evaluation's results depend on besides the prompts: the model name, a
    fingerprint of its weights (``gsd_lab.runs.identity.weights_fingerprint``), the full decoding
    spec (method, clusters, G, residual, acceptance scale, window; the adapter's CFG scale,
    top-k and temperature as resolved; GSD's filter settings) and the base seed."""
    from ..runs.identity import weights_fingerprint
    from ..experiments.runs import decoding_identity

    identity = {
        "model": model.name,
        "weights": weights_fingerprint(model.weights_info, model.adapter.model),
        "decoding": decoding_identity(model, spec),
        "seed": args.seed,
    }
    if model.quality_config:  # e.g. the CLIP resize: it changes the scores
        identity["quality"] = model.quality_config
    return identity
