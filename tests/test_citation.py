"""LICENSE and CITATION.cff agree with pyproject.toml, and CITATION.cff's example of citing a
figure names the committed figures run (results.json's commit and date)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
ROOT = Path(__file__).resolve().parents[1]


def test_license_and_citation_match_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert project["license"]["text"] == citation["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    assert citation["version"] == project["version"]
    for key in ("date-released", "title", "authors", "preferred-citation"):
        assert citation.get(key), key


def test_citation_names_no_placeholder_address():
    """repository-code is left out until a public URL exists: no placeholder may stand in."""
    text = (ROOT / "CITATION.cff").read_text()
    citation = yaml.safe_load(text)
    assert "example.invalid" not in text and "REPLACE" not in text
    if "repository-code" in citation:
        assert citation["repository-code"].startswith("https://"), citation["repository-code"]


def test_the_figure_citation_example_names_the_committed_run():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    results = json.loads((ROOT / "figures" / "results.json").read_text())
    assert f"commit {results['git']['commit'][:7]}" in citation["message"]
    assert results["created_utc"][:10] in citation["message"]
    assert str(citation["date-released"]) == results["created_utc"][:10]
