"""Tiny random checkpoints of the Chameleon / Anole and Emu3 families in their release layouts.

``save_tiny_anole(dir)`` and ``save_tiny_emu3(dir)`` write, from stock ``transformers`` classes
saved with ``save_pretrained``, what a released folder holds (config, safetensors, a byte-level
``tokenizer.json`` over the family's token names), for the tests and for users who want to try
``python -m gsd_lab generate --model anole-7b|emu3-gen --weights DIR`` without the real weights.
The model dimensions are those of transformers' own test configurations
(``tests/models/chameleon/test_modeling_chameleon.py``, ``tests/models/emu3/test_modeling_emu3.py``:
hidden 32, 2 layers, 2 heads, MLP 37; Emu3's VQ-VAE: base channels 32, multipliers [1, 2, 1], no
attention resolutions); the vocabularies are larger (the byte alphabet, the family's special token
names, shuffled image-code ids so that only a name-based map is right). Embedding and head rows are
redrawn with std ``init_std`` from a seeded generator so that distributions are peaked. Nothing is
downloaded; a few hundred kB per folder, written in about a second.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .lumina_tiny import tiny_vocabulary_map, write_tiny_tokenizer, write_tiny_vqgan

ANOLE_TINY_CODES = 64
# The text models' dimensions in transformers' own Chameleon and Emu3 test configurations.
TEST_CONFIG_DIMS = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "intermediate_size": 37,
}


def _redraw_rows(model: torch.nn.Module, names: tuple[str, ...], std: float, seed: int) -> None:
    """Parameters ``names`` <- std N(0, 1) from a generator seeded by ``seed`` (in place)."""
    generator = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name in names:
            param = params[name]
            param.copy_(std * torch.randn(param.shape, generator=generator))


def save_tiny_anole(
    folder: str | Path,
    *,
    num_codes: int = ANOLE_TINY_CODES,
    seed: int = 0,
    init_std: float = 0.5,
    with_vqgan: bool = True,
) -> Path:
    """Write a tiny random Chameleon / Anole checkpoint to ``folder`` and return it.

    ``folder``: ``ChameleonForConditionalGeneration.save_pretrained`` (config.json with
    architectures ["ChameleonForConditionalGeneration"], q/k-norms as [heads, head_dim], the image
    encoder ``model.vqmodel.*`` included, as in the transformers-layout Anole conversion), the
    Chameleon-named vocabulary of ``lumina_tiny.tiny_vocabulary_map`` (``num_codes`` shuffled
    ``IMGIMG...`` codes) and its ``tokenizer.json``; vq_config resolution 16, so an image is
    8 x 8 codes (``anole.vq_latent_side``; the release's 512 gives 32 x 32). ``with_vqgan``: a
    matching tiny Chameleon VQGAN (``num_codes`` codes, x2 upsampling) in ``folder/tokenizer``
    (vqgan.yaml + vqgan.ckpt, where Meta's and GAIR's releases keep it)."""
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocabulary_map = tiny_vocabulary_map(num_codes)
    config = ChameleonConfig(
        vocab_size=len(vocabulary_map),
        **TEST_CONFIG_DIMS,
        max_position_embeddings=2048,
        bos_token_id=vocabulary_map["<s>"],
        eos_token_id=vocabulary_map["</s>"],
        pad_token_id=vocabulary_map["<pad>"],
        vocabulary_map=vocabulary_map,
        vq_config={
            "embed_dim": 5,
            "num_embeddings": num_codes,
            "latent_channels": 5,
            "in_channels": 3,
            "base_channels": 32,
            "channel_multiplier": [1, 2],
            "resolution": 16,  # images of 8 x 8 codes (vq_latent_side): 64 image tokens
        },
    )
    with torch.random.fork_rng(devices=[]):  # transformers' initialisers use the global RNG
        torch.manual_seed(seed)
        model = ChameleonForConditionalGeneration(config).eval()
    _redraw_rows(model, ("model.embed_tokens.weight", "lm_head.weight"), init_std, seed)
    model.save_pretrained(folder)
    write_tiny_tokenizer(folder, vocabulary_map)
    if with_vqgan:
        write_tiny_vqgan(folder / "tokenizer", n_embed=num_codes, seed=seed)
    return folder


def _emu3_vocabulary(num_codes: int) -> dict[str, int]:
    """Emu3's token names at small scale: <|endoftext|> (pad), <|extra_203|> (BOS),
    <|extra_204|> (EOS), the image tokens, <|extra_200|> (end of line), <|extra_201|> (end of
    frame), <image>; ``num_codes`` visual tokens in shuffled id order; the byte alphabet."""
    from tokenizers.pre_tokenizers import ByteLevel

    names = ["<|endoftext|>", "<|extra_203|>", "<|extra_204|>"]
    names += ["<|image start|>", "<|image end|>", "<|image token|>"]
    names += ["<|extra_200|>", "<|extra_201|>", "<image>"]
    order = torch.randperm(num_codes, generator=torch.Generator().manual_seed(4321)).tolist()
    names += [f"<|visual token{c:06d}|>" for c in order]
    names += sorted(ByteLevel.alphabet())
    return {name: i for i, name in enumerate(dict.fromkeys(names))}


def _write_byte_tokenizer(folder: Path, vocabulary_map: dict[str, int]) -> None:
    """A byte-level BPE ``tokenizer.json`` (no merges; the ``<|...|>`` names special) and a
    ``tokenizer_config.json`` naming Emu3's special tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE(vocab=dict(vocabulary_map), merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = [n for n in vocabulary_map if n.startswith("<|") or n == "<image>"]
    tok.add_special_tokens([AddedToken(n, special=True, normalized=False) for n in specials])
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "GPT2TokenizerFast",
        "bos_token": "<|extra_203|>",
        "eos_token": "<|extra_204|>",
        "pad_token": "<|endoftext|>",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


def save_tiny_emu3(
    folder: str | Path,
    *,
    num_codes: int = 20,
    image_area: int = 256,
    seed: int = 0,
    init_std: float = 0.5,
) -> Path:
    """Write a tiny random Emu3 checkpoint to ``folder`` and return it.

    ``Emu3ForConditionalGeneration.save_pretrained`` (text model, head and VQ-VAE with its
    decoder; codebook ``num_codes``, spatial factor 4), ``generation_config.json`` (guidance 3.0,
    top-k 4, temperature 1.0), ``preprocessor_config.json`` (the stock ``Emu3ImageProcessor``),
    ``tokenizer.json`` over Emu3's token names, and ``processor_config.json`` setting
    ``image_area`` (the default 256 pixels gives 4 x 4 latent codes, 20 image tokens: a fast
    image; the release's processor uses its default 518400)."""
    from transformers import (
        Emu3Config,
        Emu3ForConditionalGeneration,
        Emu3ImageProcessor,
        Emu3TextConfig,
        GenerationConfig,
    )

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocabulary_map = _emu3_vocabulary(num_codes)
    text_config = Emu3TextConfig(
        vocab_size=len(vocabulary_map),
        **TEST_CONFIG_DIMS,
        max_position_embeddings=512,
        pad_token_id=vocabulary_map["<|endoftext|>"],
        bos_token_id=vocabulary_map["<|extra_203|>"],
        eos_token_id=vocabulary_map["<|extra_204|>"],
    )
    vq_config = {
        "codebook_size": num_codes,
        "temporal_downsample_factor": 1,
        "base_channels": 32,
        "channel_multiplier": [1, 2, 1],
        "hidden_size": 32,
        "attn_resolutions": [],
    }
    config = Emu3Config(text_config=text_config, vq_config=vq_config, vocabulary_map=vocabulary_map)
    with torch.random.fork_rng(devices=[]):  # transformers' initialisers use the global RNG
        torch.manual_seed(seed)
        model = Emu3ForConditionalGeneration(config).eval()
    _redraw_rows(
        model, ("model.text_model.embed_tokens.weight", "lm_head.weight"), init_std, seed
    )
    model.save_pretrained(folder)
    GenerationConfig(
        bos_token_id=text_config.bos_token_id,
        eos_token_id=text_config.eos_token_id,
        pad_token_id=text_config.pad_token_id,
        do_sample=True,
        guidance_scale=3.0,
        top_k=4,
        temperature=1.0,
    ).save_pretrained(folder)
    Emu3ImageProcessor().save_pretrained(folder)
    _write_byte_tokenizer(folder, vocabulary_map)
    (folder / "processor_config.json").write_text(json.dumps({"image_area": image_area}))
    return folder
