"""The helpers that shape what a notebook or the site shows: ``nbcheck.weights_line`` (no machine
path in a stored output), ``course.table_parts`` and ``show_tables`` (a wide table in narrow
parts), ``ledger.show_ledger(columns=)``, ``plots._zoom_range`` (the crowded NFE range) and the
site's ``plain_text_docstring`` (docs/site/docstrings.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gsd_lab.experiments import ledger, plots
from gsd_lab.teaching import course, nbcheck

ROOT = Path(__file__).resolve().parents[3]


# ---- nbcheck.weights_line --------------------------------------------------------------------

def test_weights_line_names_no_machine_path(monkeypatch, tmp_path):
    home = tmp_path / "home" / "someone"
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: home))
    line = nbcheck.weights_line({
        "inside": str(ROOT / "gsd_lab" / "standin" / "weights" / "model.safetensors"),
        "home": str(home / "models" / "lumina-mgpt-7b-768"),
        "elsewhere": "/mnt/scratch/run7/vqgan.ckpt",  # neither: only its name
        "relative": "weights/model.safetensors",
        "count": 3,
        "none": None,
    })
    assert line.startswith("weights: {")
    assert "'inside': 'gsd_lab/standin/weights/model.safetensors'" in line
    assert "'home': '~/models/lumina-mgpt-7b-768'" in line
    assert "'elsewhere': 'vqgan.ckpt'" in line
    assert "'relative': 'weights/model.safetensors'" in line
    assert "'count': 3" in line and "'none': None" in line
    assert str(tmp_path) not in line and "/mnt/" not in line and str(ROOT) not in line


# ---- course.table_parts and show_tables ------------------------------------------------------

WIDE = ["method", "nfe", "speedup", "acceptance", "distortion", "w1_distance", "condition_score",
        "realness"]


def test_table_parts_splits_a_wide_table_by_prefix_method_first():
    parts = course.table_parts(WIDE)
    assert parts == {
        "forward passes and acceptance": ["method", "nfe", "speedup", "acceptance"],
        "exact distortion": ["method", "distortion", "w1_distance"],
        "quality": ["method", "condition_score", "realness"],
    }
    # every column shown exactly once, besides the key of each part
    assert sorted(c for cols in parts.values() for c in cols[1:]) == sorted(WIDE[1:])


def test_table_parts_keeps_a_narrow_table_whole_and_drops_empty_parts():
    narrow = ["method", "nfe", "distortion", "condition_score", "realness"]
    assert course.table_parts(narrow) == {"": narrow}
    no_distortion = ["method", "nfe", "speedup", "acceptance", "condition_score", "realness"]
    assert list(course.table_parts(no_distortion)) == ["forward passes and acceptance", "quality"]


def test_show_tables_shows_each_part_with_the_rows_that_fill_it(monkeypatch):
    pytest.importorskip("IPython")
    import IPython.display

    shown: list[str] = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **_: shown.append(obj.data))
    rows = [
        {"method": "AR", "nfe": 100.0, "speedup": 1.0, "acceptance": None, "distortion": 0.0,
         "w1_distance": 0.0, "condition_score": 50.0, "realness": 0.5, "wall_seconds": 9.0},
        {"method": "GSD (G=50)", "nfe": 40.0, "speedup": 2.5, "acceptance": 0.3,
         "distortion": 0.12, "w1_distance": 0.01, "condition_score": 48.0, "realness": 0.4,
         "wall_seconds": 4.0},
        {"method": "Lumina-only", "nfe": None, "speedup": None, "acceptance": None,
         "distortion": None, "w1_distance": None, "condition_score": 47.0, "realness": None},
    ]
    course.show_tables(rows)
    assert len(shown) == 4  # three parts, then the wall time apart
    speed, distortion, quality, wall = shown
    assert speed.startswith("**forward passes and acceptance**") and "Lumina-only" not in speed
    assert distortion.startswith("**exact distortion**") and "GSD (G=50)" in distortion
    assert "Lumina-only" not in distortion
    assert quality.startswith("**quality**") and "Lumina-only" in quality
    assert all("wall_seconds" not in part for part in (speed, distortion, quality))
    assert wall.startswith("CPU wall time") and "wall_seconds" in wall


# ---- ledger.show_ledger(columns=) ------------------------------------------------------------

def test_show_ledger_shows_the_columns_asked_for(capsys):
    ledger.show_ledger(columns=("claim", "verdict"))
    header = capsys.readouterr().out.splitlines()[0]
    assert [c.strip() for c in header.strip("|").split("|")] == ["claim", "verdict"]


def test_show_ledger_names_an_unknown_column():
    with pytest.raises(ValueError, match=r"no columns \['verdicts'\]"):
        ledger.show_ledger(columns=("claim", "verdicts"))


# ---- plots._zoom_range -----------------------------------------------------------------------

def test_zoom_range_spans_gsd_mc_gsd_and_sjd_only():
    points = {
        "GSD": [{"nfe": 300.0}, {"nfe": 420.0}],
        "MC-GSD (maximal)": [{"nfe": 250.0}],
        "SJD": [{"nfe": 600.0}],
        "Amplify": [{"nfe": 100.0}],  # not in the crowd: outside the zoom
        "MC-SJD (maximal)": [{"nfe": 900.0}],
        "AR": [{"nfe": 2000.0}],
    }
    low, high = plots._zoom_range(points)
    assert low == pytest.approx(250.0 / 1.05) and high == pytest.approx(600.0 * 1.05)


def test_zoom_range_needs_two_points():
    assert plots._zoom_range({"SJD": [{"nfe": 600.0}], "Amplify": [{"nfe": 1.0}]}) is None
    assert plots._zoom_range({}) is None


# ---- docs/site/docstrings.py -----------------------------------------------------------------

def _docstrings():
    spec = importlib.util.spec_from_file_location("site_docstrings",
                                                  ROOT / "docs" / "site" / "docstrings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.plain_text_docstring


def test_plain_text_docstring_keeps_formulas_bullets_and_bars_as_written():
    convert = _docstrings()
    lines = [
        "Accept with probability:",
        "",
        "    a(x) = min(1, p(x) / q(x))",
        "",
        "TV is |p - q| / 2, not ``|p|``:",
        "- one bullet",
        "  its continuation",
        "- ``key``s",
    ]
    out = convert(lines)
    assert out[0] == "Accept with probability::"  # the formula becomes a literal block
    assert "    a(x) = min(1, p(x) / q(x))" in out
    assert r"TV is \|p - q\| / 2, not ``|p|``:" in out  # a bar is a character, not inside ``..``
    at = out.index("- one bullet")
    assert out[at - 1] == "" and out[at + 1] == "  its continuation"  # a list after a blank line
    assert r"- ``key``\ s" in out


def test_plain_text_docstring_shows_an_indented_table_verbatim():
    convert = _docstrings()
    out = convert(["The rows:", "  G  | NFE", "  50 | 40", "After."])
    assert out[:4] == ["The rows::", "", "  G  | NFE", "  50 | 40"]
    assert out[-2:] == ["", "After."]
