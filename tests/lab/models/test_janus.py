"""Janus-Pro through stock transformers (``gsd_lab.models.janus``) against the stock model itself,
on tiny random checkpoints written here (``save_tiny_janus``: transformers' own Janus test
configuration, never committed).

- fidelity: the adapter's rows for a prefix equal the distributions stock
  ``generate(generation_mode="image", do_sample=True)`` samples from (CFG, temperature, top-k),
  read at its ``torch.multinomial`` call while it is fed the same tokens;
- rollback: a window's rows after ``crop`` equal a full recompute;
- AR: ``generate`` with ``DecodingMethod("ar")`` reproduces the stock loop's tokens when the stock
  loop draws each token by the same inverse CDF from the same seeded uniforms (its multinomial
  replaced by that draw: the only change); the batched runner reproduces ``generate`` alone;
- lossless: SJD (CFG, top-k) and MC-SJD (maximal coupling) fit AR's exact joint law over all
  3^3 sequences of a 3-code model (chi-square, ``gsd_lab.experiments.lossless``);
- GSD end to end decodes to an image; the command line generates on the tiny checkpoint.
Every forward is float64 (``cast_model_float64``) on the one model object both sides share.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from gsd_core.verification import draw  # noqa: E402
from gsd_lab.decode.loop import generate  # noqa: E402
from gsd_lab.decode.methods import DecodingMethod  # noqa: E402
from gsd_lab.decode.methods import ClusterAcceptance
from gsd_lab.experiments.lossless import chi_square_pvalue, exact_joint  # noqa: E402
from gsd_lab.models.janus import JanusAdapter, load_janus  # noqa: E402
from gsd_lab.testing.tiny_checkpoints import save_tiny_janus  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = "a red cat"
TOL = dict(rtol=1e-12, atol=1e-15)  # float64 rounding (windowed vs one-token forwards)


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    return save_tiny_janus(tmp_path_factory.mktemp("janus-tiny"))


@pytest.fixture(scope="module")
def adapter(weights):
    adapter = load_janus(weights, device="cpu")
    adapter.set_compute_dtype(torch.float64)
    return adapter


def _stock_generate(adapter, prompt, monkeypatch, sampler, **generate_kwargs):
    """Stock ``generate(generation_mode="image", do_sample=True)`` on ``prompt`` with
    ``torch.multinomial`` replaced by ``sampler(probs [1, V]) -> [1, 1]``: its codes [N]."""
    monkeypatch.setattr(torch, "multinomial", lambda probs, num_samples=1, **_: sampler(probs))
    try:
        out = adapter.model.generate(
            input_ids=prompt[None],
            attention_mask=torch.ones_like(prompt)[None],
            generation_mode="image",
            do_sample=True,
            **generate_kwargs,
        )
    finally:
        monkeypatch.undo()
    return out[0]


def _stock_rows(adapter, prompt, tokens, monkeypatch, **generate_kwargs):
    """Stock generation fed ``tokens`` [num_image_tokens]: the probs [N, V] it passes to
    ``torch.multinomial`` at each step (its fully processed rows)."""
    rows, step = [], iter(tokens.tolist())

    def record(probs):
        rows.append(probs.detach().clone())
        return torch.tensor([[next(step)]])

    out = _stock_generate(adapter, prompt, monkeypatch, record, **generate_kwargs)
    assert torch.equal(out, tokens)
    return torch.cat(rows)


@pytest.mark.parametrize(
    "settings",
    [{}, {"guidance_scale": 3.0, "temperature": 0.7, "top_k": 7}],
    ids=["generation-config", "cfg3-t0.7-top7"],
)
def test_rows_equal_the_stock_processed_distributions(adapter, monkeypatch, settings):
    """Defaults from the checkpoint's generation config (CFG 5, temperature 1, transformers'
    top-k 50 of 64 codes) and explicit settings given to both sides."""
    n = adapter.num_image_tokens
    tokens = torch.randint(adapter.vocab_size, (n,), generator=torch.Generator().manual_seed(1))
    prompt = adapter.prompt_ids(PROMPT)
    saved = adapter.cfg_scale, adapter.temperature, adapter.top_k
    try:
        adapter.cfg_scale = settings.get("guidance_scale", adapter.cfg_scale)
        adapter.temperature = settings.get("temperature", adapter.temperature)
        adapter.top_k = settings.get("top_k", adapter.top_k)
        stock = _stock_rows(adapter, prompt, tokens, monkeypatch, **settings)
        adapter.start(prompt)
        rows = adapter.forward(torch.cat([prompt, tokens[:-1]]), num_rows=n)
    finally:
        adapter.cfg_scale, adapter.temperature, adapter.top_k = saved
    assert (stock == 0).any(dim=-1).all()  # top-k acted on every row
    torch.testing.assert_close(rows, stock, **TOL)
    # The unconditional row matters: without CFG the rows differ.
    adapter.cfg_scale = None
    try:
        adapter.start(prompt)
        plain = adapter.forward(torch.cat([prompt, tokens[:-1]]), num_rows=n)
    finally:
        adapter.cfg_scale = saved[0]
    assert (plain - stock).abs().max() > 1e-3


def test_unconditional_prompt_is_the_stock_one(adapter):
    prompt = adapter.prompt_ids(PROMPT)
    uncond = adapter.unconditional_prompt_ids(prompt)
    assert uncond.shape == prompt.shape
    assert uncond[0] == adapter.bos_token_id and uncond[-1] == adapter.boi_token_id
    assert (uncond[1:-1] == adapter.pad_token_id).all()


def test_window_after_rollback_equals_a_full_recompute(adapter):
    prompt = adapter.prompt_ids(PROMPT)
    g = torch.Generator().manual_seed(2)
    first = torch.randint(adapter.vocab_size, (6,), generator=g)
    window = torch.randint(adapter.vocab_size, (5,), generator=g)
    P = prompt.numel()
    adapter.start(prompt)
    adapter.forward(torch.cat([prompt, first]), num_rows=7)
    adapter.crop(P + 2)  # keep two generated tokens, roll back four
    assert adapter.seq_len == P + 2 and adapter.cache.get_seq_length() == P + 2
    rolled = adapter.forward(window, num_rows=5)
    adapter.start(prompt)
    full = adapter.forward(torch.cat([prompt, first[:2], window]), num_rows=5)
    torch.testing.assert_close(rolled, full, **TOL)


def _stock_seeded_tokens(adapter, prompt, seed, monkeypatch):
    """Stock image generation with its multinomial replaced by ``generate``'s AR draw: the
    inverse CDF of the row at one float64 uniform from a generator seeded ``seed``."""
    generator = torch.Generator().manual_seed(seed)

    def inverse_cdf(probs):
        u = torch.rand(1, generator=generator, dtype=torch.float64)
        return draw(probs.to(torch.float64)[0], u).view(1, 1)

    return _stock_generate(adapter, prompt, monkeypatch, inverse_cdf)


def test_ar_decoding_reproduces_stock_generate(adapter, monkeypatch):
    from gsd_lab.decode.batch import DecodeRequest, generate_batch

    prompt = adapter.prompt_ids(PROMPT)
    n = adapter.num_image_tokens
    for seed in (0, 1):
        stock = _stock_seeded_tokens(adapter, prompt, seed, monkeypatch)
        ours = generate(
            adapter, prompt, DecodingMethod("ar"), num_tokens=n,
            generator=torch.Generator().manual_seed(seed),
        ).tokens
        assert torch.equal(ours, stock)
    assert len(set(stock.tolist())) > 3  # a sampled image, not a constant one
    # Two prompts of different lengths batched (eager runner): each as generate alone.
    prompts = [prompt, adapter.prompt_ids("a blue sky with a dog")]
    method = DecodingMethod("sjd", window=4)
    alone = [
        generate(adapter, p, method, num_tokens=n, generator=torch.Generator().manual_seed(5))
        for p in prompts
    ]
    requests = [DecodeRequest(p, method, n, torch.Generator().manual_seed(5)) for p in prompts]
    batched = generate_batch(adapter, requests, batch_size=2)
    for one, many in zip(alone, batched):
        assert torch.equal(one.tokens, many.tokens) and one.nfe == many.nfe


def test_static_runner_is_refused(adapter):
    from gsd_lab.decode.batch import DecodeRequest, generate_batch

    request = DecodeRequest(adapter.prompt_ids(PROMPT), DecodingMethod("ar"), 4)
    with pytest.raises(ValueError, match="eager runners only"):
        generate_batch(adapter, [request], runner="static")


# ---- lossless --------------------------------------------------------------------------------

SEQUENCES = list(itertools.product(range(3), repeat=3))
SAMPLES = 500


@pytest.fixture(scope="module")
def three_codes(tmp_path_factory):
    folder = save_tiny_janus(tmp_path_factory.mktemp("janus-3"), num_codes=3, head_std=3.0)
    adapter = load_janus(folder, device="cpu", top_k=2)
    adapter.set_compute_dtype(torch.float64)
    return adapter


@pytest.mark.parametrize(
    "method,seed",
    [(DecodingMethod("sjd", window=8), 41), (DecodingMethod("sjd", window=2, draft="maximal"), 42)],
    ids=["sjd-cfg-top2", "mc-sjd-maximal"],
)
def test_sjd_and_mc_sjd_are_lossless(three_codes, method, seed):
    adapter = three_codes
    # A short prompt (BOS, two characters, BOI): the law under test does not depend on it.
    prompt = (adapter.bos_token_id, 40, 41, adapter.boi_token_id)
    joint = exact_joint(adapter, prompt=prompt, sequences=SEQUENCES)
    assert joint.max() > 2.5 / len(SEQUENCES) and (joint == 0).any()  # peaked; top-k zeros
    index = {s: i for i, s in enumerate(SEQUENCES)}
    counts = np.zeros(len(SEQUENCES))
    generator = torch.Generator().manual_seed(seed)
    for _ in range(SAMPLES):
        out = generate(adapter, torch.tensor(prompt), method, num_tokens=3, generator=generator)
        counts[index[tuple(out.tokens.tolist())]] += 1
    assert chi_square_pvalue(counts, joint) > 1e-3


# ---- end to end ------------------------------------------------------------------------------


def test_gsd_end_to_end_decodes_to_an_image(weights):
    from gsd_lab.experiments.image_model import load_image_model
    from gsd_lab.experiments.runs import generate_one, resolve_for

    model = load_image_model("janus-pro-1b", weights=str(weights), device="cpu")
    assert isinstance(model.adapter, JanusAdapter)
    assert model.adapter.compute_dtype == torch.float64
    assert model.embeddings.shape == (64, 32) and model.adapter.code_content().shape == (64, 12)
    method = DecodingMethod("gsd", window=8, acceptance=ClusterAcceptance(group_size=3))
    result, image = generate_one(
        model, resolve_for(model, method), PROMPT, 0, progress=False
    )
    assert result.tokens.numel() == 16 and result.nfe < 16
    assert image.shape == (8, 8, 3) and image.dtype == np.uint8


def test_cli_generate_on_the_tiny_checkpoint(weights, tmp_path, capsys):
    from gsd_lab.cli import main

    out = tmp_path / "janus.png"
    argv = ["generate", "--model", "janus-pro-1b", "--weights", str(weights), "--prompt", PROMPT,
            "--method", "gsd", "--out", str(out), "--json", "--threads", "1"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"] == "janus-pro-1b" and report["method"] == "gsd"
    assert out.is_file() and out.stat().st_size > 0
    for bad, message in (
        (["--model", "janus-pro-1b", "--prompt", "x"], "--weights"),
        (["--model", "janus-pro-1b", "--weights", str(tmp_path), "--prompt", "x"], "no Janus"),
        (["--model", "janus-pro-1b", "--weights", str(weights), "--vqgan", str(tmp_path),
          "--prompt", "x"], "does not apply"),
    ):
        with pytest.raises(SystemExit):
            main(["generate", *bad])
        assert message in capsys.readouterr().err


def test_bad_inputs_are_named(adapter, weights, tmp_path):
    with pytest.raises(ValueError, match="begin_of_image"):
        adapter.start(adapter.prompt_ids(PROMPT)[:-1])
    with pytest.raises(ValueError, match="16 image codes"):
        adapter.decode_images(torch.zeros(15, dtype=torch.long))
    with pytest.raises(ValueError, match="cfg_scale must be > 1"):
        JanusAdapter(adapter.model, cfg_scale=1.0)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "multi_modality"}))
    with pytest.raises(ValueError, match="deepseek-community"):
        load_janus(tmp_path, device="cpu")


# ---- real-size shapes --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["janus-pro-1b", "janus-pro-7b"])
def test_release_configurations_decode_576_codes(name):
    """The released sizes: 576 image tokens = the VQ decoder's 24 x 24 grid (the adapter's
    check), 16384 codes, the aligner and head at the text width."""
    from gsd_lab.models.janus import RELEASE_TEXT, release_config

    config = release_config(name)
    assert config.vision_config.num_image_tokens == 576 == config.vq_config.num_patches**2
    assert config.vq_config.num_embeddings == 16384
    hidden = RELEASE_TEXT[name]["hidden_size"]
    assert config.text_config.hidden_size == hidden
    assert config.vq_config.projection_dim == config.vq_config.image_token_embed_dim == hidden


def test_shapes_benchmark_tiny_janus(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu_lumina_shapes.py"
    spec = importlib.util.spec_from_file_location("gpu_lumina_shapes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--tiny", "--model", "janus-pro-7b", "--repeats", "1", "--window", "4"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    assert result["model"] == "janus-pro-7b" and result["cfg_batch"] == 2
    assert result["vq_decode"]["pixels"] == [8, 8, 3]
    methods = result["decoding"]["methods"]
    assert methods["ar"]["nfe"] == 12 and 1 <= methods["gsd"]["nfe"] <= 12
