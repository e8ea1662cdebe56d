"""The lossless decoders beyond MC-SJD on the frontier: k candidates at the first undecided
position and token trees (``benchmarks/lossless_beyond.py``), read from their committed results
and paired image by image with the frontier's MC-SJD and MC-GSD.

A decoder's modelled GPU time is its forwards' summed cost in weight-read times
(``accounting.roofline``: cost(W) = max(1, W / W_ridge) for W tokens per forward). MC-SJD's and
MC-GSD's windows (at most ``window`` <= W_ridge tokens) cost one read per forward, so their time
is their NFE. Per decoder, against each reference R: the paired difference of NFE and of modelled
time (decoder minus R; the claim "fewer", sign -1) by ``verdicts.decide``, and the ratio of mean
modelled times with its paired SE. A source is used only on the frontier's own images (the same
generator seeds) and only if the MC-SJD it decoded beside the decoder gave the frontier's NFE on
every image both decoded: otherwise its row says why it was left out.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .verdicts import decide, paired_difference, paired_ratio

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = {"MC-SJD": "MC-SJD (maximal)", "MC-GSD": "MC-GSD (G={group}, maximal)"}
DECODED_MC_SJD = "MC-SJD (decoded here)"  # the benchmarks' own MC-SJD row: the reproduction check


@dataclass(frozen=True)
class LosslessSource:
    """One row (``row``) of a committed benchmark result (``path``, from the repository root),
    decoded on ``model``."""

    path: str
    row: str
    model: str = "standin"


SOURCES = (
    LosslessSource("benchmarks/results/multidraft_standin.json", "MC-SJD, 2 candidates"),
    LosslessSource("benchmarks/results/multidraft_standin.json", "MC-SJD, 4 candidates"),
    LosslessSource("benchmarks/results/multidraft_standin_k8.json", "MC-SJD, 8 candidates"),
    LosslessSource("benchmarks/results/token_trees_standin.json", "MC-SJD, tree (8,), window 12"),
    LosslessSource("benchmarks/results/token_trees_standin_3x2.json",
                   "MC-SJD, tree (3, 2), window 16"),
    LosslessSource("benchmarks/results/token_trees_standin_6.json", "MC-SJD, tree (6,), window 16"),
    LosslessSource("benchmarks/results/token_trees_standin_spine.json",
                   "MC-SJD, tree (8, 4, 3, 2, 2), window 16, side tail 5"),
    LosslessSource("benchmarks/results/token_trees_standin_spine_6x3.json",
                   "MC-SJD, tree (6, 3), window 16, side tail 10"),
)


def modelled_per_image(row: dict[str, Any]) -> list[float] | None:
    """A benchmark row's per-image modelled time: stored, or its NFE when its mean modelled time
    equals its mean NFE (every forward costs at least one read, so equal sums mean every forward
    cost one); None when neither holds (only the mean is known)."""
    per = row["per_image"]
    if "modelled_read_times" in per:
        return [float(v) for v in per["modelled_read_times"]]
    if abs(row["modelled_read_times"] - row["nfe"]) <= 1e-9 * row["nfe"]:
        return [float(v) for v in per["nfe"]]
    return None


def _table_row(name: str, row: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """The benchmark row as a frontier row on the reference's images (``per_image``: nfe,
    modelled, and the reference's prompt and seed: the caller checked the seeds agree)."""
    modelled = modelled_per_image(row)
    return {
        "method": name,
        "images": len(row["per_image"]["nfe"]),
        "nfe": float(row["nfe"]),
        "tokens_per_forward": float(row["tokens_processed_per_forward"]),
        "modelled": float(row["modelled_read_times"]),
        "distortion_max": float(row["distortion_max"]),
        "per_image": {
            "nfe": [float(v) for v in row["per_image"]["nfe"]],
            "modelled": modelled,
            "prompt": reference["per_image"]["prompt"],
            "seed": reference["per_image"]["seed"],
        },
    }


def _reference_row(row: dict[str, Any]) -> dict[str, Any]:
    """A frontier row of MC-SJD or MC-GSD with ``modelled`` = NFE (one read per forward)."""
    per = dict(row["per_image"], modelled=list(row["per_image"]["nfe"]))
    return dict(row, modelled=row["nfe"], per_image=per)


def _why_not(source: LosslessSource, data: dict[str, Any] | None, model: str,
             mc_sjd: dict[str, Any]) -> str | None:
    """Why ``source`` cannot be paired with this frontier, or None when it can."""
    if data is None:
        return f"{source.path} is not in this checkout"
    if source.model != model:
        return f"decoded on {source.model}, this frontier on {model}"
    if source.row not in data["rows"]:
        return f"{source.path} has no row {source.row!r}"
    if data["rows"][source.row]["per_image"]["seed"] != mc_sjd["per_image"]["seed"]:
        return "decoded on other images than the frontier's (other generator seeds)"
    own = data["rows"].get(DECODED_MC_SJD)
    if own is None:
        return f"{source.path} has no {DECODED_MC_SJD!r} row to check the reproduction on"
    nfe = dict(zip(mc_sjd["per_image"]["seed"], mc_sjd["per_image"]["nfe"]))
    if any(nfe.get(s) != v for s, v in zip(own["per_image"]["seed"], own["per_image"]["nfe"])):
        return "its MC-SJD did not reproduce the frontier's NFE image by image (other code)"
    return None


def _versus(row: dict[str, Any], references: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per reference: NFE and modelled-time decisions (row minus reference, sign -1) and the
    modelled-time ratio, as results.json stores them."""
    out = {}
    for name, ref in references.items():
        nfe = decide(paired_difference(row, ref, "nfe"), expected_sign=-1)
        time = decide(paired_difference(row, ref, "modelled"), expected_sign=-1)
        ratio = paired_ratio(row, ref, "modelled")
        out[name] = {
            "nfe": {**nfe.diff.as_dict(), "verdict": nfe.outcome, "text": nfe.text(1, "NFE")},
            "modelled": {**time.diff.as_dict(), "verdict": time.outcome,
                         "text": time.text(1, "reads")},
            "modelled_ratio": {"ratio": ratio.ratio if math.isfinite(ratio.ratio) else None,
                               "se": ratio.se, "n": ratio.n, "text": ratio.text(3)},
        }
    return out


def lossless_results(front: dict[str, Any], model: str, root: Path = ROOT,
                     sources: tuple[LosslessSource, ...] = SOURCES) -> dict[str, Any] | None:
    """What results.json keeps under ``frontier.lossless``: per source, its row (NFE, tokens per
    forward, modelled time, largest measured distortion, ``versus`` MC-SJD and MC-GSD) or the
    reason it was left out. None when the frontier has no MC-SJD or MC-GSD curve."""
    names = {k: v.format(group=front["group_size"]) for k, v in REFERENCES.items()}
    if not all(name in front["curves"] for name in names.values()):
        return None
    references = {k: _reference_row(front["curves"][v][0]) for k, v in names.items()}
    rows, left_out = [], []
    for source in sources:
        path = root / source.path
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        reason = _why_not(source, data, model, references["MC-SJD"])
        if reason is not None:
            left_out.append({"method": source.row, "file": source.path, "reason": reason})
            continue
        row = _table_row(source.row, data["rows"][source.row], references["MC-SJD"])
        rows.append({**row, "file": source.path, "versus": _versus(row, references)})
    return {"references": names, "rows": rows, "left_out": left_out}
