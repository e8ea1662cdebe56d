"""Lumina-mGPT's prompt tokenizer as written (a byte-level BPE ``tokenizer.json`` labelled
``LlamaTokenizerFast``), the 768 repo's tokenizer for the 512 / 1024 checkpoints that ship none,
``--tokenizer``, and the VQGAN layouts of the release's code."""

from __future__ import annotations

import shutil

import pytest
from tokenizers import Tokenizer

from gsd_lab.models.chameleon_vqgan import VQGAN_LAYOUTS, find_vqgan_files
from gsd_lab.models.lumina_mgpt import load_lumina_mgpt
from gsd_lab.models.lumina_tokenizer import PromptTokenizer, find_tokenizer_file

PROMPTS = ["A red cat on a blue sky", "a  dog,\twith 2 cats: ünïcode & 'quotes'\n", "  lead spaces", "x"]


@pytest.fixture()
def no_hf_cache(monkeypatch, tmp_path):
    """No Hugging Face cache the search could stumble on."""
    for name in ("HF_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_prompt_ids_are_the_files_own_ids(tiny_release_set, no_hf_cache):
    # The release set's 512 folder has no tokenizer: the sibling 768 folder's is used.
    adapter = load_lumina_mgpt(tiny_release_set.weights, resolution=512, device="cpu")
    path = tiny_release_set.tokenizer / "tokenizer.json"
    assert adapter.tokenizer.path == path and adapter.tokenizer.declared_class == "LlamaTokenizerFast"
    raw = Tokenizer.from_file(str(path))
    for prompt in PROMPTS:
        ids = adapter.prompt_ids(prompt).tolist()
        text_ids = raw.encode(adapter.prompt_text(prompt), add_special_tokens=False).ids
        assert ids == [adapter.layout.bos, *text_ids, *adapter.layout.header], prompt
    # The file is a byte-level BPE: a space is part of the next piece, not dropped (what
    # transformers 5.x's LlamaTokenizerFast does to such a file: its Metaspace pre-tokenizer).
    vocab = adapter.model.config.vocabulary_map
    assert vocab["Ġcat"] in adapter.prompt_ids("a cat").tolist()


def test_the_tokenizer_is_searched_in_order_and_its_absence_names_the_download(tiny_release_set, tmp_path,
                                                                              no_hf_cache):
    weights = tmp_path / "lumina-mgpt-7b-1024"
    shutil.copytree(tiny_release_set.weights, weights)
    with pytest.raises(FileNotFoundError) as error:
        load_lumina_mgpt(weights, resolution=512, device="cpu")
    message = str(error.value)
    assert "hf download Alpha-VLLM/Lumina-mGPT-7B-768 tokenizer.json" in message and "--tokenizer" in message
    # --tokenizer: a folder or the file itself.
    for given in (tiny_release_set.tokenizer, tiny_release_set.tokenizer / "tokenizer.json"):
        assert find_tokenizer_file(weights, given) == tiny_release_set.tokenizer / "tokenizer.json"
    with pytest.raises(FileNotFoundError, match="--tokenizer .*no tokenizer.json"):
        find_tokenizer_file(weights, tmp_path)
    # A Hugging Face cache: the 768 entry's snapshot holding tokenizer.json, found from the 512 one.
    cache = tmp_path / "hub"
    snapshot_512 = cache / "models--Alpha-VLLM--Lumina-mGPT-7B-512" / "snapshots" / "aaa"
    snapshot_768 = cache / "models--Alpha-VLLM--Lumina-mGPT-7B-768" / "snapshots" / "bbb"
    shutil.copytree(tiny_release_set.weights, snapshot_512)
    shutil.copytree(tiny_release_set.tokenizer, snapshot_768)
    assert find_tokenizer_file(snapshot_512) == snapshot_768 / "tokenizer.json"
    # The checkpoint's own tokenizer wins over a sibling's.
    shutil.copy(tiny_release_set.tokenizer / "tokenizer.json", weights / "tokenizer.json")
    assert find_tokenizer_file(weights) == weights / "tokenizer.json"


def test_a_tokenizer_of_other_weights_is_refused(tiny_release_set, tmp_path):
    from gsd_lab.testing.tiny_checkpoints import tiny_vocabulary_map, write_tiny_tokenizer

    other = tiny_vocabulary_map(32)  # fewer image codes: every later id moves
    write_tiny_tokenizer(tmp_path / "other", other)
    with pytest.raises(ValueError, match="does not match the checkpoint's vocabulary_map"):
        load_lumina_mgpt(tiny_release_set.weights, resolution=512, device="cpu", tokenizer=tmp_path / "other")
    tokenizer = PromptTokenizer(tmp_path / "other" / "tokenizer.json")
    assert tokenizer.bos_token_id == other["<s>"]
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a tokenizers file"):
        PromptTokenizer(tmp_path / "bad.json")


@pytest.mark.parametrize("layout", VQGAN_LAYOUTS)
def test_every_vqgan_layout_of_the_release_is_found(tmp_path, layout):
    folder = tmp_path / layout
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vqgan.yaml").write_text("model: {}")
    (folder / "vqgan.ckpt").write_bytes(b"")
    assert find_vqgan_files(tmp_path) == (folder / "vqgan.yaml", folder / "vqgan.ckpt")


def test_a_missing_vqgan_names_every_layout(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        find_vqgan_files(tmp_path)
    assert "ckpts/image_tokenizer/chameleon/" in str(error.value)
    assert "ckpts/chameleon/tokenizer/" in str(error.value)
