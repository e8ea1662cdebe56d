"""``check-weights``: one verdict per item of a download, exit 1 when one failed
(``gsd_lab.checks``): Lumina-mGPT, a Janus-Pro folder, ``--model anole-7b|emu3-gen``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from . import common
from .common import Fail

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
    """--rows >= 1; the family's own flags are checked by ``checks.command``."""
    if args.rows < 1:
        fail(f"--rows must be >= 1, got {args.rows}")


def run(args: argparse.Namespace) -> int:
    from ..checks.command import main as check_weights_main

    return check_weights_main(args)
