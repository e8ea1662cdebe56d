"""Lumina-mGPT on stock transformers, end to end on tiny random checkpoints in the release layout:
q/k-norm expansion and strict loading, weight discovery, image logits, the image token layout
and sampling processors, generation through gsd_lab.decode.loop, and decoding to pixels."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from gsd_lab.models.lumina_checkpoint import resolve_weights_dir
from gsd_lab.models.lumina_mgpt import PROMPT_TEMPLATE, LuminaMGPTAdapter, load_lumina_mgpt
from gsd_lab.testing.tiny_checkpoints import (
    tiny_vocabulary_map,
    write_tiny_lumina_checkpoint,
    write_tiny_vqgan,
)

RESOLUTION = 64  # 2 size cells -> a 4 x 4 latent -> 4 * 5 = 20 image tokens
HEADS, KV_HEADS, RANKS = 4, 2, 2


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("lumina")
    weights = write_tiny_lumina_checkpoint(
        root / "weights", num_heads=HEADS, num_kv_heads=KV_HEADS, model_parallel_size=RANKS
    )
    vqgan = write_tiny_vqgan(root / "vqgan", n_embed=64)
    return weights, vqgan


@pytest.fixture(scope="module")
def adapter(files):
    weights, vqgan = files
    return load_lumina_mgpt(weights, vqgan_dir=vqgan, resolution=RESOLUTION, device="cpu")


def _saved_state(folder):
    state = {}
    for file in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(file)))
    return state


def _reference_model(folder, rank_of_head):
    """Stock Chameleon whose q/k-norm row for head h is the saved row of rank ``rank_of_head(h, heads)``."""
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    config = ChameleonConfig.from_pretrained(str(folder))
    model = ChameleonForConditionalGeneration(config).eval()
    state = {}
    for name, tensor in _saved_state(folder).items():
        if ".q_norm." in name or ".k_norm." in name:
            heads = HEADS if ".q_norm." in name else KV_HEADS
            tensor = torch.stack([tensor[rank_of_head(h, heads)] for h in range(heads)])
        state[name] = tensor
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith("model.vqmodel.") for k in missing)
    return model


def test_loads_lumina_layout_and_matches_a_reference_forward(files, adapter):
    weights, _ = files
    model = adapter.model
    assert (
        model.config.z_loss_weight == 1e-5 and model.config.mask_image_logits is False
    )  # extra keys kept
    assert model.model.vqmodel is None  # the image encoder is not allocated
    assert model.model.layers[0].self_attn.q_norm.weight.shape == (HEADS, 64 // HEADS)
    assert model.model.layers[0].self_attn.k_norm.bias.shape == (KV_HEADS, 64 // HEADS)
    # The fork applies rank r's row to the heads r * heads/ranks .. (r + 1) * heads/ranks - 1.
    reference = _reference_model(weights, lambda h, heads: h // (heads // RANKS))
    ids = torch.tensor([[0, 95, 96, 97, 70, 69, 74, 74, 10, 20, 71]])
    with torch.no_grad():
        expected = reference(input_ids=ids).logits
        hidden = model.model(input_ids=ids).last_hidden_state
        ours = model.lm_head(hidden)
    image = torch.tensor(sorted(reference.model.vocabulary_mapping.image_tokens))
    text = torch.ones(ours.shape[-1], dtype=torch.bool)
    text[image] = False
    torch.testing.assert_close(ours[..., text], expected[..., text], rtol=1e-5, atol=1e-5)
    # Stock forward masks image logits to the dtype minimum; ours are finite and meaningful.
    assert bool((expected[..., image] == torch.finfo(expected.dtype).min).all())
    assert bool(torch.isfinite(ours[..., image]).all()) and float(ours[..., image].std()) > 0.1
    # A wrong expansion (tiling ranks instead of repeating each over its heads) gives other logits.
    tiled = _reference_model(weights, lambda h, heads: h % RANKS)
    with torch.no_grad():
        assert not torch.allclose(
            tiled(input_ids=ids).logits[..., text], expected[..., text], atol=1e-3
        )


def _rewrite(folder, change):
    for file in sorted(folder.glob("*.safetensors")):
        state = load_file(str(file))
        change(state)
        save_file(state, str(file))


def test_bad_checkpoints_fail_loudly(tmp_path):
    def checkpoint(name):
        return write_tiny_lumina_checkpoint(tmp_path / name, num_layers=1, num_shards=1)

    folder = checkpoint("unexpected")
    _rewrite(
        folder, lambda s: s.__setitem__("model.layers.0.self_attn.extra.weight", torch.zeros(2))
    )
    with pytest.raises(
        ValueError, match=r"unexpected 1 \['model.layers.0.self_attn.extra.weight'\]"
    ):
        load_lumina_mgpt(folder, resolution=RESOLUTION, device="cpu")

    folder = checkpoint("missing")
    _rewrite(folder, lambda s: s.pop("model.layers.0.mlp.down_proj.weight"))
    with pytest.raises(ValueError, match=r"missing 1 \['model.layers.0.mlp.down_proj.weight'\]"):
        load_lumina_mgpt(folder, resolution=RESOLUTION, device="cpu")

    folder = checkpoint("shape")
    _rewrite(
        folder, lambda s: s.__setitem__("model.layers.0.self_attn.q_norm.weight", torch.ones(3, 16))
    )
    with pytest.raises(ValueError, match="q_norm.weight: shape \\(3, 16\\)"):
        load_lumina_mgpt(folder, resolution=RESOLUTION, device="cpu")

    folder = checkpoint("mlp")
    _rewrite(
        folder, lambda s: s.__setitem__("model.layers.0.mlp.up_proj.weight", torch.ones(5, 64))
    )
    with pytest.raises(ValueError, match="wrong shape 1"):
        load_lumina_mgpt(folder, resolution=RESOLUTION, device="cpu")

    # An image encoder in the checkpoint is tolerated (skipped), not loaded.
    folder = checkpoint("with_encoder")
    _rewrite(
        folder,
        lambda s: s.__setitem__("model.vqmodel.encoder.conv_in.weight", torch.zeros(4, 3, 3, 3)),
    )
    assert load_lumina_mgpt(folder, resolution=RESOLUTION, device="cpu").model.model.vqmodel is None


def test_weights_discovery_and_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="Alpha-VLLM/Lumina-mGPT-7B-768.*--weights DIR"):
        resolve_weights_dir(tmp_path / "nowhere", 768)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    with pytest.raises(FileNotFoundError, match="Hugging Face cache"):
        resolve_weights_dir(None, 768)
    entry = tmp_path / "hub" / "models--Alpha-VLLM--Lumina-mGPT-7B-512"
    (entry / "refs").mkdir(parents=True)
    (entry / "refs" / "main").write_text("abc123")
    snapshot = entry / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert resolve_weights_dir(None, 512) == snapshot
    assert resolve_weights_dir(tmp_path / "hub", 512) == snapshot
    assert resolve_weights_dir(entry, 512) == snapshot
    assert resolve_weights_dir(snapshot, 512) == snapshot
    # An explicit folder is the only place looked at: no silent fallback to the cache.
    with pytest.raises(FileNotFoundError, match="nowhere"):
        resolve_weights_dir(tmp_path / "nowhere", 512)


def test_refuses_a_7b_model_on_cpu_unless_forced(tmp_path):
    config = json.loads(
        (write_tiny_lumina_checkpoint(tmp_path / "w", num_layers=1) / "config.json").read_text()
    )
    config.update(
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        vocab_size=65536,
    )
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="7.0B-parameter model.*force_cpu=True"):
        load_lumina_mgpt(tmp_path / "big", resolution=768, device="cpu")


def test_prompt_ids_follow_the_reference_template(adapter):
    vocab = adapter.model.config.vocabulary_map
    ids = adapter.prompt_ids("A red cat")
    header = [
        vocab["<reserved08706>"],
        vocab["<racm3:break>"],
        vocab["<reserved08802>"],
        vocab["<reserved08802>"],
    ]
    text = adapter.tokenizer.encode(
        PROMPT_TEMPLATE.format(width=64, height=64, prompt="A red cat"), add_special_tokens=False
    )
    assert ids.tolist() == [vocab["<s>"], *text, *header]
    # The file's byte-level pieces: "Ġcat" (space + cat), "Ċ" (the new line), digits one by one.
    assert vocab["Ġcat"] in text and vocab["Ċ"] in text and vocab["Generate"] in text
    assert text.count(vocab["6"]) == 2 and text.count(vocab["4"]) == 2 and "64" not in vocab
    assert adapter.unconditional_prompt_ids().tolist() == header
    assert adapter.num_image_tokens == 4 * 5 and adapter.row_length == 5
    with pytest.raises(ValueError, match="non-empty"):
        adapter.prompt_ids("  ")


def _direct_logits(model, ids):
    with torch.no_grad():
        return model.lm_head(model.model(input_ids=torch.tensor([ids])).last_hidden_state)[
            0
        ].double()


def test_distributions_are_cfg_topk_allowed_and_forced(files):
    weights, _ = files
    top_k, scale = 5, 3.0
    adapter = load_lumina_mgpt(
        weights, resolution=RESOLUTION, device="cpu", top_k=top_k, cfg_scale=scale
    )
    layout, vocab = adapter.layout, adapter.model.config.vocabulary_map
    prompt = adapter.prompt_ids("a red cat")
    generated = adapter.random_tokens(torch.arange(12), torch.Generator().manual_seed(3))
    adapter.start(prompt)
    probs = adapter.forward(
        torch.cat([prompt, generated]), num_rows=13
    )  # generated positions 0..12

    image_ids = torch.tensor(sorted(v for k, v in vocab.items() if k.startswith("IMGIMG")))
    assert torch.equal(adapter.allowed_tokens, image_ids)
    cond = _direct_logits(adapter.model, prompt.tolist() + generated.tolist())[len(prompt) - 1 :]
    unc = _direct_logits(
        adapter.model, adapter.unconditional_prompt_ids().tolist() + generated.tolist()
    )[3:]
    logits = unc + scale * (cond - unc)
    masked = torch.full_like(logits, -torch.inf)
    masked[:, image_ids] = logits[:, image_ids]
    kth = masked.topk(top_k, -1).values[:, -1:]
    expected = torch.softmax(masked.masked_fill(masked < kth, -torch.inf), -1)
    row_ends = torch.tensor([4, 9])  # (g + 1) % 5 == 0
    expected[row_ends] = 0.0
    expected[row_ends, layout.row_end] = 1.0
    torch.testing.assert_close(probs, expected, atol=1e-5, rtol=0)
    free = torch.ones(13, dtype=torch.bool)
    free[row_ends] = False
    assert bool(((probs[free] > 0).sum(-1) == top_k).all())
    assert float(probs[free][:, image_ids].sum(-1).min()) > 1 - 1e-12
    assert torch.equal(generated[row_ends], torch.full((2,), layout.row_end))
    # Guidance matters: the conditional distribution alone differs.
    assert not torch.allclose(
        torch.softmax(cond[free][:, image_ids], -1), probs[free][:, image_ids], atol=1e-3
    )
    # After the last row: the image end, then the end of turn.
    forced = adapter.forced_tokens(torch.tensor([19, 20, 21]))
    assert forced.tolist() == [layout.row_end, layout.image_end, layout.end_of_turn]


def test_image_codes_use_the_name_based_map(adapter):
    vocab = adapter.model.config.vocabulary_map
    layout = adapter.layout
    codes = torch.arange(16).reshape(4, 4)
    names = ["IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(c)) + "Z" for c in range(16)]
    ids = torch.tensor([vocab[n] for n in names]).reshape(4, 4)
    assert not torch.equal(
        ids - 4, codes
    )  # the tiny vocabulary is shuffled: an offset map would fail
    tokens = torch.cat([ids, torch.full((4, 1), layout.row_end)], 1).flatten()
    assert torch.equal(adapter.image_codes(tokens), codes.unsqueeze(0))
    assert torch.equal(
        adapter.image_codes(torch.cat([tokens, torch.tensor([layout.image_end])])),
        codes.unsqueeze(0),
    )
    bad = tokens.clone()
    bad[4] = ids[0, 0]
    with pytest.raises(ValueError, match="row-end"):
        adapter.image_codes(bad)
    bad = tokens.clone()
    bad[0] = layout.image_start
    with pytest.raises(ValueError, match="not image codes"):
        adapter.image_codes(bad)
    with pytest.raises(ValueError, match="20 image tokens"):
        adapter.image_codes(tokens[:-1])


@pytest.mark.parametrize("method", ["ar", "sjd", "gsd"])
def test_generates_and_decodes_an_image(adapter, method):
    decoding = pytest.importorskip("gsd_lab.decode.loop")
    from gsd_lab.decode.methods import ClusterAcceptance, DecodingMethod, FilterSettings

    clusters = (
        dict(acceptance=ClusterAcceptance("dynamic-distance", 3),
             filters=FilterSettings(max_embedding_distance=1e9))
        if method == "gsd"
        else {}
    )
    prompt = adapter.prompt_ids("a blue sky")
    runs = [
        decoding.generate(
            adapter,
            prompt,
            DecodingMethod(method, window=4, **clusters),
            num_tokens=adapter.num_image_tokens,
            generator=torch.Generator().manual_seed(7),
        )
        for _ in range(2)
    ]
    tokens = runs[0].tokens
    assert torch.equal(tokens, runs[1].tokens)  # same seed, same image
    grid = tokens.reshape(4, 5)
    assert bool((grid[:, -1] == adapter.layout.row_end).all())
    assert bool(torch.isin(grid[:, :-1], adapter.allowed_tokens).all())
    if method == "ar":
        assert runs[0].nfe == adapter.num_image_tokens
    else:
        assert runs[0].nfe < adapter.num_image_tokens  # forced row ends are always accepted
    images = adapter.decode_images(tokens)
    assert images.shape == (1, 8, 8, 3) and images.dtype == torch.uint8
    assert len(torch.unique(images)) > 1


def test_decode_without_vqgan_and_embeddings(files):
    weights, _ = files
    adapter = load_lumina_mgpt(weights, resolution=RESOLUTION, device="cpu")
    assert isinstance(adapter, LuminaMGPTAdapter) and adapter.vqgan is None
    with pytest.raises(ValueError, match="no VQGAN"):
        adapter.decode_images(torch.zeros(20, dtype=torch.long))
    emb = adapter.embeddings
    assert emb.dtype == torch.float32 and emb.shape == (len(tiny_vocabulary_map(64)), 64)
    torch.testing.assert_close(emb, adapter.model.model.embed_tokens.weight.float())
    with pytest.raises(ValueError, match="multiple of 32"):
        load_lumina_mgpt(weights, resolution=48, device="cpu")


def test_registry_loads_the_release_resolutions(files):
    from gsd_lab.models import load_model

    weights, vqgan = files
    adapter = load_model("lumina-mgpt-7b-512", weights=str(weights), vqgan=str(vqgan), device="cpu")
    assert isinstance(adapter, LuminaMGPTAdapter)
    assert adapter.num_image_tokens == 32 * 33 and adapter.layout.size_token == (
        adapter.model.config.vocabulary_map["<reserved08816>"]
    )
    assert adapter.top_k == 2000 and adapter.cfg_scale == 3.0 and adapter.temperature == 1.0


def test_bfloat16_path_generates_valid_images(files):
    """The GPU default dtype (bfloat16), exercised on the CPU: processing stays float64."""
    decoding = pytest.importorskip("gsd_lab.decode.loop")
    weights, vqgan = files
    adapter = load_lumina_mgpt(
        weights, vqgan_dir=vqgan, resolution=RESOLUTION, device="cpu", dtype=torch.bfloat16
    )
    assert adapter.model.lm_head.weight.dtype == torch.bfloat16
    assert adapter.embeddings.dtype == torch.float32
    prompt = adapter.prompt_ids("a red dog")
    from gsd_lab.decode.methods import DecodingMethod

    result = decoding.generate(
        adapter, prompt, DecodingMethod("sjd", window=6), num_tokens=adapter.num_image_tokens,
        generator=torch.Generator().manual_seed(0),
    )
    assert bool((result.tokens.reshape(4, 5)[:, -1] == adapter.layout.row_end).all())
    assert adapter.decode_images(result.tokens).shape == (1, 8, 8, 3)
