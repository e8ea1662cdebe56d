"""Janus / Janus-Pro (DeepSeek) text-to-image on stock ``transformers`` classes, as a decoding
adapter (``JanusAdapter``), its loader (``load_janus``) and the released sizes
(``release_config``; tiny checkpoints: ``gsd_lab.testing.tiny_checkpoints.save_tiny_janus``).

Weights: the transformers conversions ``deepseek-community/Janus-Pro-1B`` and
``deepseek-community/Janus-Pro-7B`` (``config.json`` with ``model_type`` "janus",
``generation_config.json``, safetensors, ``tokenizer.json``), loaded by
``JanusForConditionalGeneration.from_pretrained``. DeepSeek's own repos
(``deepseek-ai/Janus-Pro-*``, ``model_type`` "multi_modality") need DeepSeek's code and are
refused with a message naming the conversion.

How stock ``JanusForConditionalGeneration`` generates, what this adapter does instead, and its
KV cache: docs/family-janus.md, "The adapter's quirks".
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .adapter import CausalLMAdapter, cache_kwarg
from .loading import device_and_dtype, find_checkpoint, refuse_large_on_cpu, tokenizer_file
from .lumina_tokenizer import PromptTokenizer

JANUS_REPOS = {
    "janus-pro-1b": "deepseek-community/Janus-Pro-1B",
    "janus-pro-7b": "deepseek-community/Janus-Pro-7B",
}
SFT_TEMPLATE = "<|User|>: {prompt}\n\n<|Assistant|>:"
STOCK_GUIDANCE_SCALE = 5.0  # JanusForConditionalGeneration.generate's default
TRANSFORMERS_TOP_K = 50  # GenerationConfig's default top-k, applied by generate when sampling
CPU_PARAMETER_LIMIT = 3_000_000_000  # above this, loading on CPU needs force_cpu=True

# Janus-Pro's special-token names (its tokenizer's; the tiny checkpoints use them too).
BOS_NAME = "<｜begin▁of▁sentence｜>"
EOS_NAME = "<｜end▁of▁sentence｜>"
PAD_NAME = "<｜▁pad▁｜>"
BOI_NAME = "<begin_of_image>"
EOI_NAME = "<end_of_image>"
IMAGE_PLACEHOLDER_NAME = "<image_placeholder>"


def stock_sampling(generation_config: Any) -> dict[str, Any]:
    """(cfg_scale, temperature, top_k) that stock ``generate(generation_mode="image",
    do_sample=True)`` uses with this generation config (module docstring): guidance_scale or 5,
    temperature or 1, top_k or transformers' default 50 (0: none). Raises ``ValueError`` for
    processing the adapter does not reproduce (top-p < 1, min-p, typical-p < 1, a repetition
    penalty != 1)."""
    get = lambda name: getattr(generation_config, name, None)  # noqa: E731
    unsupported = {
        "top_p": get("top_p") not in (None, 1.0),
        "min_p": get("min_p") is not None,
        "typical_p": get("typical_p") not in (None, 1.0),
        "repetition_penalty": get("repetition_penalty") not in (None, 1.0),
    }
    named = [f"{k}={get(k)!r}" for k, bad in unsupported.items() if bad]
    if named:
        raise ValueError(
            "the generation config asks for processing the Janus adapter does not reproduce: "
            + ", ".join(named)
        )
    scale = get("guidance_scale")
    top_k = get("top_k")
    top_k = TRANSFORMERS_TOP_K if top_k is None else int(top_k)
    return {
        "cfg_scale": float(STOCK_GUIDANCE_SCALE if scale is None else scale),
        "temperature": float(get("temperature") or 1.0),
        "top_k": top_k if top_k > 0 else None,
    }


def special_ids(generation_config: Any) -> tuple[int, int, int]:
    """(bos, pad, boi) ids from the generation config (``generation_kwargs["boi_token_id"]``, as
    the stock ``generate`` reads it); ``ValueError`` naming a missing one."""
    kwargs = getattr(generation_config, "generation_kwargs", None) or {}
    found = {
        "bos_token_id": getattr(generation_config, "bos_token_id", None),
        "pad_token_id": getattr(generation_config, "pad_token_id", None),
        "generation_kwargs.boi_token_id": kwargs.get("boi_token_id"),
    }
    missing = [k for k, v in found.items() if v is None]
    if missing:
        raise ValueError(f"the Janus generation config lacks {missing} (generation_config.json)")
    bos, pad, boi = (int(v) for v in found.values())
    return bos, pad, boi


class JanusAdapter(CausalLMAdapter):
    """``CausalLMAdapter`` for Janus / Janus-Pro text-to-image (the module docstring's quirks):
    V = K codes, all allowed, nothing forced; logits ``generation_head(h)`` [B, R, K];
    ``embeddings`` [K, D]: the aligned generation embeddings the language model reads (GSD's
    distance filter); ``code_content()`` [K, embed_dim]: the L2-normalised VQ codebook rows;
    ``decode_images`` -> uint8 [B, H, W, 3].

    model: a ``JanusForConditionalGeneration`` in eval mode. bos / pad / boi: the special ids
    (``special_ids(model.generation_config)`` when None). cfg_scale None: no guidance (the
    conditional row alone). tokenizer: a ``PromptTokenizer`` for ``prompt_ids(text)``.
    """

    def __init__(
        self,
        model: Any,
        *,
        cfg_scale: float | None = STOCK_GUIDANCE_SCALE,
        temperature: float = 1.0,
        top_k: int | None = TRANSFORMERS_TOP_K,
        bos_token_id: int | None = None,
        pad_token_id: int | None = None,
        boi_token_id: int | None = None,
        tokenizer: Any = None,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        if type(model).__name__ != "JanusForConditionalGeneration":
            raise ValueError(
                f"JanusAdapter needs a JanusForConditionalGeneration, got {type(model).__name__}"
            )
        num_image_tokens = int(model.model.vision_model.config.num_image_tokens)
        side = math.isqrt(num_image_tokens)
        grid = [int(d) for d in model.model.vqmodel.quantize.quant_state_dims]
        if side * side != num_image_tokens or grid != [side, side]:
            raise ValueError(
                f"vision_config.num_image_tokens={num_image_tokens} is not the VQ decoder's grid "
                f"{grid[0]} x {grid[1]} (vision image_size / patch_size): images cannot decode"
            )
        if cfg_scale is not None and not cfg_scale > 1:
            raise ValueError(
                f"cfg_scale must be > 1 (the stock guidance processor's range) or None, got "
                f"{cfg_scale!r}"
            )
        ids = (bos_token_id, pad_token_id, boi_token_id)
        if any(i is None for i in ids):
            found = special_ids(model.generation_config)
            ids = tuple(f if i is None else int(i) for i, f in zip(ids, found))
        self.bos_token_id, self.pad_token_id, self.boi_token_id = ids
        super().__init__(
            model,
            None,
            temperature=temperature,
            top_k=top_k,
            cfg_scale=cfg_scale,
            row_length=side,
            compute_dtype=compute_dtype,
        )
        self.num_image_tokens = num_image_tokens
        self.tokenizer = tokenizer
        self.row_prompt_lengths: Tensor | None = None  # set by BatchRunner around a forward
        self._embeddings: Tensor | None = None
        # compute_logits calls the language model directly: its own cache keyword.
        self._language_cache_kwarg = cache_kwarg(model.model.language_model)

    @staticmethod
    def _infer_vocab_size(model: Any) -> int:
        """V = the VQ codebook size K (generated tokens are VQ indices)."""
        return int(model.config.vq_config.num_embeddings)

    def set_compute_dtype(self, dtype: torch.dtype) -> None:
        super().set_compute_dtype(dtype)
        self._embeddings = None

    def require_transformers_cache(self, runner: str) -> None:
        """The eager ``BatchRunner`` is supported; the static-cache runners build inputs the
        Janus forward (two embedding tables by position) does not take: ``ValueError``."""
        if "static" in runner.lower():
            raise ValueError(
                f"{runner}: Janus runs on the eager runners only (its windows mix text and "
                "image-code embeddings); use runner='eager'"
            )
        super().require_transformers_cache(runner)

    # ---- prompts ----

    def unconditional_prompt_ids(self, prompt_ids: Any) -> Tensor:
        """The stock unconditional row: ``prompt_ids`` [P] with every id other than BOS and
        BOI replaced by the pad id (same length P)."""
        prompt = torch.as_tensor(prompt_ids).long()
        keep = (prompt == self.bos_token_id) | (prompt == self.boi_token_id)
        return torch.where(keep, prompt, torch.full_like(prompt, self.pad_token_id))

    def prompt_ids(self, prompt: str) -> Tensor:
        """<BOS> + tokens of ``SFT_TEMPLATE`` around ``prompt`` + <BOI> (1-D int64)."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("prompt must be a non-empty string")
        if self.tokenizer is None:
            raise ValueError(
                "no tokenizer: load with load_janus (the checkpoint's tokenizer.json), or pass "
                "token ids to start()"
            )
        text = self.tokenizer.encode(SFT_TEMPLATE.format(prompt=prompt), add_special_tokens=False)
        return torch.tensor([self.bos_token_id, *text, self.boi_token_id], dtype=torch.long)

    def start(self, prompt_ids: Any, uncond_prompt_ids: Any = None) -> None:
        """As ``CausalLMAdapter.start``; with CFG the unconditional prompt defaults to
        ``unconditional_prompt_ids(prompt_ids)``. The prompt must end with <BOI>."""
        prompt = self._check_prompt(prompt_ids, "prompt_ids")
        if int(prompt[-1]) != self.boi_token_id:
            raise ValueError(
                f"a Janus image prompt ends with <begin_of_image> (id {self.boi_token_id}), "
                f"got last id {int(prompt[-1])}"
            )
        if self.uses_cfg and uncond_prompt_ids is None:
            uncond_prompt_ids = self.unconditional_prompt_ids(prompt)
        super().start(prompt, uncond_prompt_ids)

    # ---- logits ----

    def _prompt_lengths(self, rows: int) -> Tensor:
        """Real prompt length of each model row [B] (the batched runner's, else this sequence's:
        both CFG rows have the prompt's length when unpadded)."""
        if self.row_prompt_lengths is not None:
            return self.row_prompt_lengths.to(self.device)
        real = self._prompt_mask.sum(1).to(self.device)
        return real[:rows]

    def input_embeddings(self, input_ids: Tensor, position_ids: Tensor) -> Tensor:
        """[B, W, D]: column j of row b is a text token when its position < the row's prompt
        length (``embed_tokens``), else an image code (``prepare_embeddings_for_image_generation``).
        Padding columns of a batched forward (masked out) may hold either: ids are clamped into
        each table's range."""
        model = self.model
        prompt_lengths = self._prompt_lengths(input_ids.shape[0])
        is_text = position_ids < prompt_lengths.unsqueeze(1)
        text_table = model.get_input_embeddings()
        text = text_table(input_ids.clamp(0, text_table.num_embeddings - 1))
        if bool(is_text.all()):
            return text
        image = model.prepare_embeddings_for_image_generation(
            input_ids.clamp(0, self.vocab_size - 1)
        )
        return torch.where(is_text.unsqueeze(-1), text, image.to(text.dtype))

    def compute_logits(
        self, input_ids: Tensor, attention_mask: Tensor | None, position_ids: Tensor, num_rows: int
    ) -> Tensor:
        """``generation_head`` of the language model's last ``num_rows`` hidden states:
        [B, num_rows, K]."""
        embeds = self.input_embeddings(input_ids, position_ids)
        out = self.model.model.language_model(
            inputs_embeds=embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{self._language_cache_kwarg: self.cache},
        )
        return self.model.model.generation_head(out.last_hidden_state[:, -num_rows:, :])

    # ---- embeddings, content, pixels ----

    @property
    def embeddings(self) -> Tensor:
        """[K, D] float32: ``generation_aligner(generation_embeddings(k))`` for every code k, the
        vector the language model reads for it (GSD's distance filter)."""
        if self._embeddings is None:
            codes = torch.arange(self.vocab_size, device=self.device)
            with torch.inference_mode():
                rows = self.model.prepare_embeddings_for_image_generation(codes)
            self._embeddings = rows.detach().float()
        return self._embeddings

    def code_content(self) -> Tensor:
        """[K, embed_dim]: the L2-normalised VQ codebook rows (what ``JanusVQVAE.decode`` turns
        into pixels), row k for code k."""
        weight = self.model.model.vqmodel.quantize.embedding.weight.detach()
        return torch.nn.functional.normalize(weight, p=2, dim=-1)

    def decode_images(self, tokens: Any) -> Tensor:
        """Codes [N] or [B, N] (N = ``num_image_tokens``) -> uint8 images [B, H, W, 3] through
        ``JanusVQVAE.decode``: clip((x + 1) / 2 * 255, 0, 255) truncated to uint8."""
        codes = torch.as_tensor(tokens).to(self.device).long()
        if codes.ndim == 1:
            codes = codes.unsqueeze(0)
        if codes.ndim != 2 or codes.shape[1] != self.num_image_tokens:
            raise ValueError(
                f"expected {self.num_image_tokens} image codes per image, got shape "
                f"{tuple(codes.shape)}"
            )
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= self.vocab_size):
            raise ValueError(f"image codes must lie in [0, {self.vocab_size})")
        with torch.inference_mode():
            pixels = self.model.model.vqmodel.decode(codes)
        pixels = ((pixels.float() + 1) / 2 * 255).clamp(0, 255)
        return pixels.to(torch.uint8).permute(0, 2, 3, 1)


