"""Count what a call costs on an accelerator, independent of timing: top-level aten ops (one
kernel launch each on a GPU) and host syncs (device-to-host reads that stall the queue); and
where a call's CPU time goes, op by op.

Counts from ``torch.profiler`` on CPU are deterministic, unlike times, so tests can bound them
(``tests/lab/engine/test_engine_costs.py``) and benchmarks can print them
(``benchmarks/verify.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::nonzero_numpy")


@contextlib.contextmanager
def counted_tolist(counter: list[int]) -> Iterator[None]:
    """Count ``Tensor.tolist`` calls (a device-to-host read the profiler does not name)."""
    real = torch.Tensor.tolist

    def tolist(self):
        counter.append(1)
        return real(self)

    torch.Tensor.tolist = tolist
    try:
        yield
    finally:
        torch.Tensor.tolist = real


def ops_and_syncs(fn: Callable[[], object]) -> tuple[int, int]:
    """(top-level aten ops, host syncs: item-type reads, nonzero, tolist) of one call of ``fn``."""
    reads: list[int] = []
    with profile(activities=[ProfilerActivity.CPU]) as prof, counted_tolist(reads):
        fn()
    events = prof.events()
    top = [e for e in events if e.cpu_parent is None and e.name.startswith("aten::")]
    return len(top), sum(e.name in SYNC_OPS for e in events) + len(reads)


@dataclass(frozen=True)
class OpTime:
    """One aten op's share of a call: its name, the calls to it and their self time (seconds:
    the op's own time, without the ops it calls)."""

    name: str
    calls: int
    seconds: float


def op_times(fn: Callable[[], object], repeats: int = 3) -> list[OpTime]:
    """Self CPU time per aten op of one call of ``fn``: for each op, the run (of ``repeats``
    profiled calls) with its median time, and that run's count of calls; largest first. Ops
    that only call other ops (self time ~0) still appear."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    runs: list[dict[str, tuple[float, int]]] = []
    for _ in range(repeats):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        runs.append(
            {
                e.key: (e.self_cpu_time_total * 1e-6, e.count)
                for e in prof.key_averages()
                if e.key.startswith("aten::")
            }
        )
    rows: list[OpTime] = []
    for name in set().union(*runs):
        seconds, calls = sorted(run.get(name, (0.0, 0)) for run in runs)[len(runs) // 2]
        rows.append(OpTime(name, calls, seconds))
    return sorted(rows, key=lambda row: (-row.seconds, row.name))
