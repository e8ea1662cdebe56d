"""benchmarks/gpu_static_engine.py in its CPU ``--tiny`` mode: every part of the GPU run (forwards
of three engines, the limit, AR/SJD/GSD decoding with both engines, syncs per step, the compile
part) on a tiny Chameleon, so the later GPU run does not fail on its code."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_static_engine.py"


def test_tiny_dry_run_prints_the_record_then_the_compile_part(capsys):
    spec = importlib.util.spec_from_file_location("gpu_static_engine", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--tiny", "--repeats", "1", "--window", "4", "--compare-tokens", "12",
                 "--decode-tokens", "30", "--compile"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 2 and not lines[0]["complete"] and lines[1]["complete"]
    record = lines[1]
    assert record["errors"] == {} and record["mode"] == "tiny-cpu" and record["widths"] == [1, 5]
    assert record["git_commit"] and len(record["source_sha256"]) == 64
    assert record["decoding_engine"] == "captured"
    for engine in ("eager", "static-eager", "captured", "captured-model"):
        for width in ("1", "5"):
            times = record["forwards"][engine][width]
            assert times["wall_ms"] > 0 and times["model_ms"] > 0 and times["queued_ms"] > 0
    assert set(record["compile"]["forwards"]) == {"1", "5"} and record["compile"]["seconds"] > 0
    assert 0 < record["limit_ms"]["weights"] < record["limit_ms"]["weights_and_kv"]
    decoding = record["decoding"]
    assert {run["engine"] for run in decoding.values()} == {"static", "eager"}
    for name, tokens in (("static_compare", 12), ("eager_compare", 12), ("static_image", 30)):
        methods = decoding[name]["methods"]
        assert decoding[name]["tokens"] == tokens and methods["ar"]["nfe"] == tokens
        for row in methods.values():
            assert row["wall_seconds"] >= row["model_seconds"] > 0 and row["outside_ms_per_step"] >= 0
    # The same seeds and tokens: both engines take the same number of forwards.
    assert ({m: r["nfe"] for m, r in decoding["static_compare"]["methods"].items()}
            == {m: r["nfe"] for m, r in decoding["eager_compare"]["methods"].items()})
    assert record["syncs_per_step"]["static"] == 1 and record["syncs_per_step"]["eager"] > 1
    targets = record["targets"]
    assert targets["window_forward_ms"] == record["forwards"]["captured"]["5"]["model_ms"]
    assert targets["gsd_wall_over_nfe"] == decoding["static_image"]["methods"]["gsd"]["wall_over_nfe"]


def test_the_image_decode_shortens_to_fit_the_budget():
    spec = importlib.util.spec_from_file_location("gpu_static_engine", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pace = {"methods": {"ar": {"wall_ms_per_forward": 8.0}, "gsd": {"wall_ms_per_forward": 10.0}}}
    fit = module.image_tokens_within_budget
    assert fit(pace, 2352, 256, 300.0) == 2352  # 3 x 2352 x 11 ms = 78 s < 300 - 90
    assert fit(pace, 2352, 256, 150.0) == int(60 / (3 * 1.1 * 0.010))  # the slowest method's pace
    assert fit(pace, 2352, 256, 80.0) == 256 and fit(None, 2352, 256, 300.0) == 256


def test_forward_bytes_and_the_documented_7b_figures():
    """The weight-read limit's bytes: every weight but the input embeddings, plus the CFG pair's
    keys and values; for the 7B (bf16, 2432 slots) the figures docs/lumina-mgpt.md section 6b
    states."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = importlib.util.spec_from_file_location("gpu_static_engine", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    counts = module.forward_bytes(model, kv_slots=10, batch=2)
    parameters = sum(p.numel() for p in model.parameters())
    assert counts["weights"] == 2 * (parameters - 40 * 16)
    assert counts["weights_and_kv"] - counts["weights"] == 2 * 3 * 2 * (2 * 4) * 10 * 2
    seven_b = module.shapes.model_config(tiny=False)
    weights = 2 * (module.estimated_parameters(seven_b, expanded_qk_norms=True) - 65536 * 4096)
    cache = 2 * 32 * 2 * 4096 * 2432 * 2  # keys and values, layers, CFG rows, heads x head_dim, slots, bf16
    docs = (BENCHMARK.parents[1] / "docs" / "lumina-mgpt.md").read_text()
    assert f"{weights / 1e9:.1f} GB of weights" in docs and f"= {cache / 1e9:.2f} GB at C = 2432" in docs


def test_a_failing_part_is_recorded_and_the_run_goes_on():
    spec = importlib.util.spec_from_file_location("gpu_static_engine", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    errors: dict[str, str] = {}

    def refuses():
        raise RuntimeError("operation not permitted when stream is capturing")

    assert module._part(errors, "forwards captured", refuses) is None
    assert module._part(errors, "limit", lambda: 3) == 3
    assert errors == {"forwards captured": "RuntimeError: operation not permitted when stream is capturing"}
