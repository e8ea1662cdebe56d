"""Numbers in prose (``gsd_lab.io.prose``): every rendered document equals its rendering from the
committed ``figures/results.json``, every ``from`` span's numerals occur in its file, and no
document has a hand-written numeral that no reviewed rule explains (strict: render it, quote it
with its source, or remove it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gsd_lab.io import prose

RESULTS = {
    "tables": {"t": [{"method": "A", "nfe": 12.345}, {"method": "B", "nfe": 10.0}]},
    "seconds": 1016.4,
    "git": {"commit": "882ef34c7746"},
}


def _name(path: Path) -> str:
    return path.relative_to(prose.REPO).as_posix()


def test_every_document_equals_its_rendering():
    results = prose.load_results()
    stale = [_name(p) for p in prose.stale_documents(results)]
    assert stale == [], f"re-render with python -m gsd_lab readme: {stale}"


def test_the_documents_hold_rendered_spans():
    """The check is not vacuous: the converted documents carry value spans."""
    for name in ("docs/lossless-frontier.md", "docs/optimal-lossy.md", "docs/standin.md",
                 "docs/reproducibility.md"):
        assert prose.VALUE.search((prose.REPO / name).read_text()), name


def test_render_replaces_the_text_and_keeps_the_marker():
    text = ('a <!-- value: row(tables.t, "A").nfe - row(tables.t, "B").nfe fmt=+.1f -->0<!-- /value'
            ' --> b <!-- value: seconds fmt=,.0f -->x<!-- /value --> `<!-- value: short(git.commit)'
            ' -->?<!-- /value -->`')
    out = prose.render(text, RESULTS)
    assert out == ('a <!-- value: row(tables.t, "A").nfe - row(tables.t, "B").nfe fmt=+.1f -->+2.3'
                   '<!-- /value --> b <!-- value: seconds fmt=,.0f -->1,016<!-- /value --> '
                   '`<!-- value: short(git.commit) -->882ef34<!-- /value -->`')
    assert prose.render(out, RESULTS) == out  # idempotent


def test_one_comparison_renders_yes_or_no():
    # RESULTS has seconds = 1016.4: above a quarter hour (900 s), above 1000 s.
    assert prose.render("<!-- value: seconds <= 15 * 60 -->?<!-- /value -->", RESULTS).endswith(
        "-->no<!-- /value -->")
    assert prose.render("<!-- value: seconds > 1000 -->?<!-- /value -->", RESULTS).endswith(
        "-->yes<!-- /value -->")


@pytest.mark.parametrize(
    "expr",
    ["tables.missing", "__import__('os')", "tables.t[0].nfe.__class__", "open('x')",
     "tables.t[5]", "0 < seconds < 2000", "seconds == 1016", "seconds in [1016]"],
)
def test_bad_expressions_are_refused(expr):
    with pytest.raises((KeyError, IndexError, ValueError, AttributeError)):
        prose.render(f"<!-- value: {expr} -->?<!-- /value -->", RESULTS)


def test_detectable_is_two_plus_z80_standard_errors():
    from gsd_lab.experiments.verdicts import minimum_detectable

    assert prose.evaluate("detectable(1.0)", {}) == minimum_detectable(1.0)  # the one rule
    assert prose.evaluate("detectable(1.0)", {}) == pytest.approx(2.8416, abs=1e-4)


def test_the_check_flags_hand_written_numbers_and_allows_the_reviewed_kinds():
    text = "\n".join([
        "GSD needs 55.6 forwards, 12% fewer.",  # measured: flagged (55.6 and 12)
        "With G = 50 and k=2, window `--window 16` (proofs/04, arXiv 2508.07747, 2025).",
        "Token 0 and 1; $\\alpha = 14/15$; commit 882ef34; v3.1; float16; 1e-12; 15/2.",
        "<!-- value: seconds -->1016<!-- /value -->",
        "<!-- paper: paper.md 1.2 -->50-95%<!-- /paper -->",
        "```", "python -c 'print(0.7)'", "```",
        "As issue 27 asked.",  # an issue citation: flagged
    ])
    assert [n.text for n in prose.unmarked(text)] == ["55.6", "12", "27"]


def test_from_spans_are_found_in_their_files():
    problems = []
    for path in prose.documents():
        problems += [f"{_name(path)}: {p}" for p in prose.check_from_spans(prose.markdown_of(path))]
    assert problems == []
    assert prose.check_from_spans("<!-- from: README.md -->0.123456789<!-- /from -->")


def test_no_document_has_hand_written_numerals():
    found = {_name(p): prose.unmarked_in(p) for p in prose.documents()}
    assert len(found) > 10  # README, docs/, proofs/, notebooks, the weights' README
    bad = {name: [f"{n.line}: {n.text} | {n.context}" for n in numerals][:10]
           for name, numerals in found.items() if numerals}
    assert bad == {}, "render (value span), quote (from / paper span) or remove these numerals"


def test_word_renders_a_stored_verdict_in_the_one_vocabulary():
    from gsd_lab.experiments.verdicts import WORDS

    for key, shown in WORDS.items():
        assert prose.evaluate(f"word({key!r})", {}) == shown
    with pytest.raises(ValueError, match="unknown verdict"):
        prose.evaluate("word('same')", {})


def test_no_document_shows_a_verdict_key_outside_the_vocabulary():
    """A value span that renders a stored verdict goes through ``word``: "noise" never shows."""
    for path in prose.documents():
        for match in prose.VALUE.finditer(prose.markdown_of(path)):
            if match["expr"].strip().endswith(".verdict"):
                raise AssertionError(f"{path.name}: {match['expr']} renders a raw verdict key")


def test_from_spans_accept_code_spellings_of_a_large_number(tmp_path, monkeypatch):
    """7,013,158,912 in prose matches ``7_013_158_912`` or ``7013158912`` in its file; a number
    the file does not hold is still reported (negative control)."""
    monkeypatch.setattr(prose, "REPO", tmp_path)
    (tmp_path / "t.py").write_text("assert n == 7_013_158_912\nassert m == 39294851\n")
    span = "<!-- from: t.py -->7,013,158,912 and 39,294,851<!-- /from -->"
    assert prose.check_from_spans(span) == []
    assert prose.check_from_spans("<!-- from: t.py -->7,013,666,816<!-- /from -->") == [
        "from: 7,013,666,816 does not occur in t.py"]


def test_load_reads_a_jsonl_log_as_its_records():
    records = prose.evaluate('load("benchmarks/results/gpu_lumina_shapes_h200.jsonl")', {})
    assert isinstance(records, list) and len(records) >= 1 and "forward_ms" in records[-1]
    with pytest.raises(ValueError, match="committed JSON"):
        prose.evaluate('load("README.md")', {})


def test_a_dollar_in_code_does_not_open_math_that_hides_prose():
    text = "Write to `$OUT/x.jsonl`.\n\nGSD needs 55.6 forwards.\n\nThen $E = N - 13$ holds."
    assert [n.text for n in prose.unmarked(text)] == ["55.6"]


def test_paper_spans_name_public_sources():
    """A paper span's source is where a reader can look: a publication or a public repository,
    not the team's notes outside this repository (``paper.md``, ``reference/...``)."""
    private = re.compile(r"paper\.md|reference/|shared/")
    found = {
        _name(p): [m["source"] for m in prose.PAPER.finditer(p.read_text(encoding="utf-8"))
                   if private.search(m["source"])]
        for p in prose.documents()
    }
    assert not {k: v for k, v in found.items() if v}, found
    assert private.search("paper.md 1.2") and not private.search("GSD paper (arXiv 2508.07747)")
