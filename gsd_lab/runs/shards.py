"""A sharded, resumable run over a prompt list: ``evaluate``, ``run_shard``, ``BatchedWork``.

Prompt i goes to rank i mod N (``ranks.shard_indices``), each finished prompt is one result file
of the run's folder (``store``), and a re-run skips what is there; rank 0 merges after a barrier.
Launch with ``torchrun --nproc_per_node N -m gsd_lab evaluate ...`` (docs/run-store.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..workers import run_units
from .identity import RunIdentity
from .ranks import DistributedContext, barrier, shard_indices
from .store import is_done, merge_results, start_run, write_result


@dataclass(frozen=True)
class BatchedWork:
    """Work on several prompts at once. ``decode(items, write)``: items [(index, prompt)], in
    order; it calls ``write(index, row)`` for each item as soon as that item is done (any
    order), and returns when all are. ``chunk``: the most items given to one call (host memory,
    and what a crash can lose: at most the unwritten items of one call)."""

    decode: Callable[[list[tuple[int, str]], Callable[[int, dict[str, Any]], None]], None]
    chunk: int

    def __post_init__(self) -> None:
        if isinstance(self.chunk, bool) or not isinstance(self.chunk, int) or self.chunk < 1:
            raise ValueError(f"BatchedWork.chunk must be an int >= 1, got {self.chunk!r}")


def run_shard(
    run: RunIdentity,
    out_dir: str | Path,
    work: Callable[[int, str], dict[str, Any]] | BatchedWork,
    context: DistributedContext,
    *,
    progress: bool = True,
    workers: int = 1,
) -> list[int]:
    """Run ``work(index, prompt) -> result dict`` (or a ``BatchedWork`` over chunks of them)
    for this rank's unfinished prompts and write each result atomically (with the run's fields,
    ``RunIdentity.row_fields``) as soon as it is done. Returns the indices run now, chunk by chunk,
    each chunk's in the order finished. The shard (``shard_indices``) and the skipping of
    finished prompts do not depend on the kind of work. A result file of another run raises
    ``RunMismatch`` (after ``start_run`` this means a file was copied in or edited by hand).

    workers > 1 (on a CPU): the chunks (a ``BatchedWork``'s ``chunk`` prompts, else one prompt)
    run on that many forked processes, one intra-op thread each; otherwise in this process, on
    one intra-op thread too on a CPU (``workers.run_units``: the chunks, and so every
    result file, are the same for any number of workers)."""
    from tqdm.auto import tqdm

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    todo = [
        index
        for index in shard_indices(len(run.prompts), context.rank, context.world_size)
        if not is_done(run, out_dir, index)
    ]
    size = work.chunk if isinstance(work, BatchedWork) else 1
    chunks = [todo[start : start + size] for start in range(0, len(todo), size)]
    bar = tqdm(
        total=len(todo),
        unit="img",
        desc=f"rank {context.rank}",
        disable=not progress,
        position=context.rank,
    )

    def run_chunk(position: int, bar: Any) -> list[int]:
        """Run and write the prompts of chunk ``position``; returns them in the order
        finished."""
        part, done = chunks[position], []

        def write(index: int, row: dict[str, Any]) -> None:
            write_result(run, out_dir, index, row, context)
            done.append(index)
            if bar is not None:
                bar.update(1)

        if isinstance(work, BatchedWork):
            work.decode([(index, run.prompts[index]) for index in part], write)
            missing = sorted(set(part) - set(done))
            if missing:
                raise RuntimeError(f"BatchedWork.decode returned without writing prompts {missing}")
        else:
            for index in part:
                write(index, work(index, run.prompts[index]))
        return done

    try:
        done = run_units(
            run_chunk, len(chunks), workers=workers, device=context.device or "cpu", progress=bar
        )
    finally:
        bar.close()
    return [index for part in done for index in part]


def evaluate(
    prompts: list[str],
    out_dir: str | Path,
    work: Callable[[int, str], dict[str, Any]] | BatchedWork,
    context: DistributedContext,
    *,
    identity: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    progress: bool = True,
    workers: int = 1,
) -> dict[str, Any] | None:
    """Check or record the run (``identity`` + ``prompts``: docs/run-store.md), run this
    rank's shard (``work``: ``run_shard``'s), wait for all ranks, merge on rank 0 (returns the
    summary there, None on other ranks). Raises ``RunMismatch`` when ``out_dir`` holds another run.

    ``identity`` must hold everything the results depend on besides the prompts (the CLI
    passes model, weights fingerprint, decoding spec and seed); ``config``: extra, uncompared
    fields for summary.json (e.g. world_size); ``metadata``: uncompared fields for run.json.
    workers: processes this rank's chunks run on (``run_shard``)."""
    if not prompts:
        raise ValueError("no prompts to evaluate")
    run = RunIdentity(identity or {}, prompts)
    start_run(out_dir, run, context, metadata=metadata)
    run_shard(run, out_dir, work, context, progress=progress, workers=workers)
    barrier(context)
    summary = merge_results(out_dir, config=config) if context.is_main else None
    barrier(context)
    return summary
