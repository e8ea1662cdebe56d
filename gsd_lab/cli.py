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

Every flag is checked before a model loads (``check_args``): a bad value, a flag that does not
apply (e.g. ``--group-size`` without ``--method gsd``), a missing file or an output path that
cannot be written ends with argparse's usage message, the flag named, and exit status 2, never
a traceback. Errors found once the model is loaded (an unknown class, a bad checkpoint) exit 2
the same way, before anything is generated.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, NoReturn

from .decode.acceptance import DEFAULT_CLUSTERS, acceptance_from_flags, command_line_flags
from .decode.methods import DRAFTS, KINDS, RESIDUALS, VERIFIERS, DecodingMethod
from .teaching.notebooks import CELL_TIMEOUT as NOTEBOOK_CELL_TIMEOUT
from .teaching.notebooks import SIZES as NOTEBOOK_SIZES

# gsd_lab.models.MODEL_NAMES + ("tiny-random",) and FAMILY_LOADERS (FAMILY_CHOICES: also the
# families of gsd_lab.checks.families.MODEL_TYPES), spelled out so that parsing and checking the
# flags imports no torch. Tests keep them in sync.
FAMILY_CHOICES = ("anole-7b", "emu3-gen")
MODEL_CHOICES = (
    "standin",
    "lumina-mgpt-7b-512",
    "lumina-mgpt-7b-768",
    "lumina-mgpt-7b-1024",
    *FAMILY_CHOICES,
    "janus-pro-1b",
    "janus-pro-7b",
    "tiny-random",
)
PRESET_WINDOWS = {"release": 15}  # decode.presets.PRESETS[...].window (a test keeps them in sync)


def _add_model_args(parser: argparse.ArgumentParser) -> None:
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


def _add_method_args(parser: argparse.ArgumentParser) -> None:
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
    _add_preset_arg(group)
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


def _add_batching_args(parser: argparse.ArgumentParser) -> None:
    """--batch-size and --workers (figures, evaluate)."""
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="images decoded together, one forward per step for all; the same tokens and NFE, "
        "wall times become each image's share (default: per device, 8 on a CPU and on a GPU: "
        "gsd_lab.models.batched.default_batch_size)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes the decoding is split over, one thread each (1: this process, one "
        "thread too), so that other jobs on the same cores slow it in proportion instead of "
        "stalling it; the same records for any number (default: the usable cores on a CPU, "
        "shared among torchrun's ranks; 1 on a GPU: gsd_lab.experiments.workers; figures "
        "--paper: refused, torchrun shares its streamed run)",
    )


def _add_decoding_args(parser: argparse.ArgumentParser) -> None:
    """The model, decoding and runner flags (generate, evaluate)."""
    _add_model_args(parser)
    _add_method_args(parser)
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


PRESET_CHOICES = ("default", "release")  # decode.presets.PRESETS, spelled out (no torch import)


def _add_preset_arg(group: Any) -> None:
    group.add_argument(
        "--preset",
        choices=PRESET_CHOICES,
        default="default",
        help="default: the package's own exact variant; release: the GSD release's settings (15 "
        "drafts, Jacobi between generated positions 3 and side^2+side-10, random drafts at "
        "row ends, the bf16 distance filter, CLIP on images resized to 299 px) to set numbers "
        "beside the paper's (docs/lumina-mgpt.md)",
    )


def _add_generate_parser(sub: Any) -> None:
    """``generate``: one image, its NFE, acceptance and time."""
    gen = sub.add_parser("generate", help="generate one image and report nfe, acceptance, time")
    _add_decoding_args(gen)
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


def _add_figures_parser(sub: Any) -> None:
    """``figures``: every figure and results.md."""
    fig = sub.add_parser("figures", help="regenerate every figure and results.md")
    _add_model_args(fig)
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
    _add_preset_arg(fig)
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
    _add_batching_args(fig)
    fig.add_argument("--no-progress", action="store_true")
    fig.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write into the repository from a tree with uncommitted changes (development; "
        "the outputs then say dirty)",
    )


