"""Static checks of the committed notebooks (executing them is ``pytest --nbval-lax notebooks/``):
normalised kernelspec, one ``parameters`` cell, checked cells present, stored outputs without
errors, plot cells that show PNGs only (no figure reprs that change between versions); and the
papermill runner (``gsd_lab.teaching.notebooks``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = ["01_tv_toy_examples", "02_top1_probability_histograms", "03_top100_replacement",
         "04_speedup_and_quality", "05_speculative_decoding_tutorial"]


@pytest.mark.parametrize("name", NAMES)
def test_notebook_sources(name):
    path = NOTEBOOK_DIR / f"{name}.ipynb"
    assert path.is_file(), f"missing notebook {path}"
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    assert any("# NBVAL_CHECK_OUTPUT" in c.source for c in code), "key numbers must be in # NBVAL_CHECK_OUTPUT cells"
    if name != "05_speculative_decoding_tutorial":
        assert "Which model produced the outputs shown" in "".join(c.source for c in nb.cells[:3])


@pytest.mark.parametrize("name", NAMES)
def test_stored_outputs(name):
    """The outputs the notebook is committed with (``python -m gsd_lab notebooks`` from a clean
    commit writes them): every printing cell has some, none is an error, checked cells print to
    stdout only, figures are PNGs (no reprs that change between versions)."""
    nb = nbformat.read(NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        assert cell.outputs or "parameters" in cell.metadata.get("tags", []) or not _prints(cell), \
            f"cell without stored outputs (regenerate: python -m gsd_lab notebooks): {cell.source[:60]!r}"
        for out in cell.outputs:
            assert out.output_type != "error", f"stored error in {name}: {out.get('ename')}"
            text = out.get("data", {}).get("text/plain", "") if "data" in out else ""
            assert "<Figure size" not in text and "matplotlib" not in text, "figure repr in output"
        if "# NBVAL_CHECK_OUTPUT" in cell.source:
            assert cell.outputs and all(o.output_type == "stream" and o.name == "stdout" for o in cell.outputs)


def _prints(cell) -> bool:
    """A top-level print or plot call: the cell must have produced output when executed."""
    return re.search(r"^(print|plots\.show)\(", cell.source, re.M) is not None


# ---- the sources and the papermill runner (gsd_lab.teaching.notebooks) -----------------------------------

MODEL_NOTEBOOKS = NAMES[:4]


def _read(name):
    return nbformat.read(NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_is_normalised(name):
    """What ``gsd_lab.teaching.notebooks.normalise`` writes: a JupyterLab save that adds a kernel of its
    own, timing or papermill metadata is caught here (run ``python -m gsd_lab notebooks``)."""
    from gsd_lab.teaching.notebooks import KERNELSPEC, LANGUAGE_INFO

    nb = _read(name)
    assert set(nb.metadata) == {"kernelspec", "language_info"}  # no saved widget state
    assert nb.metadata["kernelspec"] == KERNELSPEC
    info = dict(nb.metadata["language_info"])
    assert info.pop("version").startswith("3.")
    assert info == {k: v for k, v in LANGUAGE_INFO.items() if k != "version"}
    for cell in nb.cells:
        assert set(cell.metadata) <= {"tags", "mystnb"}, (name, cell.source[:60], dict(cell.metadata))
        assert "injected-parameters" not in cell.metadata.get("tags", []), "committed with injected parameters"


def test_model_notebooks_share_their_model_cells():
    """01-04 declare the same model parameters with the same defaults, load the model with the
    same cell and say which model produced their outputs in the same words (one edit must reach
    all four; only 04 runs on the Lumina-mGPT checkpoints in tests/lab/test_lumina_end_to_end.py,
    so the others' loading is that cell)."""
    from gsd_lab.teaching.notebooks import declared_parameters

    model_names = ("model_name", "weights", "vqgan", "clip", "device", "threads")
    declared = [declared_parameters(NOTEBOOK_DIR / f"{name}.ipynb") for name in MODEL_NOTEBOOKS]
    assert all({k: d[k] for k in model_names} == {k: declared[0][k] for k in model_names} for d in declared)
    notes = {next(c.source for c in _read(name).cells if "Which model produced" in c.source)
             for name in MODEL_NOTEBOOKS}
    assert len(notes) == 1
    loads = [[c.source for c in _read(name).cells if "load_image_model(" in c.source]
             for name in MODEL_NOTEBOOKS]
    assert all(len(cells) == 1 for cells in loads) and len({cells[0] for cells in loads}) == 1


def test_plan_injects_only_declared_names():
    from gsd_lab.teaching.notebooks import SIZES, notebook_paths, parse_value, plan

    runs = {r.source.stem[:2]: r.parameters for r in
            plan(notebook_paths(), {"model_name": "tiny-random"}, sizes="tiny")}
    assert runs["05"] == {k: SIZES["tiny"][k] for k in ("num_samples", "distortion_pairs")}
    assert runs["04"]["model_name"] == "tiny-random" and runs["04"]["table2_group"] == 3
    assert "model_name" not in runs["05"]
    with pytest.raises(ValueError, match=r"\['num_sample'\] declared by none"):
        plan(notebook_paths(["05"]), {"num_sample": 3})
    with pytest.raises(ValueError, match="no notebook starts with"):
        notebook_paths(["9"])
    assert parse_value("[0, 1]") == [0, 1] and parse_value("None") is None
    assert parse_value("tiny-random") == "tiny-random" and parse_value("/a/b") == "/a/b"


def _toy_notebook(path, body: str) -> None:
    from nbformat.v4 import new_code_cell, new_notebook

    cells = [new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
             new_code_cell("from gsd_lab.io.provenance import provenance_line\n\nprint(provenance_line())"),
             new_code_cell(body)]
    nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": {"name": "other", "display_name": "x", "language": "python"}}),
                   path)


