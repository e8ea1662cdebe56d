"""What the CLI imports, pinned (not timed): parsing the flags needs no torch, and the modules
``generate`` runs import none of the figure, transport or SciPy stacks (each costs import time
on every call; ``benchmarks/cli_generate.py`` times the call)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "transformers", "matplotlib", "scipy", "ot")


def imported_after(statement: str) -> set[str]:
    """Which of ``HEAVY`` a fresh interpreter holds in ``sys.modules`` after ``statement``."""
    report = f"print(json.dumps(sorted(set(sys.modules) & {set(HEAVY)!r})))"
    probe = f"import json, sys\n{statement}\n{report}"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        check=False,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_cli_module_imports_none_of_the_heavy_stacks():
    assert imported_after("import gsd_lab.cli") == set()


def test_generate_modules_import_torch_only():
    generate_modules = (
        "import gsd_lab.cli\n"
        "from gsd_lab.experiments.image_model import load_image_model\n"
        "from gsd_lab.experiments.runs import generate_one, resolve_for\n"
        "from gsd_lab.standin.adapter import load_standin\n"
        "from gsd_lab.io.figure_io import save_image_atomic\n"
        "from gsd_lab.decode.presets import preset"
    )
    # torch present: the probe sees a real import (negative control for the empty set above);
    # transformers only when the stand-in loads (load_ar_model), the rest never on this path.
    assert imported_after(generate_modules) == {"torch"}



def _run_module(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                          check=False, text=True, cwd=ROOT, timeout=300)


def test_the_cli_package_runs_as_a_module():
    """``python -m gsd_lab.cli`` is ``python -m gsd_lab``: the same commands, the same exit."""
    package, cli = _run_module("gsd_lab", "--help"), _run_module("gsd_lab.cli", "--help")
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert cli.stdout == package.stdout and "generate" in cli.stdout
    bad = _run_module("gsd_lab.cli", "no-such-command")
    assert bad.returncode == 2 and "no-such-command" in bad.stderr
