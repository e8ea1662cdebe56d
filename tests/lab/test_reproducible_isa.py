"""Same tokens and NFE on any x86 instruction set and thread count (CPU models, float64 forward).

A fixed batch of generations (``gsd_lab.experiments.determinism``: SJD and GSD with G = 3 and 50
on the stand-in) runs in fresh subprocesses under ``ATEN_CPU_CAPABILITY=default`` (ATen's scalar
kernels), ``avx2`` and the machine's own best (unset), with 1 and 2 threads. Tokens and NFE must
be identical. A finer check: the top-1 probability of every token's target distribution must
agree to 1e-10 relative, so a float32 step left in the forward (rounding ~1e-7, which flips
sampling decisions: in float32 about one generation in ten differed between these settings)
fails even when no decision happens to flip in this small batch.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {"default ISA, 1 thread": ("default", 1), "avx2, 1 thread": ("avx2", 1),
            "best ISA, 2 threads": (None, 2)}
TOP1_RELATIVE_TOLERANCE = 1e-10

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="ATEN_CPU_CAPABILITY values are x86 instruction sets")


def run_batch(capability: str | None, threads: int, tmp_path: Path, model: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if capability is not None:
        env["ATEN_CPU_CAPABILITY"] = capability
    env["OMP_NUM_THREADS"] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    out = tmp_path / f"{capability}_{threads}.json"
    # 128 tokens of the stand-in (half an image) keep the 2-thread run short on a busy 2-core machine.
    cmd = [sys.executable, "-m", "gsd_lab.experiments.determinism", "--model", model, "--seeds", "0",
           "--num-prompts", "2", "--threads", str(threads), "--out", str(out)]
    cmd += ["--num-tokens", "128"] if model == "standin" else []
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("model", ["tiny-random", "standin"])
def test_generations_do_not_depend_on_isa_or_threads(tmp_path, model):
    batches = {name: run_batch(cap, threads, tmp_path, model) for name, (cap, threads) in SETTINGS.items()}
    reference_name, reference = next(iter(batches.items()))
    assert reference["compute_dtype"] == "torch.float64"
    assert reference["capability"] == "DEFAULT" and batches["avx2, 1 thread"]["threads"] == 1
    for name, batch in batches.items():
        assert batch["compute_dtype"] == "torch.float64"
        assert len(batch["runs"]) == len(reference["runs"]) == 6
        for ref, run in zip(reference["runs"], batch["runs"]):
            where = f"{run['method']} prompt {run['prompt']} seed {run['seed']}: {reference_name} vs {name}"
            assert run["nfe"] == ref["nfe"], where
            assert run["tokens_sha256"] == ref["tokens_sha256"], where
            worst = max(abs(a - b) / abs(a) for a, b in zip(ref["top1"], run["top1"]))
            assert worst < TOP1_RELATIVE_TOLERANCE, f"{where}: top-1 differs by {worst:.2e} (relative)"
