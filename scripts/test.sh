#!/usr/bin/env bash
# The whole test suite: unit and property tests, and the notebooks under nbval, spread over one
# worker process per core (pytest-xdist). --dist loadfile keeps each file on one worker, in order:
# a notebook's cells share one kernel, and a module's fixtures are built once. A notebook cell that
# runs past its timeout (notebooks/conftest.py, or --nbval-cell-timeout) fails, named, instead of
# holding its worker.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
python -m pytest -n "${GSD_TEST_WORKERS:-auto}" --dist loadfile tests notebooks \
    --nbval-lax --nbval-current-env --durations=25 "$@"
