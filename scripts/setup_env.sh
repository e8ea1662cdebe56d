#!/usr/bin/env bash
# Create .venv (once) and install gsd with every extra on the CPU torch wheel.
# Sourced by scripts/main.sh and scripts/test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
# The constraints file pins the CPU build of torch: an unpinned torch pulls a multi-GB CUDA build.
.venv/bin/python -m pip install -q -c constraints/cpu.txt -e ".[test]"
export PATH="$PWD/.venv/bin:$PATH"
export MPLBACKEND=Agg
