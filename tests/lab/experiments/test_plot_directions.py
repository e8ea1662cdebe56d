"""Every plotted metric declares its better direction (``plots.BETTER``), and the panels say it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gsd_lab.experiments import plots

ROWS = {"GSD": [{"method": "GSD (G=3)", "nfe": 40.0, "distortion": 0.02, "w1": 0.01},
                {"method": "GSD (G=10)", "nfe": 30.0, "distortion": 0.05, "w1": 0.03}],
        "AR": [{"method": "AR", "nfe": 64.0, "distortion": 0.0, "w1": 0.0}]}


def _titles(fig) -> dict[str, str]:
    """y label -> title of the full-range (log NFE) panels."""
    return {ax.get_ylabel(): ax.get_title() for ax in fig.axes if ax.get_xscale() == "log"}


def test_w1_and_tv_panels_say_lower_is_better():
    titles = _titles(plots.distortion_vs_nfe(ROWS))
    assert len(titles) == 2
    for label, title in titles.items():
        assert "better: down-left" in title and "lower" in title, (label, title)
        assert "higher" not in title, (label, title)
    assert plots.better("w1") == "lower" and plots.better("distortion") == "lower"


@pytest.mark.parametrize("key, direction", [("condition_score", "higher"),
                                            ("frechet_distance", "lower"),
                                            ("w1", "lower"), ("distortion", "lower")])
def test_pareto_titles_follow_the_declared_direction(key, direction):
    rows = {"GSD": [{"method": "GSD (G=3)", "nfe": 40.0, key: 1.0},
                    {"method": "GSD (G=10)", "nfe": 30.0, key: 2.0}]}
    (title,) = _titles(plots.pareto(rows, [(key, key)])).values()
    corner = "down" if direction == "lower" else "up"
    assert title.startswith(f"better: {corner}-left") and title.endswith(f"{direction})")


def test_a_metric_without_a_direction_cannot_be_plotted():
    rows = {"GSD": [{"method": "GSD (G=3)", "nfe": 40.0, "sharpness": 1.0}]}
    with pytest.raises(ValueError, match="sharpness.*no declared better direction"):
        plots.pareto(rows, [("sharpness", "sharpness")])
    with pytest.raises(ValueError, match="sharpness"):
        plots.bars([{"method": "AR", "sharpness": 1.0}], [("sharpness", "sharpness")])


def test_bars_name_the_direction_unless_the_label_does():
    rows = [{"method": "AR", "nfe": 64.0, "w1": 0.0}, {"method": "GSD", "nfe": 30.0, "w1": 0.02}]
    fig = plots.bars(rows, [("nfe", "NFE per image"), ("w1", "W1 (lower better)")])
    assert fig.axes[0].get_xlabel() == "NFE per image (lower better)"
    w1_label = fig.axes[1].get_xlabel()
    assert w1_label.startswith("W1 (lower better)") and "higher" not in w1_label


def test_every_model_quality_metric_has_a_direction_and_its_label_agrees():
    """The quality metrics the image models plot (``quality_names`` in image_model.py): each is
    declared, and a label that names a direction names the declared one."""
    source = Path(plots.__file__).with_name("image_model.py").read_text()
    found = 0
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.keyword) and node.arg == "quality_names"
                and isinstance(node.value, ast.Dict)):
            for key, label in zip(node.value.keys, node.value.values):
                direction = plots.better(key.value)  # raises for an undeclared metric
                other = "lower" if direction == "higher" else "higher"
                assert f"{other} better" not in label.value, (key.value, label.value)
                found += 1
    assert found >= 3  # the stand-in's two metrics and Lumina-mGPT's CLIP score
