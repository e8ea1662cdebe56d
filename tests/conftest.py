"""Shared pytest configuration: Hypothesis profiles.

- "ci": Hypothesis' built-in profile (derandomize=True, no database, deadline=None), loaded
  automatically when the CI environment variable is set (``.ci/run`` sets CI=true), so
  property tests see the same examples on every CI run.
- "dev" (default elsewhere): 100 examples, no deadline (first torch calls are slow to warm up).
- "thorough": 2000 examples, for occasional local runs (HYPOTHESIS_PROFILE=thorough).

HYPOTHESIS_PROFILE=<name> overrides the choice.

Under pytest-xdist (scripts/test.sh: one worker process per core) each worker's torch gets its
share of the usable cores for intra-op threads, set before torch is imported: more threads than
cores makes OpenMP's spinning threads stall each other. An explicit OMP_NUM_THREADS wins. The
files that take longest (``LONGEST_FIRST``, from the durations CI prints) are collected first,
so that the workers start on them and finish together instead of one waiting on the other's
last long file (xdist's ``--dist loadfile`` hands out files in collection order).
"""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile(
    "thorough", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

_workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
if _workers:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (_cores or 1) // int(_workers))))

LONGEST_FIRST = (  # minutes each on 2 cores: a Lumina end-to-end run, notebooks, figures --quick
    "tests/lab/test_lumina_end_to_end.py",
    "notebooks/04_speedup_and_quality.ipynb",
    "tests/lab/cli/test_cli.py",
    "notebooks/03_top100_replacement.ipynb",
    "notebooks/02_top1_probability_histograms.ipynb",
    "tests/train/standin/test_standin_training.py",
    "tests/lab/experiments/test_reproducible_isa.py",
    "tests/test_site.py",  # the documentation site's Sphinx build
)


def pytest_collection_modifyitems(config, items):
    """Items of the ``LONGEST_FIRST`` files first, in that order; the rest keep theirs."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath

    def key(item):
        path = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        return rank.get(path, len(rank))

    items.sort(key=key)  # stable: the order within a file and among the rest is kept


_profile = os.environ.get("HYPOTHESIS_PROFILE")
if _profile:
    settings.load_profile(_profile)
elif not os.environ.get("CI"):
    settings.load_profile("dev")
# With CI set and no override, Hypothesis has already loaded its built-in "ci" profile.


@pytest.fixture(scope="module")
def one_thread():
    """Many tiny forward passes: extra intra-op threads only add contention. Restores the count."""
    import torch  # here, not at the top: the thread count above is set before torch loads

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
