"""Numbers in prose rendered (``gsd_lab.experiments.prose``): every rendered document equals its
rendering from the committed ``figures/results.json``; the expressions of value spans. The check
for unmarked numerals: tests/tooling/test_prose_lint.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from gsd_lab.experiments import prose

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


def test_load_reads_a_jsonl_log_as_its_records():
    records = prose.evaluate('load("benchmarks/results/gpu_lumina_shapes_h200.jsonl")', {})
    assert isinstance(records, list) and len(records) >= 1 and "forward_ms" in records[-1]
    with pytest.raises(ValueError, match="committed JSON"):
        prose.evaluate('load("README.md")', {})


