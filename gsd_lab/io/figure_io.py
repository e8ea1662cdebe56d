"""Saving figures and tables with provenance: every figure is written as PNG and SVG with a
JSON sidecar (git commit, package versions, model, seeds, config, and the plotted numbers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .provenance import atomic_write_json, atomic_write_text, provenance


def save_figure(
    fig: Any,
    out_dir: str | Path,
    name: str,
    *,
    model: str,
    seeds: Any,
    config: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
    git: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Write ``out_dir/name.png``, ``name.svg`` and ``name.json`` (the sidecar) and close ``fig``.

    The sidecar holds ``provenance(model, seeds, config)`` plus ``data``: the numbers drawn, so
    that a figure can be checked or re-plotted without re-running the experiment. git: the
    ``git_commit()`` record read before any output was written (None: read now)."""
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "png": out_dir / f"{name}.png",
        "svg": out_dir / f"{name}.svg",
        "json": out_dir / f"{name}.json",
    }
    # Fixed metadata keeps the SVG free of a timestamp, so regenerating gives a stable diff.
    fig.savefig(paths["png"], dpi=150, bbox_inches="tight")
    fig.savefig(paths["svg"], bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    record = provenance(model=model, seeds=seeds, config=config, git=git)
    record["figure"] = {"name": name, "files": [paths["png"].name, paths["svg"].name]}
    record["data"] = data or {}
    atomic_write_json(paths["json"], record)
    return paths


def markdown_table(
    rows: list[dict[str, Any]],
    columns: list[str],
    *,
    floatfmt: str = ".4g",
    headers: dict[str, str] | None = None,
) -> str:
    """A GitHub-flavoured markdown table of ``rows`` (dicts) restricted to ``columns``; a ``|``
    inside a cell (a label such as "|dp| filter") is escaped as ``\\|``. ``headers``: the name
    shown for a column, where it differs from its key (e.g. clip_score for condition_score)."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return format(value, floatfmt)
        return "" if value is None else str(value).replace("|", "\\|")

    names = [(headers or {}).get(c, c) for c in columns]
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def write_results_markdown(
    path: str | Path, title: str, sections: list[tuple[str, str]], *, record: dict[str, Any]
) -> Path:
    """Write ``figures/results.md``: a title, provenance lines, then (heading, body) sections."""
    git = record.get("git", {})
    versions = record.get("versions", {})
    header = [
        f"# {title}",
        "",
        f"Model: `{record.get('model')}`; seeds: `{record.get('seeds')}`; git commit: "
        f"`{git.get('commit')}`; dirty: `{str(git.get('dirty')).lower()}`"
        f"{' (uncommitted changes: not reproducible from the commit)' if git.get('dirty') else ''}"
        f"; generated {record.get('created_utc')}.",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v) + ".",
        "",
    ]
    body = []
    for heading, text in sections:
        body += [f"## {heading}", "", text.rstrip(), ""]
    return atomic_write_text(path, "\n".join(header + body))


def save_image_atomic(image: Any, path: Path) -> str:
    """Write ``image`` (uint8 [H, W, 3]) to ``path`` in the format of its extension, through a
    temporary file and os.replace (a crash never leaves half an image)."""
    import os

    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    image_format = Image.registered_extensions().get(path.suffix.lower(), "PNG")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        Image.fromarray(image).save(tmp, format=image_format)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return str(path)
