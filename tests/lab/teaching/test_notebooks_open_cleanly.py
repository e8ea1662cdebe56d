"""The notebooks greet a student without friction: a short opening paragraph (what you will learn,
what it runs, described by its workload rather than a hand-written time) with a first code cell inside JupyterLab's first screen, the metadata JupyterLab
itself writes (opening and saving without edits changes nothing), alt text on every figure, and
stored outputs without machine paths, stray progress bars or a widget's repr."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

from gsd_lab.teaching.course import SLIDERS_TEXT  # noqa: E402
from gsd_lab.teaching.notebooks import KERNELSPEC, LANGUAGE_INFO, normalise  # noqa: E402

NOTEBOOKS = sorted((Path(__file__).resolve().parents[3] / "notebooks").glob("*.ipynb"))
FIRST_SCREEN = 30  # rows of a laptop's JupyterLab before the first code cell must start
MACHINE_PATH = re.compile(r"(?<![\w.])(?:/(?:work|home|Users|root|tmp|mnt|data|opt|var|scratch)/"
                          r"|[A-Z]:\\)")
EMPTY_BAR = re.compile(r"(?:^|\r|\n)[^\n\r]*: ?0(?:it|\w+) \[00:00")  # a bar that never moved
WIDGET_REPR = re.compile(r"\b(?:interactive|VBox|HBox|Box)\(children=")


def _ids(path: Path) -> str:
    return path.stem


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_a_short_opening_then_code_within_the_first_screen(path):
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert "What you will learn" in first.source and "What it runs" in first.source
    assert not re.search(r"\b(?:minutes?|seconds?|hours?)\b", first.source), "a hand-written time"
    assert "docs/glossary.md" in first.source  # the words and notation
    assert "NBVAL" not in first.source
    code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    rows = sum(len(c.source.splitlines()) + 2 for c in nb.cells[:code])
    assert rows <= FIRST_SCREEN, f"{rows} rows before the first code cell"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_metadata_is_what_jupyterlab_saves(path):
    """kernelspec "Python 3 (ipykernel)" and the full language_info: JupyterLab would fill in
    anything less on opening, marking the notebook modified; and ``normalise`` keeps it so."""
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["kernelspec"] == KERNELSPEC
    assert set(nb.metadata["language_info"]) == set(LANGUAGE_INFO)
    assert "widgets" not in nb.metadata
    again = normalise(nbformat.from_dict(nb))
    assert again.metadata == nb.metadata


# What JupyterLab wrote when it saved, without edits, a notebook committed with ``saved_from``'s
# metadata (recorded once with scripts/jupyterlab_save_check.py; the real check in a browser).
JUPYTERLAB_SAVE = Path(__file__).with_name("jupyterlab_saved_metadata.json")


def test_the_runner_writes_what_jupyterlab_saves():
    """``normalise`` of an executed notebook (papermill's kernelspec, nbclient's and papermill's
    metadata) gives the metadata and format version JupyterLab saved, but for the Python version,
    which is the executing kernel's."""
    recorded = json.loads(JUPYTERLAB_SAVE.read_text())
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", metadata={
        "execution": {"iopub.status.busy": "2026-01-01"}, "papermill": {"duration": 1.0}})])
    nb.metadata = {**recorded["saved_from"], "papermill": {"duration": 3.0}}
    written = json.loads(nbformat.writes(normalise(nb)))
    saved = recorded["metadata"]
    assert written["metadata"]["kernelspec"] == saved["kernelspec"]
    assert (written["nbformat"], written["nbformat_minor"]) == (recorded["nbformat"], recorded["nbformat_minor"])
    assert {k: v for k, v in written["metadata"]["language_info"].items() if k != "version"} == \
        {k: v for k, v in saved["language_info"].items() if k != "version"}
    assert set(written["metadata"]) == set(saved) and written["cells"][0]["metadata"] == {}
    assert "id" in written["cells"][0]  # nbformat 4.5 cell ids, which JupyterLab keeps


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_every_figure_has_alt_text(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and any("image/png" in o.get("data", {}) for o in cell.outputs):
            alt = cell.metadata.get("mystnb", {}).get("image", {}).get("alt", "")
            assert len(alt) > 20, f"{path.stem}: figure cell without alt text: {cell.source[:60]!r}"


def stored_output_problems(nb) -> list[str]:
    """Machine paths, progress bars that never moved and widget reprs in ``nb``'s outputs."""
    problems = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text = out.get("text", "") if out.output_type == "stream" else str(
                out.get("data", {}).get("text/plain", ""))
            where = cell.source.splitlines()[0][:50] if cell.source else ""
            if MACHINE_PATH.search(text):
                problems.append(f"machine path in {where!r}: {MACHINE_PATH.search(text)[0]}")
            if out.output_type == "stream" and EMPTY_BAR.search(text):
                problems.append(f"empty progress bar in {where!r}")
            if WIDGET_REPR.search(text):
                problems.append(f"widget repr in {where!r}")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_stored_outputs_name_no_machine_and_show_no_stray_boxes(path):
    assert stored_output_problems(nbformat.read(path, as_version=4)) == []


def test_the_output_checks_catch_what_they_name():
    """Negative control on a hand-made notebook."""
    cell = nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="weights: {'dir': '/work/main/w'}\n"),
        nbformat.v4.new_output("stream", name="stderr", text="images decoded here: 0image [00:00, ?image/s]"),
        nbformat.v4.new_output("execute_result", data={"text/plain": "interactive(children=(..."}),
    ])
    assert len(stored_output_problems(nbformat.v4.new_notebook(cells=[cell]))) == 3
    ok = nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="weights: {'dir': 'gsd_lab/standin/weights'} 1/2\n"),
        nbformat.v4.new_output("display_data", data={"text/plain": SLIDERS_TEXT}),
    ])
    assert stored_output_problems(nbformat.v4.new_notebook(cells=[ok])) == []


PROVENANCE = re.compile(r"provenance: commit ([0-9a-f]{40}) dirty (?:True|False)")


def _code_sources(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_code_cells_are_those_of_the_commit_the_outputs_name(path):
    """The stored outputs name a commit (the provenance line); the code cells must be that
    commit's, or the outputs shown were produced by other code than the reader sees."""
    import subprocess

    nb = nbformat.read(path, as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    match = PROVENANCE.search(text)
    assert match, "the stored outputs name no commit (no provenance line)"
    root = path.parents[1]

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)

    try:
        if git("rev-parse", "--is-inside-work-tree").returncode != 0:
            pytest.skip("not a git checkout: the named commit cannot be read")
    except (FileNotFoundError, subprocess.TimeoutExpired) as error:
        pytest.skip(f"git unavailable: {error}")
    commit = match.group(1)
    if git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        pytest.skip(f"commit {commit[:12]} not in this history (a shallow clone?)")
    shown = git("show", f"{commit}:notebooks/{path.name}")
    assert shown.returncode == 0, f"{path.name} is not in commit {commit[:12]}"
    then = nbformat.reads(shown.stdout, as_version=4)
    assert _code_sources(nb) == _code_sources(then), (
        f"code cells differ from those at {commit[:12]}, whose run the outputs show: re-execute")
