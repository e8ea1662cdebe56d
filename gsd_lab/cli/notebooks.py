"""``notebooks``: execute the notebooks top to bottom with papermill (``teaching.notebooks``),
in place (a clean tree) or into --out."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..teaching.notebooks import CELL_TIMEOUT as NOTEBOOK_CELL_TIMEOUT
from ..teaching.notebooks import SIZES as NOTEBOOK_SIZES


def _positive_int(text: str) -> int:
    """``text`` as an integer >= 1 (argparse's type: anything else exits 2 naming the flag)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def add_parser(sub: Any) -> None:
    """``notebooks``: execute the notebooks with papermill."""
    nb = sub.add_parser(
        "notebooks",
        help="execute the notebooks with papermill (in place, or into --out)",
        description="Execute notebooks/NN_*.ipynb top to bottom with papermill. Into the "
        "checkout (the default) needs a clean tree; every notebook runs before "
        "any is written.",
    )
    nb.add_argument(
        "--only", nargs="+", metavar="PREFIX", help="notebook name prefixes, e.g. 02 04"
    )
    nb.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        help="set a parameter of the notebooks that declare it; VALUE is a Python literal "
        "(3, [0, 1], None) or else a string (tiny-random)",
    )
    nb.add_argument(
        "-r",
        "--raw-parameter",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        help="as -p, VALUE always a string (paths)",
    )
    nb.add_argument(
        "--sizes",
        choices=sorted(NOTEBOOK_SIZES),
        default=None,
        help="tiny: tiny sizes (seconds per notebook, meaningless numbers); -p wins over it",
    )
    nb.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "notebooks",
        help="folder to write the executed notebooks to (default: notebooks/ in place)",
    )
    nb.add_argument(
        "--timeout",
        type=_positive_int,
        default=None,
        help="seconds each cell may run before its notebook fails naming the cell (default: "
        f"{NOTEBOOK_CELL_TIMEOUT[None]}, {NOTEBOOK_CELL_TIMEOUT['tiny']} with --sizes tiny)",
    )
    nb.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write into the checkout from a tree with uncommitted changes (development; the "
        "notebooks then print dirty True)",
    )
    nb.add_argument(
        "--dry-run", action="store_true", help="print each notebook's parameters and stop"
    )


def run(args: argparse.Namespace) -> int:
    from ..teaching.notebooks import main as notebooks_main

    return notebooks_main(args)
