"""Provenance of the committed outputs, and the dirty-tree guard that protects it.

``test_committed_outputs_name_a_clean_ancestor_commit``: every committed figure sidecar
(figures/*.json), figures/results.json, figures/results.md, figures/records.npz and every notebook's provenance line
names a commit that is an ancestor of HEAD, with a clean tree (``dirty: false``), so that
checking out that commit reproduces them.
"""

from __future__ import annotations

import json
import re
import subprocess
import warnings
from pathlib import Path

import pytest

from gsd_lab.io import provenance as prov

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SHA = r"[0-9a-f]{40}"


def _git(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def committed_records() -> dict[str, tuple[str | None, object]]:
    """(commit, dirty) named by each committed output, by file (notebooks: their header line)."""
    records: dict[str, tuple[str | None, object]] = {}
    for path in sorted((ROOT / "figures").glob("*.json")):
        git = json.loads(path.read_text()).get("git", {})
        records[path.name] = (git.get("commit"), git.get("dirty"))
    results_md = ROOT / "figures" / "results.md"
    if results_md.is_file():
        text = results_md.read_text()
        commit = re.search(rf"git commit: `({SHA})`", text)
        dirty = re.search(r"dirty: `(true|false)`", text)
        records["results.md"] = (commit and commit.group(1), dirty and dirty.group(1) == "true")
    records_npz = ROOT / "figures" / "records.npz"
    if records_npz.is_file():  # the per-image records notebook 04 loads
        import numpy as np

        with np.load(records_npz, allow_pickle=False) as archive:
            git = json.loads(str(archive["index"])).get("git", {})
        records[records_npz.name] = (git.get("commit"), git.get("dirty"))
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        text = "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                       for o in c.get("outputs", []))
        match = re.search(rf"provenance: commit ({SHA}) dirty (True|False)", text)
        records[path.name] = (match.group(1), match.group(2) == "True") if match else (None, None)
    return records


def test_record_parsing_sees_every_output():
    records = committed_records()
    assert "results.md" in records and len(NOTEBOOKS) == 5
    assert sum(name.endswith(".json") for name in records) >= 10


def test_committed_outputs_name_a_clean_ancestor_commit():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    problems = []
    for name, (commit, dirty) in committed_records().items():
        if commit is None:
            problems.append(f"{name}: names no commit")
            continue
        if dirty is not False:
            problems.append(f"{name}: dirty tree ({dirty})")
        if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
            if _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
                pytest.skip(f"shallow clone: {commit} not present")
            problems.append(f"{name}: commit {commit[:12]} is not in this repository")
        elif _git("merge-base", "--is-ancestor", commit, "HEAD").returncode != 0:
            problems.append(f"{name}: commit {commit[:12]} is not an ancestor of HEAD")
    assert not problems, "\n".join(problems)


# ---- the guard ----------------------------------------------------------------------------------

@pytest.fixture()
def repo(tmp_path):
    if _git("--version").returncode != 0:
        pytest.skip("git not installed")
    for args in (["init", "-q"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        assert _git(*args, cwd=tmp_path).returncode == 0
    (tmp_path / "a.txt").write_text("a\n")
    assert _git("add", "a.txt", cwd=tmp_path).returncode == 0
    assert _git("commit", "-qm", "a", cwd=tmp_path).returncode == 0
    return tmp_path


def test_clean_tree_passes_and_names_the_commit(repo):
    git = prov.require_clean_tree("outputs", repo=repo)
    assert git["dirty"] is False and re.fullmatch(SHA, git["commit"])


@pytest.mark.parametrize("change", ["modify", "untracked"])
def test_dirty_tree_is_refused_unless_allowed(repo, change, monkeypatch):
    monkeypatch.delenv(prov.ALLOW_DIRTY_ENV, raising=False)
    if change == "modify":
        (repo / "a.txt").write_text("b\n")
    else:
        (repo / "new_module.py").write_text("x = 1\n")
    with pytest.raises(prov.DirtyTreeError, match="--allow-dirty"):
        prov.require_clean_tree("outputs", repo=repo)
    with pytest.warns(UserWarning, match="DIRTY TREE"):
        git = prov.require_clean_tree("outputs", allow_dirty=True, repo=repo)
    assert git["dirty"] is True and git["changes"]
    monkeypatch.setenv(prov.ALLOW_DIRTY_ENV, "1")
    with pytest.warns(UserWarning, match="DIRTY TREE"):
        prov.require_clean_tree("outputs", repo=repo)


def test_records_carry_the_git_state_read_before_writing(tmp_path):
    from gsd_lab.io.figure_io import write_results_markdown

    git = {"commit": "0" * 40, "dirty": False, "changes": []}
    record = prov.provenance(model="m", seeds=[0], git=git)
    assert record["git"] is git and record["versions"]["torch"]
    assert record["platform"]["torch_cpu_capability"]
    path = write_results_markdown(tmp_path / "results.md", "t", [("s", "body")], record=record)
    text = path.read_text()
    assert f"git commit: `{'0' * 40}`; dirty: `false`" in text and "torch" in text
    line = prov.provenance_line(git)
    assert re.search(rf"provenance: commit {SHA} dirty False; .*torch", line)


def test_outputs_inside_the_checkout_need_a_clean_tree():
    assert prov.inside_repository(ROOT / "figures")
    assert not prov.inside_repository(Path("/tmp") / "scratch-figures")


def test_notebook_runner_refuses_a_dirty_tree(monkeypatch):
    """``python -m gsd_lab notebooks`` checks the tree before executing into notebooks/ (no kernel
    started), and only warns for a folder outside the checkout."""
    from gsd_lab.teaching import notebooks

    def dirty(what, *, allow_dirty=False, repo=None):
        if not allow_dirty:
            raise prov.DirtyTreeError(f"{what}: dirty")
        warnings.warn("DIRTY TREE")
        return {}

    monkeypatch.setattr(prov, "require_clean_tree", dirty)
    monkeypatch.setattr(notebooks, "execute", lambda run, scratch, timeout=None: pytest.fail("executed"))
    with pytest.raises(prov.DirtyTreeError, match="dirty"):
        notebooks.run_notebooks(only=["05"])
    from gsd_lab.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["notebooks", "--only", "05"])
    assert exit_info.value.code == 2
    with pytest.warns(UserWarning, match="DIRTY TREE"), pytest.raises(pytest.fail.Exception, match="executed"):
        notebooks.run_notebooks(Path("/tmp") / "scratch-notebooks", only=["05"])
