#!/usr/bin/env bash
# The whole test suite: unit and property tests, then the notebooks under nbval.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
python -m pytest tests notebooks --nbval-lax --nbval-current-env --durations=25 "$@"
