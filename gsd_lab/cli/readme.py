"""``readme``: the README's answer, docs/findings.md, docs/claims.md and every rendered value
span from a figures run's results.json; ``--check`` compares only (exit 1 if any differs)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    """``readme``: the README's answer and docs/findings.md from results.json."""
    rd = sub.add_parser(
        "readme",
        help="README's answer, docs/findings.md, docs/claims.md and every value span",
        description="Render the README's answer, docs/findings.md (the full table and Table 1), "
        "the claims "
        "ledger (docs/claims.md) and the value spans of README, docs, proofs and notebook "
        "markdown (gsd_lab.experiments.prose) from a figures run's results.json; "
        "--check exits 1 if any differs.",
    )
    rd.add_argument(
        "--results", type=Path, default=None, help="default: the repository's figures/results.json"
    )
    rd.add_argument("--check", action="store_true", help="compare only; write nothing")


def run(args: argparse.Namespace) -> int:
    """README's answer, docs/findings.md and docs/claims.md from results.json
    (``experiments.findings``)."""
    from ..experiments import findings, ledger, prose

    results = ledger.load_results(args.results or ledger.RESULTS)
    if not args.check:
        for path in findings.update_repository(results):
            print(f"wrote {path}")
        for path in prose.update_documents(results):  # value spans in README, docs, proofs
            print(f"wrote {path}")
        return 0
    stale = findings.stale_outputs(results)
    stale += [str(p.relative_to(prose.REPO)) for p in prose.stale_documents(results)]
    for name in stale:
        print(f"{name} differs from the rendering of the results (python -m gsd_lab readme)")
    return 1 if stale else 0
