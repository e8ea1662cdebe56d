"""Lines of gsd_core, gsd_lab and gsd_train are at most 100 characters (pyproject's ``[tool.ruff]``)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 100


def _long_lines(path: Path) -> list[int]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [number for number, line in enumerate(lines, 1) if len(line) > LIMIT]


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(
    "path",
    _sources("gsd_core") + _sources("gsd_lab") + _sources("gsd_train"),
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_lines_fit(path):
    name = path.relative_to(ROOT).as_posix()
    assert _long_lines(path) == [], f"{name}: lines over {LIMIT} characters"


def test_the_check_sees_both_packages():
    assert _sources("gsd_core") and _sources("gsd_lab")
