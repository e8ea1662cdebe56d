"""README's rendered blocks and the claims ledger follow figures/results.json (no hand-copied
number can drift), and the rendering reads the results rather than a template."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from gsd_lab.cli import main
from gsd_lab.experiments import claims, findings, judges, ledger, paper
from gsd_lab.experiments.verdicts import NOISE_Z, WORDS, minimum_detectable, paired_difference

RESULTS = ledger.load_results()


def test_committed_readme_blocks_equal_the_rendering_of_committed_results():
    documents = findings.rendered_blocks(RESULTS)
    assert set(documents) == {findings.README, findings.FINDINGS_MD}
    for path, blocks in documents.items():
        text = path.read_text()
        for (start, end), block in blocks.items():
            assert findings.committed_block(text, start, end) == block, (
                f"{path.name}: run python -m gsd_lab readme")


def _ids_findings_rows_reads() -> set[str]:
    """The claim ids the full findings table reads (every ``found[cid]`` of ``findings_rows``)."""
    from unittest import mock

    read: set[str] = set()

    class Recording(dict):
        def __getitem__(self, cid):
            read.add(cid)
            return super().__getitem__(cid)

    real = findings.claims.of_results
    with mock.patch.object(findings.claims, "of_results", lambda r: Recording(real(r))):
        findings.findings_rows(RESULTS)
    return read


def test_readme_answer_is_one_row_per_finding_linked_to_the_ledger():
    """README's answer: the caveat first, at most eight rows, each opening with a word of the one
    vocabulary and linking to ledger ids that exist as anchors of docs/claims.md; every claim of
    the full findings table is in one of them (grouped, not dropped)."""
    import re

    block = findings.render_answer(RESULTS)
    first, rest = block.split("\n\n", 1)
    assert "stand-in" in first and "have not run" in first
    rows = findings.answer_rows(RESULTS)
    assert 0 < len(rows) <= 8 and len(rest.splitlines()) == len(rows) + 2
    anchors = set(re.findall(r'<a id="([a-z0-9_]+)"></a>', ledger.CLAIMS_MD.read_text()))
    ids = {r["id"] for r in ledger.ledger(RESULTS)}
    assert anchors == ids
    linked = []
    for row in rows:
        answer = row[findings.ANSWER_COLUMNS[1]]
        parts = [p.split(": ", 1)[-1] for p in answer.split("; ")]
        assert any(answer.startswith(w) or any(p.startswith(w) for p in parts)
                   for w in WORDS.values()), answer
        found = re.findall(r"\(docs/claims\.md#([a-z0-9_]+)\)", row[findings.ANSWER_COLUMNS[0]])
        assert found and set(found) <= anchors, row
        linked += found
    used = _ids_findings_rows_reads()
    assert len(findings.findings_rows(RESULTS)) > len(rows)  # one row per compared pair
    assert set(BEYOND_IDS) <= used  # the k = 2, 4, 8 drafts against MC-SJD and MC-GSD: one row
    assert used <= set(linked), f"claims of the full table missing from README's answer: " \
        f"{sorted(used - set(linked))}"
    assert len({r[findings.ANSWER_COLUMNS[0]] for r in rows}) == len(rows)


def test_readme_answer_follows_the_numbers():
    results = copy.deepcopy(RESULTS)
    mc = next(r for r in results["tables"]["table1"] if r["method"] == "MC-SJD (maximal)")
    gsd = next(r for r in results["tables"]["table1"] if r["method"] == "GSD (G=50)")
    mc["per_image"]["nfe"] = [v - 30 - i % 2 for i, v in enumerate(gsd["per_image"]["nfe"])]
    row = next(r for r in findings.answer_rows(results)
               if "mc_sjd_maximal_fewer_nfe_than_gsd" in r[findings.ANSWER_COLUMNS[0]])
    assert row[findings.ANSWER_COLUMNS[1]].startswith("yes, -30.5 [")


def test_readme_is_a_front_door():
    """At most 150 lines, the answer's table within its first screen (50 rows)."""
    lines = findings.README.read_text().splitlines()
    assert len(lines) <= 150
    head = "| " + " | ".join(findings.ANSWER_COLUMNS) + " |"
    assert head in lines[:50]


def test_committed_claims_page_equals_the_ledger_of_committed_results():
    assert ledger.CLAIMS_MD.read_text() == ledger.ledger_markdown(RESULTS)


def test_readme_check_command_passes_on_the_committed_tree():
    assert main(["readme", "--check"]) == 0


