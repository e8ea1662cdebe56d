"""The stand-in's training script runs end to end (tiny sizes, a few steps) and its output loads."""

import json

import torch

from gsd_lab.models.standin import load_standin
from gsd_lab.standin.__main__ import main


def test_train_script_end_to_end_tiny(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--tiny", "--tokenizer-steps", "2",
                 "--classifier-steps", "2", "--steps", "2", "--batch", "2"]) == 0
    for name in ("tokenizer.safetensors", "classifier.safetensors", "ar_model.safetensors",
                 "ar_config.json", "manifest.json", "reference_outputs.json", "samples.png",
                 "generation_stats.json", "train_log.jsonl"):
        assert (out / name).is_file(), name
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in log} == {"tokenizer", "classifier", "ar", "export"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["sources"]) == 10 and manifest["crop_size"] == 64
    adapter = load_standin(weights_dir=out)
    reference = json.loads((out / "reference_outputs.json").read_text())
    assert len(reference["tokens"]) == adapter.num_image_tokens
    from gsd_lab.standin.sampling import sample_tokens

    tokens, _ = sample_tokens(adapter.model, adapter.layout, torch.tensor([0]), cfg_scale=3.0,
                              generator=torch.Generator().manual_seed(0))
    assert tokens[0].tolist() == reference["tokens"]  # same seed, same stored weights


def test_training_is_reproducible(tmp_path):
    """Same seed, same arguments: byte-identical weight files."""
    outputs = []
    for run in ("a", "b"):
        out = tmp_path / run
        assert main(["train", "--out", str(out), "--tiny", "--stages", "tokenizer,ar",
                     "--tokenizer-steps", "3", "--steps", "3", "--batch", "2"]) == 0
        outputs.append(out)
    for name in ("tokenizer.safetensors", "ar_model.safetensors"):
        assert (outputs[0] / name).read_bytes() == (outputs[1] / name).read_bytes(), name
