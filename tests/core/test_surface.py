"""gsd_core's public surface: ``__all__`` names what exists, the package docstring maps every
module, and gsd_lab imports from gsd_core only names in ``__all__`` (read from its sources with
ast, submodule imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import gsd_core

ROOT = Path(gsd_core.__file__).resolve().parent.parent


def core_names_imported(source: str) -> set[str]:
    """Names taken from gsd_core or a submodule by ``from gsd_core[.x] import a, b`` (module
    level or inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module.split(".")[0] == "gsd_core"):
            names.update(alias.name for alias in node.names)
    return names


def test_all_names_exist():
    assert all(hasattr(gsd_core, name) for name in gsd_core.__all__)
    assert len(set(gsd_core.__all__)) == len(gsd_core.__all__)


def test_the_docstring_maps_every_module():
    modules = sorted(f.stem for f in (ROOT / "gsd_core").glob("*.py") if f.stem != "__init__")
    assert "multidraft" in modules
    missing = [m for m in modules if f"``{m}``" not in gsd_core.__doc__]
    assert not missing, f"gsd_core's docstring does not map {missing}"


def test_gsd_lab_imports_only_gsd_core_all():
    files = sorted((ROOT / "gsd_lab").rglob("*.py"))
    assert len(files) > 50
    outside = {}
    for f in files:
        names = core_names_imported(f.read_text()) - set(gsd_core.__all__)
        if names:
            outside[str(f.relative_to(ROOT))] = sorted(names)
    assert not outside, f"gsd_lab imports gsd_core names not in gsd_core.__all__: {outside}"


def test_the_walk_sees_submodule_and_deferred_imports():
    """Negative control: a private helper taken from a submodule, inside a function, is seen."""
    source = "def f():\n    from gsd_core.rules import member_table, SD\n"
    assert core_names_imported(source) - set(gsd_core.__all__) == {"member_table"}
