"""environment.yml and pyproject.toml must name the same dependencies with the same bounds, and
the lock file (constraints/lock.txt, with constraints/cpu.txt for torch) must pin every one of them
inside those bounds. Conflicts among the pins themselves (a transitive pin another package
excludes) are not checked here: pip reports them when it installs through the lock."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
specifiers = pytest.importorskip("packaging.specifiers")

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
        # conda packages, then those only PyPI has (the pip section; "-e ." is the package)
        for entry in [item] if isinstance(item, str) else item.get("pip", []):
            if entry.startswith("-"):
                continue
            name, spec = _split(entry)
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


# ---- the lock file -------------------------------------------------------------------------------

LOCK = ROOT / "constraints" / "lock.txt"
CPU = ROOT / "constraints" / "cpu.txt"
PYPI_NAME = {conda: pypi for pypi, conda in CONDA_NAME.items()}
# How to refresh the pins; the checks below compare them with the declared ranges only, so a
# conflict among transitive pins shows up when pip installs through the lock, not here.
UPDATE = (f"Update {LOCK.name} as its header says: a fresh venv, pip install -c "
          "constraints/cpu.txt -U -e '.[test]', the suite, then pip freeze --exclude-editable "
          "without torch and taming-transformers-rom1504.")


def _normalise(name: str) -> str:
    """PEP 503: pip treats ``scikit_image``, ``Scikit-Image`` and ``scikit.image`` as one name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """name -> version of a constraints file's ``name==version`` lines (comments skipped);
    fails on any other kind of line, which would not pin one version."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9_.\-]*)==([A-Za-z0-9_.+!\-]+)", line)
        assert match, f"{path.name}: not a name==version pin: {line!r}"
        name = _normalise(match.group(1))
        assert name not in out, f"{path.name}: {name} pinned twice"
        out[name] = match.group(2)
    return out


def installed_pins() -> dict[str, str]:
    """What set-up installs: the lock file, and torch from constraints/cpu.txt."""
    return {**pins(LOCK), **pins(CPU)}


def _satisfies(version: str, spec: str) -> bool:
    return specifiers.SpecifierSet(spec).contains(version, prereleases=True)


def test_lock_pins_torch_only_through_cpu_constraints_and_not_gsd() -> None:
    locked = pins(LOCK)
    assert "torch" not in locked and "gsd" not in locked
    assert set(pins(CPU)) == {"torch"}


def test_every_pyproject_dependency_is_pinned() -> None:
    wanted = {_normalise(PYPI_NAME.get(name, name)) for name in pyproject_requirements()}
    missing = sorted(wanted - set(installed_pins()))
    assert missing == [], f"not pinned in {LOCK.name}: {missing}. {UPDATE}"


def test_pins_satisfy_pyproject_ranges() -> None:
    locked = installed_pins()
    outside = {
        name: (locked.get(_normalise(PYPI_NAME.get(name, name)), "not pinned"), spec)
        for name, spec in pyproject_requirements().items()
        if not _satisfies(locked.get(_normalise(PYPI_NAME.get(name, name)), "0"), spec)
    }
    assert outside == {}, f"pinned version outside pyproject.toml's range: {outside!r}. {UPDATE}"


def test_pins_satisfy_environment_yml() -> None:
    locked = installed_pins()
    outside = {
        name: spec
        for name, spec in environment_requirements().items()
        if not _satisfies(locked.get(_normalise(PYPI_NAME.get(name, name)), "0"), spec)
    }
    assert outside == {}, f"environment.yml asks for other versions than the lock: {outside!r}"


def test_setup_installs_through_both_constraint_files() -> None:
    setup = (ROOT / "scripts" / "setup_env.sh").read_text()
    assert "-c constraints/cpu.txt -c constraints/lock.txt" in setup


def test_no_deps_oracle_pinned_by_set_up_only() -> None:
    """taming-transformers-rom1504 is installed with --no-deps at its own pin, not through the
    lock (whose constraints would then apply to it twice)."""
    setup = (ROOT / "scripts" / "setup_env.sh").read_text()
    assert "--no-deps taming-transformers-rom1504==" in setup
    assert "taming-transformers-rom1504" not in pins(LOCK)


def test_range_check_catches_a_pin_outside_the_range() -> None:
    assert _satisfies("8.1.9", ">=8.1") and not _satisfies("8.0.7", ">=8.1")
    assert not _satisfies("6.0.0", ">=5.0,<6") and _satisfies("0.9.7.post1", ">=0.9")
