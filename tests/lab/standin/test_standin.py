"""The shipped stand-in weights: they load (safetensors only), reproduce the outputs recorded at
export time, the tokenizer round-trips, the classifier is accurate, and the adapter's
distributions are the ones the reference sampler draws from."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from gsd_lab.standin.adapter import load_standin
from gsd_lab.standin import data
from gsd_lab.standin.classifier import accuracy, heldout_set
from gsd_lab.standin.loading import WEIGHTS_DIR, load_ar_model, load_classifier, load_tokenizer
from gsd_lab.standin.sampling import logits_checksum, process_logits, sample_tokens
from gsd_train.standin.train_tokenizer import evaluate_tokenizer
from gsd_lab.standin.weights_io import STORAGE_DTYPE, WeightFileError, load_state, save_module

# Floors the stand-in must meet (measured values are in weights/*_config.json).
TOKENIZER_PSNR_FLOOR_DB = 24.0
CLASSIFIER_ACCURACY_FLOOR = 0.85
WEIGHT_FILES = ("ar_model.safetensors", "tokenizer.safetensors", "classifier.safetensors")


@pytest.fixture(scope="module")
def adapter():
    return load_standin()


@pytest.fixture(scope="module")
def reference():
    return json.loads((WEIGHTS_DIR / "reference_outputs.json").read_text())


def test_weights_are_small_safetensors():
    total = sum(p.stat().st_size for p in WEIGHTS_DIR.glob("*.safetensors"))
    assert total <= 30 * 2**20  # 16-bit storage (27 MiB; 53 MiB in float32)
    for name in WEIGHT_FILES:
        assert (WEIGHTS_DIR / name).read_bytes()[8:9] == b"{"  # safetensors header, not a pickle


def test_weights_are_stored_in_16_bit_and_load_exactly(adapter):
    """Every floating tensor is stored float16; the float64 model holds those values exactly."""
    for name in WEIGHT_FILES:
        state = load_state(WEIGHTS_DIR / name)
        assert {v.dtype for v in state.values() if v.is_floating_point()} == {STORAGE_DTYPE}, name
    stored = load_state(WEIGHTS_DIR / "ar_model.safetensors")
    own = adapter.model.state_dict()
    assert own["model.embed_tokens.weight"].dtype == torch.float64
    for key, value in stored.items():
        assert torch.equal(own[key], value.to(own[key].dtype)), key


def test_save_module_stores_16_bit_and_rounds_the_module(tmp_path):
    module = torch.nn.Linear(3, 2)
    with torch.no_grad():
        module.weight.copy_(torch.tensor([[0.1, 1 / 3, 1e-6], [2.0, -7.3, 0.0]]))
    save_module(module, tmp_path / "m.safetensors")
    state = load_state(tmp_path / "m.safetensors")
    assert state["weight"].dtype == torch.float16
    assert torch.equal(module.weight, state["weight"].float())  # the module holds what is stored
    third = float(module.weight.detach()[0, 1])
    assert third != 1 / 3 and abs(third - 1 / 3) < 2e-4  # float16: 11 significant bits
    with torch.no_grad():
        module.weight[1, 1] = 1e5  # beyond float16's 65504
    with pytest.raises(ValueError, match="weight does not fit"):
        save_module(module, tmp_path / "n.safetensors")
    assert not (tmp_path / "n.safetensors").exists()


def test_fixed_seed_generation_and_logits_reproduce(adapter, reference):
    model, layout = adapter.model, adapter.layout
    generator = torch.Generator().manual_seed(reference["seed"])
    tokens, _ = sample_tokens(model, layout, torch.tensor([reference["class_index"]]),
                              cfg_scale=reference["cfg_scale"], top_k=reference["top_k"],
                              generator=generator)
    assert tokens[0].tolist() == reference["tokens"]
    checksum = logits_checksum(model, layout, reference["class_index"], tokens[0, :-1])
    for key in ("sum", "abs_sum"):
        assert checksum[key] == pytest.approx(reference["logits_checksum"][key], rel=1e-4)
    assert checksum["last_row_head"] == pytest.approx(reference["logits_checksum"]["last_row_head"], abs=1e-3)
    image = adapter.tokenizer.decode(tokens.view(1, layout.grid, layout.grid))
    assert float(image.double().sum()) == pytest.approx(reference["decoded_pixel_sum"], rel=1e-4, abs=1e-2)


def test_adapter_distribution_equals_reference_sampler(adapter, reference):
    """The adapter (CFG against the null class, image codes only) gives the distributions
    that sample_tokens draws from, for the recorded prefix."""
    tokens = torch.tensor(reference["tokens"][:20])
    prompt = adapter.prompt_ids(reference["class_index"])
    adapter.start(prompt, adapter.uncond_prompt_ids())
    probs = adapter.forward(torch.cat([prompt, tokens]))  # [21, V]
    layout = adapter.layout
    ids = torch.cat([prompt, tokens])[None]
    with torch.no_grad():
        cond = adapter.model(input_ids=ids).logits[0]
        uncond = adapter.model(input_ids=torch.cat([adapter.uncond_prompt_ids(), tokens])[None]).logits[0]
    expected = process_logits(cond, uncond, layout, adapter.cfg_scale, adapter.top_k, 1.0)
    assert probs.dtype == torch.float64 and adapter.model.dtype == torch.float64
    assert torch.allclose(probs[:, : layout.codebook_size], expected, atol=1e-12)
    assert float(probs[:, layout.codebook_size:].abs().max()) == 0.0


def test_adapter_interface(adapter):
    assert adapter.num_classes == len(data.CLASS_NAMES) == len(adapter.class_names)
    assert adapter.num_image_tokens == 256 and adapter.row_length == 16
    assert adapter.layout.codebook_size == 8192 and adapter.top_k == 2000
    assert torch.equal(adapter.allowed_tokens, torch.arange(adapter.layout.codebook_size))
    assert adapter.prompt_ids("coffee").tolist() == [adapter.layout.codebook_size + 1]
    assert adapter.uncond_prompt_ids().tolist() == [adapter.layout.null_class_id]
    images = adapter.decode_images(torch.zeros(2, 256, dtype=torch.long))
    assert images.shape == (2, 256, 256, 3) and images.dtype == torch.uint8
    assert adapter.tokenizer.patch == 16 and adapter.code_content().shape == (8192, 16 * 16 * 3)
    with pytest.raises(ValueError):
        adapter.prompt_ids(adapter.num_classes)
    with pytest.raises(ValueError):
        adapter.prompt_ids("no such class")
    with pytest.raises(ValueError):
        adapter.decode_images(torch.full((256,), adapter.layout.codebook_size))


def test_tokenizer_round_trip_and_heldout_error():
    """Decoding a code gives its patch, encoding that patch gives the code back (the patch is
    its own nearest code); the seam decoder's held-out PSNR meets the floor, beats the tiles'
    and matches the recorded value."""
    tokenizer = load_tokenizer()
    images, _ = data.class_crops("heldout", 4, seed=99, flip=False)
    codes = tokenizer.encode(images)
    assert codes.shape == (40, data.HELDOUT_CROP // 16, data.HELDOUT_CROP // 16)
    assert torch.equal(tokenizer.encode(tokenizer.decode_tiles(codes)), codes)
    assert tokenizer.decoder is not None
    metrics = evaluate_tokenizer(tokenizer)
    assert metrics["heldout_psnr_db"] >= TOKENIZER_PSNR_FLOOR_DB
    assert metrics["heldout_psnr_db"] > metrics["heldout_tiles_psnr_db"]
    recorded = json.loads((WEIGHTS_DIR / "tokenizer_config.json").read_text())["metrics"]
    assert metrics["heldout_psnr_db"] == pytest.approx(recorded["heldout_psnr_db"], abs=0.05)
    assert metrics["heldout_tiles_psnr_db"] == pytest.approx(recorded["heldout_tiles_psnr_db"], abs=0.05)


def test_nearest_code_does_not_depend_on_the_chunk():
    """The codes are the float64 brute-force argmin (ties to the smallest k) whatever the number
    of rows per chunk: one row, a chunk that does not divide N, the default, all rows at once."""
    from gsd_lab.standin.tokenizer import nearest_code

    g = torch.Generator().manual_seed(0)
    book = torch.rand(64, 48, generator=g) * 2 - 1
    book[5] = book[3]  # a tie: code 3 wins
    x = torch.rand(1000, 48, generator=g, dtype=torch.float64) * 2 - 1
    x[:10] = book[3].double()
    brute = ((x[:, None, :] - book.double()[None]) ** 2).sum(-1).argmin(1)
    assert (brute[:10] == 3).all() and brute.unique().numel() > 32
    for chunk in (1, 7, 128, 1000, 4096):
        assert torch.equal(nearest_code(x, book, chunk=chunk), brute), chunk


def test_codebook_has_close_neighbours():
    """GSD's premise: most codes have a near-duplicate whose patch is close (PSNR > 24 dB)."""
    recorded = json.loads((WEIGHTS_DIR / "tokenizer_config.json").read_text())["metrics"]
    assert recorded["nearest_code_patch_psnr_db_median"] > 24.0
    codebook = load_tokenizer().codebook.double()
    dist = torch.cdist(codebook[:512], codebook)
    dist[torch.arange(512), torch.arange(512)] = float("inf")
    psnr = 10 * torch.log10(4.0 / (dist.min(1).values ** 2 / codebook.shape[1]))
    assert float(psnr.median()) > 24.0


