"""Command line: ``python -m gsd_lab {generate, figures, evaluate, notebooks, check-weights,
readme}`` (also ``gsd-lab``); each command's ``--help`` describes its flags.

generate  one image by AR, SJD or GSD; prints nfe, acceptance rate and wall time (``--json``).
figures   every figure and results table into a folder (PNG + SVG + JSON sidecars, results.md).
evaluate  a prompt list sharded over processes (torchrun), resumable: a re-run into the same
          --out resumes the same run only (another configuration is refused, exit 2).
notebooks execute the notebooks top to bottom with papermill (``teaching.notebooks``).
check-weights  one verdict per item of a download, exit 1 when one failed (``gsd_lab.checks``):
          Lumina-mGPT, a Janus-Pro folder, ``--model anole-7b|emu3-gen``.
readme    the README's findings and every rendered value span from results.json.

One module per command (``add_parser``, ``check``, ``run``); the flag groups they share in
``model_flags`` and ``decoding_flags``, the rest in ``common``. Every flag is checked before a
model loads: a bad value, a flag that does not apply (e.g. ``--group-size`` without ``--method
gsd``), a missing file or an output path that cannot be written ends with argparse's usage
message, the flag named, and exit status 2, never a traceback. Errors found once the model is
loaded (an unknown class, a bad checkpoint) exit 2 the same way, before anything is generated.
"""

from __future__ import annotations

import argparse

from . import check_weights, evaluate, figures, generate, notebooks, readme

COMMANDS = {
    "generate": generate,
    "figures": figures,
    "evaluate": evaluate,
    "notebooks": notebooks,
    "check-weights": check_weights,
    "readme": readme,
}


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command; each subparser is stored as its ``command_parser``."""
    parser = argparse.ArgumentParser(prog="python -m gsd_lab", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(sub)
    for command_parser in sub.choices.values():
        command_parser.set_defaults(command_parser=command_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse, check every flag (the command's ``check``), then run the command. Usage errors and
    bad input found later (the command's ``USAGE_ERRORS``: ValueError, FileNotFoundError,
    ``RunMismatch``) exit 2 through argparse's ``error`` (usage line, message, no traceback)."""
    args = build_parser().parse_args(argv)
    fail = args.command_parser.error
    command = COMMANDS[args.command]
    command.check(args, fail)
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)
    try:
        return command.run(args)
    except command.USAGE_ERRORS as error:
        fail(str(error))
