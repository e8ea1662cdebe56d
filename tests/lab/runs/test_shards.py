"""gsd_lab.runs.shards.evaluate: prompts sharded over 2 gloo processes, atomic per-prompt results, merge,
and re-runs that skip finished prompts (also after a crash), plus the torchrun CLI end to end.
Run identity (refusing mixed runs): tests/lab/runs/test_identity.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from gsd_lab.runs.identity import RunMismatch
from gsd_lab.runs.ranks import DistributedContext, init_distributed, shard_indices
from gsd_lab.runs.shards import evaluate
from gsd_lab.runs.store import load_result, merge_results, result_path

PROMPTS = [f"prompt {i}" for i in range(7)]
IDENTITY = {"model": "test", "decoding": {"method": "sjd", "window": 4}, "seed": 0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out_dir: str, crash_at: int | None) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    context = init_distributed("cpu")
    log = Path(out_dir) / f"calls_rank{rank}.txt"

    def work(index: int, prompt: str) -> dict:
        if index == crash_at:
            raise RuntimeError("simulated crash")
        with log.open("a") as fh:
            fh.write(f"{index}\n")
        return {"nfe": 10 + index, "acceptance_rate": 0.5}

    try:
        evaluate(PROMPTS, out_dir, work, context, identity=IDENTITY, progress=False)
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _run(out_dir: Path, crash_at: int | None = None) -> None:
    mp.start_processes(_worker, args=(2, _free_port(), str(out_dir), crash_at), nprocs=2, join=True,
                       start_method="spawn")


def _calls(out_dir: Path) -> list[int]:
    calls = []
    for rank in (0, 1):
        path = out_dir / f"calls_rank{rank}.txt"
        if path.exists():
            calls += [int(x) for x in path.read_text().split()]
            path.unlink()
    return sorted(calls)


def test_shard_indices_partition_the_prompts():
    shards = [shard_indices(7, r, 3) for r in range(3)]
    assert sorted(i for s in shards for i in s) == list(range(7)) and shards[1] == [1, 4]
    with pytest.raises(ValueError):
        shard_indices(7, 3, 3)


def test_two_gloo_processes_crash_resume_and_merge(tmp_path):
    # Run 1: rank 1 dies at prompt 3 (after finishing prompt 1); finished results stay on disk.
    with pytest.raises(Exception):
        _run(tmp_path, crash_at=3)
    assert load_result(tmp_path, 1) is not None and load_result(tmp_path, 3) is None
    done_before = {i for i in range(7) if load_result(tmp_path, i) is not None}
    _calls(tmp_path)
    # Run 2: only the unfinished prompts are computed, each on rank i mod 2; rank 0 merges.
    _run(tmp_path)
    assert set(_calls(tmp_path)) == set(range(7)) - done_before
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["complete"] and summary["finished"] == 7
    assert summary["mean"]["nfe"] == pytest.approx(13.0)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["index"] for r in rows] == list(range(7))
    assert all(r["rank"] == r["index"] % 2 for r in rows)
    # Every row, from either run, records the run it belongs to and its prompt text.
    assert {r["run_id"] for r in rows} == {summary["run_id"]} and all(r["run"] == IDENTITY for r in rows)
    assert [r["prompt"] for r in rows] == PROMPTS
    assert not list(tmp_path.glob("results/.*.tmp"))


def test_merge_reports_missing_prompts(tmp_path):
    context = DistributedContext(0, 1, 0, "cpu")

    def work(index: int, prompt: str) -> dict:
        if index == 2:
            raise RuntimeError("simulated crash")
        return {"nfe": 1}

    with pytest.raises(RuntimeError):
        evaluate(PROMPTS[:3], tmp_path, work, context, progress=False)
    summary = merge_results(tmp_path, PROMPTS[:3])
    assert not summary["complete"] and summary["missing"] == [2] and summary["finished"] == 2
    with pytest.raises(RunMismatch, match="prompt list"):
        merge_results(tmp_path, PROMPTS[:4])


def test_cli_evaluate_with_torchrun_two_processes(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("0\n1\n2\n")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()),
           "-m", "gsd_lab", "evaluate", "--model", "tiny-random", "--method", "sjd", "--prompts", str(prompts),
           "--out", str(out), "--no-progress", "--threads", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["config"]["world_size"] == 2
    row = json.loads(result_path(out, 2).read_text())
    assert row["generator_seed"] == 2 and "seed" not in row and row["label"] == "SJD"  # each once
    assert len(row["tokens"]) == 64 and Path(row["image"]).is_file()
    assert 1 <= row["nfe"] <= 64
    assert row["prompt"] == "2" and row["run"]["decoding"]["method"]["kind"] == "sjd" and row["run"]["seed"] == 0
    assert row["run"]["model"] == "tiny-random" and row["run"]["weights"]["parameters_sha256"]
    # The same configuration on one process resumes the run: nothing left to do, still complete.
    again = subprocess.run([sys.executable, "-m", "gsd_lab", *cmd[cmd.index("evaluate"):]], capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["complete"]
    assert json.loads(result_path(out, 1).read_text())["rank"] == 1  # written by rank 1, not recomputed
