"""The stand-in's transformers-free forward (``gsd_lab.standin.llama_forward``) against the
reference, ``transformers``' LlamaForCausalLM cast by ``cast_model_float64``: logits equal bit
for bit (a CFG pair with padding, windows of several widths, a crop and re-forward), the same
tokens and NFE from ``generate``, clear errors for a config it does not cover, and a command-line
generate that never imports ``transformers``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gsd_lab.decode.loop import generate
from gsd_lab.decode.methods import DecodingMethod, ClusterAcceptance, RelaxationAcceptance
from gsd_lab.standin.adapter import load_standin
from gsd_lab.standin.llama_forward import KVCache, LlamaForward, LlamaShape
from gsd_lab.standin.loading import WEIGHTS_DIR, load_ar_forward, load_ar_model
from gsd_lab.standin.weights_io import WeightFileError, read_json

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def models(one_thread):
    reference, layout, _ = load_ar_model(dtype=torch.float64)
    fast, fast_layout, _ = load_ar_forward()
    assert fast_layout == layout
    return reference, fast, layout


@pytest.fixture(scope="module")
def adapters(one_thread):
    return load_standin(), load_standin(fast_forward=True, lazy_tokenizer=True)


def test_the_parameters_are_the_reference_tensors(models):
    reference, fast, _ = models
    ours = dict(fast.named_parameters())
    theirs = dict(reference.named_parameters())
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        assert ours[name].dtype == torch.float64 and torch.equal(ours[name], value), name
    assert torch.equal(fast.inv_freq, reference.model.rotary_emb.inv_freq)


def _reference_cache(model):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def _python(*args: str) -> subprocess.CompletedProcess:
    """A fresh ``python *args`` in the repository root, its output captured as text."""
    return subprocess.run(
        [sys.executable, *args], capture_output=True, check=False, text=True, cwd=ROOT, timeout=600
    )


def _cache_kw(model) -> str:
    from gsd_lab.models.adapter import cache_kwarg

    return cache_kwarg(model)  # "cache" or "past_key_values", by the transformers release


def test_logits_equal_bit_for_bit_through_padding_windows_and_a_crop(models):
    """A CFG pair whose prompts differ in length (left padding, masked; positions count real
    tokens, as ``CausalLMAdapter`` builds them), windows of widths 1, 3, 16 and 5 (padding: the
    boolean mask every time; the unmasked forms are the next test's), then a crop and a
    re-forward of other tokens."""
    reference, fast, layout = models
    null = layout.null_class_id
    prompts = [
        [layout.class_id(2), 11, 12, 13],  # a longer conditional prompt
        [null],  # padded by 3 on the left
    ]
    width = max(map(len, prompts))
    ids = torch.tensor([[p[0]] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    generator = torch.Generator().manual_seed(0)
    ref_cache, fast_cache = _reference_cache(reference), fast.new_cache()

    def step(ids, mask, keep):
        positions = (mask.cumsum(1) - 1).clamp(min=0)[:, -ids.shape[1] :]
        kwargs = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
        with torch.inference_mode():
            kwargs_ref = {**kwargs, _cache_kw(reference): ref_cache}
            theirs = reference(**kwargs_ref, logits_to_keep=keep).logits
            ours = fast(**kwargs, cache=fast_cache, logits_to_keep=keep).logits
        assert ours.shape == theirs.shape == (2, keep, layout.vocab_size)
        assert ours.dtype == torch.float64
        assert torch.equal(ours, theirs)
        assert fast_cache.get_seq_length() == ref_cache.get_seq_length() == mask.shape[1]
        return ours

    step(ids, mask, 2)
    for new in (1, 3, 16, 5):
        tokens = torch.randint(0, layout.codebook_size, (1, new), generator=generator)
        mask = torch.cat([mask, torch.ones(2, new, dtype=torch.long)], 1)
        step(tokens.expand(2, -1), mask, new)
    removed = 9
    ref_cache.crop(-removed)
    fast_cache.crop(-removed)
    mask = mask[:, :-removed]
    redo = torch.randint(0, layout.codebook_size, (1, 7), generator=generator)
    mask = torch.cat([mask, torch.ones(2, 7, dtype=torch.long)], 1)
    ours = step(redo.expand(2, -1), mask, 7)
    # Negative control: one weight one ulp off changes the logits.
    with torch.no_grad():
        weight = fast.model.layers[0].mlp.up_proj.weight
        saved = weight[0, 0].clone()
        weight[0, 0] = torch.nextafter(saved, saved + 1)
        try:
            fast_cache.crop(-7)
            with torch.inference_mode():
                positions = (mask.cumsum(1) - 1).clamp(min=0)[:, -7:]
                moved = fast(
                    redo.expand(2, -1), mask, positions, fast_cache, logits_to_keep=7
                ).logits
        finally:
            weight[0, 0] = saved
    assert not torch.equal(moved, ours)


def test_logits_equal_without_padding_from_the_default_positions(models):
    """An unpadded CFG pair (no attention mask): the prefill (is_causal), then windows after
    it (a materialised causal mask) and single tokens (no mask)."""
    reference, fast, layout = models
    ref_cache, fast_cache = _reference_cache(reference), fast.new_cache()
    ids = torch.tensor([[layout.class_id(0), 5, 6], [layout.null_class_id, 5, 6]])
    generator = torch.Generator().manual_seed(1)
    for step in range(5):
        with torch.inference_mode():
            theirs = reference(input_ids=ids, **{_cache_kw(reference): ref_cache}).logits
            ours = fast(input_ids=ids, cache=fast_cache).logits
        assert torch.equal(ours, theirs), step
        new = (1, 4, 1, 16, 2)[step]
        ids = torch.randint(0, layout.codebook_size, (1, new), generator=generator).expand(2, -1)


def test_adapters_give_the_same_rows_for_a_padded_cfg_pair_with_a_crop(adapters):
    """Through ``CausalLMAdapter``: a conditional prompt of 3 tokens against the 1-token null
    prompt (the adapter pads and masks), windows, a crop, a re-forward: the same processed rows
    (and supports) bit for bit."""
    reference, fast = adapters
    prompt = torch.cat([reference.prompt_ids("brick"), torch.tensor([7, 8])])
    generator = torch.Generator().manual_seed(2)
    windows = [torch.randint(0, 8192, (n,), generator=generator) for n in (16, 1, 5)]
    outputs = []
    for adapter in adapters:
        adapter.start(prompt, reference.uncond_prompt_ids())
        rows = [adapter.forward(torch.cat([prompt, windows[0]]), 17, with_support=True)]
        rows += [adapter.forward(w, with_support=True) for w in windows[1:]]
        adapter.crop(adapter.seq_len - 4)
        rows.append(adapter.forward(windows[0][:6], with_support=True))
        outputs.append(rows)
    assert fast._padded
    for (ours, our_support), (theirs, their_support) in zip(*outputs[::-1]):
        assert torch.equal(ours, theirs) and torch.equal(our_support, their_support)


METHODS = {
    "ar": DecodingMethod("ar"),
    "sjd": DecodingMethod("sjd"),
    "gsd": DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=25)),
    "sjd-relaxed": DecodingMethod("sjd", acceptance=RelaxationAcceptance(delta=0.2)),
}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_generate_gives_the_same_tokens_and_nfe(adapters, name):
    """AR, SJD, GSD (dynamic clusters) and a lossy rule (SJD's TV-optimal relaxation): rejected
    drafts roll the cache back (crop) between windows, so the whole trajectory depends on it.
    The stand-in's prompts have one token each: no padding here (the logits tests cover it)."""
    results = []
    for adapter in adapters:
        prompt = adapter.prompt_ids("brick")
        generator = torch.Generator().manual_seed(3)
        results.append(
            generate(
                adapter,
                prompt,
                METHODS[name],
                num_tokens=64,
                generator=generator,
                uncond_prompt_ids=adapter.uncond_prompt_ids(),
            )
        )
    reference, fast = results
    assert torch.equal(fast.tokens, reference.tokens)
    assert fast.nfe == reference.nfe
    assert fast.acceptance_rate == reference.acceptance_rate
    if name != "ar":
        assert fast.nfe < 64  # windows accepted several tokens: crops happened


def test_the_fast_adapter_keeps_the_stand_in_s_interface(adapters):
    reference, fast = adapters
    assert isinstance(fast.model, LlamaForward) and fast._tokenizer is None  # lazy
    assert fast.compute_dtype == torch.float64
    assert torch.equal(fast.embeddings, reference.embeddings)
    assert fast.vocab_size == reference.vocab_size
    assert fast.distance_quantiles == reference.distance_quantiles
    tokens = torch.randint(0, 8192, (256,), generator=torch.Generator().manual_seed(0))
    assert torch.equal(fast.decode_images(tokens), reference.decode_images(tokens))
    assert fast._tokenizer is not None  # loaded at its first use
    assert torch.equal(fast.code_content(), reference.code_content())


def test_kv_cache_crop_takes_a_count_to_remove():
    cache = KVCache(2)
    assert cache.get_seq_length() == 0
    cache.crop(0)  # nothing to do on an empty cache
    key = torch.zeros(2, 4, 5, 8, dtype=torch.float64)
    for layer in range(2):
        cache.update(layer, key, key)
    cache.crop(-2)
    assert cache.get_seq_length() == 3 and cache.values[1].shape[-2] == 3
    with pytest.raises(ValueError, match="negative count"):
        cache.crop(1)


def test_the_forward_refuses_what_it_does_not_compute(models):
    _, fast, layout = models
    ids = torch.tensor([[layout.class_id(0)]])
    with pytest.raises(ValueError, match="KVCache"):
        fast(ids)
    with pytest.raises(ValueError, match="attention_mask covers"):
        fast(ids, attention_mask=torch.ones(1, 3, dtype=torch.long), cache=fast.new_cache())
    with pytest.raises(ValueError, match="float64 on the CPU only"):
        load_standin(compute_dtype=torch.float32, fast_forward=True)
    from gsd_lab.experiments.image_model import load_image_model

    with pytest.raises(ValueError, match="quick loads the stand-in"):
        load_image_model("tiny-random", quick=True)


def _weights_copy(tmp_path: Path, edit) -> Path:
    """A copy of the shipped weights folder with ``edit(cfg)`` applied to ar_config.json."""
    folder = tmp_path / "weights"
    shutil.copytree(WEIGHTS_DIR, folder, ignore=shutil.ignore_patterns("*.png", "*.jsonl"))
    cfg = read_json(folder / "ar_config.json")
    edit(cfg)
    (folder / "ar_config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda cfg: cfg["llama"].update(hidden_act="gelu"), "hidden_act='gelu'"),
        (lambda cfg: cfg["llama"].update(num_key_value_heads=2), "num_key_value_heads=2"),
        (lambda cfg: cfg["llama"].update(tie_word_embeddings=True), "tie_word_embeddings"),
        (
            lambda cfg: cfg["llama"]["rope_parameters"].update(rope_type="linear"),
            "rope_type='linear'",
        ),
        (lambda cfg: cfg["llama"].pop("rms_norm_eps"), "lacks or mistypes a field"),
        (lambda cfg: cfg.update(llama=[1, 2]), "is invalid"),
        (lambda cfg: cfg["llama"].update(vocab_size=8204), "layout vocabulary 8203 != model"),
        (lambda cfg: cfg["llama"].update(intermediate_size=512), "does not match the model"),
    ],
)
def test_a_config_outside_the_forward_is_refused_naming_the_file(tmp_path, edit, message):
    folder = _weights_copy(tmp_path, edit)
    with pytest.raises(WeightFileError, match=message) as error:
        load_ar_forward(folder)
    assert str(folder) in str(error.value)


def test_the_shape_reads_the_shipped_config():
    shape = LlamaShape.from_dict(read_json(WEIGHTS_DIR / "ar_config.json")["llama"])
    assert (shape.num_attention_heads * shape.head_dim, shape.vocab_size) == (256, 8203)


HEAVY = ("transformers", "scipy", "sympy", "torch._dynamo", "matplotlib", "ot")


def test_command_line_generate_imports_no_transformers():
    """The stand-in's eager generate runs without importing transformers (nor SciPy, SymPy or
    torch._dynamo, which torch.broadcast_shapes and random init on the meta device pull in);
    torch itself is seen (negative control: the probe sees real imports)."""
    args = ["generate", "--method", "gsd", "--group-size", "25", "--class", "brick", "--json"]
    probe = (
        "import json, sys\nfrom gsd_lab.cli import main\n"
        "code = main(sys.argv[1:])\n"
        f"heavy = [m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r}]\n"
        "print(json.dumps(sorted(heavy) + ['torch'] * ('torch' in sys.modules)))\n"
    )
    done = _python("-c", probe, *args)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    report, heavy = json.loads(lines[-2]), json.loads(lines[-1])
    assert heavy == ["torch"] and report["num_tokens"] == 256 and report["nfe"] > 0


def test_the_batched_and_static_runners_refuse_the_fast_forward(adapters):
    from gsd_lab.models.batched import BatchRunner
    from gsd_lab.models.static import StaticEngine
    from gsd_lab.models.static_batched import StaticBatchRunner

    reference, fast = adapters
    assert fast.has_own_cache and not reference.has_own_cache
    for runner in (BatchRunner, StaticEngine):
        with pytest.raises(ValueError, match="brings its own cache"):
            runner(fast)
    with pytest.raises(ValueError, match="brings its own cache"):
        StaticBatchRunner(fast, images=1, new_tokens=4, window=2, max_prompt=4)
    BatchRunner(reference)  # negative control: the transformers model is taken


def test_python_m_generate_writes_its_image_and_exits_with_main_s_status(tmp_path, adapters):
    """``python -m gsd_lab generate`` skips the interpreter's teardown (``gsd_lab.__main__``):
    its JSON and its image (the tokenizer loaded for --out only) are complete with status 0, and
    a bad class still exits 2 (argparse's SystemExit, before the skipped teardown)."""
    import numpy as np
    from PIL import Image

    out = tmp_path / "brick.png"
    command = ["-m", "gsd_lab", "generate", "--method", "sjd", "--json"]
    done = _python(*command, "--class", "brick", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    reference = adapters[0].decode_images(torch.tensor(report["tokens"]))[0].numpy()
    assert np.array_equal(np.asarray(Image.open(out).convert("RGB")), reference)
    bad = _python(*command, "--class", "nope")
    assert bad.returncode == 2 and "unknown class" in bad.stderr
