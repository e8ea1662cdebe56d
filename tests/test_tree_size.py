"""The tracked tree fits on the accelerator machine: a device call carries at most 64 MiB (the
working tree plus any wheels carried), so the tracked files stay at or below 48 MiB, leaving
16 MiB for wheels. Measured as the sum of the working-tree sizes of ``git ls-files``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREE_LIMIT_BYTES = 48 * 2**20


def tracked_sizes(root: Path = ROOT) -> dict[str, int]:
    """{path: bytes} of every file git tracks under ``root`` (as it is in the working tree;
    tracked files deleted there count 0). Skips the test outside a git checkout."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    done = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=False,
                          timeout=60)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout: {done.stderr.decode(errors='replace').strip()}")
    names = [n for n in done.stdout.decode().split("\0") if n]
    return {n: (root / n).stat().st_size if (root / n).is_file() else 0 for n in names}


def over_limit(sizes: dict[str, int], limit: int = TREE_LIMIT_BYTES) -> str | None:
    """None when the files total at most ``limit`` bytes, else a message naming the largest."""
    total = sum(sizes.values())
    if total <= limit:
        return None
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:5]
    return (f"tracked files total {total / 2**20:.2f} MiB > {limit / 2**20:.2f} MiB; largest: "
            + ", ".join(f"{n} {s / 2**20:.2f} MiB" for n, s in largest))


def test_tracked_files_fit_the_device_carry():
    sizes = tracked_sizes()
    assert len(sizes) > 50 and "pyproject.toml" in sizes  # this repository's own listing
    problem = over_limit(sizes)
    assert problem is None, problem


def test_the_limit_counts_tracked_files_only(tmp_path):
    """In a scratch repository (limit 1 KiB): a tracked file above it fails, untracked files
    and files under the limit do not count against it."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True, timeout=60)
    (tmp_path / "small.txt").write_bytes(b"x" * 1000)
    (tmp_path / "untracked.bin").write_bytes(b"\0" * 5000)
    subprocess.run(["git", "add", "small.txt"], cwd=tmp_path, check=True, timeout=60)
    assert tracked_sizes(tmp_path) == {"small.txt": 1000}
    assert over_limit(tracked_sizes(tmp_path), 1024) is None
    (tmp_path / "big.bin").write_bytes(b"\0" * 100)
    subprocess.run(["git", "add", "big.bin"], cwd=tmp_path, check=True, timeout=60)
    assert "big.bin" in over_limit(tracked_sizes(tmp_path), 1024)
