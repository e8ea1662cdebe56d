"""``check-weights``: one verdict per item of a download, exit 1 when one failed
(``gsd_lab.checks``): Lumina-mGPT, a Janus-Pro folder, ``--model anole-7b|emu3-gen``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from . import common
from .common import Fail, refuse_given


def add_parser(sub: Any) -> None:
    """``check-weights``: one verdict per item of a download."""
    chk = sub.add_parser(
        "check-weights",
        help="check a downloaded checkpoint (Lumina-mGPT, Janus-Pro, anole-7b, emu3-gen), one "
        "verdict per item",
        description="Check a download with the package's own code, one verdict per item (files, "
        "architecture, vocabulary, tokenizer, a short AR generation and its image); exit 1 when "
        "an item failed (gsd_lab.checks). Lumina-mGPT (the default), Janus-Pro (detected from "
        "config.json's model_type), --model anole-7b | emu3-gen (--resolution and --clip are "
        "Lumina-mGPT's only).",
    )
    chk.add_argument("weights", help="checkpoint folder (or Hugging Face cache entry)")
    chk.add_argument(
        "--model",
        choices=("lumina-mgpt", *common.FAMILY_CHOICES),
        default="lumina-mgpt",
        help="the checkpoint's family (default lumina-mgpt, which also detects a Janus-Pro "
        "folder)",
    )
    chk.add_argument(
        "--resolution",
        type=int,
        choices=(512, 768, 1024),
        default=None,
        help="Lumina-mGPT only; default: from the folder's name (...-7b-512), else 768",
    )
    chk.add_argument(
        "--vqgan", help="VQGAN folder (vqgan.yaml + vqgan.ckpt, or a release layout above them)"
    )
    chk.add_argument("--clip", help="local CLIP folder (Lumina-mGPT only)")
    chk.add_argument("--tokenizer", help="folder holding tokenizer.json, or the file")
    chk.add_argument("--device", help="default cuda if available")
    chk.add_argument(
        "--force-cpu", action="store_true", help="load a 7B model on the CPU anyway (slow)"
    )
    chk.add_argument("--rows", type=int, default=2, help="image rows to generate (default 2)")
    chk.add_argument("--seed", type=int, default=0)
    chk.add_argument("--prompt", default="a lighthouse on a rocky coast at sunset")
    chk.add_argument("--out", type=Path, default=None, help="save the decoded rows to this PNG")
    chk.add_argument("--json", action="store_true", help="one JSON object instead of text")


def check(args: argparse.Namespace, fail: Fail) -> None:
    """--rows >= 1; the family's own flags are checked by ``run`` (a Janus folder is read)."""
    if args.rows < 1:
        fail(f"--rows must be >= 1, got {args.rows}")


def run(args: argparse.Namespace) -> int:
    """Check ``args.weights``: ``--model anole-7b|emu3-gen`` (``checks.families``), else a Janus
    folder (``checks.janus``) or Lumina-mGPT (``checks.lumina``); a flag that does not apply and
    a ``--model`` no family checks are usage errors. Exit 1 when an item failed, else 0."""
    from ..checks.families import MODEL_TYPES, check_family_weights
    from ..checks.generation import RunOptions
    from ..checks.items import report
    from ..checks.janus import check_janus_weights, is_janus_folder
    from ..checks.lumina import check_lumina_weights

    started, fail = time.perf_counter(), args.command_parser.error
    options = RunOptions.from_args(args)
    # Lumina-mGPT's flags that no other family takes (the families take --vqgan too).
    lumina_only = {"--clip": args.clip, "--resolution": args.resolution}
    if args.model != "lumina-mgpt":
        if args.model not in MODEL_TYPES:
            fail(
                f"check-weights has no checks for --model {args.model} (it checks lumina-mgpt, "
                f"{', '.join(MODEL_TYPES)})"
            )
        why = f"does not apply to --model {args.model} (Lumina-mGPT only)"
        refuse_given(lumina_only, why, fail)
        try:
            verdicts = check_family_weights(args.model, args.weights, vqgan=args.vqgan, run=options)
        except ValueError as error:
            fail(str(error))
        return report(args, verdicts, started, model=args.model)
    if is_janus_folder(args.weights):
        given = {"--vqgan": args.vqgan, **lumina_only}
        refuse_given(given, "does not apply to a Janus checkpoint", fail)
        return report(args, check_janus_weights(args.weights, options), started)
    verdicts = check_lumina_weights(
        args.weights, resolution=args.resolution, vqgan=args.vqgan, clip=args.clip, run=options
    )
    return report(args, verdicts, started)