def test_findings_follow_the_numbers_and_the_verdicts():
    results = copy.deepcopy(RESULTS)
    table1 = results["tables"]["table1"]
    mc = next(r for r in table1 if r["method"] == "MC-SJD (maximal)")
    gsd = next(r for r in table1 if r["method"] == "GSD (G=50)")
    question = "Does a lossless decoder (MC-SJD, coupled drafts) need fewer forwards than GSD?"

    def lossless_row(results):
        return next(r for r in findings.findings_rows(results) if r["question"] == question)

    before = lossless_row(results)
    diff = paired_difference(mc, gsd, "nfe")
    low, high = diff.difference - NOISE_Z * diff.se, diff.difference + NOISE_Z * diff.se
    assert before["A - B [+- 2 SE]"] == (
        f"MC-SJD (maximal) - GSD (G=50), NFE: {diff.difference:+.1f} [{low:+.1f}, {high:+.1f}]"
    )
    assert before["n"] == str(gsd["images"])
    # MC-SJD far below GSD on every image: the answer must change to "yes".
    mc["per_image"]["nfe"] = [v - 30 - i % 2 for i, v in enumerate(gsd["per_image"]["nfe"])]
    mc["nfe"] = sum(mc["per_image"]["nfe"]) / len(mc["per_image"]["nfe"])
    after = lossless_row(results)
    assert after["answer"].startswith("yes: MC-SJD needs fewer")
    assert after["A - B [+- 2 SE]"].startswith("MC-SJD (maximal) - GSD (G=50), NFE: -30.5 [")
    # And far above: "no".
    mc["per_image"]["nfe"] = [v + 30 + i % 2 for i, v in enumerate(gsd["per_image"]["nfe"])]
    assert lossless_row(results)["answer"].startswith("no: GSD needs fewer")


def test_a_noise_answer_names_what_the_run_could_have_detected():
    """Never "equal": a difference within the noise reads "no difference detected" with the
    smallest difference detectable at 80% power, (NOISE_Z + z_0.8) SE."""
    results = copy.deepcopy(RESULTS)
    table1 = results["tables"]["table1"]
    gsd = next(r for r in table1 if r["method"] == "GSD (G=50)")
    mc = next(r for r in table1 if r["method"] == "MC-SJD (maximal)")
    mc["per_image"]["nfe"] = [v + (1 if i % 2 else -1)
                              for i, v in enumerate(gsd["per_image"]["nfe"])]
    diff = paired_difference(mc, gsd, "nfe")
    row = next(r for r in findings.findings_rows(results)
               if r["question"].startswith("Does a lossless"))
    assert row["answer"].startswith(f"no difference detected (the run could detect |d| >= "
                                    f"{minimum_detectable(diff.se):.1f})")
    assert "same" not in row["answer"] and "equal" not in row["answer"]


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


def test_findings_are_a_table_after_the_stand_in_caveat():
    block = findings.render_findings(RESULTS)
    first, rest = block.split("\n\n", 1)
    assert "stand-in" in first and "have not run" in first  # the caveat comes first
    header = rest.splitlines()[0]
    assert header == "| " + " | ".join(findings.COLUMNS) + " |"
    rows = findings.findings_rows(RESULTS)
    assert len(rest.splitlines()) == len(rows) + 2
    for row in rows:  # every answer opens with a word of the one vocabulary
        assert any(row["answer"].startswith(w) for w in WORDS.values()), row["answer"]


def test_a_missing_row_is_not_run_not_invented():
    results = copy.deepcopy(RESULTS)
    results["tables"]["table1"] = [r for r in results["tables"]["table1"] if r["method"] != "SJD"]
    row = findings.findings_rows(results)[0]
    assert row["question"].startswith("Does GSD (G = 50) need fewer forwards than SJD")
    assert row["answer"].startswith("not run") and row["A - B [+- 2 SE]"] == "-"
    assert "not run" in findings.render_findings(results)


def test_replace_block_needs_its_markers():
    with pytest.raises(ValueError, match="markers"):
        findings.replace_block("no markers here", "x")
    text = f"a\n{findings.START}\nold\n{findings.END}\nb"
    assert findings.replace_block(text, "new") == f"a\n{findings.START}\nnew\n{findings.END}\nb"


