"""The stand-in's Llama forward in float64 without ``transformers``: the same ops, in the same
order and dtypes, as ``LlamaForCausalLM`` (sdpa attention, ``DynamicCache``) after
``gsd_lab.models.float64.cast_model_float64``, so the logits are equal bit for bit.

Shapes: B batch rows (2 for a CFG pair), W new tokens, S = cache + W key positions, D hidden
size, H heads of size d (H d = D), F the MLP width, V the vocabulary.

    x = embed[input_ids]                                             [B, W, D]
    per layer:  x = x + o_proj(attention(rope(q), rope(k), v))       q, k, v [B, H, W, d]
                x = x + down(silu(gate(n)) * up(n)),  n = RMSNorm(x)
    logits = lm_head(RMSNorm(x)[:, -logits_to_keep:])                 [B, R, V]

    RMSNorm(x)  = w * (x * rsqrt(mean(x^2) + eps))
    rope(q)     = q * cos + rotate_half(q) * sin,  rotate_half([a, b]) = [-b, a],
                  cos/sin of position * inv_freq (twice), inv_freq_i = 1 / theta^(2i / d)
    attention   = softmax(q k^T / sqrt(d) + mask) v   (F.scaled_dot_product_attention)

Why it exists, its mask, ``KVCache`` and its scope (anything else raises ``ValueError`` at load;
the same safetensors file as ``LlamaForCausalLM``): docs/runtimes.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

DTYPE = torch.float64


@dataclass(frozen=True)
class LlamaShape:
    """The fields of a ``LlamaConfig`` dict the forward uses (``from_dict`` checks the rest)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> LlamaShape:
        """From ``ar_config.json``'s "llama" dict; ValueError naming what is missing or outside
        the scope of this forward (module docstring)."""
        try:
            heads = int(cfg["num_attention_heads"])
            hidden = int(cfg["hidden_size"])
            rope = cfg.get("rope_parameters") or {
                "rope_type": "default",
                "rope_theta": cfg.get("rope_theta", 10000.0),
            }
            shape = cls(
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(cfg["intermediate_size"]),
                num_hidden_layers=int(cfg["num_hidden_layers"]),
                num_attention_heads=heads,
                head_dim=int(cfg.get("head_dim") or hidden // heads),
                rms_norm_eps=float(cfg["rms_norm_eps"]),
                rope_theta=float(rope["rope_theta"]),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"the llama config lacks or mistypes a field: {err!r}") from err
        unsupported = {
            "num_key_value_heads": (cfg.get("num_key_value_heads") or heads, heads),
            "hidden_act": (cfg.get("hidden_act", "silu"), "silu"),
            "rope_type": (rope.get("rope_type", "default"), "default"),
            "partial_rotary_factor": (rope.get("partial_rotary_factor", 1.0), 1.0),
            "attention_bias": (bool(cfg.get("attention_bias", False)), False),
            "mlp_bias": (bool(cfg.get("mlp_bias", False)), False),
            "tie_word_embeddings": (bool(cfg.get("tie_word_embeddings", False)), False),
            "pretraining_tp": (cfg.get("pretraining_tp", 1), 1),
            "rope_scaling": (cfg.get("rope_scaling"), None),
        }
        for name, (value, expected) in unsupported.items():
            if value != expected:
                raise ValueError(
                    f"the llama config has {name}={value!r}; the fast stand-in forward "
                    f"supports {expected!r} only"
                )
        if min(shape.vocab_size, hidden, shape.intermediate_size, heads, shape.head_dim) < 1:
            raise ValueError(f"the llama config has a non-positive size: {shape}")
        return shape


@dataclass
class ForwardOutput:
    """What ``LlamaForward.forward`` returns: logits [B, R, V] (float64)."""

    logits: Tensor


class KVCache:
    """Per-layer keys and values [B, H, S, d], grown by concatenation along S and cropped by
    slicing (``transformers.DynamicLayer``'s ops: the attention sees the same layouts).
    ``get_seq_length()`` = S; ``crop(-n)`` drops the last n positions of every layer."""

    def __init__(self, num_layers: int) -> None:
        self.keys: list[Tensor | None] = [None] * num_layers
        self.values: list[Tensor | None] = [None] * num_layers

    def get_seq_length(self) -> int:
        return 0 if self.keys[0] is None else int(self.keys[0].shape[-2])

    def update(self, layer: int, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Append key, value [B, H, W, d] to ``layer``; return its whole keys and values."""
        if self.keys[layer] is None:  # a fresh contiguous copy, as DynamicLayer's first cat
            self.keys[layer] = key.new_empty(*key.shape[:-2], 0, key.shape[-1])
            self.values[layer] = value.new_empty(*value.shape[:-2], 0, value.shape[-1])
        self.keys[layer] = torch.cat([self.keys[layer], key], dim=-2)
        self.values[layer] = torch.cat([self.values[layer], value], dim=-2)
        return self.keys[layer], self.values[layer]

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``-tokens_to_remove`` positions (a count <= 0, as ``DynamicCache``)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count to remove, got {tokens_to_remove}")
        if tokens_to_remove == 0 or self.keys[0] is None:
            return
        for layer, (key, value) in enumerate(zip(self.keys, self.values)):
            self.keys[layer] = key[..., :tokens_to_remove, :]
            self.values[layer] = value[..., :tokens_to_remove, :]


def _weight(*shape: int) -> nn.Parameter:
    """An unset float64 parameter on the meta device (``loading.load_ar_forward`` assigns it). No
    random init: on the meta device that would import torch._dynamo (a slow import)."""
    return nn.Parameter(torch.empty(shape, dtype=DTYPE, device="meta"))


class Linear(nn.Module):
    """``nn.Linear`` without bias or init: y = x W^T, W [out, in]."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = _weight(n_out, n_in)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight)


class Embedding(nn.Module):
    """``nn.Embedding`` without init: rows of W [V, D]."""

    def __init__(self, vocab: int, size: int) -> None:
        super().__init__()
        self.weight = _weight(vocab, size)

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.weight)


class RMSNorm(nn.Module):
    """x [..., D] -> w * (x * rsqrt(mean(x^2) + eps)), in x's dtype (float64 here, as
    ``cast_model_float64``'s norms; the stock norm would compute in float32)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = _weight(size)
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rotate_half(x: Tensor) -> Tensor:
    """[a, b] -> [-b, a] on the last dimension (halves of size d / 2)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    """One layer's self-attention: q, k, v projections [D -> H d], RoPE on q and k, the layer's
    cache extended by k and v, sdpa (scale 1 / sqrt(d)), o projection [H d -> D]."""

    def __init__(self, shape: LlamaShape, layer: int) -> None:
        super().__init__()
        width = shape.num_attention_heads * shape.head_dim
        self.q_proj = Linear(shape.hidden_size, width)
        self.k_proj = Linear(shape.hidden_size, width)
        self.v_proj = Linear(shape.hidden_size, width)
        self.o_proj = Linear(width, shape.hidden_size)
        self.head_dim = shape.head_dim
        self.scaling = shape.head_dim**-0.5
        self.layer = layer

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: KVCache
    ) -> Tensor:
        """x [B, W, D], cos/sin [B, 1, W, d], mask [B, 1, W, S] bool or None -> [B, W, D]."""
        batch, width = x.shape[:2]
        heads_shape = (batch, width, -1, self.head_dim)
        q = self.q_proj(x).view(heads_shape).transpose(1, 2)  # [B, H, W, d]
        k = self.k_proj(x).view(heads_shape).transpose(1, 2)
        v = self.v_proj(x).view(heads_shape).transpose(1, 2)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        k, v = cache.update(self.layer, k, v)  # [B, H, S, d]
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=0.0,
            scale=self.scaling,
            is_causal=mask is None and width > 1,
        )
        out = out.reshape(batch, -1, width, self.head_dim).transpose(1, 2).contiguous()
        return self.o_proj(out.reshape(batch, width, -1).contiguous())


