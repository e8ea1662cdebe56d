"""Fixtures of the ``check-weights`` tests: tiny checkpoints of every family, written once per
module, and the command run with its JSON report parsed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from gsd_lab.cli import main

Verdicts = dict[str, dict[str, str]]


def run_check(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, Verdicts]:
    """(exit status, verdict by item) of ``check-weights ARGV --json --device cpu``."""
    code = main(["check-weights", *argv, "--json", "--device", "cpu"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return code, {v["item"]: v for v in report["verdicts"]}


@pytest.fixture()
def check(capsys) -> Callable[..., tuple[int, Verdicts]]:
    """``run_check`` bound to this test's captured output."""
    return lambda *argv: run_check(capsys, *argv)


@pytest.fixture(scope="module")
def janus_weights(tmp_path_factory) -> Path:
    """A tiny Janus-Pro checkpoint (``save_tiny_janus``)."""
    from gsd_lab.testing.tiny_checkpoints import save_tiny_janus

    return save_tiny_janus(tmp_path_factory.mktemp("janus-tiny"))


@dataclass(frozen=True)
class FamilyFolder:
    """A tiny checkpoint of a ``--model`` family, the flags its check needs and the module whose
    ``CPU_PARAMETER_LIMIT`` its loader reads."""

    name: str
    folder: Path
    flags: tuple[str, ...]
    limit_module: str


@pytest.fixture(scope="module", params=["anole-7b", "emu3-gen"])
def family_folder(request, tmp_path_factory) -> FamilyFolder:
    """Anole (with its Chameleon VQGAN as --vqgan) or Emu3-Gen, tiny, in the release layout."""
    from gsd_lab.testing.tiny_checkpoints import save_tiny_anole, save_tiny_emu3

    root = tmp_path_factory.mktemp(request.param)
    if request.param == "anole-7b":
        folder = save_tiny_anole(root / "anole")
        flags = ("--model", "anole-7b", "--vqgan", str(folder / "tokenizer"))
        # load_anole reads Lumina-mGPT's limit (the same 7B Chameleon architecture).
        return FamilyFolder("anole-7b", folder, flags, "gsd_lab.models.lumina_mgpt")
    folder = save_tiny_emu3(root / "emu3")
    return FamilyFolder("emu3-gen", folder, ("--model", "emu3-gen"), "gsd_lab.models.emu3")
