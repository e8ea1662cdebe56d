"""Every claim as data, by a stable id: its statement, the paper's value and source, the
results.json paths of its evidence and its verdict rule (``Claim``), and the one row every
consumer shows (``row``: the ledger in docs/claims.md and results.md, README's findings, the
notebooks' tables).

- ``evaluate(tables)``: one ``evidence.Evidence`` per id of ``IDS`` (headline claims first), a
  pure function of a figures run's tables; ``of_results`` on a results.json dict;
- ``as_json``: results.json's ``claims`` (numbers as numbers);
- rules: ``evidence.Compare``, ``evidence.Ratio``, ``evidence.NotRun`` (declarative) and the named
  judges of ``judges``; the verdicts are ``verdicts``'.

The kinds of evidence and how each is judged: docs/paper-run.md ("Claims and their rules").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from . import frontier, paper_values, tables
from .evidence import (  # difference, replacement: builders that experiments.paper calls
    PAPER_GROUP,
    QUALITY,
    Compare,
    Evidence,
    NotRun,
    Ratio,
    Row,
    Run,
    Table2Row,
    difference,
    replacement,
    resolve,
)
from .judges import (  # the benchmark files' names: findings reads them here
    BLOCK_FILE,
    BLOCK_LABEL,
    LOSSLESS_EVIDENCE,
    MULTIDRAFT_AGAINST,
    MULTIDRAFT_FILES,
    FewerThanOptimal,
    LosslessTime,
    MatchedPoints,
    Multidraft,
    Table2Ordering,
    block_fewer_nfe_than_mc_sjd,
    committed,
    theorem1,
    top1_share,
    top100,
)
from .matched import MEASURES
from .verdicts import word

AR, SJD = tables.AR.label, tables.SJD.label
GSD50 = tables.gsd(PAPER_GROUP).label
AMPLIFY3 = tables.amplify(3).label
MC_MAXIMAL, MC_GUMBEL = tables.coupled("maximal").label, tables.coupled("gumbel").label
MC_GSD50 = tables.coupled("maximal", PAPER_GROUP).label


@dataclass(frozen=True)
class Claim:
    """One claim as data: ``rule(run)`` gives its evidence (a declarative comparison of
    ``evidence``, or a named judge of ``judges``); ``paths``: the results.json (or benchmark
    file) paths it reads; ``notes`` by outcome say why."""

    id: str
    text: str
    paper: str
    source: str
    rule: Callable[[Run], Evidence]
    notes: dict[str, str] = field(default_factory=dict)
    reads: tuple[str, ...] = ()  # a named judge's paths (a declarative rule names its own)

    @property
    def paths(self) -> tuple[str, ...]:
        return self.reads or getattr(self.rule, "paths", ())


def _where(name: str) -> str:
    return f"benchmarks/results/{name}"


def read(path: str, results: dict[str, Any]) -> Any:
    """The value at one of a claim's ``paths``: in ``results`` (a results.json dict), or in a
    committed benchmark file ("benchmarks/results/<file>:<path>"); KeyError where absent."""
    if path.startswith(_where("")):
        name, inner = path[len(_where("")):].split(":", 1)
        data = committed(name)
        if data is None:
            raise KeyError(f"{_where(name)} absent")
        return resolve(data, inner)
    return resolve(results, path)


def _speedup(label: str, paper_ratio: float) -> Ratio:
    return Ratio(Row(AR), Row(label), paper_ratio)


def _table2_ratio(key: str) -> Ratio:
    claimed = paper_values.TABLE2_NFE[key].value / paper_values.SJD_NFE.value
    return Ratio(Table2Row(key), Row(SJD, "table2", fallback="table1"), claimed, "")


def _speedup_notes(size_why: str) -> dict[str, str]:
    return {
        "not run": "row not in this run's Table 1",
        "direction only": size_why,
        "noise": "the speed-up is within two paired standard errors of 1",
        "no": "slower than AR, or the paper's speed-up excluded",
    }


OTHER_MODEL = "faster than AR but by another factor: other model, token count and acceptance"
_GSD_SPEEDUP = paper_values.AR_NFE.value / paper_values.GSD50_NFE.value
_SCD_SPEEDUP = paper_values.SCD_AR_NFE.value / paper_values.SCD_NFE.value
_SCD_TEXT = (
    f"SCD {paper_values.SCD_NFE.value:g} < GSD (G=10) {paper_values.SCD_GSD10_NFE.value:g} NFE"
)
_TABLE2_CLIP = "(B) lowest CLIP: {} vs {} (C), {} (D)".format(
    *(paper_values.TABLE2_CLIP[key].value for key in ("(B)", "(C)", "(D)"))
)
_LOSSLESS_NOTES = {
    "noise": "no difference detected between this lossless coupled SJD and lossy GSD",
    "no": "GSD's clusters accept more than coupling on this model",
    "yes": "SCD compares with GSD G = 10 on COCO; here G = 50 with the paper's filters",
    "not run": "rows not in this run's Table 1",
}
_TABLE2_RATIO_NOTES = {
    "not run": "row not in this run's Table 2",
    "noise": "the ratio is within two paired standard errors of 1",
    "direction only": "the paper's ratio lies outside ours +- 2 SE: another model, the share of "
    "drafts a cluster rescues differs",
    "no": "the paper's ratio lies outside ours +- 2 SE, on the other side of 1",
}
_ORDERING_NOTES = {
    "not run": "rows (B)-(D) or their per-image distortions missing",
    "noise": "a difference within two paired standard errors: cannot tell which distorts more",
    "no": "another row distorts more than (B) on this model",
}

OPTIMAL_RULES = {  # the frontier's optimal lossy rules by the slug of their claim id
    "tv_relaxation": frontier.RELAXATION,
    "tv_relaxation_maximal": frontier.RELAXATION_MAXIMAL,
    "tv_dial": frontier.DIAL,
    "w1_transport": frontier.TRANSPORT,
    "w1_dial": frontier.W1_DIAL,
}

CLAIMS: tuple[Claim, ...] = (
    Claim(
        "gsd_quality_above_amplify",
        f"{GSD50} loses less quality than {AMPLIFY3}",
        f"CLIP {paper_values.GSD50_CLIP.value} vs {paper_values.AMPLIFY3_CLIP.value} "
        f"(GSD {paper_values.GSD50_CLIP.value - paper_values.AMPLIFY3_CLIP.value:+.3f})",
        paper_values.GSD50_CLIP.source,
        Compare(Row(GSD50), Row(AMPLIFY3), QUALITY, 1),
        {
            "no": "Amplify scored higher than GSD",
            "noise": "the proxy cannot separate them",
            "not run": "rows or per-image quality missing",
        },
    ),
    *(
        Claim(
            f"gsd_distorts_less_than_amplify_{measure.lower()}",
            f"GSD distorts less than Amplify at matched NFE, exact {measure}",
            f"implied by Table 1 (CLIP at {paper_values.GSD50_NFE.value:g} vs "
            f"{paper_values.AMPLIFY3_NFE.value:g} NFE); distortion not measured",
            "gsd_lab.experiments.matched",
            MatchedPoints(measure),
        )
        for measure in MEASURES.values()
    ),
    Claim(
        "gsd_speedup_over_ar",
        f"{GSD50}: NFE speed-up over AR",
        f"{_GSD_SPEEDUP:.2f}x",
        paper_values.GSD50_NFE.source,
        _speedup(GSD50, _GSD_SPEEDUP),
        _speedup_notes(OTHER_MODEL),
    ),
    Claim(
        "gsd_speedup_over_sjd",
        f"{GSD50}: NFE speed-up over SJD",
        f"{paper_values.SJD_NFE.value / paper_values.GSD50_NFE.value:.2f}x",
        paper_values.GSD50_NFE.source,
        Ratio(Row(SJD), Row(GSD50), paper_values.SJD_NFE.value / paper_values.GSD50_NFE.value),
        {"direction only": "the paper's speed-up lies outside ours +- 2 SE"},
    ),
    Claim(
        "gsd_fewer_nfe_than_sjd",
        f"{GSD50} needs fewer NFE than SJD",
        f"{paper_values.GSD50_NFE.value:.0f} < {paper_values.SJD_NFE.value:.0f}",
        paper_values.GSD50_NFE.source,
        Compare(Row(GSD50), Row(SJD), "nfe", -1),
        {
            "noise": "within two paired standard errors: this run cannot tell GSD's NFE from SJD's",
            "no": "GSD needed more forwards than SJD on these images",
            "not run": "SJD or per-image NFE missing",
        },
    ),
    Claim(
        "theorem1_dynamic_clusters",
        "Theorem 1's conclusion (acceptance >= SD's) carries over to this package's "
        "DynamicClusters (window clipped at the ends, no filters)",
        "stated for any partition of the vocabulary (GSD paper (arXiv 2508.07747), Theorem 1); "
        "dynamic clusters are not one",
        "proofs/04_dynamic_counterexample.md",
        theorem1,
        {"no": "holds for fixed partitions and partitions chosen from p alone (proofs/01, 05, 07); "
         "the release's slice with its filters was not checked"},
    ),
    *(
        Claim(
            f"table2_{key[1].lower()}_nfe_over_sjd",
            f"Table 2 {key}: NFE / SJD's NFE",
            f"{paper_values.TABLE2_NFE[key].value / paper_values.SJD_NFE.value:.2f}",
            paper_values.TABLE2_NFE[key].source,
            _table2_ratio(key),
            _TABLE2_RATIO_NOTES,
        )
        for key in ("(A)", "(B)", "(C)", "(D)")
    ),
    *(
        Claim(
            f"table2_b_distorts_most_{measure.lower()}",
            f"Table 2: sorting by q (B) distorts the most of (B)-(D), exact {measure}",
            _TABLE2_CLIP,
            paper_values.TABLE2_CLIP["(B)"].source,
            Table2Ordering(measure),
            _ORDERING_NOTES,
        )
        for measure in MEASURES.values()
    ),
    *(
        Claim(
            f"mc_sjd_{draft}_fewer_nfe_than_gsd",
            f"{label}, lossless, needs fewer forwards than lossy {GSD50}",
            _SCD_TEXT,
            paper_values.SCD_GSD10_NFE.source,
            Compare(Row(label), Row(GSD50), "nfe", -1),
            _LOSSLESS_NOTES,
        )
        for draft, label in (("maximal", MC_MAXIMAL), ("gumbel", MC_GUMBEL))
    ),
    Claim(
        "gsd_keeps_ar_quality",
        f"{GSD50} keeps AR's quality",
        f"CLIP {paper_values.GSD50_CLIP.value} vs AR {paper_values.AR_CLIP.value}",
        paper_values.GSD50_CLIP.source,
        Compare(Row(GSD50), Row(AR), QUALITY, 1, unchanged=True),
        {
            "noise": "no change detected: what the claim predicts, but not a proof of equality",
            "no": "quality moved beyond the noise",
        },
    ),
    Claim(
        "sjd_speedup_over_ar",
        "SJD: NFE speed-up over AR",
        f"{paper_values.AR_NFE.value / paper_values.SJD_NFE.value:.2f}x",
        paper_values.SJD_NFE.source,
        _speedup(SJD, paper_values.AR_NFE.value / paper_values.SJD_NFE.value),
        _speedup_notes(OTHER_MODEL),
    ),
    Claim(
        "amplify_speedup_over_ar",
        f"{AMPLIFY3}: NFE speed-up over AR",
        f"{paper_values.AR_NFE.value / paper_values.AMPLIFY3_NFE.value:.2f}x",
        paper_values.AMPLIFY3_NFE.source,
        _speedup(AMPLIFY3, paper_values.AR_NFE.value / paper_values.AMPLIFY3_NFE.value),
        _speedup_notes(OTHER_MODEL),
    ),
    *(
        Claim(
            f"mc_sjd_{draft}_speedup_over_ar",
            f"{label}: NFE speed-up over AR (SCD)",
            f"{_SCD_SPEEDUP:.2f}x",
            paper_values.SCD_NFE.source,
            _speedup(label, _SCD_SPEEDUP),
            _speedup_notes("another model and window (SCD: L = 64 on COCO)"),
        )
        for draft, label in (("maximal", MC_MAXIMAL), ("gumbel", MC_GUMBEL))
    ),
    Claim(
        "coupled_drafts_speed_up_gsd",
        f"(not in the papers) coupled drafts speed up {GSD50} too",
        "-",
        "proofs/09_coupled_drafts.md",
        Compare(Row(MC_GSD50), Row(GSD50), "nfe", -1),
        {
            "yes": "same rule, coupled re-drafts: the per-step law given the history is unchanged "
            "(proofs/09)",
            "not run": "rows not in this run's Table 1",
        },
    ),
    Claim(
        "coupled_gsd_fewer_nfe_than_mc_sjd",
        f"(not in the papers) {MC_GSD50} needs fewer forwards than lossless {MC_MAXIMAL}",
        "-",
        "proofs/09_coupled_drafts.md",
        Compare(Row(MC_GSD50), Row(MC_MAXIMAL), "nfe", -1),
        {"not run": "rows not in this run's Table 1"},
    ),
    Claim(
        "block_verification_fewer_nfe_than_mc_sjd",
        f"(not in the papers) {BLOCK_LABEL} (independent drafts, lossless) needs fewer forwards "
        f"than {MC_MAXIMAL}",
        "-",
        f"{_where(BLOCK_FILE)}; proofs/14_block_verification.md; {LOSSLESS_EVIDENCE}",
        block_fewer_nfe_than_mc_sjd,
        reads=tuple(f"{_where(BLOCK_FILE)}:{key}" for key in (
            "per_image.block", f"per_image.stored_nfe.{MC_MAXIMAL}",
            f"summary.{BLOCK_LABEL}.processed_per_forward")),
    ),
    *(
        Claim(
            f"multidraft_k{k}_fewer_nfe_than_{against}",
            f"(not in the papers) {MC_MAXIMAL} with {k} candidates per position (lossless) needs "
            f"fewer forwards than {'' if against == 'mc_sjd' else 'lossy '}"
            f"{MULTIDRAFT_AGAINST[against][1]}",
            "-",
            f"{_where(MULTIDRAFT_FILES[k])}; proofs/15_multiple_drafts.md; {LOSSLESS_EVIDENCE}",
            Multidraft(k, against),
        )
        for against in MULTIDRAFT_AGAINST
        for k in MULTIDRAFT_FILES
    ),
    *(
        Claim(
            f"lossless_less_time_than_{slug}",
            f"(not in the papers) a lossless decoder beyond {MC_MAXIMAL} (the one with the least "
            f"modelled time on the frontier) needs less modelled GPU time than "
            f"{'' if slug == 'mc_sjd' else 'lossy '}{label}",
            "-",
            "gsd_lab.experiments.lossless_frontier; gsd_lab.accounting.roofline; "
            f"docs/lossless-frontier.md; {LOSSLESS_EVIDENCE}",
            LosslessTime(name),
        )
        for slug, name, label in (("mc_sjd", "MC-SJD", MC_MAXIMAL), ("mc_gsd", "MC-GSD", MC_GSD50))
    ),
    *(
        Claim(
            f"gsd_fewer_nfe_than_{slug}",
            f"(not in the papers) at GSD's TV, GSD needs fewer forwards than the {name}",
            "-",
            "gsd_lab.experiments.frontier; docs/optimal-lossy.md",
            FewerThanOptimal(name),
        )
        for slug, name in OPTIMAL_RULES.items()
    ),
    Claim(
        "top1_share_below_5pct",
        "share of tokens with top-1 < 5%",
        "{:.0%}-{:.0%}".format(*(bound.value for bound in paper_values.TOP1_SHARE_RANGE)),
        paper_values.TOP1_SHARE_RANGE[0].source,
        top1_share,
        reads=("tables.top1.pooled_share_below", "tables.top1.threshold"),
    ),
    Claim(
        "top100_replacement_keeps_quality",
        "top-100 replacement barely changes quality",
        f"CLIP {paper_values.REPLACED_CLIP.value - paper_values.AR_CLIP.value:+.3f}",
        paper_values.REPLACED_CLIP.source,
        top100,
        reads=(f"tables.replacement.paired_changes.top-k.{QUALITY}",),
    ),
    Claim(
        "sjd_pac_step_compression",
        "SJD-PAC: step compression over AR",
        f"{paper_values.SJD_PAC_STEP.value:.2f}x",
        paper_values.SJD_PAC_STEP.source,
        NotRun(
            "its released tree verification is not lossless (an exact transcription, "
            "tests/lab/decode/test_sjd_pac.py; docs/lossless-frontier.md); its Adaptive "
            "Continuation on the chain is the maximal coupling, run as MC-SJD (maximal)"
        ),
    ),
    *(
        Claim(item["id"], item["analysis"], item["paper"], "paper_values.NOT_REPRODUCED",
              NotRun(item["why not here"]))
        for item in paper_values.NOT_REPRODUCED
    ),
)
IDS = tuple(c.id for c in CLAIMS)
BY_ID = {c.id: c for c in CLAIMS}


def evaluate(tables_: dict[str, Any], table2_group: int = PAPER_GROUP, model: str = "standin"
             ) -> dict[str, Evidence]:
    """Every claim's evidence from a run's tables on ``model``, by id (``IDS`` order); a claim's
    note is its rule's, else its ``notes`` entry for the outcome."""
    run = Run(tables_, table2_group, model)
    out = {}
    for claim in CLAIMS:
        found = claim.rule(run)
        out[claim.id] = found if found.note else replace(
            found, note=claim.notes.get(found.outcome, "")
        )
    return out


