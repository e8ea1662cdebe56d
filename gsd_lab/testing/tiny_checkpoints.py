"""Tiny random checkpoints in each family's release file layout: Lumina-mGPT (with the Chameleon
VQGAN and a CLIP), Chameleon / Anole, Emu3 and Janus-Pro.

- ``write_tiny_lumina_checkpoint``, ``write_tiny_tokenizer``, ``write_tiny_vqgan``,
  ``write_tiny_clip``, ``write_tiny_release_set``: Lumina-mGPT (``config.json`` with
  ``model_type`` "chameleon", the Lumina extra keys and a Chameleon-named ``vocabulary_map``;
  safetensors shards with an index; q/k-norms per model-parallel rank; no ``model.vqmodel.*``;
  a byte-level BPE ``tokenizer.json`` labelled ``LlamaTokenizerFast`` as the release's), a VQGAN
  in taming layout (``vqgan.yaml``, a Lightning-style ``vqgan.ckpt`` with encoder and loss
  keys) and a CLIP (``save_pretrained`` of model and processor);
- ``save_tiny_anole``, ``save_tiny_emu3``, ``save_tiny_janus``: one builder (``_save_family``)
  fed each family's parts: ``save_pretrained`` of the stock transformers class, a byte-level
  ``tokenizer.json`` over the family's token names and, where the release ships them, generation
  and processor configs. The text models have the
  dimensions of transformers' own test configurations (``TEST_CONFIG_DIMS``).

What they are for (every path that reads released weights, without a download), and how their
vocabularies and weights are built: docs/adapter-contract.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from ..models import janus
from ..models.chameleon_vqgan import ChameleonVQGANDecoder, VQGANConfig

# The text models' dimensions in transformers' own Chameleon and Emu3 test configurations.
TEST_CONFIG_DIMS = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                    "num_key_value_heads": 2, "intermediate_size": 37}
ANOLE_TINY_CODES = 64
CHAMELEON_SPECIALS = {"bos": "<s>", "eos": "</s>", "pad": "<pad>"}  # Lumina-mGPT, Anole
EMU3_SPECIALS = {"pad": "<|endoftext|>", "bos": "<|extra_203|>", "eos": "<|extra_204|>"}
JANUS_SPECIALS = {"bos": janus.BOS_NAME, "eos": janus.EOS_NAME, "pad": janus.PAD_NAME}
# Chameleon's tokenizer_config.json, labelled LlamaTokenizerFast as the release's is.
CHAMELEON_TOKENIZER_CONFIG = {
    "tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
    "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
    "model_max_length": 4096,
}


# ---- shared pieces ----------------------------------------------------------------------------


def _new_folder(folder: str | Path) -> Path:
    """``folder`` as a Path, made with its parents if missing."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _seeded(build: Callable[[], Any], seed: int) -> Any:
    """``build()`` with the global RNG seeded by ``seed`` (transformers' and torch's module
    initialisers draw from it), the caller's RNG state restored afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def _redraw(model: torch.nn.Module, stds: dict[str, float], seed: int) -> None:
    """Parameter ``name`` <- std N(0, 1) for each (name, std) in order, from one generator seeded
    by ``seed`` (in place)."""
    generator = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, std in stds.items():
            param = params[name]
            param.copy_(std * torch.randn(param.shape, generator=generator))


def _numbered(names: list[str]) -> dict[str, int]:
    """{name: id}: the names in order, a repeated one kept at its first id."""
    return {name: i for i, name in enumerate(dict.fromkeys(names))}


def _token_ids(vocabulary_map: dict[str, int], **names: str) -> dict[str, int]:
    """``{ROLE_token_id: id}`` for each ``ROLE=name`` (e.g. bos="<s>"), in the order given."""
    return {f"{role}_token_id": vocabulary_map[name] for role, name in names.items()}


def _byte_alphabet() -> list[str]:
    """The 256 characters of the byte-level alphabet, sorted."""
    from tokenizers.pre_tokenizers import ByteLevel

    return sorted(ByteLevel.alphabet())


def _shuffled(count: int, seed: int) -> list[int]:
    return torch.randperm(count, generator=torch.Generator().manual_seed(seed)).tolist()


def write_byte_tokenizer(
    folder: str | Path,
    vocabulary_map: dict[str, int],
    tokenizer_config: dict[str, Any],
    *,
    merges: list[tuple[str, str]] | None = None,
    unk_token: str | None = None,
    split_digits: bool = False,
    bos: str | None = None,
) -> Path:
    """Write a byte-level BPE ``tokenizer.json`` over ``vocabulary_map`` (the ``<...>`` names as
    special added tokens; ``merges``; digits split one by one before the byte-level step when
    ``split_digits``; a ``bos $A`` post-processor when ``bos`` is named) and
    ``tokenizer_config.json`` holding ``tokenizer_config``; return the tokenizer.json path."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import processors

    folder = _new_folder(folder)
    bpe = models.BPE(vocab=dict(vocabulary_map), merges=merges or [], unk_token=unk_token)
    tok = Tokenizer(bpe)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    digits = pre_tokenizers.Split(Regex(r"\d"), behavior="isolated")
    tok.pre_tokenizer = (
        pre_tokenizers.Sequence([digits, byte_level]) if split_digits else byte_level
    )
    tok.decoder = decoders.ByteLevel()
    specials = [n for n in vocabulary_map if n.startswith("<") and n.endswith(">") and len(n) > 1]
    tok.add_special_tokens([AddedToken(n, special=True, normalized=False) for n in specials])
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, vocabulary_map[bos])]
        )
    tok.save(str(folder / "tokenizer.json"))
    text = json.dumps(tokenizer_config, indent=1, ensure_ascii=False)
    (folder / "tokenizer_config.json").write_text(text)
    return folder / "tokenizer.json"


