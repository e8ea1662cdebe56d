"""Sharded, resumable evaluation over a prompt list with torch.distributed.

Launch with ``torchrun --nproc_per_node N -m gsd_lab evaluate ...`` (or ``accelerate launch``;
plain ``python -m gsd_lab evaluate`` is a single process). Prompt i goes to rank i mod N and is
generated with seed ``seed + i`` (so results do not depend on N). Each finished prompt is one
JSON file ``results/{i:06d}.json`` (and its image), written atomically (temporary file, then
os.replace): a crash loses at most the prompt in flight, and a re-run skips every prompt whose
result file exists. After a barrier, rank 0 merges all results into ``results.jsonl`` and
``summary.json``. Backend: NCCL when each rank has a GPU, gloo otherwise (CPU).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from .provenance import atomic_write_json, atomic_write_text

RESULTS_DIR = "results"


@dataclass(frozen=True)
class DistributedContext:
    """This process's place in the job: rank, world size, local rank, device."""

    rank: int
    world_size: int
    local_rank: int
    device: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str | None = None) -> DistributedContext:
    """Join the process group that torchrun / accelerate describe in RANK, WORLD_SIZE,
    LOCAL_RANK (and MASTER_ADDR/PORT); a single process without them. Each rank uses
    cuda:LOCAL_RANK when CUDA is available and ``device`` is not given."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device is None:
        device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    if world > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
        torch.distributed.init_process_group(backend=backend)
    return DistributedContext(rank, world, local_rank, device)


def barrier(context: DistributedContext) -> None:
    if context.world_size > 1 and torch.distributed.is_initialized():
        torch.distributed.barrier()


def result_path(out_dir: str | Path, index: int) -> Path:
    """Where prompt ``index``'s result lives: ``out_dir/results/{index:06d}.json``."""
    return Path(out_dir) / RESULTS_DIR / f"{index:06d}.json"


def shard_indices(num_prompts: int, rank: int, world_size: int) -> list[int]:
    """Prompt indices of one rank: i with i mod world_size == rank."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank {rank}, world_size {world_size}")
    return list(range(rank, num_prompts, world_size))


def load_result(out_dir: str | Path, index: int) -> dict[str, Any] | None:
    """The result of prompt ``index``, or None while it is not finished. A prompt is finished
    when its result file exists and parses as JSON (atomic writes mean a present file is
    complete; the parse guards against files copied in by hand)."""
    path = result_path(out_dir, index)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def is_finished(out_dir: str | Path, index: int) -> bool:
    return load_result(out_dir, index) is not None


def run_shard(
    prompts: list[str],
    out_dir: str | Path,
    work: Callable[[int, str], dict[str, Any]],
    context: DistributedContext,
    *,
    progress: bool = True,
) -> list[int]:
    """Run ``work(index, prompt) -> result dict`` for this rank's unfinished prompts and write
    each result atomically as soon as it is done. Returns the indices run now (not skipped)."""
    from tqdm.auto import tqdm

    todo = [i for i in shard_indices(len(prompts), context.rank, context.world_size)
            if not is_finished(out_dir, i)]
    done = []
    for index in tqdm(todo, desc=f"rank {context.rank}", disable=not progress, position=context.rank):
        result = dict(work(index, prompts[index]))
        result.update(index=index, prompt=prompts[index], rank=context.rank)
        atomic_write_json(result_path(out_dir, index), result)
        done.append(index)
    return done


def merge_results(out_dir: str | Path, num_prompts: int, *, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Collect ``results/*.json`` into ``results.jsonl`` (prompt order) and ``summary.json``.

    summary: the number finished / missing, ``complete``, and the mean of every numeric field
    over finished prompts (e.g. nfe, acceptance_rate, wall_seconds, a quality score)."""
    rows, missing = [], []
    for index in range(num_prompts):
        result = load_result(out_dir, index)
        if result is None:
            missing.append(index)
        else:
            rows.append(result)
    numeric = sorted({k for row in rows for k, v in row.items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)} - {"index", "rank", "seed"})
    means = {k: sum(row[k] for row in rows if k in row) / max(1, sum(k in row for row in rows)) for k in numeric}
    summary = {"num_prompts": num_prompts, "finished": len(rows), "missing": missing,
               "complete": not missing, "mean": means, "config": config or {}}
    atomic_write_text(Path(out_dir) / "results.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    atomic_write_json(Path(out_dir) / "summary.json", summary)
    return summary


def evaluate(
    prompts: list[str],
    out_dir: str | Path,
    work: Callable[[int, str], dict[str, Any]],
    context: DistributedContext,
    *,
    config: dict[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any] | None:
    """Run this rank's shard, wait for all ranks, merge on rank 0 (returns the summary there,
    None on other ranks)."""
    if not prompts:
        raise ValueError("no prompts to evaluate")
    Path(out_dir, RESULTS_DIR).mkdir(parents=True, exist_ok=True)
    run_shard(prompts, out_dir, work, context, progress=progress)
    barrier(context)
    summary = merge_results(out_dir, len(prompts), config=config) if context.is_main else None
    barrier(context)
    return summary
