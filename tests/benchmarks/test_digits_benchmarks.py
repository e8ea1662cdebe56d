"""benchmarks/archive/digits_sampling.py and digits_diagnosis.py: their stored outputs agree
with each other and with the training's record, the diagnosis's log-likelihood is the training's
teacher-forced NLL, and the sweep refuses confirmation seeds that overlap the selection's."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks/results"


def benchmark(name: str):
    spec = importlib.util.spec_from_file_location(Path(name).name, ROOT / f"benchmarks/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stored(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def test_sweep_selection_is_its_largest_accuracy_and_confirmation_seeds_are_fresh():
    sweep = stored("digits_sampling")
    best = max(sweep["settings"], key=lambda r: r["accuracy"])
    assert sweep["selected"]["accuracy_on_selection_seeds"] == best["accuracy"]
    assert (sweep["confirmed"]["cfg_scale"], sweep["confirmed"]["top_k"]) == (
        best["cfg_scale"], best["top_k"])
    assert not set(sweep["confirmed"]["seeds"]) & set(best["seeds"])
    assert sweep["confirmed"]["images"] > best["images"]


def test_sweep_and_diagnosis_draw_the_same_samples_at_one_setting():
    # the same reference sampler, generator seed and setting: the same images, the same accuracy
    samples = stored("digits_diagnosis")["samples"]
    row = next(r for r in stored("digits_sampling")["settings"]
               if (r["cfg_scale"], r["top_k"], r["seeds"]) ==
               (samples["cfg_scale"], samples["top_k"], [samples["seed"]]))
    assert row["accuracy"] == samples["accuracy"]
    confusion = torch.tensor(samples["confusion_rows_prompted_cols_classified"])
    assert confusion.sum(1).tolist() == [samples["per_class"]] * 10
    assert confusion.diagonal().sum() / confusion.sum() == pytest.approx(samples["accuracy"])


def test_diagnosis_conditional_nll_is_the_saved_epochs_heldout_nll():
    diagnosis = stored("digits_diagnosis")
    training = json.loads((ROOT / "gsd_lab/digits/weights/ar_config.json").read_text())["training"]
    saved = training["curve"][training["saved_epoch"]]["heldout_nll"]
    assert diagnosis["conditional_nll_per_token"] == pytest.approx(saved, rel=1e-4)
    rows = diagnosis["conditional_nll_nats_per_row"]
    assert sum(rows) / 196 == pytest.approx(diagnosis["conditional_nll_per_token"], rel=1e-9)


def test_code_logp_is_the_log_softmax_over_image_codes():
    class Tiny(torch.nn.Module):
        def forward(self, input_ids):
            logits = torch.arange(float(input_ids.shape[1] * 6)).view(1, -1, 6).expand(
                input_ids.shape[0], -1, -1)
            return type("Out", (), {"logits": logits.sin()})()

    ids = torch.tensor([[5, 0, 3, 1], [4, 2, 2, 0]])
    got = benchmark("archive/digits_diagnosis").code_logp(Tiny(), ids, 4)
    logits = Tiny()(ids[:, :-1]).logits[..., :4].double()
    want = torch.log_softmax(logits, -1).gather(2, ids[:, 1:, None])[..., 0]
    assert torch.equal(got, want) and got.shape == (2, 3)


def test_sweep_refuses_overlapping_confirmation_seeds():
    with pytest.raises(ValueError, match="overlap"):
        benchmark("archive/digits_sampling").main(["--seeds", "7", "--confirm-seeds", "7", "8"])


def test_sweep_compares_its_confirmation_with_the_adapters_defaults_on_the_same_seeds():
    from gsd_lab.digits.adapter import DEFAULT_CFG_SCALE, DEFAULT_TOP_K

    sweep = stored("digits_sampling")
    defaults, confirmed = sweep["defaults_on_confirmation_seeds"], sweep["confirmed"]
    assert (defaults["cfg_scale"], defaults["top_k"]) == (DEFAULT_CFG_SCALE, DEFAULT_TOP_K)
    assert (defaults["seeds"], defaults["images"]) == (confirmed["seeds"], confirmed["images"])
