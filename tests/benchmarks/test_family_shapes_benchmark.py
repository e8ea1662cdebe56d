"""benchmarks/gpu_family_shapes.py in its CPU ``--tiny`` mode: the code path of the real-size GPU
run (random weights) for Chameleon / Anole and Emu3."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_family_shapes.py"

pytestmark = pytest.mark.usefixtures("one_thread")


def _load():
    spec = importlib.util.spec_from_file_location("gpu_family_shapes", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_mode_prints_one_json_line(capsys):
    result = _load().main(["--tiny", "--repeats", "1", "--window", "4"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 1 and json.loads(lines[0]) == result
    assert result["mode"] == "tiny-cpu"
    for family, latent, tokens in (("anole", [8, 8], 64), ("emu3", [4, 4], 20)):
        entry = result[family]
        assert entry["latent"] == latent and entry["num_image_tokens"] == tokens
        assert entry["cfg_batch"] == 2 and set(entry["forward_ms"]) == {"1", "4"}
        assert all(v > 0 for v in entry["forward_ms"].values())
        for method in ("sjd", "gsd"):
            decoded = entry["decode"][method]
            assert decoded["tokens"] == 16 and 1 <= decoded["nfe"] <= 16
        assert entry["pixels"]["shape"] == [1, 16, 16, 3]
        assert entry["pixels"]["dtype"] == "torch.uint8"


def test_refuses_bad_arguments():
    module = _load()
    with pytest.raises(SystemExit):
        module.main(["--tiny", "--window", "0"])