def _add_evaluate_parser(sub: Any) -> None:
    """``evaluate``: a sharded, resumable evaluation."""
    ev = sub.add_parser(
        "evaluate",
        help="sharded, resumable evaluation over a prompt file (use torchrun)",
        description="Sharded, resumable evaluation: prompt i runs on rank i mod N with seed "
        "seed + i; one result file per prompt; rank 0 merges summary.json.",
    )
    _add_decoding_args(ev)
    ev.add_argument(
        "--prompts", type=Path, required=True, help="prompt file (one per line or PartiPrompts TSV)"
    )
    ev.add_argument(
        "--out",
        type=Path,
        required=True,
        help="results folder. A re-run with the same model, weights, decoding flags, seed and "
        "prompt file resumes (finished prompts are skipped, any number of processes); anything "
        "else is refused, naming what differs: use a new folder for a new configuration",
    )
    ev.add_argument("--seed", type=int, default=0, help="base seed >= 0: prompt i uses seed + i")
    _add_batching_args(ev)
    ev.add_argument("--no-images", action="store_true", help="do not save images")
    ev.add_argument("--no-progress", action="store_true")


def _positive_int(text: str) -> int:
    """``text`` as an integer >= 1 (argparse's type: anything else exits 2 naming the flag)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _add_notebooks_parser(sub: Any) -> None:
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
        default=Path(__file__).resolve().parent.parent / "notebooks",
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


def _add_check_weights_parser(sub: Any) -> None:
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
        choices=("lumina-mgpt", *FAMILY_CHOICES),
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


def _add_readme_parser(sub: Any) -> None:
    """``readme``: the README's findings from results.json."""
    rd = sub.add_parser(
        "readme",
        help="README's findings, docs/claims.md and every value span from results.json",
        description="Render the README's findings box and table, the claims "
        "ledger (docs/claims.md) and the value spans of README, docs, proofs and notebook "
        "markdown (gsd_lab.io.prose) from a figures run's results.json; "
        "--check exits 1 if any differs.",
    )
    rd.add_argument(
        "--results", type=Path, default=None, help="default: the repository's figures/results.json"
    )
    rd.add_argument("--check", action="store_true", help="compare only; write nothing")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gsd_lab", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_generate_parser(sub)
    _add_figures_parser(sub)
    _add_evaluate_parser(sub)
    _add_notebooks_parser(sub)
    _add_check_weights_parser(sub)
    _add_readme_parser(sub)
    for command, command_parser in sub.choices.items():
        command_parser.set_defaults(command_parser=command_parser)
    return parser


Fail = Callable[[str], NoReturn]


def _is_lumina(args: argparse.Namespace) -> bool:
    return args.model.startswith("lumina")


def _is_janus(args: argparse.Namespace) -> bool:
    return args.model.startswith("janus")


def _takes_text(args: argparse.Namespace) -> bool:
    """Whether the model's prompts are text (Lumina-mGPT, the families, Janus-Pro), not classes."""
    return _is_lumina(args) or args.model in FAMILY_CHOICES or _is_janus(args)


def _check_family_args(args: argparse.Namespace, fail: Fail) -> None:
    """--weights (a folder with config.json and tokenizer.json, or --tokenizer), --vqgan (Anole
    only: Emu3 decodes with its own VQ-VAE) and --clip of a FAMILY_CHOICES model."""
    if not args.weights:
        fail(f"--model {args.model} needs --weights DIR (the checkpoint folder)")
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
        from .models.chameleon_vqgan import find_vqgan_files

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


def _writable_folder_problem(folder: Path) -> str | None:
    """Why files cannot be created in ``folder`` (made if missing) (None when they can): the
    nearest existing ancestor must be a folder in which a file can be created (tried for real:
    permission bits say nothing for root or on read-only mounts)."""
    existing = folder
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent  # exists() is False below a file too (ENOTDIR)
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        handle, probe = tempfile.mkstemp(dir=existing, prefix=".gsd-write-check-")
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        return f"cannot write in {existing} ({error.strerror or error})"
    return None


def _check_output_file(path: Path, fail: Fail) -> None:
    """--out of generate: an image file whose folder can be written."""
    from PIL import Image

    if path.is_dir():
        fail(f"--out {path} is a folder; give an image file name such as {path / 'image.png'}")
    image_format = Image.registered_extensions().get(path.suffix.lower())
    if image_format is None or image_format not in Image.SAVE:
        fail(f"--out {path}: unknown image extension {path.suffix!r}; use .png")
    if path.exists() and not os.access(path, os.W_OK):
        fail(f"--out {path}: the file exists and is not writable")
    if problem := _writable_folder_problem(path.parent):
        fail(f"--out {path}: {problem}")


def _check_output_folder(path: Path, fail: Fail) -> None:
    """--out of figures / evaluate: a folder (made if missing) that can be written."""
    if path.exists() and not path.is_dir():
        fail(f"--out {path} is a file; this command writes a folder")
    if problem := _writable_folder_problem(path):
        fail(f"--out {path}: {problem}")


