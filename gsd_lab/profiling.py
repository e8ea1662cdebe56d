"""Count what a call costs on an accelerator, independent of timing: top-level aten ops (one
kernel launch each on a GPU) and host syncs (device-to-host reads that stall the queue).

Counts from ``torch.profiler`` on CPU are deterministic, unlike times, so tests can bound them
(``tests/core/test_op_counts.py``) and benchmarks can print them (``benchmarks/verify.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

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
