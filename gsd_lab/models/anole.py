"""Chameleon / Anole (``ChameleonForConditionalGeneration``, stock ``transformers``) text-to-image
as a decoding adapter.

Anole (GAIR, ``GAIR/Anole-7b-v0.1``; a transformers-layout conversion is ``leloy/Anole-7b-v0.1-hf``)
is Chameleon 7B fine-tuned to emit image tokens; Meta's Chameleon release has the same
architecture and vocabulary but was not trained to (its image-output head is suppressed), so only
Anole weights make images worth looking at. Both load here the same way.

Quirks of the family (what this adapter does differently from the stock model):
docs/family-chameleon.md, section 3.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .adapter import cache_kwarg
from .grid_image import GridImageAdapter, GridLayout, code_table, vocabulary_id
from .loading import device_and_dtype, find_checkpoint, refuse_large_on_cpu, tokenizer_file
from .lumina_mgpt import LuminaMGPTAdapter

HF_REPO = "leloy/Anole-7b-v0.1-hf"
BOS_NAME = "<s>"
EOS_NAME = "</s>"
IMAGE_START_NAME = "<racm3:break>"
IMAGE_END_NAME = "<eoss>"
DEFAULT_CFG_SCALE = 3.0
DEFAULT_TOP_K = 2000
DEFAULT_TEMPERATURE = 1.0


def chameleon_code_table(vocabulary_map: dict[str, int], vocab_size: int) -> Tensor:
    """int64 [vocab_size]: the VQ index of each ``IMGIMG...`` id (stock
    ``ChameleonImageVocabularyMapping.bpe2img``, read from the names), -1 elsewhere."""
    from transformers.models.chameleon.modeling_chameleon import ChameleonImageVocabularyMapping

    mapping = ChameleonImageVocabularyMapping(vocabulary_map)
    return code_table(mapping.bpe2img, vocab_size, "names starting with IMGIMG")


def vq_latent_side(config: Any) -> int:
    """Codes per side of an image as the checkpoint's ``ChameleonVQVAE`` encodes it: vq_config
    resolution / 2^(len(channel_multiplier) - 1) (32 for Chameleon 7B and Anole)."""
    vq = config.vq_config
    factor = 2 ** (len(vq.channel_multiplier) - 1)
    if vq.resolution % factor:
        raise ValueError(
            f"vq_config resolution {vq.resolution} is not a multiple of its downsampling {factor}"
        )
    return vq.resolution // factor


class AnoleAdapter(GridImageAdapter):
    """Chameleon / Anole text-to-image (module docstring: logits from the backbone and
    ``lm_head``, image codes only, <eoss> and </s> forced after the last code, one-scale CFG
    with the unconditional prompt <s> <racm3:break>, top-k, temperature).

    model: ``ChameleonForConditionalGeneration`` (its ``vqmodel`` may be None). tokenizer: an
    object with ``encode(text, add_special_tokens=False) -> list[int]`` (``PromptTokenizer``), or
    None (then ``text_ids_to_prompt`` only). vqgan: a ``ChameleonVQGANDecoder`` or None."""

    def __init__(
        self,
        model: Any,
        *,
        latent_side: int | None = None,
        tokenizer: Any = None,
        vqgan: Any = None,
        cfg_scale: float | None = DEFAULT_CFG_SCALE,
        top_k: int | None = DEFAULT_TOP_K,
        temperature: float = DEFAULT_TEMPERATURE,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        config = model.config
        vocab = dict(config.vocabulary_map or {})
        table = chameleon_code_table(vocab, int(config.vocab_size))
        self.bos, self.image_start, image_end, eos = (
            vocabulary_id(vocab, name, "Chameleon")
            for name in (BOS_NAME, IMAGE_START_NAME, IMAGE_END_NAME, EOS_NAME)
        )
        latent_side = latent_side if latent_side is not None else vq_latent_side(config)
        layout = GridLayout(latent_side, latent_side, row_end=None, tail=(image_end, eos))
        super().__init__(
            model,
            layout,
            table,
            tokenizer=tokenizer,
            cfg_scale=cfg_scale,
            top_k=top_k,
            temperature=temperature,
            compute_dtype=compute_dtype,
        )
        self.vqgan = None
        if vqgan is not None:
            self.attach_vqgan(vqgan)
        self._backbone_cache_kwarg = cache_kwarg(model.model)

    def image_header(self) -> list[int]:
        """<racm3:break> (the image start): a prompt is <s> + text + <racm3:break>."""
        return [self.image_start]

    def unconditional_prompt_ids(self) -> Tensor:
        """The CFG row's prompt: <s> <racm3:break> (the text dropped)."""
        return self.text_ids_to_prompt([])

    # The backbone and lm_head, bypassing the stock forward's image-logit mask, and the Chameleon
    # VQGAN: the very methods of Lumina-mGPT, which shares Chameleon's layout (they read model,
    # cache, _backbone_cache_kwarg and code_of_token, all set here as there).
    compute_logits = LuminaMGPTAdapter.compute_logits
    attach_vqgan = LuminaMGPTAdapter.attach_vqgan


