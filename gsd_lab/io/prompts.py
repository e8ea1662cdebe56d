"""Prompt lists: one prompt per line, or a TSV with a header that has a ``Prompt`` column
(the PartiPrompts format: Prompt, Category, Challenge, Note)."""

from __future__ import annotations

import csv
from pathlib import Path


def read_prompts(path: str | Path) -> list[str]:
    """Prompts from ``path`` in file order.

    A first line containing a tab and a ``Prompt`` column (case-insensitive) marks a TSV: the
    column is read and other columns ignored. Otherwise each non-empty line is one prompt (lines
    starting with ``#`` are comments). Raises FileNotFoundError for a missing file and
    ValueError for a folder, a file that is not UTF-8 text, or a file with no prompts."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a prompt file")
    if not path.is_file():
        raise FileNotFoundError(f"prompt file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path} is not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    lines = text.splitlines()
    first = lines[0] if lines else ""
    header = [h.strip().lower() for h in first.split("\t")]
    if "\t" in first and "prompt" in header:
        reader = csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
        column = next(name for name in reader.fieldnames or [] if name.strip().lower() == "prompt")
        prompts = [(row.get(column) or "").strip() for row in reader]
    else:
        prompts = [
            line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")
        ]
    prompts = [p for p in prompts if p]
    if not prompts:
        raise ValueError(f"no prompts found in {path}")
    return prompts