# ---- loading ------------------------------------------------------------------------------


def resolve_janus_dir(weights: str | Path | None, name: str = "janus-pro-1b") -> Path:
    """The folder holding ``config.json``: ``weights`` itself, a Hugging Face cache entry
    (``models--deepseek-community--Janus-Pro-1B``) or a cache root holding one; None searches
    the Hugging Face cache. ``FileNotFoundError`` saying what to download."""
    if name not in JANUS_REPOS:
        raise ValueError(f"unknown Janus model {name!r}; expected one of {tuple(JANUS_REPOS)}")
    return find_checkpoint(weights, JANUS_REPOS[name], "Janus")


def read_janus_config(folder: Path) -> dict[str, Any]:
    """config.json as a dict; ``ValueError`` unless ``model_type`` is "janus" (DeepSeek's own
    "multi_modality" layout names the conversion to download instead)."""
    raw = json.loads((folder / "config.json").read_text())
    kind = raw.get("model_type")
    if kind != "janus":
        hint = (
            " (DeepSeek's own release: download the transformers conversion "
            "deepseek-community/Janus-Pro-1B or -7B instead)"
            if kind == "multi_modality"
            else ""
        )
        raise ValueError(f"{folder / 'config.json'} has model_type {kind!r}, not 'janus'{hint}")
    return raw


