"""Command line: ``python -m gsd_lab {generate, figures, evaluate, notebooks, check-weights,
readme}`` (also ``gsd-lab``); each command's ``--help`` describes its flags.

One module per command, each with its parser, its run and, where argparse's own checks are not
enough, its checks (``add_parser``, ``run``, ``check``, ``USAGE_ERRORS``):

- ``generate``: one image by AR, SJD or GSD; prints nfe, acceptance rate and wall time;
- ``figures``: every figure and results table into a folder (PNG + SVG + JSON, results.md);
- ``evaluate``: a prompt list sharded over processes (torchrun), resumable into the same --out;
- ``notebooks``: execute the notebooks with papermill (``teaching.notebooks``);
- ``check_weights``: ``check-weights``, one verdict per item of a download (``gsd_lab.checks``);
- ``readme``: the README's answer, docs/findings.md and every value span from results.json;
- ``model_flags``, ``decoding_flags``: the flag groups the commands share, with their checks;
  ``common``: the model choices, output-path, prompt and batching checks.

Every flag is checked before a model loads: a bad value, a flag that does not apply, a missing
file or an output path that cannot be written ends with argparse's usage message, the flag
named, and exit status 2, never a traceback; so do errors found once the model is loaded.
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
    """Parse, check every flag (the command's ``check``, where it has one), then run the command.
    Bad input found later exits 2 through argparse's ``error`` (usage line, message, no
    traceback) where the command declares it: its ``USAGE_ERRORS`` (``common.USAGE_ERRORS``:
    ValueError, RunMismatch among them, and FileNotFoundError, for generate, figures and
    evaluate); the other commands declare none."""
    args = build_parser().parse_args(argv)
    fail = args.command_parser.error
    command = COMMANDS[args.command]
    if hasattr(command, "check"):
        command.check(args, fail)
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)
    try:
        return command.run(args)
    except getattr(command, "USAGE_ERRORS", ()) as error:
        fail(str(error))
