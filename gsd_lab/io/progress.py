"""Progress lines for long runs (``figures --paper``, the notebooks on Lumina-mGPT): done / to do
and an ETA, printed as plain lines (a log file or a notebook shows them; a tqdm bar in a
captured stream shows nothing until the end).

The ETA weighs what is left by its cost: ``advance(work=...)`` says how much work the finished
item was (e.g. its forward passes), ``remaining_work`` how much is left in the same unit; the
rate is this session's seconds per unit of work (items resumed from disk cost nothing now and
do not count in it).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def duration(seconds: float) -> str:
    """42 s, 3.5 min, 2.1 h, 3.2 days."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


class ProgressLog:
    """Done / total with an ETA, one line at most every ``interval`` seconds (and always for
    the first and the last item). ``total`` None: only what is done is known."""

    def __init__(
        self,
        total: int | None,
        *,
        desc: str,
        done: int = 0,
        interval: float = 30.0,
        stream: TextIO | None = None,
        enabled: bool = True,
    ) -> None:
        self.total, self.desc, self.done, self.resumed = total, desc, done, done
        self.interval, self.stream, self.enabled = interval, stream, enabled
        self.started = time.perf_counter()
        self.work_done = 0.0
        self.remaining_work: float | None = None
        self._last_line = -float("inf")

    def advance(
        self, n: int = 1, *, work: float = 1.0, remaining_work: float | None = None, note: str = ""
    ) -> None:
        """``n`` more items finished in this session, costing ``work`` units together;
        ``remaining_work``: the units still to do (default: the mean per item so far times the
        items left)."""
        self.done += n
        self.work_done += work
        self.remaining_work = remaining_work
        now = time.perf_counter()
        last = self.total is not None and self.done >= self.total
        if self.enabled and (now - self._last_line >= self.interval or last):
            self._last_line = now
            print(self.line(note), file=self.stream or sys.stderr, flush=True)

    def update(self, n: int = 1) -> None:
        """tqdm's name for ``advance(n, work=n)``: a ``ProgressLog`` can stand where a
        bar is expected."""
        self.advance(n, work=float(n))

    def eta_seconds(self) -> float | None:
        """Seconds left at this session's rate (None before the first item or without a total)."""
        elapsed = time.perf_counter() - self.started
        if self.work_done <= 0 or (self.total is None and self.remaining_work is None):
            return None
        remaining = self.remaining_work
        if remaining is None:
            items = self.done - self.resumed
            remaining = (self.total - self.done) * self.work_done / max(1, items)
        return remaining * elapsed / self.work_done

    def line(self, note: str = "") -> str:
        elapsed = time.perf_counter() - self.started
        todo = "" if self.total is None else f"/{self.total} ({self.total - self.done} to do)"
        resumed = f", {self.resumed} from disk"
        eta = self.eta_seconds()
        eta_text = "" if eta is None else f", ETA {duration(eta)}"
        return (
            f"{self.desc}: {self.done}{todo} done{resumed}; {duration(elapsed)} elapsed{eta_text}"
            + (f"; {note}" if note else "")
        )


class ProgressTee:
    """Several progress sinks as one (``update(n)`` on each that is not None), e.g. a tqdm bar
    and a ``ProgressLog``."""

    def __init__(self, *sinks: object) -> None:
        self.sinks = [s for s in sinks if s is not None]

    def update(self, n: int = 1) -> None:
        for sink in self.sinks:
            sink.update(n)