def test_runner_executes_with_papermill_and_writes_only_when_all_ran(tmp_path):
    """Two toy notebooks through ``run_notebooks`` (three kernel starts): in place, one failing
    notebook writes nothing; into another folder, the parameter is injected and the written
    notebook is normalised, with the provenance header and the outputs, and no progress bar."""
    from gsd_lab.teaching.notebooks import run_notebooks

    src = tmp_path / "src"
    src.mkdir()
    _toy_notebook(src / "01_ok.ipynb", "from tqdm import tqdm\n\nfor _ in tqdm(range(3)):\n    pass\nprint(f'x = {x}')")
    _toy_notebook(src / "02_fails.ipynb", "raise RuntimeError('boom')")
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    runs = run_notebooks(src, folder=src, log=lambda line: None)
    assert [r.error for r in runs] == [None, "RuntimeError: boom"]
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before
    out = tmp_path / "out"
    (run,) = run_notebooks(out, only=["01"], parameters={"x": 3}, folder=src, log=lambda line: None)
    assert run.error is None and run.parameters == {"x": 3}
    nb = nbformat.read(out / "01_ok.ipynb", as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3" and "papermill" not in nb.metadata
    assert nb.cells[1].metadata == {"tags": ["injected-parameters"]} and "x = 3" in nb.cells[1].source
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "x = 3" in text and re.search(r"provenance: commit [0-9a-f]{40} dirty (True|False)", text)
    # Progress bars (their timings change every run) are not stored.
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("name") == "stderr"]


@pytest.mark.timeout(240)
def test_runner_fails_a_hanging_cell_within_its_timeout_naming_it(tmp_path):
    """A cell that never finishes fails its notebook after the per-cell timeout (not at CI's own
    limit), the error naming the notebook and the cell; nothing is written in place."""
    import time

    from gsd_lab.teaching.notebooks import CELL_TIMEOUT, SIZES, run_notebooks

    assert set(CELL_TIMEOUT) == {None, *SIZES} and max(CELL_TIMEOUT.values()) <= 3600
    src = tmp_path / "src"
    src.mkdir()
    _toy_notebook(src / "01_hangs.ipynb", "import time\n\ntime.sleep(3600)  # never finishes")
    before = (src / "01_hangs.ipynb").read_bytes()
    start = time.monotonic()
    (run,) = run_notebooks(src, folder=src, timeout=5, log=lambda line: None)
    assert time.monotonic() - start < 120, "the timeout did not stop the hanging cell"
    cell_id = nbformat.read(src / "01_hangs.ipynb", as_version=4).cells[2].id
    assert run.error == (f'CellTimeoutError: 01_hangs.ipynb, cell 3 (id {cell_id}, "import time"): '
                         "not finished within 5 s")
    assert (src / "01_hangs.ipynb").read_bytes() == before


def test_notebook_04_defaults_are_the_figures_run_sizes():
    """Notebook 04 builds its tables from the figures run's per-image records
    (``figures/records.npz``): with other default sizes it would decode what the records lack."""
    import ast

    from gsd_lab.paper import FigureSizes
    from gsd_lab.teaching.notebooks import declared_parameters

    declared = declared_parameters(NOTEBOOK_DIR / "04_speedup_and_quality.ipynb")
    sizes = FigureSizes.default()
    names = ("seeds", "max_prompts", "table1_groups", "table1_amplify", "table2_group", "pareto_groups",
             "pareto_amplify", "table1_lantern", "pareto_lantern", "distortion_rank_groups", "seed_noise",
             "coupled_drafts", "table1_coupled_groups", "pareto_coupled_groups")
    for name in names:
        value, expected = ast.literal_eval(declared[name]), getattr(sizes, name)
        if isinstance(expected, tuple):
            value, expected = list(value), list(expected)
        assert value == expected, (name, value, expected)
    assert ast.literal_eval(declared["records_file"]) == "../figures/records.npz"


@pytest.mark.parametrize("value", ["0", "-5", "ten"])
def test_notebooks_timeout_must_be_a_positive_integer(capsys, value):
    """``--timeout`` below 1 (which would mean the default) or not an integer exits 2 naming it."""
    from gsd_lab.cli import main

    with pytest.raises(SystemExit) as caught:
        main(["notebooks", "--dry-run", "--timeout", value])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "--timeout" in err and "must be a positive integer" in err


def test_cell_label_without_cell_ids_counts_the_executed_cells():
    """Notebooks older than nbformat 4.5 have no cell ids: the label counts by position."""
    from gsd_lab.teaching.notebooks import cell_label

    source = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("a = 1")])
    cell = nbformat.v4.new_code_cell("\nprint(a)\n")
    del cell["id"]
    assert cell_label(cell, source, 2) == 'cell 3 of the executed notebook ("print(a)")'
