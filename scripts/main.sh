#!/usr/bin/env bash
# The main job: regenerate every figure and results table from the embedded stand-in model.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
python -m gsd_lab figures "$@"