class MLP(nn.Module):
    """x [..., D] -> down(silu(gate(x)) * up(x)), gate and up [D -> F], down [F -> D]."""

    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.gate_proj = Linear(shape.hidden_size, shape.intermediate_size)
        self.up_proj = Linear(shape.hidden_size, shape.intermediate_size)
        self.down_proj = Linear(shape.intermediate_size, shape.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm residual block: x + attention(RMSNorm(x)), then + MLP(RMSNorm(.))."""

    def __init__(self, shape: LlamaShape, layer: int) -> None:
        super().__init__()
        self.self_attn = Attention(shape, layer)
        self.mlp = MLP(shape)
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: KVCache
    ) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    """``LlamaModel``'s parameters: embed_tokens, layers, norm."""

    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.embed_tokens = Embedding(shape.vocab_size, shape.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(shape, layer) for layer in range(shape.num_hidden_layers)
        )
        self.norm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)


def attention_mask_4d(
    attention_mask: Tensor | None, batch: int, width: int, past: int
) -> Tensor | None:
    """transformers' sdpa mask for a dynamic cache (module docstring): None, or bool
    [B, 1, W, past + W] (key j visible to query i iff j <= past + i and attention_mask[b, j]).
    A 4-D ``attention_mask`` (bool [B, 1, W, past + W], e.g. a token tree's,
    ``gsd_lab.models.adapter.tree_mask``) is used as given, as transformers does."""
    length = past + width
    if attention_mask is not None and attention_mask.ndim == 4:
        if tuple(attention_mask.shape) != (batch, 1, width, length):
            raise ValueError(
                f"a 4-D attention_mask must be [{batch}, 1, {width}, {length}], got "
                f"{list(attention_mask.shape)}"
            )
        return attention_mask.to(torch.bool)
    padding = None if attention_mask is None else attention_mask.to(torch.bool)
    if padding is not None and padding.shape[-1] != length:
        raise ValueError(
            f"attention_mask covers {padding.shape[-1]} positions, expected cache + new = {length}"
        )
    all_real = padding is None or bool(padding.all())
    if all_real and (width == 1 or past == 0):
        return None  # the attention's own is_causal (W > 1) or no mask at all (W = 1)
    device = attention_mask.device if attention_mask is not None else None
    causal = (
        torch.arange(length, device=device)[None, :]
        <= (torch.arange(width, device=device) + past)[:, None]
    )  # [W, S]
    if padding is None:
        return causal[None, None].expand(batch, 1, width, length)
    return causal[None, None] & padding[:, None, None, :]


