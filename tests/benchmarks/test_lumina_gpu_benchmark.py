"""benchmarks/gpu_lumina_shapes.py in its CPU ``--tiny`` mode: same code path as the 7B GPU run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_lumina_shapes.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_lumina_shapes", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_mode_prints_one_json_line(capsys):
    module = _load()
    result = module.main(["--tiny", "--repeats", "1", "--window", "4"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 1 and json.loads(lines[0]) == result
    assert (
        result["mode"] == "tiny-cpu" and result["context_tokens"] == 48 and result["cfg_batch"] == 2
    )
    assert set(result["forward_ms"]) == {"1", "4"} and set(result["model_ms"]) == {"1", "4"}
    assert all(
        v > 0
        for v in [
            *result["forward_ms"].values(),
            *result["model_ms"].values(),
            *result["verify_ms"].values(),
        ]
    )
    assert all(result["model_ms"][k] <= result["forward_ms"][k] for k in ("1", "4"))
    variants = {"sjd", "gsd_unfiltered", "gsd", "gsd_support", "gsd_support_novalidate"}
    assert set(result["verify_ms"]) == set(result["verify_cost"]) == variants
    # Without validation and given the support, the GSD call reads nothing back.
    assert result["verify_cost"]["gsd_support_novalidate"]["syncs"] == 0
    assert all(cost["ops"] > 0 for cost in result["verify_cost"].values())
    decoding = result["decoding"]
    assert decoding["tokens"] == 12 and decoding["rounds"] == 1
    assert set(decoding["methods"]) == {"ar", "sjd", "gsd"}
    for row in decoding["methods"].values():
        assert 1 <= row["nfe"] <= 12 and 0 <= row["overhead_share"] < 1
        assert row["model_seconds"] <= row["wall_seconds"]
    assert decoding["methods"]["ar"]["nfe"] == 12  # AR: one token per forward
    # Per-forward model times after the prompt: AR's 11 single tokens, in the one round's place 0.
    ar = decoding["methods"]["ar"]
    assert ar["model_ms_window_forwards"]["count"] == 11 and set(ar["model_ms_by_place"]) == {"0"}
    assert [set(decoding["methods"][m]["model_ms_by_place"]) for m in ("sjd", "gsd")] == [{"1"}, {"2"}]
    for row in decoding["methods"].values():
        times = row["model_ms_window_forwards"]
        assert 0 < times["min"] <= times["median"] <= times["max"] and times["min"] <= times["mean"]
    bare = result["bare_forwards_ms"]
    assert set(bare) == {"before_decoding", "after_decoding"}
    assert all(set(b) == {"one_token", "window_4"} and b["one_token"]["count"] == 4 for b in bare.values())
    assert isinstance(result["timestamp_utc"], str) and isinstance(result["hostname"], str)


def test_full_size_vocabulary_has_the_real_ids():
    """The 7B run's synthetic vocabulary puts every token the adapter uses at its real id."""
    module = _load()
    vocab = module.chameleon_vocabulary_map(65536, 8192)
    assert len(vocab) == 65536 and sorted(vocab.values()) == list(range(65536))
    assert (
        vocab["<racm3:break>"] == 8197
        and vocab["<eoss>"] == 8196
        and vocab["<reserved08706>"] == 8710
    )
    assert vocab["<reserved08799>"] == 8803 and vocab["<reserved08824>"] == 8828
    assert vocab["IMGIMGAZ"] == 4 and vocab["IMGIMGIBJBZ"] == 8195
    config = module.model_config(tiny=False)
    # reference lumina-mgpt.md section 2: 7,013,158,912 parameters as stored ([1, 128] q/k-norms,
    # norms included), 507,904 more once the q/k-norms are expanded to [32, 128].
    assert module.estimated_parameters(config) == 7_013_158_912
    assert module.estimated_parameters(config, expanded_qk_norms=True) == 7_013_666_816
    norms = 32 * 2 * 2 * 128 + 32 * 2 * 4096 + 4096  # q/k weight + bias, two RMSNorms, final norm
    without_norms = 2 * 65536 * 4096 + 32 * (4 * 4096**2 + 3 * 4096 * 11008)
    assert without_norms + norms == 7_013_158_912