def of_results(results: dict[str, Any]) -> dict[str, Evidence]:
    """``evaluate`` on a results.json dict (its Table 2 at the run's ``sizes.table2_group``)."""
    sizes = (results.get("config") or {}).get("sizes") or {}
    return evaluate(results.get("tables") or {}, int(sizes.get("table2_group") or PAPER_GROUP),
                    str(results.get("model") or "standin"))


def as_json(evidence: dict[str, Evidence]) -> dict[str, dict[str, Any]]:
    """results.json's ``claims``: by id, the claim's statement, paper value and source with its
    evidence's numbers (``Evidence.as_dict``)."""
    return {
        cid: {
            "claim": BY_ID[cid].text,
            "paper": BY_ID[cid].paper,
            "source": BY_ID[cid].source,
            **found.as_dict(),
        }
        for cid, found in evidence.items()
    }


def row(claim_id: str, found: Evidence) -> dict[str, str]:
    """A claim as a table row: statement, the paper's value, ours ("here": the numbers the
    verdict was decided on), the verdict's words, why (the note), the source, its id, and the
    verdict's key ("outcome")."""
    claim = BY_ID[claim_id]
    return {
        "claim": claim.text,
        "paper": claim.paper,
        "here": found.measured(),
        "verdict": word(found.outcome),
        "note": found.note,
        "source": claim.source,
        "id": claim_id,
        "outcome": found.outcome,
    }


def rows(evidence: dict[str, Evidence], ids: tuple[str, ...] = IDS) -> list[dict[str, str]]:
    """``row`` for each of ``ids`` (default: every claim, in the ledger's order)."""
    return [row(cid, evidence[cid]) for cid in ids]