def test_ledger_has_every_claim_headline_first_with_known_verdicts():
    rows = ledger.ledger(RESULTS)
    assert {r["verdict"] for r in rows} <= set(WORDS.values())
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids) and ids[0] == "gsd_quality_above_amplify"
    theorem = rows[ids.index("theorem1_dynamic_clusters")]
    assert theorem["verdict"] == "no" and "898/975" in theorem["here"]
    assert ids.index("theorem1_dynamic_clusters") < ids.index("sjd_speedup_over_ar")
    for item in paper.NOT_REPRODUCED:
        assert rows[ids.index(item["id"])]["verdict"] == "not run"
        assert rows[ids.index(item["id"])]["claim"] == item["analysis"]
    for r in rows:  # a verdict on a paired difference shows the interval it was decided on
        if "MC-SJD" in r["claim"] and r["outcome"] != "not run":
            assert " [" in r["here"] and "(n = " in r["here"], r["here"]
        if r["outcome"] == "noise" and "MC-SJD" in r["claim"]:
            assert "detectable at 80% power" in r["here"]


def test_ledger_without_a_run_is_not_run_except_the_exact_counterexample(tmp_path, monkeypatch):
    monkeypatch.setattr(judges, "BENCHMARK_RESULTS", tmp_path)  # no committed benchmark files
    rows = ledger.ledger({"tables": {}})
    assert {r["verdict"] for r in rows if r["id"] != "theorem1_dynamic_clusters"} == {"not run"}


def test_show_ledger_prints_the_table(capsys):
    ledger.show_ledger(RESULTS)
    out = capsys.readouterr().out
    assert out.startswith("| claim | paper | here | verdict | note | source | id |")
    assert "| theorem1_dynamic_clusters |" in out


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


def test_results_md_claims_section_is_inserted_once_then_replaced():
    """results.md's claims section is re-rendered from results.json without decoding: inserted
    before "## Run" on a page without one, replaced in place afterwards (never duplicated)."""
    page = "# GSD results\n\n## Toy\n\ntoy\n\n## Run\n\n1 figure.\n"
    first = ledger.with_claims_section(page, RESULTS)
    assert first.index(f"## {ledger.SECTION}") < first.index("## Run")
    assert "| theorem1_dynamic_clusters |" in first
    assert ledger.with_claims_section(first, RESULTS) == first
    assert first.count(f"## {ledger.SECTION}") == 1
    with pytest.raises(ValueError, match="Run"):
        ledger.with_claims_section("# no sections\n", RESULTS)


BEYOND_IDS = (
    "block_verification_fewer_nfe_than_mc_sjd",
    *(f"multidraft_k{k}_fewer_nfe_than_{a}" for a in claims.MULTIDRAFT_AGAINST
      for k in claims.MULTIDRAFT_FILES),
)


def _beyond(results=RESULTS):
    return [r for r in findings.findings_rows(results) if r["question"].startswith(findings.BEYOND)]