def estimated_parameters(config: Any) -> int:
    """Parameters of a ``JanusForConditionalGeneration`` built on the meta device (exact)."""
    from transformers import JanusForConditionalGeneration

    with torch.device("meta"):
        model = JanusForConditionalGeneration(config)
    return sum(p.numel() for p in model.parameters())


def load_janus(
    weights: str | Path | None,
    *,
    name: str = "janus-pro-1b",
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    force_cpu: bool = False,
    cfg_scale: float | None = None,
    top_k: int | None = None,
    temperature: float | None = None,
    tokenizer: str | Path | None = None,
) -> JanusAdapter:
    """Load a Janus-Pro checkpoint (transformers layout) as a ``JanusAdapter``.

    Sampling defaults come from the checkpoint's generation config (``stock_sampling``);
    cfg_scale / top_k / temperature override them when given. device: default cuda when
    available; dtype: bfloat16 on GPU, float32 on CPU. On CPU a model above 3e9 parameters
    needs ``force_cpu=True``. tokenizer: a folder holding tokenizer.json or the file (default:
    the checkpoint's)."""
    from transformers import JanusConfig, JanusForConditionalGeneration

    folder = resolve_janus_dir(weights, name)
    read_janus_config(folder)
    config = JanusConfig.from_pretrained(str(folder))
    device, dtype = device_and_dtype(device, dtype)
    refuse_large_on_cpu(
        folder, device, lambda: estimated_parameters(config), CPU_PARAMETER_LIMIT, force_cpu
    )
    prompt_tokenizer = PromptTokenizer(tokenizer_file(folder, tokenizer))
    model = JanusForConditionalGeneration.from_pretrained(str(folder), dtype=dtype)
    model = model.to(device).eval()
    settings = stock_sampling(model.generation_config)
    given = {"cfg_scale": cfg_scale, "top_k": top_k, "temperature": temperature}
    settings.update({k: v for k, v in given.items() if v is not None})
    return JanusAdapter(model, tokenizer=prompt_tokenizer, **settings)


