"""benchmarks/gpu_static_check.py in its CPU ``--tiny`` dry run, run as the GPU run is (a fresh
process, ``PYTHONPATH=.``, ``$OUT``): every step writes its JSON line, none fails, and the checks
that mean something on a CPU pass (static-eager stands in for the graphs there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
STEPS = [
    "build",
    "limit",
    "correctness",
    "correctness",
    "correctness",
    "speed",
    "batch",
    "kernels",
    "decode_equality",
    "decode_image",
    "compile",
    "done",
]


def test_tiny_dry_run_writes_one_line_per_step(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "benchmarks/gpu_static_check.py", "--tiny"],
        cwd=ROOT,
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [
        json.loads(line) for line in (tmp_path / "static_check.jsonl").read_text().splitlines()
    ]
    assert [line["step"] for line in lines] == STEPS
    assert not [line for line in lines if "error" in line or "skipped" in line]
    build, limit = lines[0], lines[1]
    assert build["header"]["mode"] == "tiny-cpu" and build["header"]["git_commit"]
    assert limit["limit_ms"] > 0
    correctness = [line for line in lines if line["step"] == "correctness"]
    assert [line["context"] for line in correctness] == build["positions"]
    # Three positions attend over three lengths (length buckets of 16 slots).
    assert len({line["attended"][1] for line in correctness}) == 3
    for line in correctness:
        assert len(line["rows"]) == 4
        for row in line["rows"]:
            assert row["graph_equals_static"] and row["finite"]
            assert row["static_eager_tv_max"] <= build["tv_tolerance"]
    speed = next(line for line in lines if line["step"] == "speed")
    assert all(
        speed[f"{e}_forward_ms_{w}_at_{c}"] > 0
        for e in ("graph", "static", "eager")
        for w in (1, 16)
        for c in (build["positions"][0], build["positions"][-1])
    )
    batch = next(line for line in lines if line["step"] == "batch")
    assert batch["batch"] == 3 and batch["target"] == 0.3
    for c in (build["positions"][0], build["positions"][-1]):
        for kind in ("eager", "static"):
            for w in (1, 16):
                assert batch[f"{kind}_batch3_forward_ms_{w}_at_{c}"] > 0
                assert batch[f"{kind}_per_image_ratio_{w}_at_{c}"] > 0
        # float32 tiny model: every runner and batch gives the eager batch-1 rows to rounding
        assert max(batch[f"tv_max_vs_eager_batch1_at_{c}"].values()) < 1e-4
    kernels = next(line for line in lines if line["step"] == "kernels")
    assert kernels["static_eager"]["count"] > 100 and kernels["eager"]["count"] > 100
    decode = next(line for line in lines if line["step"] == "decode_equality")
    assert set(decode["methods"]) == {"ar", "sjd", "gsd"}
    assert all(row["graph_equals_static"] for row in decode["methods"].values())
    assert decode["methods"]["ar"]["nfe"] == {"eager": 16, "static": 16, "graph": 16}
    image = next(line for line in lines if line["step"] == "decode_image")
    assert image["methods"]["ar"]["nfe"] == image["tokens"] and image["gsd_wall_over_nfe"] > 0
    compiled = next(line for line in lines if line["step"] == "compile")
    assert compiled["maxdiff_vs_static"] == 0.0  # tiny: dynamo's trace run as traced
    done = lines[-1]
    assert done["all_passed"] and set(done["passes"]) == {
        "graph_equals_static",
        "static_eager_within_tolerance",
        "decode_graph_equals_static",
    }
