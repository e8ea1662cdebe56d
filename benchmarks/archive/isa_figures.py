"""The committed figures run against the same run under another CPU instruction set, field by field.

Runs ``python -m gsd_lab figures`` from this checkout under ``ATEN_CPU_CAPABILITY=<capability>``
(default avx2) into a temporary folder (or reads a finished one, ``--other``), then compares its
``records.npz`` and ``results.json`` with the committed ``figures/`` ones (made with the machine's
own best kernels) and writes the comparison (``--out``, JSON):

- records: every configuration and image in the same order; tokens, NFE and both acceptance
  measures identical (counted), the largest relative difference of each exact measure (TV, W1
  and their SEs, the substitution and its SE);
- results.json: every numeric leaf outside timings and provenance, the largest relative difference,
  the leaves beyond ``RTOL`` and how many beyond ``ATOL`` too (the live check's tolerances,
  ``records.DISTORTION_RTOL`` / ``DISTORTION_ATOL``; docs/reproducibility.md:
  within a decoding p may differ in the last ulp between ISAs, so a distortion may move in its
  last digits while tokens do not move; a lossless row's rounding-level TV, ~1e-17, by a lot).

The two runs must come from the same decoding sources (``records.code_fingerprint``), else the
comparison is refused. Wall-clock columns are never compared.

    PYTHONPATH=. python benchmarks/archive/isa_figures.py [--capability avx2] [--other DIR]
        [--out benchmarks/results/isa_figures_standin.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from gsd_lab.experiments.records import DISTORTION_ATOL as ATOL
from gsd_lab.experiments.records import DISTORTION_RTOL as RTOL

ROOT = Path(__file__).resolve().parents[2]
EXACT = ("nfe", "acceptance_rate", "accepted_per_tested")
MEASURES = ("distortion", "w1", "w1_sem", "substitution", "substitution_sem")
# results.json's timings and provenance, not results of the decoding: these top-level keys, and
# any key ending in "seconds" or naming a wall-clock ratio.
NOT_COMPARED = ("seconds", "stage_seconds", "created_utc", "git", "platform", "versions")
WALL_CLOCK = ("seconds", "speedup_wall")


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    both = ~(np.isnan(a) & np.isnan(b))
    if np.any(np.isnan(a[both]) != np.isnan(b[both])):
        return math.inf
    a, b = a[both & ~np.isnan(a)], b[both & ~np.isnan(b)]
    if a.size == 0:
        return 0.0
    scale = np.maximum(np.abs(a), np.abs(b))
    diff = np.abs(a - b)
    return float(np.max(np.where(scale > 0, diff / np.where(scale > 0, scale, 1), 0.0)))


def compare_records(mine: Path, other: Path) -> dict[str, Any]:
    with np.load(mine, allow_pickle=False) as a, np.load(other, allow_pickle=False) as b:
        index_a, index_b = json.loads(str(a["index"])), json.loads(str(b["index"]))
        if index_a["identity"] != index_b["identity"]:
            raise SystemExit("the two runs have another identity (code, weights, settings)")
        keys = [(r["key"], r["prompt"], r["seed"]) for r in index_a["records"]]
        if keys != [(r["key"], r["prompt"], r["seed"]) for r in index_b["records"]]:
            raise SystemExit("the two runs hold other records or another order")
        same_tokens = np.all(a["tokens"] == b["tokens"], axis=1)
        exact = {f: int(np.sum((a[f] == b[f]) | (np.isnan(a[f]) & np.isnan(b[f])))) for f in EXACT}
        return {
            "records": len(keys),
            "configurations": len({k for k, _, _ in keys}),
            "tokens_identical": int(same_tokens.sum()),
            "identical": exact,
            "max_relative_difference": {f: _relative(a[f], b[f]) for f in MEASURES},
        }


def _leaves(data: Any, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(data, dict):
        for key, value in data.items():
            if not (path == "" and key in NOT_COMPARED) and not str(key).endswith(WALL_CLOCK):
                yield from _leaves(value, f"{path}.{key}" if path else str(key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _leaves(value, f"{path}[{i}]")
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        yield path, float(data)


def compare_results(mine: Path, other: Path) -> dict[str, Any]:
    a = dict(_leaves(json.loads(mine.read_text())))
    b = dict(_leaves(json.loads(other.read_text())))
    if a.keys() != b.keys():
        raise SystemExit(f"results.json differs in its fields: {sorted(a.keys() ^ b.keys())[:5]}")
    differing, largest = [], 0.0
    for key, x in a.items():
        y = b[key]
        if x == y or (math.isnan(x) and math.isnan(y)):
            continue
        if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y):
            relative = math.inf  # a NaN or inf against anything else
        else:
            relative = abs(x - y) / max(abs(x), abs(y))
        largest = max(largest, relative)
        if relative > RTOL:
            differing.append({"field": key, "committed": x, "other": y, "relative": relative})
    return {
        "numbers": len(a),
        "identical": sum(1 for k in a if a[k] == b[k]),
        "max_relative_difference": largest,
        "rtol": RTOL,
        "atol": ATOL,
        "largest_value_beyond_rtol": max(
            (max(abs(d["committed"]), abs(d["other"])) for d in differing), default=0.0
        ),
        "beyond_rtol_and_atol": sum(
            1
            for d in differing
            if math.isinf(d["relative"]) or abs(d["committed"] - d["other"]) > ATOL
        ),
        "beyond_rtol": differing,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capability", default="avx2")
    parser.add_argument("--other", type=Path, default=None, help="a finished run's folder")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks/results/isa_figures_standin.json"
    )
    args = parser.parse_args()
    committed = ROOT / "figures"
    with tempfile.TemporaryDirectory() as scratch:
        other = args.other or Path(scratch)
        if args.other is None:
            env = {**os.environ, "ATEN_CPU_CAPABILITY": args.capability, "PYTHONPATH": str(ROOT)}
            command = [sys.executable, "-m", "gsd_lab", "figures", "--out", str(other)]
            subprocess.run([*command, "--no-progress"], cwd=ROOT, env=env, check=True)
        theirs, mine = (json.loads((d / "results.json").read_text()) for d in (other, committed))
        capability = theirs["platform"]["torch_cpu_capability"]
        if capability == mine["platform"]["torch_cpu_capability"]:
            raise SystemExit(f"both runs used {capability}: nothing would be compared")
        result = {
            "capability": capability,
            "committed_capability": mine["platform"]["torch_cpu_capability"],
            "committed_run": mine["git"],
            "other_run": theirs["git"],
            "records": compare_records(committed / "records.npz", other / "records.npz"),
            "results_json": compare_results(committed / "results.json", other / "results.json"),
        }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
