#!/usr/bin/env bash
# Create .venv (once) and install gsd with every extra on the CPU torch wheel.
# Sourced by scripts/main.sh and scripts/test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
# constraints/cpu.txt pins the CPU build of torch (an unpinned torch pulls a multi-GB CUDA build);
# constraints/lock.txt pins every other package at the version the suite passes with.
.venv/bin/python -m pip install -q -c constraints/cpu.txt -c constraints/lock.txt -e ".[test]"
# Test oracle for the Chameleon VQGAN decoder (tests/lab/models/test_vqgan_decoder.py). Its metadata asks
# for pytorch-lightning and torchvision, which the modules we compare against never import.
.venv/bin/python -m pip install -q --no-deps taming-transformers-rom1504==0.0.6
export PATH="$PWD/.venv/bin:$PATH"
export MPLBACKEND=Agg
