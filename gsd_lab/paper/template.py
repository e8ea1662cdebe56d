"""results.md's wording: the parts of ``templates/results.md`` (one per "@@ name" line), filled
with ``string.Template`` by ``fill``."""

from __future__ import annotations

import functools
import string
from pathlib import Path
from typing import Any


TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "results.md"


@functools.cache
def _template() -> dict[str, string.Template]:
    """The parts of ``templates/results.md`` by name (the lines after each "@@ name" line)."""
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in TEMPLATE.read_text().split("\n"):
        if line.startswith("@@ "):
            current = parts.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
    return {name: string.Template("\n".join(lines).rstrip("\n")) for name, lines in parts.items()}


def fill(part: str, **values: Any) -> str:
    """The template's ``part`` with its placeholders filled (KeyError for a missing one)."""
    return _template()[part].substitute(values)