def load_anole(
    weights: str | Path | None,
    *,
    vqgan_dir: str | Path | None = None,
    latent_side: int | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    force_cpu: bool = False,
    cfg_scale: float | None = DEFAULT_CFG_SCALE,
    top_k: int | None = DEFAULT_TOP_K,
    temperature: float = DEFAULT_TEMPERATURE,
    tokenizer: str | Path | None = None,
) -> AnoleAdapter:
    """Load a Chameleon-layout checkpoint in the stock transformers layout (``config.json`` with
    ``model_type`` "chameleon" and a ``vocabulary_map``, safetensors, ``tokenizer.json``) as an
    ``AnoleAdapter``; the image encoder ``model.vqmodel.*`` is not loaded. Strict: every text
    tensor must match the config's architecture (``lumina_checkpoint.build_lumina_model``;
    q/k-norms in transformers' [heads, head_dim] layout when ``architectures`` names a stock
    class).

    device: default cuda when available; dtype: default bfloat16 on GPU, float32 on CPU; models
    above 1e9 parameters are refused on the CPU unless ``force_cpu``. ``vqgan_dir``: the Chameleon
    VQGAN (optional; needed for pixels). ``tokenizer``: a folder or file (default the checkpoint's
    ``tokenizer.json``). latent_side: None reads it from the config (``vq_latent_side``).
    weights: the folder, or None for the Hugging Face cache (``loading.find_checkpoint``)."""
    from .lumina_checkpoint import (
        build_lumina_model,
        estimated_parameters,
        read_lumina_config,
        read_lumina_state_dict,
    )
    from .lumina_mgpt import CPU_PARAMETER_LIMIT
    from .lumina_tokenizer import PromptTokenizer

    folder = find_checkpoint(weights, HF_REPO, "Anole")
    prompt_tokenizer = PromptTokenizer(tokenizer_file(folder, tokenizer))
    config = read_lumina_config(folder)
    device, dtype = device_and_dtype(device, dtype)
    refuse_large_on_cpu(
        folder, device, lambda: estimated_parameters(config), CPU_PARAMETER_LIMIT, force_cpu
    )
    state = read_lumina_state_dict(folder, config, device=device, dtype=dtype)
    model = build_lumina_model(config, state, device=device)
    del state
    vqgan = None
    if vqgan_dir is not None:
        from .chameleon_vqgan import load_chameleon_vqgan

        vqgan = load_chameleon_vqgan(vqgan_dir, device=device)
    return AnoleAdapter(
        model,
        latent_side=latent_side,
        tokenizer=prompt_tokenizer,
        vqgan=vqgan,
        cfg_scale=cfg_scale,
        top_k=top_k,
        temperature=temperature,
    )
