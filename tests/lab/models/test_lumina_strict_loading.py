"""Lumina-mGPT loading, stricter: a tensor in two shards, an index that disagrees with the shards,
q/k-norm layouts the config does not name, the parameter count of docs/lumina-mgpt.md, and the
two named unconditional prompts for classifier-free guidance."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from gsd_lab.models.lumina_checkpoint import estimated_parameters, read_lumina_config
from gsd_lab.models.lumina_mgpt import UNCONDITIONAL_PROMPTS, load_lumina_mgpt
from gsd_lab.testing.tiny_checkpoints import write_tiny_lumina_checkpoint

RESOLUTION = 64  # a 4 x 4 latent: 20 image tokens
HEADS, KV_HEADS, RANKS, HEAD_DIM = 4, 2, 2, 16
DOCS = Path(__file__).resolve().parents[3] / "docs" / "lumina-mgpt.md"


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    return write_tiny_lumina_checkpoint(
        tmp_path_factory.mktemp("lumina") / "w", num_heads=HEADS, num_kv_heads=KV_HEADS,
        model_parallel_size=RANKS, num_shards=2,
    )


@pytest.fixture
def copy(original, tmp_path):
    return Path(shutil.copytree(original, tmp_path / "copy"))


def _shards(folder):
    return sorted(folder.glob("model-*.safetensors"))


def _index(folder):
    return json.loads((folder / "model.safetensors.index.json").read_text())


def _logits(adapter, ids):
    with torch.no_grad():
        return adapter.model.lm_head(adapter.model.model(input_ids=torch.tensor([ids])).last_hidden_state)


def test_a_tensor_in_two_shards_is_an_error(copy):
    first, second = _shards(copy)
    a, b = load_file(str(first)), load_file(str(second))
    name = next(iter(a))
    b[name] = a[name] + 1.0  # with "last one wins", this copy would silently replace the first
    save_file(b, str(second))
    with pytest.raises(ValueError, match=f"tensor {re.escape(name)} is stored in two shards"):
        load_lumina_mgpt(copy, resolution=RESOLUTION, device="cpu")
    (copy / "model.safetensors.index.json").unlink()  # no index: the shards are globbed
    with pytest.raises(ValueError, match="stored in two shards"):
        load_lumina_mgpt(copy, resolution=RESOLUTION, device="cpu")


def test_the_index_must_agree_with_the_shards(copy):
    index = _index(copy)
    path = copy / "model.safetensors.index.json"
    name, shard = next(iter(index["weight_map"].items()))
    other = next(f.name for f in _shards(copy) if f.name != shard)
    path.write_text(json.dumps({**index, "weight_map": {**index["weight_map"], name: other}}))
    with pytest.raises(ValueError, match=f"{re.escape(name)} is stored in {shard} but the index says {other}"):
        load_lumina_mgpt(copy, resolution=RESOLUTION, device="cpu")
    ghost = {**index["weight_map"], "model.layers.9.mlp.up_proj.weight": shard}
    path.write_text(json.dumps({**index, "weight_map": ghost}))
    with pytest.raises(ValueError, match=r"lists 1 tensors no shard holds: \['model.layers.9"):
        load_lumina_mgpt(copy, resolution=RESOLUTION, device="cpu")
    # A key repeated inside the index's JSON is an error too (json.loads would keep the last).
    text = json.dumps(index, indent=1).replace('"weight_map": {', f'"weight_map": {{"{name}": "{other}",', 1)
    path.write_text(text)
    with pytest.raises(ValueError, match="appears twice"):
        load_lumina_mgpt(copy, resolution=RESOLUTION, device="cpu")


def _set_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))


def _expand_stored_norms(folder):
    """Rewrite the per-rank q/k-norms in transformers' [heads, head_dim] layout, as the fork's
    forward uses them (rank r's row for heads r * heads/ranks .. (r + 1) * heads/ranks - 1)."""
    for file in _shards(folder):
        state = load_file(str(file))
        for name in list(state):
            if ".q_norm." in name or ".k_norm." in name:
                heads = HEADS if ".q_norm." in name else KV_HEADS
                state[name] = state[name].repeat_interleave(heads // RANKS, 0).contiguous()
        save_file(state, str(file))


def test_qk_norm_layout_is_the_one_the_config_names(original, copy):
    reference = load_lumina_mgpt(original, resolution=RESOLUTION, device="cpu")
    ids = [0, 95, 96, 97, 70, 69, 74, 74, 10, 20, 71]
    stock = ["ChameleonForConditionalGeneration"]
    # Per-rank tensors under a config naming the stock transformers class: refused.
    _set_config(copy, architectures=stock)
    with pytest.raises(ValueError, match=r"q_norm.weight: shape \(2, 16\); config.json's architectures"):
        load_lumina_mgpt(copy, resolution=RESOLUTION, device="cpu")
    # Expanded [heads, head_dim] tensors: accepted when the config names the stock class ...
    _expand_stored_norms(copy)
    expanded = load_lumina_mgpt(copy, resolution=RESOLUTION, device="cpu")
    torch.testing.assert_close(_logits(expanded, ids), _logits(reference, ids), rtol=0, atol=0)
    # ... and refused under Lumina's architectures (per-rank norms, model_parallel_size = 2).
    _set_config(copy, architectures=["ChameleonXLLMXForConditionalGeneration"])
    with pytest.raises(ValueError, match=r"model_parallel_size=2, so Lumina's per-rank layout \[2, "
                                         r"head_dim=16\] is expected \(this looks like"):
        load_lumina_mgpt(copy, resolution=RESOLUTION, device="cpu")
    _set_config(copy, architectures=None)  # no architectures: Lumina's layout as well
    with pytest.raises(ValueError, match="per-rank layout"):
        load_lumina_mgpt(copy, resolution=RESOLUTION, device="cpu")
    _set_config(copy, model_parallel_size=3)
    with pytest.raises(ValueError, match=r"model_parallel_size=3 does not divide the [24] heads"):
        load_lumina_mgpt(copy, resolution=RESOLUTION, device="cpu")


def test_parameter_count_stored_loaded_and_documented(original):
    config = read_lumina_config(original)
    stored = sum(t.numel() for f in _shards(original) for t in load_file(str(f)).values())
    assert estimated_parameters(config) == stored  # norms included, q/k-norms per rank
    model = load_lumina_mgpt(original, resolution=RESOLUTION, device="cpu").model
    loaded = sum(p.numel() for p in model.parameters())
    assert estimated_parameters(config, expanded_qk_norms=True) == loaded
    assert loaded - stored == 2 * 2 * (HEADS + KV_HEADS - 2 * RANKS) * HEAD_DIM  # q/k, weight/bias
    from transformers import ChameleonConfig

    seven_b = ChameleonConfig(vocab_size=65536, hidden_size=4096, intermediate_size=11008,
                              num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                              model_parallel_size=1, vocabulary_map={"<s>": 0})
    docs = DOCS.read_text()
    for count in (estimated_parameters(seven_b), estimated_parameters(seven_b, expanded_qk_norms=True)):
        assert f"{count:,}" in docs, count
    assert (estimated_parameters(seven_b), estimated_parameters(seven_b, expanded_qk_norms=True)) == (
        7_013_158_912, 7_013_666_816)


def test_unconditional_prompts_are_named_and_default_to_the_gsd_release(original):
    assert UNCONDITIONAL_PROMPTS == ("gsd-release", "alpha-vllm")
    gsd = load_lumina_mgpt(original, resolution=RESOLUTION, device="cpu")
    alpha = load_lumina_mgpt(original, resolution=RESOLUTION, device="cpu", unconditional_prompt="alpha-vllm")
    vocab, layout = gsd.model.config.vocabulary_map, gsd.layout
    assert gsd.unconditional_prompt == "gsd-release"
    assert gsd.unconditional_prompt_ids().tolist() == [
        vocab["<reserved08706>"], vocab["<racm3:break>"], layout.size_token, layout.size_token]
    assert alpha.unconditional_prompt_ids().tolist() == [
        vocab["<racm3:break>"], layout.size_token, layout.size_token]
    prompt = gsd.prompt_ids("a red cat")
    generated = gsd.random_tokens(torch.arange(4), torch.Generator().manual_seed(0))
    probs = {}
    for name, adapter in (("gsd-release", gsd), ("alpha-vllm", alpha)):
        adapter.start(prompt)  # the default unconditional row is the named one
        probs[name] = adapter.forward(torch.cat([prompt, generated]), num_rows=5)  # positions 0..4
    # The alpha-vllm row: u from [image start, h, w] + generated, combined as u + 3 (c - u).
    ids = prompt.tolist() + generated.tolist()
    cond = _logits(alpha, ids)[0, len(prompt) - 1:].double()
    unc = _logits(alpha, alpha.unconditional_prompt_ids().tolist() + generated.tolist())[0, 2:].double()
    logits = torch.full_like(cond, -torch.inf)
    image = alpha.allowed_tokens
    logits[:, image] = (unc + 3.0 * (cond - unc))[:, image]
    expected = torch.softmax(logits, -1)
    expected[4] = 0.0
    expected[4, layout.row_end] = 1.0  # generated position 4 ends the first row (4 codes + row end)
    torch.testing.assert_close(probs["alpha-vllm"], expected, atol=1e-5, rtol=0)
    assert not torch.allclose(probs["alpha-vllm"][:4], probs["gsd-release"][:4], atol=1e-4)
    with pytest.raises(ValueError, match="unconditional_prompt must be one of"):
        load_lumina_mgpt(original, resolution=RESOLUTION, device="cpu", unconditional_prompt="lumina")
