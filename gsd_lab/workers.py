"""Work split over worker processes, one intra-op thread each: a busy core slows the job in
proportion instead of stalling it (why processes, and why the results do not depend on their
number: docs/worker-processes.md).

- ``run_units(task, count, workers=...)``: ``[task(i) for i in range(count)]`` on forked
  processes (one thread each), or in this process on one thread (a GPU, one worker);
- ``plan_units``: a job's images in units of at most ``UNIT_BATCHES`` x B, fixed before any
  worker starts, so that what a unit computes depends on the plan alone;
- ``default_workers`` (the usable cores on a CPU, 1 on a GPU), ``check_workers``,
  ``usable_cores``, ``one_thread``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

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
    """Images ``start .. stop - 1`` (in the job's order) of job ``job``."""

    job: int
    start: int
    stop: int


def plan_units(images_per_job: list[int], batch_size: int) -> list[Unit]:
    """Each job's images in units of at most ``UNIT_BATCHES * batch_size``: the plan depends on
    the jobs' sizes and the batch size only (docs/worker-processes.md)."""
    size = UNIT_BATCHES * batch_size
    return [
        Unit(job, start, min(start + size, count))
        for job, count in enumerate(images_per_job)
        for start in range(0, count, size)
    ]


# The task the forked workers run (set by ``run_units`` before the pool starts: inherited, not
# pickled).
_TASK: Callable[[int, Any], Any] | None = None


def _one_thread() -> None:
    torch.set_num_threads(1)


def _run_task(index: int) -> tuple[int, Any]:
    return index, _TASK(index, None)


@contextlib.contextmanager
def one_thread(on_cpu: bool) -> Iterator[None]:
    """One intra-op thread inside (on a CPU; as each worker runs), the count restored after."""
    threads = torch.get_num_threads()
    if on_cpu:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if on_cpu:
            torch.set_num_threads(threads)


def run_units(
    task: Callable[[int, Any], Any],
    count: int,
    *,
    workers: int | None,
    device: torch.device | str,
    progress: Any = None,
    size: Callable[[Any], int] = len,
    prepare: Callable[[], None] | None = None,
) -> list[Any]:
    """``[task(i, bar) for i in range(count)]``, on ``workers`` forked processes (None:
    ``default_workers``; docs/worker-processes.md). In this process ``bar`` is ``progress`` (the
    task advances it as it goes); in a worker it is None and ``progress`` is advanced by
    ``size(result)`` as each unit comes back. ``prepare``: called once before forking."""
    global _TASK
    check_workers(workers)
    if workers is None:
        workers = default_workers(device)
    on_cpu = torch.device(device).type == "cpu"
    forked = (
        workers > 1 and count > 1 and on_cpu and "fork" in multiprocessing.get_all_start_methods()
    )
    if not forked:
        with one_thread(on_cpu):
            return [task(index, progress) for index in range(count)]
    if prepare is not None:
        prepare()
    done: list[Any] = [None] * count
    _TASK = task
    try:
        context = multiprocessing.get_context("fork")
        with context.Pool(min(workers, count), initializer=_one_thread) as pool:
            for index, result in pool.imap_unordered(_run_task, range(count)):
                done[index] = result
                if progress is not None:
                    progress.update(size(result))
    finally:
        _TASK = None
    return done
