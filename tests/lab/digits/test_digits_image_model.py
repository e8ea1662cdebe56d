"""The digits model by name (``load_image_model("digits")``, ``--model digits``): what the
experiments, the figures job and the notebooks need from it, on its shipped weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gsd_lab.cli import main
from gsd_lab.decode.loop import generate
from gsd_lab.decode.methods import DecodingMethod
from gsd_lab.digits import data
from gsd_lab.digits.adapter import WEIGHTS_DIR
from gsd_lab.digits.quality import prompted_scores
from gsd_lab.experiments.image_model import load_image_model
from gsd_lab.standin.loading import load_classifier


@pytest.fixture(scope="module")
def model():
    return load_image_model("digits")


def test_the_digits_model_decodes_a_prompted_digit_and_scores_it(model):
    assert model.name == "digits" and model.default_prompts == [str(c) for c in range(10)]
    assert model.adapter.compute_dtype == torch.float64 and model.num_tokens == 196
    assert model.weights_info["weights_dir"] == str(WEIGHTS_DIR)
    prompt, uncond = model.encode("7")
    result = generate(model.adapter, prompt, DecodingMethod("ar"), num_tokens=model.num_tokens,
                      uncond_prompt_ids=uncond, generator=torch.Generator().manual_seed(0))
    image = model.decode(result.tokens)
    assert image.shape == (28, 28, 3) and image.dtype == np.uint8
    # The condition score is the digits classifier's p(prompted digit | image) x 100, the
    # quantity whose log the digits benchmarks report (``digits.quality.prompted_scores``).
    logp, _ = prompted_scores(load_classifier(WEIGHTS_DIR), torch.from_numpy(image)[None],
                              torch.tensor([7]))
    (score,) = model.condition_scores([image], ["7"])
    assert score == pytest.approx(100 * float(logp.exp()), rel=1e-6)
    # The Frechet reference is the held-out digits: real training digits lie nearer to it than
    # twenty copies of one sample do.
    real = ((data.digits("train")[0][::45][:20] + 1) * 127.5).round().byte().permute(0, 2, 3, 1)
    assert model.frechet_distance(list(real.numpy())) < model.frechet_distance([image] * 20)


def test_the_command_line_takes_the_digits_model(tmp_path):
    out = tmp_path / "seven.png"
    assert main(["generate", "--model", "digits", "--class", "7", "--method", "gsd",
                 "--group-size", "10", "--seed", "0", "--out", str(out)]) == 0
    assert out.stat().st_size > 0