# ---- the released sizes --------------------------------------------------------------------


# The released Janus-Pro language models (DeepSeek's language_config, as converted to
# transformers' LlamaConfig); vision (SigLIP-L at 384 px, patch 16: 576 image tokens) and VQ-16
# (16384 codes of dimension 8) are shared. Used for real-size shapes on random weights
# (benchmarks/gpu_lumina_shapes.py --model janus-pro-*); check-weights compares them with a
# checkpoint's config.json.
RELEASE_TEXT = {
    "janus-pro-1b": {"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16,
                     "intermediate_size": 5632},
    "janus-pro-7b": {"hidden_size": 4096, "num_hidden_layers": 30, "num_attention_heads": 32,
                     "intermediate_size": 11008},
}


def release_config(name: str) -> Any:
    """A ``JanusConfig`` at the released size of ``name`` ("janus-pro-1b" or "-7b"): text vocab
    102400, 16384 max positions; vision 24 layers of width 1024 at 384 px / patch 16 (576 image
    tokens); VQ-16 with 16384 codes of dimension 8, channel multipliers [1, 1, 2, 2, 4]; the
    aligner and generation head at the text width."""
    from transformers import JanusConfig

    if name not in RELEASE_TEXT:
        raise ValueError(f"unknown Janus model {name!r}; expected one of {tuple(RELEASE_TEXT)}")
    text = RELEASE_TEXT[name]
    hidden = text["hidden_size"]
    return JanusConfig(
        text_config={
            "model_type": "llama",
            "vocab_size": 102400,
            "max_position_embeddings": 16384,
            "num_key_value_heads": text["num_attention_heads"],
            "bos_token_id": 100000,
            "eos_token_id": 100001,
            "pad_token_id": 100015,
            **text,
        },
        vision_config={
            "hidden_size": 1024,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "image_size": 384,
            "patch_size": 16,
            "projection_dim": hidden,
            "num_image_tokens": 576,
        },
        vq_config={
            "embed_dim": 8,
            "num_embeddings": 16384,
            "projection_dim": hidden,
            "image_token_embed_dim": hidden,
        },
    )
