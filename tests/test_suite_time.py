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


def test_the_slowest_block_is_read():
    log = (
        "===== slowest 2 durations =====\n137.08s setup    tests/a.py::t\n9.1s call     b.py::u\n"
        "===== short test summary info =====\n"
    )
    assert suite_time.slowest(log) == ["137.08s setup    tests/a.py::t", "9.1s call     b.py::u"]
    assert suite_time.slowest("no block") == []


def test_the_longest_first_files_exist():
    """tests/conftest.py's ordering names real files (a renamed one would silently lose it)."""
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("tests_conftest", root / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    LONGEST_FIRST = conftest.LONGEST_FIRST
    assert [p for p in LONGEST_FIRST if not (root / p).is_file()] == []
