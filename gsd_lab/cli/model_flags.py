"""The model flags (``--model``, ``--weights``, ``--vqgan``, ``--clip``, ``--tokenizer``,
``--device``, ``--cfg``, ``--top-k``, ``--threads``), their checks before anything loads, and
the load itself (``experiments.image_model.load_image_model``)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from .common import FAMILY_CHOICES, MODEL_CHOICES, Fail, refuse_given


def add_model_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument(
        "--model",
        default="standin",
        choices=MODEL_CHOICES,
        help="model to decode with (default: the embedded stand-in)",
    )
    group.add_argument(
        "--weights",
        help="Lumina-mGPT or Janus-Pro checkpoint folder (or Hugging Face cache); "
        "for the stand-in: another weights folder",
    )
    group.add_argument(
        "--vqgan", help="folder with the Chameleon VQGAN's vqgan.yaml and vqgan.ckpt (Lumina-mGPT)"
    )
    group.add_argument("--clip", help="local CLIP model folder for CLIP scores (Lumina-mGPT)")
    group.add_argument(
        "--tokenizer",
        help="folder holding tokenizer.json, or the file (Lumina-mGPT; default: the "
        "checkpoint's, else the Lumina-mGPT-7B-768 tokenizer next to it)",
    )
    group.add_argument(
        "--device", help="cpu, cuda, cuda:1, ... (default: cuda if available for Lumina-mGPT)"
    )
    group.add_argument(
        "--cfg", type=float, default=None, help="classifier-free guidance scale (model default)"
    )
    group.add_argument(
        "--top-k",
        type=int,
        default=None,
        help="top-k of the sampling distribution, >= 1 (model default)",
    )
    group.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads, >= 1 (default: torch's, every core; the float64 stand-in's "
        "tokens and NFE do not depend on it; on cores busy with other jobs, 1: "
        "docs/benchmarks.md)",
    )


def is_lumina(args: argparse.Namespace) -> bool:
    return args.model.startswith("lumina")


def is_janus(args: argparse.Namespace) -> bool:
    return args.model.startswith("janus")


def takes_text(args: argparse.Namespace) -> bool:
    """Whether the model's prompts are text (Lumina-mGPT, the families, Janus-Pro), not classes."""
    return is_lumina(args) or args.model in FAMILY_CHOICES or is_janus(args)


def _check_family_args(args: argparse.Namespace, fail: Fail) -> None:
    """--weights (a folder with config.json and tokenizer.json, or --tokenizer), --vqgan (Anole
    only: Emu3 decodes with its own VQ-VAE) and --clip of a FAMILY_CHOICES model."""
    folder = Path(args.weights).expanduser()
    if not (folder / "config.json").is_file():
        fail(f"--weights {args.weights}: no config.json there (docs/family-*.md: the download)")
    tokenizer = Path(args.tokenizer).expanduser() if args.tokenizer else folder
    if not (tokenizer.is_file() or (tokenizer / "tokenizer.json").is_file()):
        fail(f"no tokenizer.json in {tokenizer} (pass --tokenizer DIR)")
    if args.vqgan is not None and args.model == "emu3-gen":
        fail("--vqgan does not apply to --model emu3-gen (it decodes with its own VQ-VAE)")
    _check_vqgan_clip(args, fail)


def _check_vqgan_clip(args: argparse.Namespace, fail: Fail) -> None:
    """--vqgan: a folder where ``find_vqgan_files`` finds the VQGAN; --clip: a local CLIP folder."""
    if args.vqgan is not None:
        from ..models.chameleon_vqgan import find_vqgan_files

        try:
            find_vqgan_files(args.vqgan)
        except FileNotFoundError as error:
            fail(f"--vqgan {args.vqgan}: {error}")
    if args.clip is not None and not (Path(args.clip).expanduser() / "config.json").is_file():
        fail(
            f"--clip {args.clip}: no config.json there (a local CLIP model "
            "folder, e.g. a copy of openai/clip-vit-base-patch16)"
        )


