"""Static checks of the committed notebooks (executing them is ``pytest --nbval-lax notebooks/``):
normalised kernelspec, one ``parameters`` cell, stored outputs without errors, checked cells
present, and plot cells that show PNGs only (no figure reprs that change between versions)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = ["01_tv_toy_examples", "02_top1_probability_histograms", "03_top100_replacement",
         "04_speedup_and_quality", "05_speculative_decoding_tutorial"]


@pytest.mark.parametrize("name", NAMES)
def test_notebook_structure(name):
    path = NOTEBOOK_DIR / f"{name}.ipynb"
    assert path.is_file(), f"missing notebook {path}"
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    checked = [c for c in code if "# NBVAL_CHECK_OUTPUT" in c.source]
    assert checked, "key numbers must be in # NBVAL_CHECK_OUTPUT cells"
    for cell in code:
        assert cell.outputs or "parameters" in cell.metadata.get("tags", []) or not _prints(cell), \
            f"cell without stored outputs: {cell.source[:60]!r}"
        for out in cell.outputs:
            assert out.output_type != "error", f"stored error in {name}: {out.get('ename')}"
            text = out.get("data", {}).get("text/plain", "") if "data" in out else ""
            assert "<Figure size" not in text and "matplotlib" not in text, "figure repr in output"
    for cell in checked:
        assert cell.outputs and all(o.output_type == "stream" and o.name == "stdout" for o in cell.outputs)
    if name != "05_speculative_decoding_tutorial":
        assert "Which model produced the outputs shown" in "".join(c.source for c in nb.cells[:3])


def _prints(cell) -> bool:
    """A top-level print or plot call: the cell must have produced output when executed."""
    return re.search(r"^(print|plots\.show)\(", cell.source, re.M) is not None
