"""Provenance records: what produced a figure or a table (git commit, package versions, model,
seeds, configuration), written as JSON next to every output, and atomic file writes."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("gsd", "torch", "transformers", "safetensors", "numpy", "scipy", "matplotlib",
            "scikit-learn", "scikit-image")
_REPO_ROOT = Path(__file__).resolve().parent.parent


def git_commit(repo: Path = _REPO_ROOT) -> dict[str, Any]:
    """The checkout's HEAD commit and whether tracked files differ from it ("dirty").

    Returns {"commit": None, "dirty": None} outside a git checkout (e.g. an installed wheel)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                                text=True, check=True, timeout=10).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                                capture_output=True, text=True, check=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(status.strip())}


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed versions of ``names`` (None for a package that is not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def provenance(*, model: str, seeds: Any, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """One JSON-ready record: git commit, package versions, platform, model, seeds, config."""
    return {
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git": git_commit(),
        "versions": package_versions(),
        "platform": {"system": platform.platform(), "machine": platform.machine(),
                     "cpu_count": os.cpu_count(), "argv": sys.argv[:]},
        "model": model,
        "seeds": seeds,
        "config": config or {},
    }


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and os.replace, so
    that a reader (or a crash) never sees a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, data: Any) -> Path:
    """``atomic_write_text`` of ``data`` as indented JSON (non-JSON values via ``str``)."""
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