def _check_model_args(args: argparse.Namespace, fail: Fail) -> None:
    if args.threads is not None and args.threads < 1:
        fail(f"--threads must be >= 1, got {args.threads}")
    if args.top_k is not None and args.top_k < 1:
        fail(f"--top-k must be >= 1 (leave it out for the model's default), got {args.top_k}")
    if args.cfg is not None and not math.isfinite(args.cfg):
        fail(f"--cfg must be a finite number, got {args.cfg}")
    if args.device is not None and (problem := _device_problem(args.device)):
        fail(problem)
    if args.model in FAMILY_CHOICES:
        _check_family_args(args, fail)
        return
    if _is_lumina(args):
        if not args.weights:
            fail(f"--model {args.model} needs --weights DIR (the checkpoint folder)")
        from .models.lumina_checkpoint import resolve_weights_dir
        from .models.lumina_tokenizer import find_tokenizer_file

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
    if _is_janus(args):
        _check_janus_args(args, fail)
        return
    for flag, value in (
        ("--vqgan", args.vqgan),
        ("--clip", args.clip),
        ("--tokenizer", args.tokenizer),
    ):
        if value is not None:
            fail(f"{flag} applies to the Lumina-mGPT models only, not --model {args.model}")
    if args.weights is not None:
        if args.model != "standin":
            fail(f"--weights does not apply to --model {args.model}")
        if not Path(args.weights).expanduser().is_dir():
            fail(f"--weights {args.weights} is not a folder (the stand-in's weights folder)")


def _check_janus_args(args: argparse.Namespace, fail: Fail) -> None:
    """Janus-Pro: --weights (the transformers conversion's folder) needed; --tokenizer optional;
    --vqgan and --clip do not apply (pixels come from the checkpoint's own VQ model)."""
    if not args.weights:
        fail(f"--model {args.model} needs --weights DIR (the checkpoint folder)")
    from .models.janus import resolve_janus_dir

    try:
        resolve_janus_dir(args.weights, args.model)
    except FileNotFoundError as error:
        fail(f"--weights {args.weights}: {error}")
    for flag, value in (("--vqgan", args.vqgan), ("--clip", args.clip)):
        if value is not None:
            fail(f"{flag} does not apply to --model {args.model} (its own VQ model decodes)")


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


def _check_one_image_at_a_time(args: argparse.Namespace, fail: Fail) -> None:
    """``--verifier block`` and ``--candidates k > 1`` are decoded one image at a time by
    ``decode.loop.generate`` (``decode.batch.generate_batch`` refuses both; candidates > 1 on
    the eager runner only): refused here, before the model loads. ``evaluate`` decodes with
    ``generate`` only at ``--batch-size 1`` (its default is batched:
    ``models.batched.default_batch_size``); ``figures`` has no such flags."""
    one_at_a_time = [
        flag
        for flag, given in (
            ("--verifier block", getattr(args, "verifier", "token") != "token"),
            (f"--candidates {getattr(args, 'candidates', 1)}", getattr(args, "candidates", 1) > 1),
            ("--tree", getattr(args, "tree", None) is not None),
        )
        if given
    ]
    if not one_at_a_time:
        return
    if args.batch_size != 1:
        fail(
            f"{one_at_a_time[0]} decodes one image at a time: {args.command} needs --batch-size 1 "
            f"(got {args.batch_size if args.batch_size is not None else 'the default, batched'})"
        )
    if getattr(args, "candidates", 1) > 1 and getattr(args, "runner", "eager") != "eager":
        fail(f"--candidates {args.candidates} runs on --runner eager only (no tree forward)")
    if getattr(args, "tree", None) is not None and getattr(args, "runner", "eager") != "eager":
        fail("--tree runs on --runner eager only (no tree forward)")