def test_classifier_heldout_accuracy():
    images, labels = heldout_set()
    assert accuracy(load_classifier(), images, labels) >= CLASSIFIER_ACCURACY_FLOOR


def _copy_weights(tmp_path: Path) -> Path:
    target = tmp_path / "weights"
    shutil.copytree(WEIGHTS_DIR, target)
    return target


@pytest.mark.parametrize("name", WEIGHT_FILES + ("ar_config.json", "tokenizer_config.json"))
def test_missing_file_names_it(tmp_path, name):
    directory = _copy_weights(tmp_path)
    (directory / name).unlink()
    loader = load_classifier if name.startswith("classifier") else load_standin
    with pytest.raises(FileNotFoundError, match=name):
        loader(weights_dir=directory) if loader is load_standin else loader(directory)


@pytest.mark.parametrize("name", WEIGHT_FILES)
def test_corrupted_weights_name_the_file(tmp_path, name):
    directory = _copy_weights(tmp_path)
    path = directory / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # truncated
    with pytest.raises(WeightFileError, match=name):
        if name.startswith("classifier"):
            load_classifier(directory)
        else:
            load_standin(weights_dir=directory)


def test_garbage_and_mismatched_weights_name_the_file(tmp_path):
    directory = _copy_weights(tmp_path)
    (directory / "ar_model.safetensors").write_bytes(b"\x80\x04not a safetensors file" * 10)
    with pytest.raises(WeightFileError, match="ar_model.safetensors"):
        load_ar_model(directory)
    directory = _copy_weights(tmp_path / "b")
    shutil.copy(directory / "classifier.safetensors", directory / "tokenizer.safetensors")
    with pytest.raises(WeightFileError, match="tokenizer.safetensors"):
        load_tokenizer(directory)
    (directory / "ar_config.json").write_text("{not json")
    with pytest.raises(WeightFileError, match="ar_config.json"):
        load_ar_model(directory)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fast_load_gives_the_tensors_of_init_load_and_cast(dtype):
    """load_ar_model builds without random init and widens float16 straight to ``dtype``: every
    parameter and buffer (rotary frequencies included) and the logits equal, bit for bit, those
    of the plain path (randomly initialised float32 model, load, cast)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from gsd_lab.models.float64 import cast_model_float64
    from gsd_lab.standin.weights_io import load_into, read_json

    config = LlamaConfig.from_dict(read_json(WEIGHTS_DIR / "ar_config.json")["llama"])
    plain = load_into(LlamaForCausalLM(config), WEIGHTS_DIR / "ar_model.safetensors")
    plain = (cast_model_float64(plain) if dtype == torch.float64 else plain.to(dtype)).eval()
    fast, _, _ = load_ar_model(dtype=dtype)
    expected = dict(plain.named_parameters()) | dict(plain.named_buffers())
    got = dict(fast.named_parameters()) | dict(fast.named_buffers())
    assert sorted(got) == sorted(expected)
    for name, tensor in expected.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name
    ids = torch.randint(0, config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(fast(ids).logits, plain(ids).logits)
        # negative control: one weight off by one float16 step changes the logits
        fast.lm_head.weight[0, 0] += 2.0**-10
        assert not torch.equal(fast(ids).logits, plain(ids).logits)


def test_load_standin_refuses_a_non_floating_compute_dtype():
    with pytest.raises(ValueError, match="compute_dtype"):
        load_standin(compute_dtype=torch.int64)
