"""The digits adapter's ``generate`` gives the same tokens in every fresh process: with 1 and 2
threads and under ATen's scalar, AVX2 and the machine's best kernels (float64 forward, as the
stand-in's tests/lab/test_reproducible_isa.py), and the tokens the export recorded."""

from __future__ import annotations

import importlib.util
import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = {"default ISA, 1 thread": ("default", 1), "avx2, 1 thread": ("avx2", 1),
            "best ISA, 2 threads": (None, 2)}
BATCH = r"""
import hashlib, json, sys
import torch
from gsd_lab.decode.loop import generate
from gsd_lab.decode.methods import DecodingMethod, ClusterAcceptance
from gsd_lab.digits.adapter import load_digits
from gsd_train.digits.export import REFERENCE_CLASS, REFERENCE_SEED

torch.set_num_threads(int(sys.argv[1]))
adapter = load_digits(fast_forward=True)
out = {"capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}
methods = {"ar": DecodingMethod("ar"),
           "gsd": DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=10))}
for name, method in methods.items():
    result = generate(adapter, adapter.prompt_ids(REFERENCE_CLASS), method,
                      num_tokens=adapter.num_image_tokens,
                      generator=torch.Generator().manual_seed(REFERENCE_SEED),
                      uncond_prompt_ids=adapter.uncond_prompt_ids())
    out[name] = {"tokens": result.tokens.tolist(), "nfe": result.nfe}
print(json.dumps(out))
"""

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="ATEN_CPU_CAPABILITY values are x86 instruction sets")


def isa_test_module():
    """The stand-in's ISA test (wherever tests/ keeps it), for its ``subprocess_env``."""
    path = next(ROOT.glob("tests/**/test_reproducible_isa.py"))
    spec = importlib.util.spec_from_file_location("reproducible_isa_for_digits", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BATCH_TIMEOUT = 300  # seconds for one subprocess's batch


@pytest.fixture(scope="module")
def batches() -> dict[str, dict]:
    environment = isa_test_module().subprocess_env
    started = {
        name: subprocess.Popen([sys.executable, "-c", BATCH, str(threads)],
                               env=environment(capability, threads), cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, (capability, threads) in SETTINGS.items()
    }
    out = {}
    try:
        for name, process in started.items():
            try:
                stdout, stderr = process.communicate(timeout=BATCH_TIMEOUT)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the {name} batch ran past {BATCH_TIMEOUT} s")
            assert process.returncode == 0, stderr[-3000:]
            out[name] = json.loads(stdout.strip().splitlines()[-1])
    finally:
        for process in started.values():  # none outlives the fixture
            if process.poll() is None:
                process.kill()
                process.communicate()
    return out


def test_generate_is_the_same_in_every_process_isa_and_thread_count(batches):
    reference = json.loads((ROOT / "gsd_lab/digits/weights/reference_outputs.json").read_text())
    first = next(iter(batches.values()))
    assert first["ar"]["tokens"] == reference["generate_ar_tokens"]
    for name, batch in batches.items():
        for method in ("ar", "gsd"):
            assert batch[method] == first[method], (name, method)
    assert first["gsd"]["nfe"] < first["ar"]["nfe"] == 196
    assert batches["default ISA, 1 thread"]["capability"] == "DEFAULT"
    assert batches["avx2, 1 thread"]["capability"] == "AVX2"
    assert {b["threads"] for b in batches.values()} == {1, 2}
