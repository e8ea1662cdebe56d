"""Decoding runs split over worker processes, one intra-op thread each: a busy core slows the
job in proportion instead of stalling it.

Why processes. torch's CPU default runs one OpenMP team over every core, whose threads spin at
each barrier; when another process takes one of those cores, the team waits for its slowest
thread at every operation, so the figures job ran ~10x slower beside one CPU-bound 2-thread
process (issue 41), and ``OMP_WAIT_POLICY=PASSIVE`` costs 15-40% on quiet cores. Independent
processes with one thread each share nothing per operation: a worker that loses its core for a
while delays only its own images.

Work units. A run is a list of jobs (configurations, ``runs.MethodSpec`` with its
``ResolvedMethod``), each with its images in ``runs.batch_items`` order (seed, then prompt). A
unit is one job's images ``start .. stop - 1``: all of them when they are at most
``UNIT_BATCHES`` x B (B the batch size: the figures' 10 or 30 images per configuration are one
unit, the stream ``RunCache`` decoded before), else consecutive chunks of that many. Each unit
is decoded as one ``runs.decode_items`` stream, so an image's batch neighbours, and with them
the last bits of its batched forward (the recorded TV and W1 of lossless rules are rounding,
~1e-17), depend on the unit plan alone, never on the number of workers or on which worker ran
it; the records are merged in unit order. Tokens, NFE and acceptance depend on the batch only
through those last bits: a uniform within ~1e-16 of an acceptance threshold could decide
otherwise (the caveat ``gsd_lab.decode.batch`` documents), which the tests have not met. A job
with more than ``UNIT_BATCHES`` x B images is decoded in several units, so its batch composition
(and with it those last bits) differs from the single stream per configuration decoded before
the workers; at most ``UNIT_BATCHES`` x B images per job it is that stream.

Processes are forked (the model, its resolved rules and the caches built so far are shared
copy-on-write; nothing is loaded again) after the parent has built the embedding filter's
table once (``accounting.distortion.embedding_adjacency``, ~4 s on the stand-in); each worker
sets one intra-op thread and returns its unit's ``GenerationRecord``s by pickle. On a GPU, or
with one worker, the units are decoded in this process, in order; on a CPU with one intra-op
thread too (the previous count restored afterwards), since float64 sums split over another
number of threads can differ in the last bits: the same records for any number of workers,
one included.
"""

from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from ..accounting.distortion import embedding_adjacency
from ..decode.methods import ResolvedMethod
from .image_model import ImageModel
from .runs import BatchItem, GenerationRecord, MethodSpec, batch_items, decode_items

UNIT_BATCHES = 4  # a unit holds at most UNIT_BATCHES x batch_size images of one job


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_workers(device: torch.device | str) -> int:
    """Worker processes when the user does not say: the usable cores on a CPU, 1 on a GPU (one
    process drives the device)."""
    return 1 if torch.device(device).type != "cpu" else usable_cores()


def check_workers(workers: object) -> int | None:
    """``workers`` as given (None: ``default_workers``), or ValueError."""
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
    ):
        raise ValueError(f"workers must be an int >= 1 or None, got {workers!r}")
    return workers


@dataclass(frozen=True)
class Unit:
    """Images ``start .. stop - 1`` (in ``batch_items`` order) of job ``job``."""

    job: int
    start: int
    stop: int


def plan_units(images_per_job: list[int], batch_size: int) -> list[Unit]:
    """Each job's images in units of at most ``UNIT_BATCHES * batch_size`` (module docstring):
    the plan depends on the jobs' sizes and the batch size only."""
    size = UNIT_BATCHES * batch_size
    return [
        Unit(job, start, min(start + size, count))
        for job, count in enumerate(images_per_job)
        for start in range(0, count, size)
    ]


# The run the forked workers read (set by ``run_jobs`` before the pool starts: inherited, not
# pickled). (model, jobs, items per job, units, batch size, generate_batch's options)
_RUN: tuple | None = None


def _start_worker() -> None:
    torch.set_num_threads(1)


def _decode_unit(index: int) -> tuple[int, list[GenerationRecord]]:
    model, jobs, items, units, batch_size, options = _RUN
    unit = units[index]
    return index, decode_items(
        model, jobs, items[unit.job][unit.start : unit.stop], batch_size, **options
    )


def _warm_caches(model: ImageModel, jobs: list[tuple[MethodSpec, ResolvedMethod]]) -> None:
    """Build, in this process, the embedding filter's [V, V] table that each job's accounting
    reads, so that forked workers inherit it instead of building one each."""
    from gsd_core import Amplify, DynamicClusters

    vocab = getattr(model.adapter, "vocab_size", None)
    for _, resolved in jobs:
        rule = resolved.rule
        while isinstance(rule, Amplify):
            rule = rule.rule
        if (
            isinstance(rule, DynamicClusters)
            and rule.max_embedding_distance is not None
            and isinstance(vocab, int)
            and vocab * vocab <= 1 << 27  # the CPU table's bound (support_output_laws)
            and rule.embeddings.shape[0] >= vocab
        ):
            embedding_adjacency(rule.embeddings, rule.max_embedding_distance, vocab)


def run_jobs(
    model: ImageModel,
    jobs: list[tuple[MethodSpec, ResolvedMethod]],
    prompts: list[str],
    seeds: Iterable[int],
    batch_size: int,
    *,
    workers: int | None = None,
    progress: Any = None,
    **options: Any,
) -> list[list[GenerationRecord]]:
    """Per job its records in ``runs.run_batched``'s order, decoded unit by unit (module
    docstring) on ``workers`` processes (None: ``default_workers``). progress: advanced by a
    unit's images as it finishes. options: ``generate_batch``'s record_* and w1_draws. The
    records are the same for any ``workers`` (tested), except ``wall_seconds`` /
    ``model_seconds`` / ``accounting_seconds``, which time them."""
    global _RUN
    check_workers(workers)
    if workers is None:
        workers = default_workers(model.adapter.device)
    items: list[list[BatchItem]] = [[] for _ in jobs]
    for item in batch_items(jobs, prompts, seeds):
        items[item[0]].append(item)
    units = plan_units([len(i) for i in items], batch_size)
    done: list[list[GenerationRecord] | None] = [None] * len(units)
    in_process = (
        workers == 1
        or len(units) < 2
        or torch.device(model.adapter.device).type != "cpu"
        or "fork" not in multiprocessing.get_all_start_methods()
    )
    _RUN = (model, jobs, items, units, batch_size, options)
    try:
        if in_process:
            on_cpu = torch.device(model.adapter.device).type == "cpu"
            threads = torch.get_num_threads()
            if on_cpu:  # as each worker decodes (module docstring)
                torch.set_num_threads(1)
            try:
                for index in range(len(units)):
                    done[index] = _decode_unit(index)[1]
                    if progress is not None:
                        progress.update(len(done[index]))
            finally:
                if on_cpu:
                    torch.set_num_threads(threads)
        else:
            _warm_caches(model, jobs)
            context = multiprocessing.get_context("fork")
            with context.Pool(min(workers, len(units)), initializer=_start_worker) as pool:
                for index, records in pool.imap_unordered(_decode_unit, range(len(units))):
                    done[index] = records
                    if progress is not None:
                        progress.update(len(records))
    finally:
        _RUN = None
    out: list[list[GenerationRecord]] = [[] for _ in jobs]
    for unit, records in zip(units, done):
        out[unit.job].extend(records)
    return out
