"""The prose check (``prose_lint``): no document has a hand-written numeral that no reviewed rule
explains (strict: render it, quote it with its source, or remove it), every ``from`` span's
numerals occur in its file, every ``paper`` span names a public source."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from gsd_lab.experiments import prose

# tests/tooling/prose_lint.py, beside this file, loaded by its path (whatever the import mode)
SPEC = importlib.util.spec_from_file_location(
    "prose_lint", Path(__file__).with_name("prose_lint.py")
)
prose_lint = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = prose_lint  # its frozen dataclass looks its module up there
SPEC.loader.exec_module(prose_lint)


def _name(path: Path) -> str:
    return path.relative_to(prose.REPO).as_posix()


def test_the_check_flags_hand_written_numbers_and_allows_the_reviewed_kinds():
    text = "\n".join([
        "GSD needs 55.6 forwards, 12% fewer.",  # measured: flagged (55.6 and 12)
        "With G = 50 and k=2, window `--window 16` (proofs/04, arXiv 2508.07747, 2025).",
        "Token 0 and 1; $\\alpha = 14/15$; commit 882ef34; v3.1; float16; 1e-12; 15/2.",
        "<!-- value: seconds -->1016<!-- /value -->",
        "<!-- paper: paper.md 1.2 -->50-95%<!-- /paper -->",
        "```", "python -c 'print(0.7)'", "```",
        "As issue 27 asked.",  # an issue citation: flagged
        "Cf. transformers#32867 and owner/repo#47932; a bare #28 is flagged.",
    ])
    assert [n.text for n in prose_lint.unmarked(text)] == ["55.6", "12", "27", "28"]


def test_from_spans_are_found_in_their_files():
    problems = []
    for path in prose.documents():
        spans = prose_lint.check_from_spans(prose.markdown_of(path))
        problems += [f"{_name(path)}: {p}" for p in spans]
    assert problems == []
    assert prose_lint.check_from_spans("<!-- from: README.md -->0.123456789<!-- /from -->")


def test_no_document_has_hand_written_numerals():
    found = {_name(p): prose_lint.unmarked_in(p) for p in prose.documents()}
    assert len(found) > 10  # README, docs/, proofs/, notebooks, the weights' README
    bad = {name: [f"{n.line}: {n.text} | {n.context}" for n in numerals][:10]
           for name, numerals in found.items() if numerals}
    assert bad == {}, "render (value span), quote (from / paper span) or remove these numerals"


def test_from_spans_accept_code_spellings_of_a_large_number(tmp_path, monkeypatch):
    """7,013,158,912 in prose matches ``7_013_158_912`` or ``7013158912`` in its file; a number
    the file does not hold is still reported (negative control)."""
    monkeypatch.setattr(prose, "REPO", tmp_path)
    (tmp_path / "t.py").write_text("assert n == 7_013_158_912\nassert m == 39294851\n")
    span = "<!-- from: t.py -->7,013,158,912 and 39,294,851<!-- /from -->"
    assert prose_lint.check_from_spans(span) == []
    assert prose_lint.check_from_spans("<!-- from: t.py -->7,013,666,816<!-- /from -->") == [
        "from: 7,013,666,816 does not occur in t.py"]


def test_a_dollar_in_code_does_not_open_math_that_hides_prose():
    text = "Write to `$OUT/x.jsonl`.\n\nGSD needs 55.6 forwards.\n\nThen $E = N - 13$ holds."
    assert [n.text for n in prose_lint.unmarked(text)] == ["55.6"]


def test_paper_spans_name_public_sources():
    """A paper span's source is where a reader can look: a publication or a public repository,
    not the team's notes outside this repository (``paper.md``, ``reference/...``)."""
    private = re.compile(r"paper\.md|reference/|shared/")
    found = {
        _name(p): [m["source"] for m in prose_lint.PAPER.finditer(p.read_text(encoding="utf-8"))
                   if private.search(m["source"])]
        for p in prose.documents()
    }
    assert not {k: v for k, v in found.items() if v}, found
    assert private.search("paper.md 1.2") and not private.search("GSD paper (arXiv 2508.07747)")
