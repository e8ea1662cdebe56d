"""The test suite as CI runs it, timed: a fresh clone of a commit, ``CI=true bash .ci/run``
(installation, then ``scripts/test.sh``), and the pytest summary written to a JSON file that the
README renders (the target: ``scripts/test.sh`` in at most 12 minutes of pytest on 2 cores).

    python benchmarks/suite_time.py [--commit HEAD] [--out benchmarks/results/suite_time.json]

Written: the commit, the usable cores, the load average before and after, pytest's own count
line (passed, failed, skipped, errors) and its seconds, its slowest items, the wall seconds
of the whole run (installation included) and ATEN_CPU_CAPABILITY ("default (the best)" when
unset; the suite under another instruction set: ``ATEN_CPU_CAPABILITY=avx2 python
benchmarks/suite_time.py --out benchmarks/results/suite_time_avx2.json``). The exit status is
the suite's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"=+ (?P<counts>.*?) in (?P<seconds>[\d.]+)s(?: \([\d:]+\))? =+\s*$", re.M)


def pytest_summary(log: str) -> dict[str, object]:
    """The counts and seconds of pytest's last summary line, e.g. "1493 passed, 1 skipped in
    945.48s (0:15:45)" -> {"passed": 1493, "skipped": 1, "seconds": 945.48}."""
    found = list(SUMMARY.finditer(log))
    if not found:
        raise ValueError("no pytest summary line in the log")
    last = found[-1]
    counts = {word.rstrip("s") if word != "passed" else word: int(n)
              for n, word in re.findall(r"(\d+) (\w+)", last["counts"])}
    return {**counts, "seconds": float(last["seconds"])}


def slowest(log: str) -> list[str]:
    """The lines of pytest's "slowest N durations" block ("137.08s setup tests/...")."""
    block = re.search(r"=+ slowest \d+ durations =+\n(?P<lines>.*?)\n=+", log, re.S)
    return block["lines"].splitlines() if block else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "suite_time.json"))
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", args.commit], check=True,
                            capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "gsd"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", commit], check=True)
        load_before, start = os.getloadavg()[0], time.monotonic()
        run = subprocess.run(["bash", ".ci/run"], cwd=clone, capture_output=True, text=True,
                             env={**os.environ, "CI": "true"})
        wall, load_after = time.monotonic() - start, os.getloadavg()[0]
    log = run.stdout + run.stderr
    sys.stdout.write(run.stdout[-6000:])  # pytest's summary (pip's warnings go to stderr)
    record = {
        "commit": commit,
        "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "cores": len(os.sched_getaffinity(0)),
        # torch's CPU kernels: ATEN_CPU_CAPABILITY as set for the run, else the machine's best.
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY", "default (the best)"),
        "load_average_before": round(load_before, 2),
        "load_average_after": round(load_after, 2),
        "returncode": run.returncode,
        "pytest": pytest_summary(log),
        "slowest": slowest(log),
        "failures": [line for line in log.splitlines() if line.startswith(("FAILED ", "ERROR "))],
        "wall_seconds_with_installation": round(wall, 1),
    }
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(record, indent=1))
    return run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
