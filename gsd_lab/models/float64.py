"""Run a Hugging Face causal LM's forward pass entirely in float64 (for CPU reproducibility).

Why. On a CPU, ATen picks vectorised kernels by instruction set (``ATEN_CPU_CAPABILITY``:
default, avx2, avx512) and splits reductions by thread count; in float32 their results differ
in the last bits, and one flipped sampling decision (u < p(x)/q(x)) changes the whole
trajectory. In float64 the same kernels differ by about 1e-16 relative, so a decision flips only
if a uniform lands within ~1e-15 of its threshold: identical tokens in practice.

``model.to(torch.float64)`` alone is not enough for Llama-family models in ``transformers``:
RMSNorm casts its input to float32 (mean of squares and rsqrt in float32, a vectorised reduction
whose summation order depends on the ISA), and the rotary embedding computes its inverse
frequencies (a float32 ``pow``) and cos/sin in float32. ``cast_model_float64`` casts the model and
replaces those two forwards on every such module with the same formulas in float64:

    RMSNorm(x) = w * x / sqrt(mean(x^2) + eps),
    inv_freq_i = 1 / theta^(2i / d),  cos/sin(position * inv_freq) * attention_scaling,

so no float32 rounding is left in the forward pass. Other modules are left as they are.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import Tensor

DTYPE = torch.float64


def _rms_norm_forward(self: Any, hidden_states: Tensor) -> Tensor:
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _rotary_forward(self: Any, x: Tensor, position_ids: Tensor) -> Tensor:
    freqs = position_ids[..., None].to(DTYPE) * self.inv_freq.to(device=x.device, dtype=DTYPE)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (
        emb.sin() * self.attention_scaling
    ).to(x.dtype)


def _default_inv_freq(config: Any) -> Tensor | None:
    """1 / theta^(2i/d) in float64 for the default RoPE type, None for other types."""
    params = getattr(config, "rope_parameters", None) or {}
    if params.get("rope_type", "default") != "default" or "rope_theta" not in params:
        return None
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(dim * params.get("partial_rotary_factor", 1.0))
    return 1.0 / (params["rope_theta"] ** (torch.arange(0, dim, 2, dtype=DTYPE) / dim))


def cast_model_float64(model: torch.nn.Module) -> torch.nn.Module:
    """Cast ``model`` to float64 in place and make its RMSNorm / rotary forwards float64 (module
    docstring). Idempotent. Returns the model."""
    model.to(DTYPE)
    for module in model.modules():
        name = type(module).__name__
        if (
            name.endswith("RMSNorm")
            and hasattr(module, "variance_epsilon")
            and hasattr(module, "weight")
        ):
            module.forward = types.MethodType(_rms_norm_forward, module)
        elif (
            name.endswith("RotaryEmbedding")
            and hasattr(module, "inv_freq")
            and hasattr(module, "attention_scaling")
        ):
            inv_freq = _default_inv_freq(getattr(module, "config", None))
            if inv_freq is not None and inv_freq.shape == module.inv_freq.shape:
                module.inv_freq = inv_freq.to(module.inv_freq.device)
            module.forward = types.MethodType(_rotary_forward, module)
    return model
