"""The ``check-weights`` command (``gsd_lab.cli``): the family's items by ``--model`` and
config.json (a Janus-Pro folder is detected), the flags that do not apply refused, the
report printed; exit status 0 when nothing failed (warnings allowed), 1 otherwise."""

from __future__ import annotations

import time
from typing import Any

from .families import MODEL_TYPES, check_family_weights
from .generation import RunOptions
from .janus import check_janus_weights, is_janus_folder
from .lumina import check_lumina_weights
from .items import report


def refuse_flags(args: Any, flags: tuple[str, ...], where: str) -> None:
    """Usage error (exit 2) for the first of ``flags`` (e.g. "--clip") given that does not apply
    ``where``: refused, not ignored."""
    for flag in flags:
        if getattr(args, flag[2:]) is not None:
            args.command_parser.error(f"{flag} does not apply to {where}")


def main(args: Any) -> int:
    """Check ``args.weights``: ``--model anole-7b|emu3-gen`` (``checks.families``), else
    (``--model lumina-mgpt``) a Janus folder (``checks.janus``) or Lumina-mGPT
    (``checks.lumina``); another ``--model`` is a usage error (no family's checks for it)."""
    started = time.perf_counter()
    run = RunOptions.from_args(args)
    if args.model != "lumina-mgpt":
        if args.model not in MODEL_TYPES:
            args.command_parser.error(
                f"check-weights has no checks for --model {args.model} (it checks lumina-mgpt, "
                f"{', '.join(MODEL_TYPES)})"
            )
        refuse_flags(args, ("--clip", "--resolution"), f"--model {args.model} (Lumina-mGPT only)")
        try:
            verdicts = check_family_weights(args.model, args.weights, vqgan=args.vqgan, run=run)
        except ValueError as error:
            args.command_parser.error(str(error))
        return report(args, verdicts, started, model=args.model)
    if is_janus_folder(args.weights):
        refuse_flags(args, ("--vqgan", "--clip", "--resolution"), "a Janus checkpoint")
        return report(args, check_janus_weights(args.weights, run), started)
    verdicts = check_lumina_weights(
        args.weights, resolution=args.resolution, vqgan=args.vqgan, clip=args.clip, run=run
    )
    return report(args, verdicts, started)