def _device_problem(device: str) -> str | None:
    """Why ``--device`` cannot be used here (None when it can)."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        return f"--device {device!r} is not a device: use cpu, cuda or cuda:N"
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            return (
                f"--device {device}: CUDA is not available on this machine "
                "(torch.cuda.is_available() is False); use --device cpu"
            )
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            return f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)"
    elif parsed.type == "mps":
        if not torch.backends.mps.is_available():
            return f"--device {device}: MPS is not available on this machine"
    elif parsed.type != "cpu":
        return f"--device {device}: only cpu, cuda[:N] and mps are supported"
    return None


def check_model_args(args: argparse.Namespace, fail: Fail) -> None:
    """The model flags: numbers in range, a usable device, then the model's own (files found
    where they are needed, flags that do not apply refused)."""
    if args.threads is not None and args.threads < 1:
        fail(f"--threads must be >= 1, got {args.threads}")
    if args.top_k is not None and args.top_k < 1:
        fail(f"--top-k must be >= 1 (leave it out for the model's default), got {args.top_k}")
    if args.cfg is not None and not math.isfinite(args.cfg):
        fail(f"--cfg must be a finite number, got {args.cfg}")
    if args.device is not None and (problem := _device_problem(args.device)):
        fail(problem)
    if takes_text(args) and not args.weights:
        fail(f"--model {args.model} needs --weights DIR (the checkpoint folder)")
    if args.model in FAMILY_CHOICES:
        _check_family_args(args, fail)
        return
    if is_lumina(args):
        from ..models.lumina_checkpoint import resolve_weights_dir
        from ..models.lumina_tokenizer import find_tokenizer_file

        try:
            folder = resolve_weights_dir(args.weights, int(args.model.rsplit("-", 1)[1]))
        except FileNotFoundError as error:
            fail(f"--weights {args.weights}: {error}")
        _check_vqgan_clip(args, fail)
        try:
            find_tokenizer_file(folder, args.tokenizer)
        except FileNotFoundError as error:
            fail(str(error))
        return
    if is_janus(args):
        _check_janus_args(args, fail)
        return
    only = f"applies to the Lumina-mGPT models only, not --model {args.model}"
    given = {"--vqgan": args.vqgan, "--clip": args.clip, "--tokenizer": args.tokenizer}
    refuse_given(given, only, fail)
    if args.weights is not None:
        if args.model not in ("standin", "digits"):
            fail(f"--weights does not apply to --model {args.model}")
        if not Path(args.weights).expanduser().is_dir():
            fail(f"--weights {args.weights} is not a folder (the {args.model}'s weights folder)")


def _check_janus_args(args: argparse.Namespace, fail: Fail) -> None:
    """Janus-Pro: --weights (given: the transformers conversion's folder); --tokenizer optional;
    --vqgan and --clip do not apply (pixels come from the checkpoint's own VQ model)."""
    from ..models.janus import resolve_janus_dir

    try:
        resolve_janus_dir(args.weights, args.model)
    except FileNotFoundError as error:
        fail(f"--weights {args.weights}: {error}")
    why = f"does not apply to --model {args.model} (its own VQ model decodes)"
    refuse_given({"--vqgan": args.vqgan, "--clip": args.clip}, why, fail)


def _quick_generate(args: argparse.Namespace) -> bool:
    """Whether this run is a ``generate`` on the stand-in's CPU eager path, which loads quickly:
    the float64 forward without ``transformers`` (the same logits bit for bit), no quality
    metrics, the tokenizer only for --out (``load_image_model(quick=True)``)."""
    return (
        args.command == "generate"
        and args.model == "standin"
        and args.runner == "eager"
        and (args.device or "cpu") == "cpu"
    )


def load_model(args: argparse.Namespace):
    from ..experiments.image_model import load_image_model

    if _quick_generate(args):
        return load_image_model(
            args.model, weights=args.weights, cfg_scale=args.cfg, top_k=args.top_k, quick=True
        )
    from ..decode.presets import preset

    return load_image_model(
        args.model,
        weights=args.weights,
        vqgan=args.vqgan,
        clip=args.clip,
        device=args.device,
        cfg_scale=args.cfg,
        top_k=args.top_k,
        tokenizer=args.tokenizer,
        clip_resize=preset(getattr(args, "preset", "default")).clip_resize,
    )
