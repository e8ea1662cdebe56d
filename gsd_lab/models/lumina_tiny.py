"""Tiny randomly initialised Lumina-mGPT checkpoints in the real file layout, for tests and the
CPU mode of ``benchmarks/gpu_lumina_shapes.py``.

A tiny checkpoint folder holds what a released Lumina-mGPT folder holds: ``config.json``
(``model_type`` "chameleon", the Lumina extra keys, a ``vocabulary_map`` whose names follow
Chameleon's: ``<s>``, ``<reservedNNNNN>``, ``<racm3:break>``, ``<eoss>``, ``IMGIMG...Z``),
safetensors shards with an index, q/k-norm weights stored per model-parallel rank
([model_parallel_size, head_dim]), no ``model.vqmodel.*`` keys, and a byte-level BPE
``tokenizer.json`` labelled ``LlamaTokenizerFast`` (as the release's). A tiny VQGAN
folder holds ``vqgan.yaml`` and a Lightning-style ``vqgan.ckpt`` (``{"state_dict": ...}``,
encoder and loss keys included, as in the real file). A tiny CLIP folder holds what
``CLIPModel.save_pretrained`` + ``CLIPProcessor.save_pretrained`` write (config, safetensors,
tokenizer and preprocessor files), built locally: nothing is downloaded.
``write_tiny_release_set`` writes all three side by side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from .chameleon_vqgan import ChameleonVQGANDecoder, VQGANConfig

# Words the tiny byte-level BPE merges into one token each (the prompt template's and a few
# caption words), written as byte-level pieces: "Ġ" is the byte-level form of a leading space.
TINY_MERGED_WORDS = (
    "Generate",
    "Ġan",
    "Ġimage",
    "Ġof",
    "Ġaccording",
    "Ġto",
    "Ġthe",
    "Ġfollowing",
    "Ġprompt",
    "Ġa",
    "Ġred",
    "Ġcat",
    "Ġdog",
    "Ġblue",
    "Ġsky",
    "Ġon",
    "Ġwith",
)


def _image_token_name(code: int) -> str:
    """Chameleon's name for VQ code ``code``: IMGIMG + the digits written as letters A..J + Z."""
    return "IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(code)) + "Z"


def _word_merges(words: tuple[str, ...]) -> list[tuple[str, str]]:
    """BPE merges that build each word left to right from its characters (shared prefixes once)."""
    merges: list[tuple[str, str]] = []
    for word in words:
        piece = word[0]
        for char in word[1:]:
            if (piece, char) not in merges:
                merges.append((piece, char))
            piece += char
    return merges


def tiny_vocabulary_map(num_codes: int, *, max_grid: int = 32) -> dict[str, int]:
    """A scaled-down Chameleon vocabulary with the same names (and, where they fit, the same roles).

    Ids: 0 <s>, 1 <pad>, 2 </s>, 3 <unk>; 4 .. 4+num_codes-1 the image codes; then <eoss> (image
    end), <racm3:break> (image start), <reserved08706> (end of turn), <reserved08799> (row end),
    <reserved08800+n> for grid sizes n = 0..max_grid, <image>; then the 256 characters of the
    byte-level alphabet and the pieces of ``TINY_MERGED_WORDS`` (the tokenizer's vocabulary:
    Chameleon's ``vocabulary_map`` is its tokenizer's vocabulary).
    The image codes are assigned to ids in a *shuffled* order so that a mapping by offset
    (id - 4) would be wrong: only the name-based map gives the right VQ index.
    """
    from tokenizers.pre_tokenizers import ByteLevel

    names = ["<s>", "<pad>", "</s>", "<unk>"]
    generator = torch.Generator().manual_seed(1234)
    codes = torch.randperm(num_codes, generator=generator).tolist()
    names += [_image_token_name(c) for c in codes]
    names += ["<eoss>", "<racm3:break>", "<reserved08706>", "<reserved08799>"]
    names += [f"<reserved{8800 + n:05d}>" for n in range(max_grid + 1)]
    names += ["<image>"]
    names += sorted(ByteLevel.alphabet())
    names += [a + b for a, b in _word_merges(TINY_MERGED_WORDS)]
    return {name: i for i, name in enumerate(dict.fromkeys(names))}


