"""benchmarks/suite_time.py reads pytest's summary line (the README renders its output)."""

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "suite_time", Path(__file__).resolve().parents[1] / "benchmarks" / "suite_time.py"
)
suite_time = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(suite_time)


def test_the_last_summary_line_gives_counts_and_seconds():
    log = (
        "=== 3 passed in 1.00s ===\n...\n"
        "====== 1493 passed, 1 skipped, 1 warning, 2 errors in 945.48s (0:15:45) ======\n"
    )
    assert suite_time.pytest_summary(log) == {
        "passed": 1493, "skipped": 1, "warning": 1, "error": 2, "seconds": 945.48
    }


def test_a_log_without_a_summary_is_refused():
    with pytest.raises(ValueError, match="no pytest summary"):
        suite_time.pytest_summary("collected 0 items\n")
