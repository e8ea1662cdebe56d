"""``python -m gsd_lab check-weights`` on the tiny release-layout set and on broken copies of it:
one verdict per item, exit 1 naming the failed item, items that depend on it skipped."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file


@pytest.fixture()
def no_hf_cache(monkeypatch, tmp_path):
    for name in ("HF_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def _copy(tiny, tmp_path, name: str = "lumina-mgpt-7b-512"):
    """A copy of the set's 512 folder with the 768 tokenizer folder beside it, as released."""
    shutil.copytree(tiny.tokenizer, tmp_path / "lumina-mgpt-7b-768", dirs_exist_ok=True)
    return shutil.copytree(tiny.weights, tmp_path / name)


def test_the_tiny_release_set_passes_every_item(tiny_release_set, tmp_path, check, one_thread,
                                                no_hf_cache):
    files = tiny_release_set
    out = tmp_path / "rows.png"
    code, verdicts = check(str(files.weights), "--vqgan", str(files.vqgan), "--clip",
                           str(files.clip), "--out", str(out))
    assert code == 0
    assert list(verdicts) == ["files", "architecture", "vocabulary", "tokenizer", "prompt ids",
                              "generation", "image", "clip"]
    assert all(v["status"] in ("ok", "warn") for v in verdicts.values()), verdicts
    assert "2 shard(s)" in verdicts["files"]["detail"]
    assert "[(2, 8)] (Lumina's per rank" in verdicts["architecture"]["detail"]
    assert "512 px: 32 x 32 codes + row ends = 1056 tokens" in verdicts["vocabulary"]["detail"]
    # the sibling 768 folder's tokenizer
    assert str(files.tokenizer / "tokenizer.json") in verdicts["tokenizer"]["detail"]
    assert "LlamaTokenizerFast" in verdicts["tokenizer"]["detail"]
    assert "66 tokens (2 rows)" in verdicts["generation"]["detail"]
    image = verdicts["image"]
    assert image["status"] == "warn" and "not Meta's" in image["detail"]  # a random VQGAN
    from PIL import Image

    assert Image.open(out).size == (64, 4)  # 2 rows of 32 codes, x2 upsampling of the tiny VQGAN


def test_broken_downloads_fail_at_the_right_item(tiny_release_set, tmp_path, check, no_hf_cache):
    # A shard missing: files fails, everything after it is skipped.
    folder = _copy(tiny_release_set, tmp_path / "a")
    (folder / "model-00002-of-00002.safetensors").unlink()
    code, verdicts = check(str(folder))
    assert code == 1 and verdicts["files"]["status"] == "FAIL"
    assert "not there" in verdicts["files"]["detail"]
    skipped = {verdicts[k]["status"] for k in ("architecture", "generation", "prompt ids")}
    assert skipped == {"skip"}

    # A shard cut short (an interrupted download): a verdict naming the file, not a traceback.
    folder = _copy(tiny_release_set, tmp_path / "a2")
    shard = folder / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:1000])
    code, verdicts = check(str(folder))
    assert code == 1 and verdicts["files"]["status"] == "FAIL"
    assert f"{shard} is not a readable safetensors file" in verdicts["files"]["detail"]
    assert "interrupted download" in verdicts["files"]["detail"]

    # q/k-norms expanded to [heads, head_dim] under Lumina's architectures: the layout is named.
    folder = _copy(tiny_release_set, tmp_path / "b")
    name = "model.layers.0.self_attn.q_norm.weight"
    shard = next(f for f in sorted(folder.glob("*.safetensors")) if name in load_file(str(f)))
    state = load_file(str(shard))
    state[name] = torch.ones(4, 8)
    save_file(state, str(shard), metadata={"format": "pt"})
    code, verdicts = check(str(folder))
    assert code == 1 and verdicts["architecture"]["status"] == "FAIL"
    assert "transformers' expanded [heads, head_dim] layout" in verdicts["architecture"]["detail"]
    assert verdicts["tokenizer"]["status"] == "ok" and verdicts["generation"]["status"] == "skip"

    # No row-end token in the vocabulary map.
    folder = _copy(tiny_release_set, tmp_path / "c")
    config = json.loads((folder / "config.json").read_text())
    del config["vocabulary_map"]["<reserved08799>"]
    (folder / "config.json").write_text(json.dumps(config))
    code, verdicts = check(str(folder))
    assert code == 1 and "<reserved08799>" in verdicts["vocabulary"]["detail"]

    # No tokenizer anywhere near a 1024 folder: the download is named.
    folder = shutil.copytree(tiny_release_set.weights, tmp_path / "d" / "lumina-mgpt-7b-1024")
    code, verdicts = check(str(folder))
    assert code == 1 and verdicts["tokenizer"]["status"] == "FAIL"
    download = "hf download Alpha-VLLM/Lumina-mGPT-7B-768 tokenizer.json"
    assert download in verdicts["tokenizer"]["detail"]
    assert verdicts["prompt ids"]["status"] == verdicts["generation"]["status"] == "skip"
    assert "1024 px" in verdicts["vocabulary"]["detail"]  # the resolution read from the folder name


def test_a_bad_vqgan_fails_the_image_item_only(tiny_release_set, tmp_path, check, no_hf_cache):
    """Another model's VQGAN, a truncated one: the model's items pass, the image item names it."""
    from gsd_lab.testing.tiny_checkpoints import write_tiny_vqgan

    small_folder = tmp_path / "small-vqgan" / "ckpts" / "chameleon" / "tokenizer"
    small = write_tiny_vqgan(small_folder, n_embed=32)
    code, verdicts = check(str(tiny_release_set.weights), "--vqgan", str(small.parents[2]),
                           "--clip", str(tiny_release_set.clip))
    assert code == 1 and verdicts["generation"]["status"] == "ok"
    assert verdicts["image"]["status"] == "FAIL"
    assert "codebook has 32 entries" in verdicts["image"]["detail"]
    assert verdicts["clip"]["status"] == "skip"
    cut = shutil.copytree(tiny_release_set.vqgan, tmp_path / "cut-vqgan")
    checkpoint = next(cut.rglob("vqgan.ckpt"))
    checkpoint.write_bytes(checkpoint.read_bytes()[:2000])
    code, verdicts = check(str(tiny_release_set.weights), "--vqgan", str(cut))
    assert code == 1 and verdicts["generation"]["status"] == "ok"
    assert verdicts["image"]["status"] == "FAIL"
    assert f"{checkpoint} cannot be read as a torch checkpoint" in verdicts["image"]["detail"]


def test_a_model_above_the_cpu_limit_skips_generation(tiny_release_set, check, monkeypatch,
                                                      no_hf_cache):
    """The loader's refusal on the CPU (``TooLargeForCPU``) is the generation item's SKIP naming
    --force-cpu; what needs it is skipped in turn."""
    import gsd_lab.models.lumina_mgpt as lumina_mgpt

    monkeypatch.setattr(lumina_mgpt, "CPU_PARAMETER_LIMIT", 0)
    code, verdicts = check(str(tiny_release_set.weights), "--vqgan", str(tiny_release_set.vqgan))
    assert code == 0 and verdicts["generation"]["status"] == "skip"
    assert "--force-cpu" in verdicts["generation"]["detail"]
    assert verdicts["image"] == {"item": "image", "status": "skip", "detail": "needs generation"}