def write_tiny_tokenizer(folder: str | Path, vocabulary_map: dict[str, int]) -> Path:
    """Write a byte-level BPE ``tokenizer.json`` over ``vocabulary_map`` (Chameleon's pipeline:
    digits split one by one, then byte-level pre-tokenisation; merges of ``TINY_MERGED_WORDS``;
    the ``<...>`` names as special added tokens; a ``<s> $A`` post-processor) and a
    ``tokenizer_config.json`` labelled ``LlamaTokenizerFast`` as the release's is. transformers
    5.x's ``LlamaTokenizerFast`` reads such a file with a Metaspace pre-tokenizer and other ids
    (``gsd_lab.models.lumina_tokenizer``); the raw ``tokenizers`` ids are the right ones."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
    )

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    specials = [
        name
        for name in vocabulary_map
        if name.startswith("<") and name.endswith(">") and len(name) > 1
    ]
    merges = [m for m in _word_merges(TINY_MERGED_WORDS) if "".join(m) in vocabulary_map]
    tok = Tokenizer(models.BPE(vocab=dict(vocabulary_map), merges=merges, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\d"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(name, special=True, normalized=False) for name in specials])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", vocabulary_map["<s>"])]
    )
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "LlamaTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
        "model_max_length": 4096,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return folder / "tokenizer.json"


def write_tiny_lumina_checkpoint(
    folder: str | Path,
    *,
    num_codes: int = 64,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int | None = None,
    model_parallel_size: int = 1,
    intermediate_size: int = 128,
    max_position_embeddings: int = 4608,
    num_shards: int = 2,
    seed: int = 0,
    init_std: float = 0.5,
    embedding_spread: float | None = None,
    with_tokenizer: bool = True,
) -> Path:
    """Write a random tiny Lumina-mGPT-layout checkpoint to ``folder`` and return it.

    The weights are those of a stock ``ChameleonForConditionalGeneration`` with q/k-norm weights
    and biases randomised per *model-parallel rank* and saved as [model_parallel_size, head_dim]
    (the Lumina layout); ``model.vqmodel.*`` is not saved. ``init_std`` sets the std of the
    embedding / lm_head rows so the tiny model has peaked, non-uniform distributions.
    ``embedding_spread`` s (optional): every input-embedding row is one shared random vector plus
    s N(0, 1) instead. Such a model barely depends on which tokens it reads, so its next-token
    distributions hardly change with the context: Jacobi drafts are accepted often (about 170
    forward passes instead of about 900 for a 512 x 512 image: fast end-to-end tests), and the
    squared distances between embeddings, about 2 hidden_size s^2, straddle the release's GSD
    filter value 0.5 when s = 0.1 and hidden_size = 32. ``with_tokenizer=False`` writes no
    tokenizer, as the 512 and 1024 releases (``write_tiny_tokenizer`` writes one elsewhere).
    """
    from safetensors.torch import save_file
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocabulary_map = tiny_vocabulary_map(num_codes)
    num_kv_heads = num_kv_heads or num_heads
    head_dim = hidden_size // num_heads
    config_dict = {
        "architectures": ["ChameleonXLLMXForConditionalGeneration"],
        "model_type": "chameleon",
        "vocab_size": len(vocabulary_map),
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "max_position_embeddings": max_position_embeddings,
        "rope_theta": 10000.0,
        "bos_token_id": vocabulary_map["<s>"],
        "eos_token_id": vocabulary_map["</s>"],
        "pad_token_id": vocabulary_map["<pad>"],
        "tie_word_embeddings": False,
        "model_parallel_size": model_parallel_size,
        "swin_norm": False,
        "vocabulary_map": vocabulary_map,
        "vq_config": {
            "embed_dim": 32,
            "num_embeddings": num_codes,
            "latent_channels": 32,
            "base_channels": 32,
            "channel_multiplier": [1, 2],
            "resolution": 32,
        },
        # Lumina-mGPT's own keys (kept by the stock config, unused by the stock model).
        "z_loss_weight": 1e-5,
        "mask_image_logits": False,
        "dropout": 0.05,
        "torch_dtype": "float32",
    }
    config = ChameleonConfig(
        **{k: v for k, v in config_dict.items() if k not in ("architectures", "model_type")}
    )
    # transformers' initialisers use the global RNG: a fixed seed keeps files reproducible, and
    # the forked RNG state leaves the caller's global state as it was.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ChameleonForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name, tensor in model.state_dict().items():
        if name.startswith("model.vqmodel."):
            continue
        if ".q_norm." in name or ".k_norm." in name:
            # One (weight, bias) row per model-parallel rank, as Lumina-mGPT stores it.
            base = 1.0 if name.endswith("weight") else 0.0
            tensor = base + 0.3 * torch.randn(model_parallel_size, head_dim, generator=generator)
        elif name == "model.embed_tokens.weight" and embedding_spread is not None:
            shared = torch.randn(1, tensor.shape[1], generator=generator)
            tensor = shared + embedding_spread * torch.randn(tensor.shape, generator=generator)
        elif name in ("model.embed_tokens.weight", "lm_head.weight"):
            tensor = init_std * torch.randn(tensor.shape, generator=generator)
        state[name] = tensor.contiguous().clone()
    names = sorted(state)
    shards = [names[i::num_shards] for i in range(num_shards)] if num_shards > 1 else [names]
    weight_map = {}
    for index, shard in enumerate(shards):
        file = (
            f"model-{index + 1:05d}-of-{len(shards):05d}.safetensors"
            if len(shards) > 1
            else "model.safetensors"
        )
        save_file({k: state[k] for k in shard}, str(folder / file), metadata={"format": "pt"})
        weight_map.update({k: file for k in shard})
    if len(shards) > 1:
        total = sum(t.numel() * t.element_size() for t in state.values())
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1)
        )
    (folder / "config.json").write_text(json.dumps(config_dict, indent=1))
    if with_tokenizer:
        write_tiny_tokenizer(folder, vocabulary_map)
    return folder


def write_tiny_vqgan(
    folder: str | Path,
    *,
    n_embed: int = 64,
    embed_dim: int = 8,
    z_channels: int = 8,
    ch: int = 32,
    ch_mult: tuple[int, ...] = (1, 2),
    num_res_blocks: int = 1,
    seed: int = 0,
) -> Path:
    """Write a random tiny VQGAN in taming layout: ``vqgan.yaml`` + ``vqgan.ckpt`` holding
    ``{"state_dict": ...}`` with the decode path, a stand-in encoder / quant_conv and loss keys."""
    import yaml

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = VQGANConfig(
        embed_dim=embed_dim,
        n_embed=n_embed,
        z_channels=z_channels,
        ch=ch,
        ch_mult=ch_mult,
        num_res_blocks=num_res_blocks,
        resolution=16 * 2 ** (len(ch_mult) - 1),
    )
    with torch.random.fork_rng(devices=[]):  # module initialisers use the global RNG
        torch.manual_seed(seed)
        decoder = ChameleonVQGANDecoder(config)
    generator = torch.Generator().manual_seed(seed)
    state = {k: v.clone() for k, v in decoder.state_dict().items()}
    state["quantize.embedding.weight"] = torch.randn(n_embed, embed_dim, generator=generator)
    state["encoder.conv_in.weight"] = torch.randn(ch, 3, 3, 3, generator=generator)
    state["encoder.conv_in.bias"] = torch.zeros(ch)
    state["quant_conv.weight"] = torch.randn(embed_dim, z_channels, 1, 1, generator=generator)
    state["quant_conv.bias"] = torch.zeros(embed_dim)
    state["loss.discriminator.main.0.weight"] = torch.randn(4, 3, 4, 4, generator=generator)
    torch.save({"state_dict": state, "global_step": 0}, folder / "vqgan.ckpt")
    yaml_data = {
        "model": {
            "target": "taming.models.vqgan.VQModel",
            "params": {
                "embed_dim": embed_dim,
                "n_embed": n_embed,
                "ddconfig": {
                    "double_z": False,
                    "z_channels": z_channels,
                    "resolution": config.resolution,
                    "in_channels": 3,
                    "out_ch": 3,
                    "ch": ch,
                    "ch_mult": list(ch_mult),
                    "num_res_blocks": num_res_blocks,
                    "attn_resolutions": [],
                    "dropout": 0.0,
                },
                "lossconfig": {
                    "target": "taming.modules.losses.vqperceptual.VQLPIPSWithDiscriminator"
                },
            },
        }
    }
    (folder / "vqgan.yaml").write_text(yaml.safe_dump(yaml_data))
    return folder


def write_tiny_clip(folder: str | Path, *, seed: int = 0, image_size: int = 32) -> Path:
    """Write a random tiny CLIP (``CLIPModel`` + ``CLIPProcessor``, ``save_pretrained`` layout) to
    ``folder``: a character-level BPE vocabulary (a..z, word-final forms, unknown characters map
    to <|endoftext|>), 77 text positions as the real CLIP, 2 layers of width 32, projection 16."""
    from transformers import (
        CLIPConfig,
        CLIPImageProcessorPil,
        CLIPModel,
        CLIPProcessor,
        CLIPTokenizer,
    )

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab.update({c: i + 2 for i, c in enumerate(letters)})
    vocab.update({c + "</w>": i + 2 + len(letters) for i, c in enumerate(letters)})
    processor = CLIPProcessor(
        image_processor=CLIPImageProcessorPil(
            size={"shortest_edge": image_size},
            crop_size={"height": image_size, "width": image_size},
        ),
        tokenizer=CLIPTokenizer(vocab=vocab, merges=[], model_max_length=77),
    )
    small = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
    }
    config = CLIPConfig(
        text_config=dict(
            vocab_size=len(vocab),
            max_position_embeddings=77,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
            **small,
        ),
        vision_config=dict(image_size=image_size, patch_size=8, **small),
        projection_dim=16,
    )
    with torch.random.fork_rng(devices=[]):  # transformers' initialisers use the global RNG
        torch.manual_seed(seed)
        model = CLIPModel(config).eval()
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


@dataclass(frozen=True)
class TinyReleaseSet:
    """Folders of a tiny checkpoint set in the release layouts (``write_tiny_release_set``)."""

    weights: Path  # lumina-mgpt-7b-512: config.json, 2 safetensors shards + index, no tokenizer
    tokenizer: Path  # lumina-mgpt-7b-768 next to it: tokenizer.json + tokenizer_config.json only
    vqgan: Path  # vqgan.yaml + vqgan.ckpt (taming layout)
    clip: Path  # CLIPModel + CLIPProcessor save_pretrained


def write_tiny_release_set(root: str | Path, *, seed: int = 0) -> TinyReleaseSet:
    """Write a tiny Lumina-mGPT checkpoint (per-rank q/k-norms: 4 heads, 2 kv heads, 2 ranks;
    2 shards; 64 image codes; ``embedding_spread`` 0.1, so decoding is fast and GSD's distance
    filter keeps some pairs) as ``root/lumina-mgpt-7b-512`` *without* a tokenizer, as the 512
    release ships, with its byte-level tokenizer in ``root/lumina-mgpt-7b-768`` (tokenizer files
    only, where ``hf download Alpha-VLLM/Lumina-mGPT-7B-768 tokenizer.json ...`` puts them: the
    loader finds it there), a matching tiny VQGAN (64 codes, x2 upsampling: a 512 x 512 model
    decodes to 64 x 64 pixels) and a tiny CLIP under ``root`` (about 2 MB, seconds on a CPU).
    The Lumina vocabulary has the size tokens of every resolution up to 1024, so any
    ``lumina-mgpt-7b-*`` name loads it."""
    root = Path(root)
    weights = write_tiny_lumina_checkpoint(
        root / "lumina-mgpt-7b-512",
        num_codes=64,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        model_parallel_size=2,
        intermediate_size=64,
        num_shards=2,
        seed=seed,
        embedding_spread=0.1,
        with_tokenizer=False,
    )
    tokenizer = write_tiny_tokenizer(root / "lumina-mgpt-7b-768", tiny_vocabulary_map(64)).parent
    vqgan = write_tiny_vqgan(root / "chameleon-vqgan", n_embed=64, seed=seed)
    clip = write_tiny_clip(root / "clip", seed=seed)
    return TinyReleaseSet(weights=weights, tokenizer=tokenizer, vqgan=vqgan, clip=clip)
