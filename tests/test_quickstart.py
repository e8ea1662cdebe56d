"""README's quick start runs in seconds and prints exactly the output the README shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(
    r"<!-- quickstart:start -->\s*```python\n(?P<code>.*?)```\s*```text\n(?P<out>.*?)```\s*"
    r"<!-- quickstart:end -->",
    re.S,
)


def test_the_quick_start_prints_what_the_readme_shows():
    match = BLOCK.search((ROOT / "README.md").read_text(encoding="utf-8"))
    assert match, "README.md has no quick start block"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", match["code"]], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=120, check=True)
    assert run.stdout == match["out"]
