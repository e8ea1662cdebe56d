"""environment.yml and pyproject.toml must name the same dependencies with the same bounds."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
# conda-forge spells a few packages differently from PyPI.
CONDA_NAME = {"torch": "pytorch"}
NOT_PACKAGES = {"python", "pip"}


def _split(requirement: str) -> tuple[str, str]:
    name = re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0).lower()
    return name, requirement[len(name):].replace(" ", "")


def pyproject_requirements() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += [r for r in extra if not r.startswith(project["name"] + "[")]
    out = {}
    for requirement in requirements:
        name, spec = _split(requirement)
        out[CONDA_NAME.get(name, name)] = spec
    return out


def environment_requirements() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    out = {}
    for item in env["dependencies"]:
        if isinstance(item, str):
            name, spec = _split(item)
            if name not in NOT_PACKAGES:
                out[name] = spec
    return out


def test_same_dependency_names() -> None:
    assert sorted(pyproject_requirements()) == sorted(environment_requirements())


def test_same_version_bounds() -> None:
    assert pyproject_requirements() == environment_requirements()


def test_environment_installs_the_package_itself() -> None:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_sections = [item["pip"] for item in env["dependencies"] if isinstance(item, dict)]
    assert pip_sections and "-e ." in pip_sections[0]


def test_cpu_torch_pinned_by_constraints_not_metadata() -> None:
    assert "torch==" not in (ROOT / "pyproject.toml").read_text()
    assert "torch==2.13.0" in (ROOT / "constraints" / "cpu.txt").read_text()
