"""What the commands share: the model choices (spelled out, so that parsing imports no torch),
the ``Fail`` callback (argparse's ``parser.error``), ``refuse_given`` (flags that do not apply),
the output-path and prompt checks, and the batching flags of ``figures`` and ``evaluate`` with
their checks."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, NoReturn

# gsd_lab.models.MODEL_NAMES + ("tiny-random",) and FAMILY_LOADERS (FAMILY_CHOICES: also the
# families of gsd_lab.checks.families.MODEL_TYPES), spelled out so that parsing and checking the
# flags imports no torch. Tests keep them in sync.
FAMILY_CHOICES = ("anole-7b", "emu3-gen")
MODEL_CHOICES = (
    "standin",
    "digits",
    "lumina-mgpt-7b-512",
    "lumina-mgpt-7b-768",
    "lumina-mgpt-7b-1024",
    *FAMILY_CHOICES,
    "janus-pro-1b",
    "janus-pro-7b",
    "tiny-random",
)
PRESET_WINDOWS = {"release": 15}  # decode.presets.PRESETS[...].window (a test keeps them in sync)
PRESET_CHOICES = ("default", "release")  # decode.presets.PRESETS, spelled out (no torch import)

Fail = Callable[[str], NoReturn]
USAGE_ERRORS = (ValueError, FileNotFoundError)  # what the decoding commands report as usage


def refuse_given(flags: dict[str, Any], why: str, fail: Fail) -> None:
    """Usage error ``FLAG WHY`` for the first of ``flags`` (flag -> parsed value) that was given
    (neither None nor False): a flag that does not apply is refused, not ignored."""
    for flag, value in flags.items():
        if value is not None and value is not False:
            fail(f"{flag} {why}")


def add_batching_args(parser: argparse.ArgumentParser) -> None:
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
        "shared among torchrun's ranks; 1 on a GPU: gsd_lab.workers; figures "
        "--paper: refused, torchrun shares its streamed run)",
    )


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


def check_output_file(path: Path, fail: Fail) -> None:
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


def check_output_folder(path: Path, fail: Fail) -> None:
    """--out of figures / evaluate: a folder (made if missing) that can be written."""
    if path.exists() and not path.is_dir():
        fail(f"--out {path} is a file; this command writes a folder")
    if problem := _writable_folder_problem(path):
        fail(f"--out {path}: {problem}")


def _check_one_image_at_a_time(args: argparse.Namespace, fail: Fail) -> None:
    """``--verifier block``, ``--candidates k > 1`` and ``--tree`` are decoded one image at a
    time by ``decode.loop.generate`` (``decode.batch.generate_batch`` refuses them; trees on the
    eager runner only): refused here, before the model loads. ``evaluate`` decodes with
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


def check_batching(args: argparse.Namespace, fail: Fail) -> None:
    """--batch-size, --workers, the one-image-at-a-time flags, --prompts (read into
    ``args.prompt_list``, None without it) and the --out folder of ``figures`` / ``evaluate``."""
    if args.batch_size is not None and args.batch_size < 1:
        fail(f"--batch-size must be >= 1, got {args.batch_size}")
    if getattr(args, "workers", None) is not None and args.workers < 1:
        fail(f"--workers must be >= 1, got {args.workers}")
    _check_one_image_at_a_time(args, fail)
    from ..io.prompts import read_prompts

    args.prompt_list = None
    if args.prompts is not None:
        try:
            args.prompt_list = read_prompts(args.prompts)
        except (OSError, ValueError) as error:
            fail(f"--prompts {args.prompts}: {error}")
    check_output_folder(args.out, fail)


def check_prompt(model: Any, prompt: str, flag: str, fail: Fail) -> None:
    """Encode ``prompt`` once (after loading, before generating) so a bad class or prompt
    fails with the flag named instead of after minutes of decoding."""
    try:
        model.encode(prompt)
    except (ValueError, KeyError, IndexError) as error:
        fail(f"{flag} {prompt!r}: {error}")
