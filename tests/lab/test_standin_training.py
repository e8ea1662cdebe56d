"""The stand-in's training script runs end to end (tiny sizes, a few steps) and its output loads;
the data split keeps training and held-out pixels apart."""

import json

import torch

from gsd_lab.models.standin import load_standin
from gsd_lab.standin import data
from gsd_lab.standin.__main__ import main

TINY = ["--tiny", "--tokenizer-iterations", "2", "--tokenizer-patches", "3000"]


def test_train_script_end_to_end_tiny(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *TINY, "--classifier-steps", "2", "--steps", "2",
                 "--batch", "2", "--eval-every", "1"]) == 0
    for name in ("tokenizer.safetensors", "classifier.safetensors", "ar_model.safetensors",
                 "ar_config.json", "manifest.json", "reference_outputs.json", "samples.png",
                 "generation_stats.json", "train_log.jsonl"):
        assert (out / name).is_file(), name
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in log} == {"tokenizer", "classifier", "ar", "export"}
    evals = [r for r in log if r.get("stage") == "ar" and "step" in r]
    assert len(evals) == 2 and all(0 <= r["heldout_windows"]["share_top1_below_5pct"] <= 1 for r in evals)
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["sources"]) > 10 and manifest["image_size"] == 128
    assert all(s["raw_sha256"] and s["licence"] for s in manifest["sources"])
    adapter = load_standin(weights_dir=out)
    reference = json.loads((out / "reference_outputs.json").read_text())
    assert len(reference["tokens"]) == adapter.num_image_tokens
    from gsd_lab.standin.sampling import sample_tokens

    tokens, _ = sample_tokens(adapter.model, adapter.layout, torch.tensor([0]), cfg_scale=3.0,
                              top_k=reference["top_k"], generator=torch.Generator().manual_seed(0))
    assert tokens[0].tolist() == reference["tokens"]  # same seed, same stored weights


def test_training_is_reproducible(tmp_path):
    """Same seed, same arguments: byte-identical weight files."""
    outputs = []
    for run in ("a", "b"):
        out = tmp_path / run
        assert main(["train", "--out", str(out), *TINY, "--stages", "tokenizer,ar",
                     "--steps", "3", "--batch", "2"]) == 0
        outputs.append(out)
    for name in ("tokenizer.safetensors", "ar_model.safetensors"):
        assert (outputs[0] / name).read_bytes() == (outputs[1] / name).read_bytes(), name


def test_training_and_heldout_crops_share_no_pixel():
    """Every training crop position avoids the held-out corners; every held-out crop lies in one."""
    source = data.load_sources("classes")[0]
    for scale in (0.5, 1.0):
        view = data.make_view(source, scale, flip=True)
        for top, left in data.valid_corners(view, data.IMAGE_SIZE, "train")[::97].tolist():
            assert not view.touches[top: top + 128, left: left + 128].any()
    view = data.make_view(source, 1.0, flip=False)
    held = data.valid_corners(view, data.IMAGE_SIZE, "heldout")
    assert held.shape[0] > 0
    for top, left in held[::13].tolist():
        assert source.heldout_mask[top: top + 128, left: left + 128].all()


def test_window_counts_match_brute_force():
    mask = torch.rand(9, 11, generator=torch.Generator().manual_seed(3)) < 0.3
    counts = data.window_counts(mask, 4)
    for i in range(6):
        for j in range(8):
            assert counts[i, j] == mask[i: i + 4, j: j + 4].sum()
