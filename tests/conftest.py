"""Shared pytest configuration: Hypothesis profiles.

- "ci": Hypothesis' built-in profile (derandomize=True, no database, deadline=None), loaded
  automatically when the CI environment variable is set (``.ci/run`` sets CI=true), so
  property tests see the same examples on every CI run.
- "dev" (default elsewhere): 100 examples, no deadline (first torch calls are slow to warm up).
- "thorough": 2000 examples, for occasional local runs (HYPOTHESIS_PROFILE=thorough).

HYPOTHESIS_PROFILE=<name> overrides the choice.

Under pytest-xdist (scripts/test.sh: one worker process per core) each worker's torch gets its
share of the usable cores for intra-op threads, set before torch is imported: more threads than
cores makes OpenMP's spinning threads stall each other. An explicit OMP_NUM_THREADS wins.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile(
    "thorough", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

_workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
if _workers:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (_cores or 1) // int(_workers))))

_profile = os.environ.get("HYPOTHESIS_PROFILE")
if _profile:
    settings.load_profile(_profile)
elif not os.environ.get("CI"):
    settings.load_profile("dev")
# With CI set and no override, Hypothesis has already loaded its built-in "ci" profile.
