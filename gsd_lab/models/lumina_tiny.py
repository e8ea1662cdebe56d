"""Tiny randomly initialised Lumina-mGPT checkpoints in the real file layout, for tests and the
CPU mode of ``benchmarks/gpu_lumina_shapes.py``.

A tiny checkpoint folder holds what a released Lumina-mGPT folder holds: ``config.json``
(``model_type`` "chameleon", the Lumina extra keys, a ``vocabulary_map`` whose names follow
Chameleon's: ``<s>``, ``<reservedNNNNN>``, ``<racm3:break>``, ``<eoss>``, ``IMGIMG...Z``),
safetensors shards with an index, q/k-norm weights stored per model-parallel rank
([model_parallel_size, head_dim]), no ``model.vqmodel.*`` keys, and a tokenizer. A tiny VQGAN
folder holds ``vqgan.yaml`` and a Lightning-style ``vqgan.ckpt`` (``{"state_dict": ...}``,
encoder and loss keys included, as in the real file).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .chameleon_vqgan import ChameleonVQGANDecoder, VQGANConfig

TINY_TEXT_WORDS = (
    "generate",
    "an",
    "image",
    "of",
    "according",
    "to",
    "the",
    "following",
    "prompt",
    "a",
    "red",
    "cat",
    "dog",
    "blue",
    "sky",
    "on",
    "with",
)


def _image_token_name(code: int) -> str:
    """Chameleon's name for VQ code ``code``: IMGIMG + the digits written as letters A..J + Z."""
    return "IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(code)) + "Z"


def tiny_vocabulary_map(num_codes: int, *, max_grid: int = 32) -> dict[str, int]:
    """A scaled-down Chameleon vocabulary with the same names (and, where they fit, the same roles).

    Ids: 0 <s>, 1 <pad>, 2 </s>, 3 <unk>; 4 .. 4+num_codes-1 the image codes; then <eoss> (image
    end), <racm3:break> (image start), <reserved08706> (end of turn), <reserved08799> (row end),
    <reserved08800+n> for grid sizes n = 0..max_grid, <image>, then text words (lower case,
    with and without the sentencepiece-style prefix) and a few reserved fillers.
    The image codes are assigned to ids in a *shuffled* order so that a mapping by offset
    (id - 4) would be wrong: only the name-based map gives the right VQ index.
    """
    names = ["<s>", "<pad>", "</s>", "<unk>"]
    generator = torch.Generator().manual_seed(1234)
    codes = torch.randperm(num_codes, generator=generator).tolist()
    names += [_image_token_name(c) for c in codes]
    names += ["<eoss>", "<racm3:break>", "<reserved08706>", "<reserved08799>"]
    names += [f"<reserved{8800 + n:05d}>" for n in range(max_grid + 1)]
    names += ["<image>", "\n", ":", "x", *[str(d) for d in range(10)]]
    names += list(TINY_TEXT_WORDS)
    return {name: i for i, name in enumerate(names)}


def _tiny_tokenizer(vocabulary_map: dict[str, int]):
    """A lower-casing word-level fast tokenizer over ``vocabulary_map`` (splits on spaces, digits
    and punctuation), saved with ``save_pretrained`` so that ``AutoTokenizer`` loads it."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab=dict(vocabulary_map), unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r" +"), behavior="removed"),
            pre_tokenizers.Split(Regex(r"\n"), behavior="isolated"),
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.Punctuation(),
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )


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
) -> Path:
    """Write a random tiny Lumina-mGPT-layout checkpoint to ``folder`` and return it.

    The weights are those of a stock ``ChameleonForConditionalGeneration`` with q/k-norm weights
    and biases randomised per *model-parallel rank* and saved as [model_parallel_size, head_dim]
    (the Lumina layout); ``model.vqmodel.*`` is not saved. ``init_std`` sets the std of the
    embedding / lm_head rows so the tiny model has peaked, non-uniform distributions.
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
    _tiny_tokenizer(vocabulary_map).save_pretrained(str(folder))
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