class LlamaForward(nn.Module):
    """The stand-in's causal LM (module docstring), called like ``LlamaForCausalLM`` by
    ``CausalLMAdapter``: ``forward(input_ids, attention_mask, position_ids, cache, use_cache,
    logits_to_keep)`` -> ``ForwardOutput``; ``new_cache()`` gives the adapter its ``KVCache``.

    Built with its parameters on the meta device (``loading.load_ar_forward`` assigns the stored
    tensors); ``inv_freq`` [d / 2] float64 is computed here, as ``cast_model_float64`` does."""

    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.config = shape  # what CausalLMAdapter reads as model.config (vocab_size, ...)
        self.model = Backbone(shape)
        self.lm_head = Linear(shape.hidden_size, shape.vocab_size)
        dim = shape.head_dim
        inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(0, dim, 2, dtype=DTYPE) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def get_input_embeddings(self) -> Embedding:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> Linear:
        return self.lm_head

    def new_cache(self) -> KVCache:
        return KVCache(self.config.num_hidden_layers)

    def rotary(self, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """position_ids [B, W] -> cos, sin [B, 1, W, d] (float64; transformers' rotary scaling
        of the default RoPE is a multiplication by 1.0, left out: exact)."""
        freqs = position_ids[..., None].to(DTYPE) * self.inv_freq.to(position_ids.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: KVCache | None = None,
        use_cache: bool = True,
        logits_to_keep: int = 0,
    ) -> ForwardOutput:
        """input_ids [B, W]; attention_mask [B, cache + W] (1 real, 0 padding) or None;
        position_ids [B, W] (default cache .. cache + W - 1); logits of the last
        ``logits_to_keep`` positions (0: all) -> ``ForwardOutput`` (logits [B, R, V])."""
        if cache is None or not use_cache:
            raise ValueError("LlamaForward runs with a KVCache (new_cache()) only")
        if self.lm_head.weight.dtype != DTYPE:
            raise ValueError(
                f"LlamaForward computes in float64 only, its parameters are "
                f"{self.lm_head.weight.dtype}"
            )
        batch, width = input_ids.shape
        past = cache.get_seq_length()
        if position_ids is None:
            position_ids = torch.arange(past, past + width, device=input_ids.device)[None]
        x = self.model.embed_tokens(input_ids)
        mask = attention_mask_4d(attention_mask, batch, width, past)
        cos, sin = self.rotary(position_ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask, cache)
        x = self.model.norm(x)
        return ForwardOutput(self.lm_head(x[:, -logits_to_keep:, :]))
