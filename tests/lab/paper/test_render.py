"""results.md's renderer and the samples figure: the matched and frontier tables print
the one verdict vocabulary (``verdicts.WORDS``), never the stored key "noise"; the samples grid
labels its rows (methods) and its columns (prompt and seed)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from gsd_lab.io.figure_io import markdown_table
from gsd_lab.paper import figures, render
from gsd_lab.experiments import plots
from gsd_lab.experiments.verdicts import WORDS


def _row(verdict: str, se: float) -> dict:
    return {"measure": "TV", "nfe": 55.6, "anchor": "GSD (G=50)", "other": "Amplify",
            "reference_value": 0.12, "other_value": 0.11, "reference_nfe": 55.6, "other_nfe": 55.0,
            "reference": "GSD", "distortion": 0.12, "difference": 0.01, "se": se,
            "low": 0.01 - 2 * se, "high": 0.01 + 2 * se, "n": 30, "inside": True,
            "verdict": verdict}


def _verdict_cells(text: str) -> list[str]:
    """The verdict column of every table row in ``text``."""
    cells = []
    for table in text.split("\n\n"):
        lines = [line for line in table.splitlines() if line.startswith("|")]
        if not lines or "verdict" not in lines[0]:
            continue
        at = [c.strip() for c in lines[0].strip("|").split("|")].index("verdict")
        cells += [[c.strip() for c in line.strip("|").split("|")][at] for line in lines[2:]]
    return cells


def test_frontier_and_matched_sections_print_the_one_vocabulary():
    rows = [_row("noise", 0.02), _row("yes", 0.001), _row("no", 0.001)]
    results = {"shared_seeds": [], "prompts": ["a"], "seeds": [0], "seconds": 1.0, "specs": {},
               "curves": {}, "matched": rows}
    frontier_text = render._frontier_text(results)
    matched_text = render._matched_text(SimpleNamespace(matched_rows=rows))
    for text in (frontier_text, matched_text):
        cells = _verdict_cells(text)
        assert cells == [WORDS["noise"], WORDS["yes"], WORDS["no"]], text
        assert "| noise |" not in text
    assert [r["verdict"] for r in rows] == ["noise", "yes", "no"]  # results.json keeps the keys


def test_the_renderer_would_show_a_raw_key_without_the_vocabulary():
    """Negative control: the check above reads the table's verdict column."""
    table = markdown_table([_row("noise", 0.02)], render.MATCHED_COLUMNS)
    assert _verdict_cells(table) == ["noise"]


def _images(n: int) -> list[np.ndarray]:
    return [np.full((4, 4, 3), 40 * i, dtype=np.uint8) for i in range(n)]


def test_samples_grid_labels_rows_and_columns():
    columns = ["astronaut\nseed 0", "coffee\nseed 0", "rocket\nseed 0"]
    fig = plots.image_grid({"AR": _images(3), "GSD (G=50)": _images(3)}, columns=columns)
    axes = np.array(fig.axes).reshape(2, 3)
    assert [ax.get_ylabel() for ax in axes[:, 0]] == ["AR", "GSD (G=50)"]
    assert [ax.get_title() for ax in axes[0]] == columns
    assert all(ax.get_title() == "" for ax in axes[1])  # labelled once, over the top row
    with pytest.raises(ValueError, match="column labels"):
        plots.image_grid({"AR": _images(3)}, columns=columns[:2])


def test_sample_columns_name_prompt_and_seed_and_refuse_mismatched_rows():
    def rec(prompt, seed):
        return SimpleNamespace(prompt=prompt, seed=seed)

    same = {"AR": [rec("astronaut", 0), rec("coffee", 1)],
            "SJD": [rec("astronaut", 0), rec("coffee", 1)]}
    assert figures._sample_columns(same) == ["astronaut\nseed 0", "coffee\nseed 1"]
    with pytest.raises(ValueError, match="different prompts or seeds"):
        figures._sample_columns({"AR": [rec("astronaut", 0)], "SJD": [rec("coffee", 0)]})
