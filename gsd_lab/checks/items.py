"""The verdicts of ``check-weights``: one per item, the runner that orders the items (an item
whose prerequisite failed is skipped, naming it) and the report (text or one JSON line)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"
# An item's check raising one of these is that item's FAIL verdict, not a traceback (the
# FloatingPointError ``generate`` raises on non-finite logits included).
ITEM_ERRORS = (OSError, ValueError, KeyError, RuntimeError, FloatingPointError)

Outcome = tuple[str, str]  # (status, detail) of one item's check


@dataclass(frozen=True)
class Verdict:
    """One item's status (OK, WARN, FAIL or SKIP) and what its check found."""

    item: str
    status: str
    detail: str


Item = tuple[str, tuple[str, ...], Callable[[], Outcome]]  # (item, the items it needs, check)


def run_items(items: list[Item]) -> list[Verdict]:
    """One verdict per item, in order: its check's outcome, a FAIL naming an ``ITEM_ERRORS``
    error the check raised, or a SKIP naming the needed items that failed or were skipped."""
    verdicts: list[Verdict] = []
    failed: set[str] = set()
    for item, needs, check in items:
        blocked = [need for need in needs if need in failed]
        verdict = Verdict(item, *_outcome(blocked, check))
        if verdict.status in (FAIL, SKIP):
            failed.add(item)
        verdicts.append(verdict)
    return verdicts


def _outcome(blocked: list[str], check: Callable[[], Outcome]) -> Outcome:
    if blocked:
        return SKIP, f"needs {', '.join(blocked)}"
    try:
        return check()
    except ITEM_ERRORS as error:
        return FAIL, f"{type(error).__name__}: {error}"


def format_verdicts(verdicts: list[Verdict]) -> str:
    """One line per verdict, then the summary: the failed items, else "all checks passed",
    and the warned ones."""
    width = max(len(v.item) for v in verdicts)
    lines = [f"  {v.status:<4}  {v.item:<{width}}  {v.detail}" for v in verdicts]
    failed = [v.item for v in verdicts if v.status == FAIL]
    warned = [v.item for v in verdicts if v.status == WARN]
    summary = (f"FAILED: {', '.join(failed)}" if failed else "all checks passed") + (
        f" ({len(warned)} warning(s): {', '.join(warned)})" if warned else ""
    )
    return "\n".join(lines + [f"verdict: {summary}"])


def report(args: Any, verdicts: list[Verdict], started: float, **named: str) -> int:
    """Print the verdicts (``--json``: one JSON line; ``named``, e.g. model=..., go in both) and
    return the exit status: 1 when an item failed (warnings allowed), else 0."""
    seconds = time.perf_counter() - started
    if args.json:
        data = {"weights": str(args.weights), **named, "seconds": seconds}
        print(json.dumps({**data, "verdicts": [asdict(v) for v in verdicts]}))
    else:
        flags = "".join(f" --{name} {value}" for name, value in named.items())
        print(f"check-weights {args.weights}{flags} ({seconds:.1f} s)")
        print(format_verdicts(verdicts))
    return 1 if any(v.status == FAIL for v in verdicts) else 0