def check_args(args: argparse.Namespace, fail: Fail) -> None:
    """Check every flag of ``args`` before any model loads; ``fail(message)`` (argparse's
    ``parser.error``: usage, message, exit 2) on the first problem. Sets ``args.acceptance``
    (the rule of the flags; --method gsd: --group-size 25, --clusters dynamic unless given) and
    ``args.decoding_method``. Reads --prompts into
    ``args.prompt_list`` (figures, evaluate)."""
    _check_model_args(args, fail)
    if args.command in ("generate", "evaluate"):
        _check_method_args(args, fail)
        try:
            args.decoding_method = _method(args)
        except ValueError as error:
            fail(str(error))
        if args.seed < 0:
            fail(f"--seed must be >= 0, got {args.seed}")
    if args.command == "generate":
        if _takes_text(args):
            if args.class_ is not None:
                fail(
                    f"--class is for the stand-in and tiny-random; --model {args.model} takes "
                    '--prompt "..."'
                )
            if not (args.prompt or "").strip():
                fail(f'--model {args.model} needs --prompt "..." (a non-empty text prompt)')
            if args.out is not None and args.vqgan is None and (
                _is_lumina(args) or args.model == "anole-7b"
            ):
                fail(
                    f"--out needs pixels: --model {args.model} "
                    "decodes tokens to pixels with --vqgan DIR"
                )
        elif args.prompt is not None:
            fail(f"--prompt is for text-prompted models; --model {args.model} takes --class")
        if args.out is not None:
            _check_output_file(args.out, fail)
    if args.command == "figures":
        if args.quick and args.paper:
            fail("--quick and --paper exclude each other")
        for flag, value in (
            ("--save-images", args.save_images),
            ("--dry-run", args.dry_run),
            ("--forward-ms", args.forward_ms is not None),
        ):
            if value and not args.paper:
                fail(f"{flag} applies to --paper only")
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
    if args.command in ("figures", "evaluate"):
        if args.batch_size is not None and args.batch_size < 1:
            fail(f"--batch-size must be >= 1, got {args.batch_size}")
        if getattr(args, "workers", None) is not None and args.workers < 1:
            fail(f"--workers must be >= 1, got {args.workers}")
        _check_one_image_at_a_time(args, fail)
        from .io.prompts import read_prompts

        args.prompt_list = None
        if args.prompts is not None:
            try:
                args.prompt_list = read_prompts(args.prompts)
            except (OSError, ValueError) as error:
                fail(f"--prompts {args.prompts}: {error}")
        _check_output_folder(args.out, fail)


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


def _load(args: argparse.Namespace):
    from .experiments.image_model import load_image_model

    if _quick_generate(args):
        return load_image_model(
            args.model, weights=args.weights, cfg_scale=args.cfg, top_k=args.top_k, quick=True
        )
    from .decode.presets import preset

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


def _method(args: argparse.Namespace) -> DecodingMethod:
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
    ).for_model(args.model)


def _spec(args: argparse.Namespace):
    """The ``MethodSpec`` of checked arguments (``check_args`` ran)."""
    from .experiments.runs import MethodSpec

    method = args.decoding_method
    label = (
        f"GSD ({method.clusters}, G={method.group_size})"
        if method.kind == "gsd"
        else method.kind.upper()
    )
    return MethodSpec(label, method)


def _partial_identity(args: argparse.Namespace) -> dict[str, Any]:
    """The part of the run identity known before the model loads (checked early, so that a
    mismatching re-run fails before minutes of loading)."""
    decoding: dict[str, Any] = {"method": args.decoding_method.to_dict()}
    if args.cfg is not None:
        decoding["cfg_scale"] = float(args.cfg)
    if args.top_k is not None:
        decoding["top_k"] = args.top_k
    return {"model": args.model, "decoding": decoding, "seed": args.seed}


def run_identity(args: argparse.Namespace, model: Any, spec: Any) -> dict[str, Any]:
    """What an evaluation's results depend on besides the prompts: the model name, a
    fingerprint of its weights (``gsd_lab.evaluate.weights_fingerprint``), the full decoding
    spec (method, clusters, G, residual, acceptance scale, window; the adapter's CFG scale,
    top-k and temperature as resolved; GSD's filter settings) and the base seed."""
    from .evaluate import weights_fingerprint
    from .experiments.runs import decoding_identity

    identity = {
        "model": model.name,
        "weights": weights_fingerprint(model.weights_info, model.adapter.model),
        "decoding": decoding_identity(model, spec),
        "seed": args.seed,
    }
    if model.quality_config:  # e.g. the CLIP resize: it changes the scores
        identity["quality"] = model.quality_config
    return identity


def _check_prompt(model: Any, prompt: str, flag: str, fail: Fail) -> None:
    """Encode ``prompt`` once (after loading, before generating) so a bad class or prompt
    fails with the flag named instead of after minutes of decoding."""
    try:
        model.encode(prompt)
    except (ValueError, KeyError, IndexError) as error:
        fail(f"{flag} {prompt!r}: {error}")


