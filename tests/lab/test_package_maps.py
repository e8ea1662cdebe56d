"""Each package's ``__init__`` docstring is a map of its files: every module is named in it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(
    p.parent for name in ("gsd_lab", "gsd_train") for p in (ROOT / name).rglob("__init__.py")
) + [ROOT / "gsd_core"]


def unmapped(package: Path) -> list[str]:
    """The modules of ``package`` its ``__init__`` docstring does not name (``name``,
    ``name.attr``, ``package.name...`` or name.py)."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    missing = []
    for module in sorted(package.glob("*.py")):
        name = module.stem
        if name in ("__init__", "__main__"):
            continue
        if not re.search(rf"``(?:[\w.]*\.)?{name}(?:``|[.(])|\b{name}\.py\b", doc):
            missing.append(name)
    return missing


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_is_on_its_package_map(package):
    assert unmapped(package) == []


def test_an_unnamed_module_is_found(tmp_path):
    (tmp_path / "__init__.py").write_text('"""Map: ``named``, the one."""\n')
    (tmp_path / "named.py").write_text("")
    (tmp_path / "forgotten.py").write_text("")
    assert unmapped(tmp_path) == ["forgotten"]