def _save_family(
    folder: str | Path,
    model_class: Any,
    config: Any,
    stds: dict[str, float],
    seed: int,
    write_tokenizer: Callable[[Path], Any],
    generation_config: Any = None,
) -> Path:
    """The one builder of the transformers-layout families: write ``model_class(config)`` (built
    seeded, eval mode) with the parameters ``stds`` redrawn (``_redraw``) and
    ``generation_config`` (when given) with ``save_pretrained`` to ``folder``, then its tokenizer
    (``write_tokenizer(folder)``); return the folder."""
    folder = _new_folder(folder)
    model = _seeded(lambda: model_class(config).eval(), seed)
    _redraw(model, stds, seed)
    if generation_config is not None:
        model.generation_config = generation_config
    model.save_pretrained(str(folder))
    write_tokenizer(folder)
    return folder


# ---- Lumina-mGPT (Chameleon vocabulary), its VQGAN and a CLIP ---------------------------------

# Words the tiny byte-level BPE merges into one token each (the prompt template's and a few
# caption words), written as byte-level pieces: "Ġ" is the byte-level form of a leading space.
TINY_MERGED_WORDS = (
    "Generate", "Ġan", "Ġimage", "Ġof", "Ġaccording", "Ġto", "Ġthe", "Ġfollowing", "Ġprompt",
    "Ġa", "Ġred", "Ġcat", "Ġdog", "Ġblue", "Ġsky", "Ġon", "Ġwith",
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
    """
    names = ["<s>", "<pad>", "</s>", "<unk>"]
    names += [_image_token_name(c) for c in _shuffled(num_codes, 1234)]
    names += ["<eoss>", "<racm3:break>", "<reserved08706>", "<reserved08799>"]
    names += [f"<reserved{8800 + n:05d}>" for n in range(max_grid + 1)]
    names += ["<image>", *_byte_alphabet()]
    names += [a + b for a, b in _word_merges(TINY_MERGED_WORDS)]
    return _numbered(names)


def write_tiny_tokenizer(folder: str | Path, vocabulary_map: dict[str, int]) -> Path:
    """Write a Chameleon-style byte-level BPE ``tokenizer.json`` over ``vocabulary_map`` (digits
    split one by one, then byte-level pre-tokenisation; merges of ``TINY_MERGED_WORDS``; a
    ``<s> $A`` post-processor) and ``CHAMELEON_TOKENIZER_CONFIG`` as ``tokenizer_config.json``
    (the release's label, which transformers' class reads otherwise: docs/adapter-contract.md)."""
    merges = [m for m in _word_merges(TINY_MERGED_WORDS) if "".join(m) in vocabulary_map]
    return write_byte_tokenizer(
        folder, vocabulary_map, CHAMELEON_TOKENIZER_CONFIG, merges=merges, unk_token="<unk>",
        split_digits=True, bos="<s>",
    )


def write_tiny_lumina_checkpoint(
    folder: str | Path, *, num_codes: int = 64, hidden_size: int = 64, num_layers: int = 2,
    num_heads: int = 4, num_kv_heads: int | None = None, model_parallel_size: int = 1,
    intermediate_size: int = 128, max_position_embeddings: int = 4608, num_shards: int = 2,
    seed: int = 0, init_std: float = 0.5, embedding_spread: float | None = None,
    with_tokenizer: bool = True,
) -> Path:
    """Write a random tiny Lumina-mGPT-layout checkpoint to ``folder`` and return it.

    A stock ``ChameleonForConditionalGeneration``'s weights with q/k-norms per model-parallel
    rank, [model_parallel_size, head_dim], and no ``model.vqmodel.*``; ``init_std``: the std of
    the embedding and head rows; ``embedding_spread`` s: every embedding row one shared random
    vector plus s N(0, 1) (why: docs/adapter-contract.md); ``with_tokenizer=False``: no
    tokenizer, as the 512 and 1024 releases.
    """
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    folder = _new_folder(folder)
    vocabulary_map = tiny_vocabulary_map(num_codes)
    config_dict = {
        "architectures": ["ChameleonXLLMXForConditionalGeneration"], "model_type": "chameleon",
        "vocab_size": len(vocabulary_map), "hidden_size": hidden_size,
        "intermediate_size": intermediate_size, "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads, "num_key_value_heads": num_kv_heads or num_heads,
        "max_position_embeddings": max_position_embeddings, "rope_theta": 10000.0,
        **_token_ids(vocabulary_map, **CHAMELEON_SPECIALS),
        "tie_word_embeddings": False, "model_parallel_size": model_parallel_size,
        "swin_norm": False, "vocabulary_map": vocabulary_map,
        "vq_config": {"embed_dim": 32, "num_embeddings": num_codes, "latent_channels": 32,
                      "base_channels": 32, "channel_multiplier": [1, 2], "resolution": 32},
        # Lumina-mGPT's own keys (kept by the stock config, unused by the stock model).
        "z_loss_weight": 1e-5, "mask_image_logits": False, "dropout": 0.05,
        "torch_dtype": "float32",
    }
    config = ChameleonConfig(
        **{k: v for k, v in config_dict.items() if k not in ("architectures", "model_type")}
    )
    model = _seeded(lambda: ChameleonForConditionalGeneration(config).eval(), seed)
    generator = torch.Generator().manual_seed(seed)
    norm_shape = (model_parallel_size, hidden_size // num_heads)
    state = _lumina_state(model.state_dict(), generator, norm_shape, init_std, embedding_spread)
    _save_shards(state, folder, num_shards)
    (folder / "config.json").write_text(json.dumps(config_dict, indent=1))
    if with_tokenizer:
        write_tiny_tokenizer(folder, vocabulary_map)
    return folder


def _lumina_state(
    stock: dict[str, torch.Tensor],
    generator: torch.Generator,
    norm_shape: tuple[int, int],
    init_std: float,
    embedding_spread: float | None,
) -> dict[str, torch.Tensor]:
    """The stock state dict in the Lumina layout: no ``model.vqmodel.*``; q/k-norm weights and
    biases redrawn as one row per model-parallel rank (``norm_shape``); embedding and head rows
    redrawn with std ``init_std`` (or the embedding as a shared row plus ``embedding_spread``
    noise)."""
    state = {}
    for name, tensor in stock.items():
        if name.startswith("model.vqmodel."):
            continue
        if ".q_norm." in name or ".k_norm." in name:
            # One (weight, bias) row per model-parallel rank, as Lumina-mGPT stores it.
            base = 1.0 if name.endswith("weight") else 0.0
            tensor = base + 0.3 * torch.randn(*norm_shape, generator=generator)
        elif name == "model.embed_tokens.weight" and embedding_spread is not None:
            shared = torch.randn(1, tensor.shape[1], generator=generator)
            tensor = shared + embedding_spread * torch.randn(tensor.shape, generator=generator)
        elif name in ("model.embed_tokens.weight", "lm_head.weight"):
            tensor = init_std * torch.randn(tensor.shape, generator=generator)
        state[name] = tensor.contiguous().clone()
    return state


def _save_shards(state: dict[str, torch.Tensor], folder: Path, num_shards: int) -> None:
    """``state`` as ``num_shards`` safetensors files (names interleaved in sorted order) with
    the index file, or one ``model.safetensors``."""
    from safetensors.torch import save_file

    names = sorted(state)
    shards = [names[i::num_shards] for i in range(num_shards)] if num_shards > 1 else [names]
    weight_map = {}
    for index, shard in enumerate(shards):
        file = f"model-{index + 1:05d}-of-{len(shards):05d}.safetensors"
        file = file if len(shards) > 1 else "model.safetensors"
        save_file({k: state[k] for k in shard}, str(folder / file), metadata={"format": "pt"})
        weight_map.update({k: file for k in shard})
    if len(shards) > 1:
        total = sum(t.numel() * t.element_size() for t in state.values())
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1)
        )


def write_tiny_vqgan(
    folder: str | Path, *, n_embed: int = 64, embed_dim: int = 8, z_channels: int = 8,
    ch: int = 32, ch_mult: tuple[int, ...] = (1, 2), num_res_blocks: int = 1, seed: int = 0,
) -> Path:
    """Write a random tiny VQGAN in taming layout: ``vqgan.yaml`` + ``vqgan.ckpt`` holding
    ``{"state_dict": ...}`` with the decode path, a stand-in encoder / quant_conv and loss keys."""
    import yaml

    folder = _new_folder(folder)
    config = VQGANConfig(
        embed_dim=embed_dim, n_embed=n_embed, z_channels=z_channels, ch=ch, ch_mult=ch_mult,
        num_res_blocks=num_res_blocks, resolution=16 * 2 ** (len(ch_mult) - 1),
    )
    decoder = _seeded(lambda: ChameleonVQGANDecoder(config), seed)
    generator = torch.Generator().manual_seed(seed)
    state = {k: v.clone() for k, v in decoder.state_dict().items()}
    state["quantize.embedding.weight"] = torch.randn(n_embed, embed_dim, generator=generator)
    state["encoder.conv_in.weight"] = torch.randn(ch, 3, 3, 3, generator=generator)
    state["encoder.conv_in.bias"] = torch.zeros(ch)
    state["quant_conv.weight"] = torch.randn(embed_dim, z_channels, 1, 1, generator=generator)
    state["quant_conv.bias"] = torch.zeros(embed_dim)
    state["loss.discriminator.main.0.weight"] = torch.randn(4, 3, 4, 4, generator=generator)
    torch.save({"state_dict": state, "global_step": 0}, folder / "vqgan.ckpt")
    ddconfig = {
        "double_z": False, "z_channels": z_channels, "resolution": config.resolution,
        "in_channels": 3, "out_ch": 3, "ch": ch, "ch_mult": list(ch_mult),
        "num_res_blocks": num_res_blocks, "attn_resolutions": [], "dropout": 0.0,
    }
    loss = {"target": "taming.modules.losses.vqperceptual.VQLPIPSWithDiscriminator"}
    params = {"embed_dim": embed_dim, "n_embed": n_embed, "ddconfig": ddconfig,
              "lossconfig": loss}
    yaml_data = {"model": {"target": "taming.models.vqgan.VQModel", "params": params}}
    (folder / "vqgan.yaml").write_text(yaml.safe_dump(yaml_data))
    return folder


def write_tiny_clip(folder: str | Path, *, seed: int = 0, image_size: int = 32) -> Path:
    """Write a random tiny CLIP (``CLIPModel`` + ``CLIPProcessor``, ``save_pretrained`` layout) to
    ``folder``: a character-level BPE vocabulary (a..z, word-final forms, unknown characters map
    to <|endoftext|>), 77 text positions as the real CLIP, 2 layers of width 32, projection 16."""
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel, CLIPProcessor
    from transformers import CLIPTokenizer

    folder = _new_folder(folder)
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
    small = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 2}
    text = dict(vocab_size=len(vocab), max_position_embeddings=77, bos_token_id=0,
                eos_token_id=1, pad_token_id=1, **small)
    vision = dict(image_size=image_size, patch_size=8, **small)
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)
    model = _seeded(lambda: CLIPModel(config).eval(), seed)
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
    decodes to 64 x 64 pixels) and a tiny CLIP under ``root``.
    The Lumina vocabulary has the size tokens of every resolution up to 1024, so any
    ``lumina-mgpt-7b-*`` name loads it."""
    root = Path(root)
    weights = write_tiny_lumina_checkpoint(
        root / "lumina-mgpt-7b-512", num_codes=64, hidden_size=32, num_layers=2, num_heads=4,
        num_kv_heads=2, model_parallel_size=2, intermediate_size=64, num_shards=2, seed=seed,
        embedding_spread=0.1, with_tokenizer=False,
    )
    tokenizer = write_tiny_tokenizer(root / "lumina-mgpt-7b-768", tiny_vocabulary_map(64)).parent
    vqgan = write_tiny_vqgan(root / "chameleon-vqgan", n_embed=64, seed=seed)
    clip = write_tiny_clip(root / "clip", seed=seed)
    return TinyReleaseSet(weights=weights, tokenizer=tokenizer, vqgan=vqgan, clip=clip)


# ---- Chameleon / Anole, Emu3 and Janus-Pro: _save_family fed each family's parts -------------


def save_tiny_anole(
    folder: str | Path, *, num_codes: int = ANOLE_TINY_CODES, seed: int = 0,
    init_std: float = 0.5, with_vqgan: bool = True,
) -> Path:
    """Write a tiny random Chameleon / Anole checkpoint to ``folder`` and return it.

    ``folder``: ``ChameleonForConditionalGeneration.save_pretrained`` (config.json with
    architectures ["ChameleonForConditionalGeneration"], q/k-norms as [heads, head_dim], the image
    encoder ``model.vqmodel.*`` included, as in the transformers-layout Anole conversion), the
    Chameleon-named vocabulary of ``tiny_vocabulary_map`` (``num_codes`` shuffled ``IMGIMG...``
    codes) and its ``tokenizer.json``; vq_config resolution 16, so an image is 8 x 8 codes
    (``anole.vq_latent_side``; the release's 512 gives 32 x 32). ``with_vqgan``: a matching tiny
    Chameleon VQGAN (``num_codes`` codes, x2 upsampling) in ``folder/tokenizer`` (vqgan.yaml +
    vqgan.ckpt, where Meta's and GAIR's releases keep it)."""
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    vocabulary_map = tiny_vocabulary_map(num_codes)
    vq_config = {  # resolution 16: images of 8 x 8 codes (vq_latent_side), 64 image tokens
        "embed_dim": 5, "num_embeddings": num_codes, "latent_channels": 5, "in_channels": 3,
        "base_channels": 32, "channel_multiplier": [1, 2], "resolution": 16,
    }
    config = ChameleonConfig(
        vocab_size=len(vocabulary_map), **TEST_CONFIG_DIMS, max_position_embeddings=2048,
        **_token_ids(vocabulary_map, **CHAMELEON_SPECIALS), vocabulary_map=vocabulary_map,
        vq_config=vq_config,
    )
    stds = dict.fromkeys(("model.embed_tokens.weight", "lm_head.weight"), init_std)
    folder = _save_family(
        folder, ChameleonForConditionalGeneration, config, stds, seed,
        lambda f: write_tiny_tokenizer(f, vocabulary_map),
    )
    if with_vqgan:
        write_tiny_vqgan(folder / "tokenizer", n_embed=num_codes, seed=seed)
    return folder


def _emu3_vocabulary(num_codes: int) -> dict[str, int]:
    """Emu3's token names at small scale: <|endoftext|> (pad), <|extra_203|> (BOS),
    <|extra_204|> (EOS), the image tokens, <|extra_200|> (end of line), <|extra_201|> (end of
    frame), <image>; ``num_codes`` visual tokens in shuffled id order; the byte alphabet."""
    names = list(EMU3_SPECIALS.values())
    names += ["<|image start|>", "<|image end|>", "<|image token|>"]
    names += ["<|extra_200|>", "<|extra_201|>", "<image>"]
    names += [f"<|visual token{c:06d}|>" for c in _shuffled(num_codes, 4321)]
    return _numbered(names + _byte_alphabet())


def save_tiny_emu3(
    folder: str | Path, *, num_codes: int = 20, image_area: int = 256, seed: int = 0,
    init_std: float = 0.5,
) -> Path:
    """Write a tiny random Emu3 checkpoint to ``folder`` and return it.

    ``Emu3ForConditionalGeneration.save_pretrained`` (text model, head and VQ-VAE with its
    decoder; codebook ``num_codes``, spatial factor 4), ``generation_config.json`` (guidance 3.0,
    top-k 4, temperature 1.0), ``preprocessor_config.json`` (the stock ``Emu3ImageProcessor``),
    ``tokenizer.json`` over Emu3's token names, and ``processor_config.json`` setting
    ``image_area`` (the default 256 pixels gives 4 x 4 latent codes, 20 image tokens: a fast
    image; the release's processor uses its default 518400)."""
    from transformers import Emu3Config, Emu3ForConditionalGeneration, Emu3ImageProcessor
    from transformers import Emu3TextConfig, GenerationConfig

    vocabulary_map = _emu3_vocabulary(num_codes)
    specials = _token_ids(vocabulary_map, **EMU3_SPECIALS)
    text_config = Emu3TextConfig(
        vocab_size=len(vocabulary_map), **TEST_CONFIG_DIMS, max_position_embeddings=512,
        **specials,
    )
    vq_config = {"codebook_size": num_codes, "temporal_downsample_factor": 1,
                 "base_channels": 32, "channel_multiplier": [1, 2, 1], "hidden_size": 32,
                 "attn_resolutions": []}
    config = Emu3Config(text_config=text_config, vq_config=vq_config, vocabulary_map=vocabulary_map)
    stds = dict.fromkeys(("model.text_model.embed_tokens.weight", "lm_head.weight"), init_std)
    tokenizer_config = {"tokenizer_class": "GPT2TokenizerFast"}
    tokenizer_config.update({f"{r}_token": EMU3_SPECIALS[r] for r in ("bos", "eos", "pad")})
    folder = _save_family(
        folder, Emu3ForConditionalGeneration, config, stds, seed,
        lambda f: write_byte_tokenizer(f, vocabulary_map, tokenizer_config),
    )
    GenerationConfig(
        **specials, do_sample=True, guidance_scale=3.0, top_k=4, temperature=1.0
    ).save_pretrained(folder)
    Emu3ImageProcessor().save_pretrained(folder)
    (folder / "processor_config.json").write_text(json.dumps({"image_area": image_area}))
    return folder


def tiny_janus_vocabulary() -> dict[str, int]:
    """Text vocabulary of the tiny checkpoints: Janus-Pro's special-token names (ids 0..5), <unk>,
    then the 256 characters of the byte-level alphabet."""
    names = [janus.BOS_NAME, janus.EOS_NAME, janus.PAD_NAME, janus.BOI_NAME, janus.EOI_NAME]
    return _numbered(names + [janus.IMAGE_PLACEHOLDER_NAME, "<unk>"] + _byte_alphabet())


def tiny_janus_config(*, num_codes: int = 64, grid: int = 4) -> Any:
    """The tiny ``JanusConfig`` of ``save_tiny_janus`` (its docstring), over
    ``tiny_janus_vocabulary()``."""
    from transformers import JanusConfig

    vocab = tiny_janus_vocabulary()
    hidden, patch = 32, 5
    specials = _token_ids(vocab, pad=janus.PAD_NAME, bos=janus.BOS_NAME, eos=janus.EOS_NAME)
    text_config = {
        "model_type": "llama", "vocab_size": len(vocab), "hidden_size": hidden,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37,
        "hidden_act": "gelu", "max_position_embeddings": 512, **specials,
    }
    vision_config = {
        "image_size": grid * patch, "patch_size": patch, "num_image_tokens": grid * grid,
        "hidden_size": hidden, "projection_dim": hidden, "num_hidden_layers": 2,
        "num_attention_heads": 4, "mlp_ratio": 2,
    }
    vq_config = {
        "embed_dim": 12, "num_embeddings": num_codes, "latent_channels": 12, "base_channels": 32,
        "channel_multiplier": [1, 1], "projection_dim": hidden, "image_token_embed_dim": hidden,
    }
    return JanusConfig(
        text_config=text_config, vision_config=vision_config, vq_config=vq_config,
        image_token_id=vocab[janus.IMAGE_PLACEHOLDER_NAME],
    )


def save_tiny_janus(
    folder: str | Path, *, num_codes: int = 64, grid: int = 4, seed: int = 0,
    head_std: float = 0.5, generation: dict[str, Any] | None = None,
) -> Path:
    """Write a random tiny Janus checkpoint in the release layout to ``folder`` and return it:
    ``config.json`` + ``model.safetensors`` (``save_pretrained`` of a stock
    ``JanusForConditionalGeneration``), ``generation_config.json`` (BOS, pad, BOI ids, guidance
    scale 5 as the release) and a byte-level ``tokenizer.json`` with Janus-Pro's special-token
    names.

    ``tiny_janus_config``: transformers' own test configuration made to generate images
    (docs/adapter-contract.md); ``head_std``: the generation head's output weights redrawn
    N(0, head_std^2); ``generation``: extra generation-config fields (e.g. top_k)."""
    from transformers import GenerationConfig, JanusForConditionalGeneration

    vocab = tiny_janus_vocabulary()
    stds = {"model.generation_head.vision_head.weight": head_std,
            "model.generation_embeddings.weight": 1.0}
    generation_config = GenerationConfig(
        **_token_ids(vocab, **JANUS_SPECIALS), guidance_scale=janus.STOCK_GUIDANCE_SCALE,
        generation_kwargs={"boi_token_id": vocab[janus.BOI_NAME]}, **(generation or {}),
    )
    tokenizer_config = {"tokenizer_class": "LlamaTokenizerFast", "bos_token": janus.BOS_NAME,
                        "pad_token": janus.PAD_NAME}
    return _save_family(
        folder, JanusForConditionalGeneration, tiny_janus_config(num_codes=num_codes, grid=grid),
        stds, seed, lambda f: write_byte_tokenizer(f, vocab, tokenizer_config, unk_token="<unk>"),
        generation_config,
    )
