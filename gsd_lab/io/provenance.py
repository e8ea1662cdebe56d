"""Provenance records: what produced a figure or a table (git commit, package versions, model,
seeds, configuration), written as JSON next to every output, and atomic file writes.

Committed outputs (``figures/``, the notebooks' stored outputs) must come from a clean
checkout of a commit, so that the commit reproduces them: ``require_clean_tree`` refuses a
dirty tree unless explicitly allowed (``--allow-dirty``, or ``GSD_ALLOW_DIRTY=1``), and then
warns loudly; the record says ``dirty: true`` either way. The git state is read once, before
anything is written (writing the outputs themselves dirties the tree).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import warnings
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = (
    "gsd",
    "torch",
    "transformers",
    "safetensors",
    "numpy",
    "scipy",
    "matplotlib",
    "scikit-learn",
    "scikit-image",
)
_REPO_ROOT = Path(__file__).resolve().parents[2]


ALLOW_DIRTY_ENV = "GSD_ALLOW_DIRTY"


class DirtyTreeError(RuntimeError):
    """Committed outputs requested from a checkout with uncommitted changes."""


def git_commit(repo: Path = _REPO_ROOT) -> dict[str, Any]:
    """The checkout's HEAD commit and whether the tree differs from it ("dirty": modified tracked
    files, or untracked files that git does not ignore, e.g. a new module not yet committed).

    ``changes``: up to 20 lines of ``git status --porcelain`` (what made it dirty).
    Returns {"commit": None, "dirty": None} outside a git checkout (e.g. an installed wheel)."""
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, check=True, timeout=10
        ).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        status = git("status", "--porcelain")
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    changes = [line for line in status.splitlines() if line.strip()]
    return {"commit": commit, "dirty": bool(changes), "changes": changes[:20]}


def allow_dirty_from_env() -> bool:
    """True when ``GSD_ALLOW_DIRTY`` is set to 1/true/yes."""
    return os.environ.get(ALLOW_DIRTY_ENV, "").strip().lower() in ("1", "true", "yes")


def require_clean_tree(
    what: str, *, allow_dirty: bool = False, repo: Path = _REPO_ROOT
) -> dict[str, Any]:
    """Read the git state once; raise ``DirtyTreeError`` if the tree is dirty and not
    ``allow_dirty`` (or ``GSD_ALLOW_DIRTY=1``); with it, warn loudly. Returns ``git_commit()``.

    what: the outputs about to be written (named in the message)."""
    git = git_commit(repo)
    if not git["dirty"]:
        return git
    listing = "\n  ".join(git["changes"])
    message = (
        f"{what}: the checkout at {git['commit']} has uncommitted changes, so no commit reproduces "
        f"these outputs:\n  {listing}\nCommit (or stash) first and regenerate from the clean tree"
    )
    if not (allow_dirty or allow_dirty_from_env()):
        raise DirtyTreeError(
            message + f"; for a development run pass --allow-dirty (or set {ALLOW_DIRTY_ENV}=1)."
        )
    warnings.warn(
        "DIRTY TREE: " + message + ". The outputs record dirty: true and must not be committed.",
        stacklevel=2,
    )
    return git


def inside_repository(path: str | os.PathLike, repo: Path = _REPO_ROOT) -> bool:
    """Whether ``path`` lies inside this checkout (where outputs may get committed)."""
    try:
        Path(path).resolve().relative_to(repo.resolve())
    except ValueError:
        return False
    return (repo / ".git").exists()


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed versions of ``names`` (None for a package that is not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def provenance(
    *,
    model: str,
    seeds: Any,
    config: dict[str, Any] | None = None,
    git: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One JSON-ready record: git commit, package versions, platform, model, seeds, config.

    git: a ``git_commit()`` record read earlier (before outputs were written); None reads it now."""
    import torch

    return {
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git": git if git is not None else git_commit(),
        "versions": package_versions(),
        "platform": {
            "system": platform.platform(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            # 1, 5 and 15-minute load averages as the record is written (the run's own
            # processes included): how busy the cores were for a timing read from the record
            "load_average": [round(load, 2) for load in os.getloadavg()],
            "argv": sys.argv[:],
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(),
        },
        "model": model,
        "seeds": seeds,
        "config": config or {},
    }


def provenance_line(git: dict[str, Any] | None = None) -> str:
    """One line for a notebook header: commit, dirty flag, package versions (``check_provenance``
    in the tests parses ``commit <sha>`` and ``dirty <bool>`` from it)."""
    git = git if git is not None else git_commit()
    versions = ", ".join(f"{k} {v}" for k, v in package_versions().items() if v)
    return f"provenance: commit {git.get('commit')} dirty {git.get('dirty')}; {versions}"


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