def cmd_generate(args: argparse.Namespace) -> int:
    from .experiments.runs import Recording, generate_one, resolve_for
    from .io.figure_io import save_image_atomic

    fail = args.command_parser.error
    spec = _spec(args)
    model = _load(args)
    prompt = (
        args.prompt
        if _takes_text(args)
        else (args.class_ if args.class_ is not None else model.default_prompts[0])
    )
    _check_prompt(model, prompt, "--prompt" if _takes_text(args) else "--class", fail)
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
    report = {
        "model": model.name,
        "method": method.kind,
        "prompt": prompt,
        "seed": args.seed,
        "group_size": method.group_size if method.kind == "gsd" else None,
        "clusters": method.clusters,
        "residual": method.residual,
        "window": method.window,
        "acceptance_scale": method.acceptance_scale,
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
    if method.acceptance.legacy_fields() is None:  # a rule with no flat fields: its spec
        report["acceptance"] = method.acceptance.to_dict()
    if method.relaxation_delta:
        report["relaxation_delta"] = method.relaxation_delta
    if method.candidates > 1:
        report.update(candidates=method.candidates, tokens_processed=result.tokens_processed)
    if method.tree is not None:
        report.update(tree=list(method.tree), tokens_processed=result.tokens_processed)
    if method.transport_eps is not None:
        report.update(transport_eps=method.transport_eps, transport_k=method.transport_k)
    if method.budget is not None:
        if method.budget_measure == "w1":
            report["transport_k"] = method.transport_k
        report.update(
            budget=method.budget,
            budget_measure=method.budget_measure,
            budget_policy=method.budget_policy,
            budget_cap=method.budget_cap,
            budget_spent=result.budget_spent,
        )
    if args.json:
        print(json.dumps(report))
    else:
        rate = "n/a (AR)" if result.acceptance_rate is None else f"{result.acceptance_rate:.3f}"
        print(
            f"{model.name} {spec.label}: {report['num_tokens']} tokens, nfe {result.nfe}, "
            f"acceptance rate {rate}, wall {result.wall_seconds:.2f} s"
            + (
                f", certified {method.budget_measure.upper()} {result.budget_spent:.4f} of "
                f"{method.budget:g}"
                if method.budget is not None
                else ""
            )
            + (f", image {args.out}" if args.out else "")
        )
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    from .experiments.stream import context_from_environment
    from .figures import FigureSizes, paper_plan, run_figures

    sizes = (
        FigureSizes.quick()
        if args.quick
        else FigureSizes.paper()
        if args.paper
        else FigureSizes.default()
    )
    if args.paper and args.device in (None, "cuda"):
        # One device per torchrun process (LOCAL_RANK), as evaluate does.
        context = context_from_environment()
        if context.world_size > 1:
            import torch

            if torch.cuda.is_available():
                args.device = f"cuda:{context.local_rank}"
    model = _load(args)
    for index, prompt in enumerate(args.prompt_list or []):
        _check_prompt(
            model, prompt, f"--prompts {args.prompts}: prompt {index}", args.command_parser.error
        )
    if args.dry_run:
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
    if args.threads is None and not sizes.streamed and str(model.adapter.device) == "cpu":
        import torch

        # The workers decode with one thread each (experiments.workers; workers=1 in this
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


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .evaluate import BatchedWork, check_run, evaluate, init_distributed
    from .experiments.runs import Recording, RunItem, decode_items, resolve_for
    from .experiments.stream import CHUNK_BATCHES
    from .experiments.workers import default_workers
    from .models.batched import default_batch_size
    from .io.figure_io import save_image_atomic
    from .io.provenance import git_commit, package_versions

    fail = args.command_parser.error
    prompts = args.prompt_list
    spec = _spec(args)
    try:  # before loading: another configuration or prompt list in --out fails now
        check_run(args.out, _partial_identity(args), prompts, partial=True)
    except ValueError as error:
        fail(str(error))
    # The stand-in runs on the CPU unless told otherwise; Lumina-mGPT takes cuda:LOCAL_RANK.
    context = init_distributed(args.device or (None if _takes_text(args) else "cpu"))
    args.device = context.device
    model = _load(args)
    for index, prompt in enumerate(prompts):
        _check_prompt(model, prompt, f"--prompts {args.prompts}: prompt {index}", fail)
    resolved = resolve_for(model, spec.method)
    image_dir = args.out / "images"

    batch_size = args.batch_size or default_batch_size(context.device)
    recording = Recording(batch_size=batch_size, runner=args.runner)

    def row_of(index: int, prompt: str, record: Any) -> dict[str, Any]:
        row: dict[str, Any] = {
            "seed": args.seed + index,
            "nfe": record.nfe,
            "acceptance_rate": record.acceptance_rate,
            "wall_seconds": record.wall_seconds,
            "model_seconds": record.model_seconds,
            "tokens": record.tokens.tolist(),
            "device": str(context.device),
        }
        if record.image is not None:
            if model.condition_scores is not None:
                row["condition_score"] = float(model.condition_scores([record.image], [prompt])[0])
            if not args.no_images:
                row["image"] = save_image_atomic(record.image, image_dir / f"{index:06d}.png")
        return row

    def work(items: list[tuple[int, str]], write: Callable[[int, dict], None]) -> None:
        # prompt i's generator is seeded seed + i (the module docstring of evaluate)
        runs = [RunItem(spec.label, resolved, prompt, args.seed + i) for i, prompt in items]

        def finished(position: int, record: Any) -> None:
            index, prompt = items[position]
            write(index, row_of(index, prompt, record))
            record.image = None  # host memory: pixels only until the row is written

        decode_items(model, runs, recording, on_record=finished)

    identity = run_identity(args, model, spec)
    if model.adapter.device.type != "cpu":
        # On a GPU, batched and static forwards round differently from batch 1 eager, so the
        # tokens can depend on them: a resumed run must keep both (on a CPU in float64 they are
        # the same tokens, tested).
        identity["rounding"] = {"runner": args.runner, "batch_size": batch_size}
    config = {
        "label": spec.label,
        "world_size": context.world_size,
        "device": str(context.device),
        "runner": args.runner,
        "batch_size": batch_size,
    }
    if model.condition_scores is not None:  # what the rows' condition_score is (e.g. CLIP score)
        config["condition_score"] = " ".join(
            model.quality_names.get("condition_score", "condition score").split()
        )
    metadata = {
        "weights_info": model.weights_info,
        "git": git_commit(),
        "versions": package_versions(),
        "prompts_file": str(args.prompts),
    }
    summary = evaluate(
        prompts,
        args.out,
        BatchedWork(work, 1 if batch_size == 1 else CHUNK_BATCHES * batch_size),
        context,
        identity=identity,
        config=config,
        metadata=metadata,
        progress=not args.no_progress,
        # torchrun's ranks share the cores: by default each rank takes its share of them.
        workers=max(1, default_workers(context.device) // context.world_size)
        if args.workers is None
        else args.workers,
    )
    if summary is not None:
        print(json.dumps({k: summary[k] for k in ("num_prompts", "finished", "complete", "mean")}))
    return 0


def cmd_readme(args: argparse.Namespace) -> int:
    """README's findings block and docs/claims.md from results.json (``experiments.findings``)."""
    from .experiments import findings, ledger

    from .io import prose

    results = ledger.load_results(args.results or ledger.RESULTS)
    if not args.check:
        for path in findings.update_repository(results):
            print(f"wrote {path}")
        for path in prose.update_documents(results):  # value spans in README, docs, proofs
            print(f"wrote {path}")
        return 0
    stale = findings.stale_outputs(results)
    stale += [str(p.relative_to(prose.REPO)) for p in prose.stale_documents(results)]
    for name in stale:
        print(f"{name} differs from the rendering of the results (python -m gsd_lab readme)")
    return 1 if stale else 0


COMMANDS = {"generate": cmd_generate, "figures": cmd_figures, "evaluate": cmd_evaluate}


def main(argv: list[str] | None = None) -> int:
    """Parse, check every flag (``check_args``), then run the command. Usage errors and bad
    input found later (ValueError, FileNotFoundError, ``RunMismatch``) exit 2 through argparse's
    ``error`` (usage line, message, no traceback)."""
    args = build_parser().parse_args(argv)
    fail = args.command_parser.error
    if args.command == "notebooks":
        from .teaching.notebooks import main as notebooks_main

        return notebooks_main(args)
    if args.command == "readme":
        return cmd_readme(args)
    if args.command == "check-weights":
        if args.rows < 1:
            fail(f"--rows must be >= 1, got {args.rows}")
        from .checks.command import main as check_weights_main

        return check_weights_main(args)
    check_args(args, fail)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        return COMMANDS[args.command](args)
    except (ValueError, FileNotFoundError) as error:
        fail(str(error))


if __name__ == "__main__":
    sys.exit(main())
