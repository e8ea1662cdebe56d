"""``figures``: every figure and results table into a folder (PNG + SVG + JSON sidecars,
results.md); ``--paper`` streams one image per prompt into resumable result files."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from .common import USAGE_ERRORS  # noqa: F401 (cli.main reads it)
from .common import Fail, add_batching_args, check_batching, check_prompt, refuse_given
from .decoding_flags import add_preset_arg
from .model_flags import add_model_args, check_model_args, load_model


def add_parser(sub: Any) -> None:
    """``figures``: every figure and results.md."""
    fig = sub.add_parser("figures", help="regenerate every figure and results.md")
    add_model_args(fig)
    fig.add_argument(
        "--out", type=Path, default=Path("figures"), help="output folder (default: figures/)"
    )
    fig.add_argument(
        "--prompts",
        type=Path,
        default=None,
        help="prompt file: one per line, or a TSV with a Prompt column (PartiPrompts)",
    )
    fig.add_argument("--quick", action="store_true", help="tiny sizes (tests)")
    add_preset_arg(fig)
    fig.add_argument(
        "--paper",
        action="store_true",
        help="one image per prompt (Lumina-mGPT on a GPU), each written to a result file as it is "
        "decoded: a re-run into the same --out resumes, torchrun shares the images between "
        "processes",
    )
    fig.add_argument(
        "--save-images", action="store_true", help="--paper: also keep every image as a PNG"
    )
    fig.add_argument(
        "--dry-run",
        action="store_true",
        help="--paper: print what would be decoded, what is done in --out and the device-hours "
        "left (per-forward times measured on the device now, or --forward-ms), and stop",
    )
    fig.add_argument(
        "--forward-ms",
        type=float,
        default=None,
        help="--dry-run: milliseconds per forward pass (all methods) instead of measuring",
    )
    add_batching_args(fig)
    fig.add_argument("--no-progress", action="store_true")
    fig.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write into the repository from a tree with uncommitted changes (development; "
        "the outputs then say dirty)",
    )


def check(args: argparse.Namespace, fail: Fail) -> None:
    """The model flags, the ``--paper``-only flags, then batching, prompts and --out."""
    check_model_args(args, fail)
    if args.quick and args.paper:
        fail("--quick and --paper exclude each other")
    if not args.paper:
        given = {"--save-images": args.save_images, "--dry-run": args.dry_run,
                 "--forward-ms": args.forward_ms}
        refuse_given(given, "applies to --paper only", fail)
    if args.forward_ms is not None and not (
        math.isfinite(args.forward_ms) and args.forward_ms > 0
    ):
        fail(f"--forward-ms must be a number > 0, got {args.forward_ms}")
    if args.forward_ms is not None and not args.dry_run:
        fail("--forward-ms applies to --dry-run only")
    if args.paper and args.workers is not None:
        # The streamed run (StreamedRunCache) decodes in this process; torchrun shares it.
        fail(
            "--workers does not apply to --paper (a streamed run decodes in this process; "
            "torchrun shares its images between processes)"
        )
    check_batching(args, fail)


def run(args: argparse.Namespace) -> int:
    """Load, check the prompts, then the plan (--dry-run) or the figures run."""
    from ..paper import FigureSizes, run_figures

    sizes = (
        FigureSizes.quick()
        if args.quick
        else FigureSizes.paper()
        if args.paper
        else FigureSizes.default()
    )
    if args.paper and args.device in (None, "cuda"):
        _device_of_this_rank(args)
    model = load_model(args)
    for index, prompt in enumerate(args.prompt_list or []):
        check_prompt(
            model, prompt, f"--prompts {args.prompts}: prompt {index}", args.command_parser.error
        )
    if args.dry_run:
        return _dry_run(args, model, sizes)
    if args.threads is None and not sizes.streamed and str(model.adapter.device) == "cpu":
        import torch

        # The workers decode with one thread each (gsd_lab.workers; workers=1 in this
        # process on one thread too); this process's own decodes (the detail analyses) too, so
        # that a busy core does not stall a spinning team here either. A streamed run (--paper)
        # has no workers and keeps torch's thread count.
        torch.set_num_threads(1)
    result = run_figures(
        args.out,
        model=model,
        prompts=args.prompt_list,
        sizes=sizes,
        progress=not args.no_progress,
        allow_dirty=args.allow_dirty,
        save_images=args.save_images,
        preset=args.preset,
        batch_size=args.batch_size,
        workers=args.workers,
    )
    if "rank" in result:
        print(
            f"rank {result['rank']}: {result['decoded']} images decoded; rank 0 writes the figures"
        )
    else:
        print(
            f"{len(result['figures'])} figures and {result['results']} "
            f"written in {result['seconds']:.0f} s"
        )
    return 0


def _device_of_this_rank(args: argparse.Namespace) -> None:
    """One device per torchrun process (LOCAL_RANK), as evaluate does."""
    from ..runs.ranks import context_from_environment

    context = context_from_environment()
    if context.world_size > 1:
        import torch

        if torch.cuda.is_available():
            args.device = f"cuda:{context.local_rank}"


def _dry_run(args: argparse.Namespace, model: Any, sizes: Any) -> int:
    """Print the paper run's plan (what is left, device-hours) and decode nothing."""
    from ..paper import paper_plan

    prompts = (args.prompt_list or model.default_prompts)[: sizes.max_prompts]
    forward = (
        None
        if args.forward_ms is None
        else {m: args.forward_ms / 1000 for m in ("ar", "sjd", "gsd")}
    )
    print(
        paper_plan(
            args.out,
            model,
            prompts,
            sizes,
            forward_seconds=forward,
            preset=args.preset,
            world_size=int(os.environ.get("WORLD_SIZE", "1")),
        )
    )
    return 0
