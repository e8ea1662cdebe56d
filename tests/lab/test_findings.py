"""README's rendered blocks and the claims ledger follow figures/results.json (no hand-copied
number can drift), and the rendering reads the results rather than a template."""

from __future__ import annotations

import copy

import pytest

from gsd_lab.cli import main
from gsd_lab.experiments import findings, ledger, paper

RESULTS = ledger.load_results()


def test_committed_readme_blocks_equal_the_rendering_of_committed_results():
    text = findings.README.read_text()
    for (start, end), block in findings.rendered_blocks(RESULTS).items():
        assert findings.committed_block(text, start, end) == block, "run python -m gsd_lab readme"


def test_committed_claims_page_equals_the_ledger_of_committed_results():
    assert ledger.CLAIMS_MD.read_text() == ledger.ledger_markdown(RESULTS)


def test_readme_check_command_passes_on_the_committed_tree():
    assert main(["readme", "--check"]) == 0


def test_findings_follow_the_numbers_and_the_verdicts():
    results = copy.deepcopy(RESULTS)
    table1 = results["tables"]["table1"]
    mc = next(r for r in table1 if r["method"] == "MC-SJD (maximal)")
    gsd = next(r for r in table1 if r["method"] == "GSD (G=50)")
    before = findings.render_findings(results)
    assert f"{gsd['nfe']:.1f} NFE" in before or f"against {gsd['nfe']:.1f}" in before
    # MC-SJD far below GSD on every image: the phrase must change from the noise to "fewer".
    mc["per_image"]["nfe"] = [v - 30 - i % 2 for i, v in enumerate(gsd["per_image"]["nfe"])]
    mc["nfe"] = sum(mc["per_image"]["nfe"]) / len(mc["per_image"]["nfe"])
    after = findings.render_findings(results)
    assert after != before
    assert "against GSD G = 50" in after and "fewer forwards, at zero distortion" in after
    assert f"{mc['nfe']:.1f} against {gsd['nfe']:.1f}" in after


def test_table1_names_the_batch_of_a_batched_run():
    """A run decoded at batch B > 1 says so in README's wall column and caption (each image's
    wall time is then its share of batched forwards); a batch-1 run keeps the plain column."""
    results = copy.deepcopy(RESULTS)
    results["config"]["batch_size"] = 1
    plain = findings.render_table1(results)
    assert "| speed-up (CPU wall) |" in plain and "per forward" not in plain
    results["config"]["batch_size"] = 8
    batched = findings.render_table1(results)
    assert "| speed-up (CPU wall, batch 8) |" in batched
    assert "Decoded 8 images of a configuration per forward" in batched


def test_findings_box_is_at_most_eight_lines_and_names_the_stand_in():
    block = findings.render_findings(RESULTS)
    assert len(block.splitlines()) <= 8
    assert "stand-in" in block and "have not run" in block


def test_missing_row_is_a_clear_error():
    results = copy.deepcopy(RESULTS)
    results["tables"]["table1"] = [r for r in results["tables"]["table1"] if r["method"] != "SJD"]
    with pytest.raises(ValueError, match="'SJD'"):
        findings.render_findings(results)


def test_replace_block_needs_its_markers():
    with pytest.raises(ValueError, match="markers"):
        findings.replace_block("no markers here", "x")
    text = f"a\n{findings.START}\nold\n{findings.END}\nb"
    assert findings.replace_block(text, "new") == f"a\n{findings.START}\nnew\n{findings.END}\nb"


def test_ledger_has_every_claim_headline_first_with_known_statuses():
    rows = ledger.ledger(RESULTS)
    assert {r["status"] for r in rows} <= set(ledger.STATUS.values())
    assert rows[0]["claim"].startswith("GSD (G=50) loses less quality than Amplify")
    claims = [r["claim"] for r in rows]
    theorem = next(r for r in rows if r["claim"].startswith("Theorem 1"))
    assert theorem["status"] == "not reproduced" and "898/975" in theorem["here"]
    assert claims.index(theorem["claim"]) < claims.index("SJD: NFE speed-up over AR")
    for item in paper.NOT_REPRODUCED:
        assert next(r for r in rows if r["claim"] == item["analysis"])["status"] == "not run"
    for r in rows:  # a noise verdict on a paired difference states what the run cannot exclude
        if r["status"] == "noise" and "MC-SJD" in r["claim"]:
            assert r["interval"].startswith("[")


def test_ledger_without_a_run_is_not_run_except_the_exact_counterexample():
    rows = ledger.ledger({"tables": {}})
    assert {r["status"] for r in rows if not r["claim"].startswith("Theorem 1")} == {"not run"}


def test_show_ledger_prints_the_table(capsys):
    paper.show_ledger(RESULTS)
    out = capsys.readouterr().out
    assert out.startswith("| claim | paper | here | status |") and "Theorem 1" in out


def test_relative_links_of_readme_and_docs_resolve():
    """Every relative link of README.md and docs/*.md names a file of the repository (the long
    sections moved to docs/, so a stale link would be easy to miss)."""
    import re

    pages = [findings.README, *sorted((ledger.REPO / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