def test_beyond_mc_sjd_rows_are_the_committed_benchmark_files(tmp_path, monkeypatch):
    """The lossless decoders' rows read benchmarks/results/ (not results.json): block verification
    against MC-SJD paired image by image from lossless_beyond_standin.json, k candidates against
    MC-SJD and MC-GSD from the multidraft files' paired differences; each names its file and its
    tokens processed per forward, the k rows their modelled time beside MC-SJD's, and a changed
    copy of a file changes its row."""
    rows = _beyond()
    assert [r["question"].split("? (")[1] for r in rows] == [
        "block verification vs MC-SJD)", "k = 2 drafts vs MC-SJD)", "k = 4 drafts vs MC-SJD)",
        "k = 8 drafts vs MC-SJD)", "k = 2 drafts vs MC-GSD, lossy)",
        "k = 4 drafts vs MC-GSD, lossy)", "k = 8 drafts vs MC-GSD, lossy)",
    ]
    block = json.loads((judges.BENCHMARK_RESULTS / claims.BLOCK_FILE).read_text())
    mine = {"nfe": [r["nfe"] for r in block["per_image"]["block"]], "prompt": None, "seed": None}
    theirs = {"nfe": block["per_image"]["stored_nfe"][claims.MC_MAXIMAL], "prompt": None,
              "seed": None}
    diff = paired_difference({"per_image": mine}, {"per_image": theirs}, "nfe")
    low, high = diff.difference - NOISE_Z * diff.se, diff.difference + NOISE_Z * diff.se
    assert rows[0]["A - B [+- 2 SE]"] == (
        f"SJD + block verification - MC-SJD (maximal), NFE: {diff.difference:+.1f} "
        f"[{low:+.1f}, {high:+.1f}]"
    )
    processed = block["summary"][claims.BLOCK_LABEL]["processed_per_forward"]
    assert rows[0]["answer"].endswith(
        f"; {processed:.1f} tokens processed per forward (benchmarks/results/{claims.BLOCK_FILE})"
    )
    k8 = json.loads((judges.BENCHMARK_RESULTS / claims.MULTIDRAFT_FILES[8]).read_text())
    found = k8["rows"]["MC-SJD, 8 candidates"]["moonshot"]
    low, high = (found["difference"] + z * NOISE_Z * found["se"] for z in (-1, 1))
    assert rows[-1]["A - B [+- 2 SE]"].endswith(
        f"NFE: {found['difference']:+.1f} [{low:+.1f}, {high:+.1f}]")
    modelled = k8["rows"]["MC-SJD, 8 candidates"]["modelled_read_times"]
    assert rows[-1]["answer"].endswith(f"; its modelled time {modelled:.1f} weight-read times "
                                       "per image, MC-SJD's (maximal, no candidates) 58.1 "
                                       "(roofline cost model)")
    # Modified copies: block far below MC-SJD on every image, k = 2 far above MC-SJD.
    for name in {claims.BLOCK_FILE, *claims.MULTIDRAFT_FILES.values()}:
        shutil.copy(judges.BENCHMARK_RESULTS / name, tmp_path / name)
    for i, (r, v) in enumerate(zip(block["per_image"]["block"], theirs["nfe"])):
        r["nfe"] = v - 30 - i % 2
    (tmp_path / claims.BLOCK_FILE).write_text(json.dumps(block))
    two = json.loads((tmp_path / claims.MULTIDRAFT_FILES[2]).read_text())
    two["rows"]["MC-SJD, 2 candidates"]["difference_to_mc_sjd"] = {"difference": 9.0, "se": 1.0}
    two["rows"]["MC-SJD, 2 candidates"]["tokens_processed_per_forward"] = 31.25
    (tmp_path / claims.MULTIDRAFT_FILES[2]).write_text(json.dumps(two))
    monkeypatch.setattr(judges, "BENCHMARK_RESULTS", tmp_path)
    changed = _beyond()
    assert changed[0]["answer"].startswith("yes: block verification needs fewer")
    assert changed[0]["A - B [+- 2 SE]"].endswith("NFE: -30.5 [-30.7, -30.3]")
    base = two["rows"]["MC-SJD (decoded here)"]["modelled_read_times"]
    modelled = two["rows"]["MC-SJD, 2 candidates"]["modelled_read_times"]
    assert changed[1]["answer"] == (
        "no: MC-SJD needs fewer; 31.2 tokens processed per forward "
        f"(benchmarks/results/{claims.MULTIDRAFT_FILES[2]}); its modelled time {modelled:.1f} "
        f"weight-read times per image, MC-SJD's (maximal, no candidates) {base:.1f} "
        "(roofline cost model)"
    )
    assert changed[1]["A - B [+- 2 SE]"].endswith("NFE: +9.0 [+7.0, +11.0]")
    unchanged = (2, 3, 5, 6)  # k = 4 and 8 rows: unchanged numbers (k = 2's file changed)
    assert [changed[i] for i in unchanged] == [rows[i] for i in unchanged]
    assert changed[4]["A - B [+- 2 SE]"] == rows[4]["A - B [+- 2 SE]"]
    assert "31.2 tokens processed per forward" in changed[4]["answer"]


def test_beyond_mc_sjd_rows_are_not_run_without_their_files(tmp_path, monkeypatch):
    monkeypatch.setattr(judges, "BENCHMARK_RESULTS", tmp_path)
    rows = _beyond()
    assert len(rows) == len(BEYOND_IDS)
    for row in rows:
        assert row["answer"].startswith("not run; benchmarks/results/")
        assert " absent" in row["answer"]
        assert row["A - B [+- 2 SE]"] == "-" and row["n"] == "0"
    found = claims.of_results(RESULTS)
    assert {found[cid].outcome for cid in BEYOND_IDS} == {"not run"}
    # one file back: only its rows are run
    shutil.copy(RESULTS_DIR / claims.MULTIDRAFT_FILES[8], tmp_path / claims.MULTIDRAFT_FILES[8])
    run = [cid for cid in BEYOND_IDS if claims.of_results(RESULTS)[cid].outcome != "not run"]
    assert run == ["multidraft_k8_fewer_nfe_than_mc_sjd", "multidraft_k8_fewer_nfe_than_mc_gsd"]


RESULTS_DIR = judges.BENCHMARK_RESULTS
