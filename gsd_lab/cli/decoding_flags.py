"""The decoding flags (``--method``, ``--window``, ``--preset``, ``--residual``, ``--draft``,
``--verifier``, every acceptance rule's flags, ``--candidates``, ``--runner``) of ``generate``
and evaluate``, their checks, and the ``DecodingMethod`` / ``MethodSpec`` they name (the
rule's flags become one acceptance spec in one place: ``acceptance.acceptance_from_flags``)."""

from __future__ import annotations

import argparse
from typing import Any

from ..decode.acceptance import DEFAULT_CLUSTERS, acceptance_from_flags, command_line_flags
from ..decode.methods import DRAFTS, KINDS, RESIDUALS, VERIFIERS, DecodingMethod
from .common import PRESET_CHOICES, PRESET_WINDOWS, Fail
from .model_flags import add_model_args


def add_method_args(parser: argparse.ArgumentParser) -> None:
    """The decoding flags: the method's own (kind, window, preset, residual, drafting) and every
    registered acceptance rule's (``decode.acceptance.command_line_flags``)."""
    group = parser.add_argument_group("decoding")
    group.add_argument("--method", choices=KINDS, default="gsd")
    group.add_argument(
        "--residual",
        choices=RESIDUALS,
        default="token",
        help="resampling after a rejection (cluster: cluster-exact, --clusters rank-binned only)",
    )
    group.add_argument(
        "--window",
        type=int,
        default=None,
        help="Jacobi window: drafts per forward L >= 1 (default 16; the release preset: 15)",
    )
    add_preset_arg(group)
    group.add_argument(
        "--draft",
        choices=DRAFTS,
        default=DRAFTS[0],
        help="how the Jacobi re-drafts are drawn: independent (SJD, GSD), or coupled to the "
        "previous draft (maximal or gumbel: MC-SJD / SCD, lossless for SJD; not for --method ar)",
    )
    group.add_argument(
        "--verifier",
        choices=VERIFIERS,
        default=VERIFIERS[0],
        help="how a window is verified: token (left to right) or block (the accepted prefix "
        "decided jointly, Sun et al. 2024; lossless; --method sjd with --draft independent only)",
    )
    for flag in command_line_flags():
        group.add_argument(
            flag.name, type=flag.type, default=flag.default, choices=flag.choices, help=flag.help
        )
    group.add_argument(
        "--candidates",
        type=int,
        default=1,
        help="k candidates for the first undecided position, verified by recursive rejection "
        "sampling in one tree forward (--method sjd, eager runner, batch size 1; lossless, "
        "proofs/15)",
    )
    group.add_argument(
        "--tree",
        type=int,
        nargs="+",
        default=None,
        help="a token tree: K1 K2 ... candidates per depth of the window, verified by recursive "
        "rejection at every node (--method sjd, eager runner, batch size 1; lossless, proofs/16)",
    )
    group.add_argument(
        "--side-tail",
        type=int,
        default=None,
        help="with --tree or --candidates: a spine tree, each extra candidate over a chain of at "
        "most this many window drafts (default: the level tree; proofs/16)",
    )


def add_decoding_args(parser: argparse.ArgumentParser) -> None:
    """The model, decoding and runner flags (generate, evaluate)."""
    add_model_args(parser)
    add_method_args(parser)
    parser.add_argument(
        "--runner",
        choices=("eager", "static"),
        default="eager",
        help="where the forwards run (the same method either way): eager (dynamic KV cache) "
        "or static (static cache, fixed window shapes, CUDA graphs on a GPU; "
        "docs/lumina-mgpt.md)",
    )
    parser.add_argument(
        "--engine",
        choices=("eager", "static"),
        dest="runner",
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )  # the former --runner


def add_preset_arg(group: Any) -> None:
    group.add_argument(
        "--preset",
        choices=PRESET_CHOICES,
        default="default",
        help="default: the package's own exact variant; release: the GSD release's settings (15 "
        "drafts, Jacobi between generated positions 3 and side^2+side-10, random drafts at "
        "row ends, the bf16 distance filter, CLIP on images resized to 299 px) to set numbers "
        "beside the paper's (docs/lumina-mgpt.md)",
    )


def _check_method_args(args: argparse.Namespace, fail: Fail) -> None:
    """The window and preset, then the acceptance rule of the flags (``args.acceptance``: each
    rule's ``ValueError`` a usage error naming its flag), then the residual."""
    fixed = PRESET_WINDOWS.get(args.preset)
    if args.window is not None and fixed is not None and args.window != fixed:
        fail(
            f"--preset {args.preset} fixes the window at {fixed} drafts (the release's "
            f"16-token input); leave --window out (got {args.window})"
        )
    args.window = args.window if args.window is not None else (fixed or 16)
    if args.window < 1:
        fail(f"--window must be >= 1, got {args.window}")
    try:
        args.acceptance = acceptance_from_flags(vars(args), args.method, args.residual)
    except ValueError as error:
        fail(str(error))
    if args.residual == "cluster" and not args.acceptance.is_partition:
        if args.method != "gsd":
            fail("--residual cluster applies to --method gsd --clusters rank-binned only")
        fail(
            "--residual cluster needs --clusters rank-binned "
            f"(--clusters {args.clusters or DEFAULT_CLUSTERS} is not a partition)"
        )


def check_decoding(args: argparse.Namespace, fail: Fail) -> None:
    """The decoding flags (``_check_method_args``), then ``args.decoding_method`` and --seed."""
    _check_method_args(args, fail)
    try:
        args.decoding_method = decoding_method(args)
    except ValueError as error:
        fail(str(error))
    if args.seed < 0:
        fail(f"--seed must be >= 0, got {args.seed}")


def decoding_method(args: argparse.Namespace) -> DecodingMethod:
    """The ``DecodingMethod`` of the flags (``_check_method_args`` ran), with the model's
    default GSD filters filled in (``FilterSettings.for_model``)."""
    return DecodingMethod(
        args.method,
        window=args.window,
        draft=args.draft,
        verifier=getattr(args, "verifier", "token"),
        residual=args.residual,
        preset=args.preset,
        acceptance=args.acceptance,
        candidates=args.candidates,
        tree=getattr(args, "tree", None),
        side_tail=getattr(args, "side_tail", None),
    ).for_model(args.model)


def method_spec(args: argparse.Namespace):
    """The ``MethodSpec`` of checked arguments (``check_decoding`` ran)."""
    from ..experiments.runs import MethodSpec

    method = args.decoding_method
    clusters = getattr(method.acceptance, "inner", method.acceptance)  # inside any Amplify
    label = (
        f"GSD ({clusters.clusters}, G={clusters.group_size})"
        if method.kind == "gsd"
        else method.kind.upper()
    )
    return MethodSpec(label, method)
