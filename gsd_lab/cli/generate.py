"""``generate``: one image by AR, SJD or GSD; prints nfe, acceptance rate and wall time (``--json``:
one JSON object with the method's fields and the tokens)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..decode.acceptance import BudgetAcceptance
from .common import USAGE_ERRORS  # noqa: F401 (cli.main reads it)
from .common import Fail, check_output_file, check_prompt
from .decoding_flags import add_decoding_args, check_decoding, method_spec
from .model_flags import check_model_args, is_lumina, load_model, takes_text


def add_parser(sub: Any) -> None:
    """``generate``: one image, its NFE, acceptance and time."""
    gen = sub.add_parser("generate", help="generate one image and report nfe, acceptance, time")
    add_decoding_args(gen)
    gen.add_argument(
        "--class",
        dest="class_",
        metavar="CLASS",
        default=None,
        help="stand-in / tiny-random class (index or name)",
    )
    gen.add_argument("--prompt", default=None, help="text prompt (Lumina-mGPT)")
    gen.add_argument("--seed", type=int, default=0, help="generator seed, >= 0")
    gen.add_argument(
        "--out",
        type=Path,
        default=None,
        help="save the image to this file (.png or another "
        "image extension; missing folders are made)",
    )
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def check(args: argparse.Namespace, fail: Fail) -> None:
    """The model and decoding flags, then the prompt (--class for the class-conditional models,
    --prompt for the text-prompted ones) and --out (an image file; pixels need a decoder)."""
    check_model_args(args, fail)
    check_decoding(args, fail)
    if takes_text(args):
        if args.class_ is not None:
            fail(
                f"--class is for the stand-in and tiny-random; --model {args.model} takes "
                '--prompt "..."'
            )
        if not (args.prompt or "").strip():
            fail(f'--model {args.model} needs --prompt "..." (a non-empty text prompt)')
        if args.out is not None and args.vqgan is None and (
            is_lumina(args) or args.model == "anole-7b"
        ):
            fail(
                f"--out needs pixels: --model {args.model} "
                "decodes tokens to pixels with --vqgan DIR"
            )
    elif args.prompt is not None:
        fail(f"--prompt is for text-prompted models; --model {args.model} takes --class")
    if args.out is not None:
        check_output_file(args.out, fail)


def run(args: argparse.Namespace) -> int:
    """Load, check the prompt, decode one image, print its report (and save it with --out)."""
    from ..experiments.runs import Recording, generate_one, resolve_for
    from ..io.figure_io import save_image_atomic

    fail = args.command_parser.error
    spec = method_spec(args)
    model = load_model(args)
    prompt = (
        args.prompt
        if takes_text(args)
        else (args.class_ if args.class_ is not None else model.default_prompts[0])
    )
    check_prompt(model, prompt, "--prompt" if takes_text(args) else "--class", fail)
    if args.out is not None and model.decode is None:
        fail(f"--out: --model {args.model} cannot decode tokens to pixels here")
    method = spec.method
    result, image = generate_one(
        model,
        resolve_for(model, method),
        prompt,
        args.seed,
        Recording(images=args.out is not None, runner=args.runner),
        progress=not args.json,
    )
    if args.out is not None:
        save_image_atomic(image, args.out)
    report = _report(args, model.name, method, prompt, result)
    if args.json:
        print(json.dumps(report))
    else:
        print(_summary_line(args, model.name, spec.label, method, result, report["num_tokens"]))
    return 0


def _report(args: argparse.Namespace, name: str, method: Any, prompt: str, result: Any) -> dict:
    """The ``--json`` object: the method's kind, acceptance rule (tagged,
    ``AcceptanceSpec.to_dict``) and fields, the run's counts and times, the tokens; the budget
    spent and the tokens processed only where they apply."""
    report = {
        "model": name,
        "method": method.kind,
        "prompt": prompt,
        "seed": args.seed,
        "acceptance": method.acceptance.to_dict(),
        "residual": method.residual,
        "window": method.window,
        "draft": method.draft,
        "preset": method.preset,
        **({} if method.verifier == "token" else {"verifier": method.verifier}),
        "runner": args.runner,
        "nfe": result.nfe,
        "acceptance_rate": result.acceptance_rate,
        "wall_seconds": result.wall_seconds,
        "model_seconds": result.model_seconds,
        "num_tokens": int(result.tokens.numel()),
        "tokens": result.tokens.tolist(),
        "image": None if args.out is None else str(args.out),
    }
    if method.candidates > 1:
        report.update(candidates=method.candidates, tokens_processed=result.tokens_processed)
    if method.tree is not None:
        report.update(tree=list(method.tree), tokens_processed=result.tokens_processed)
    if method.side_tail is not None:
        report.update(side_tail=method.side_tail)
    if isinstance(method.acceptance, BudgetAcceptance):
        report["budget_spent"] = result.budget_spent
    return report


def _summary_line(
    args: argparse.Namespace, name: str, label: str, method: Any, result: Any, num_tokens: int
) -> str:
    """The text report: tokens, NFE, acceptance rate, wall time (the certified budget spent and
    the image file where they apply)."""
    rate = "n/a (AR)" if result.acceptance_rate is None else f"{result.acceptance_rate:.3f}"
    dial = method.acceptance
    return (
        f"{name} {label}: {num_tokens} tokens, nfe {result.nfe}, "
        f"acceptance rate {rate}, wall {result.wall_seconds:.2f} s"
        + (
            f", certified {dial.measure.upper()} {result.budget_spent:.4f} of {dial.budget:g}"
            if isinstance(dial, BudgetAcceptance)
            else ""
        )
        + (f", image {args.out}" if args.out else "")
    )
