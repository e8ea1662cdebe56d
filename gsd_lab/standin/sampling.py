"""Batched reference AR sampler for the stand-in (sample grids, flatness statistics, the
recorded fixed-seed outputs). The decoding engine (gsd_lab.decode.loop) is the general one; this
is a small independent implementation with the same processing as ``StandinAdapter``:

    l = u + s (c - u)  (CFG, s = cfg_scale; none if cfg_scale is None)
    l[non-image tokens] = -inf; top-k over image tokens; l / temperature; p = softmax(l) (float64)
    token = inverse-CDF sample of p with one uniform per row from ``generator``.
"""

from __future__ import annotations

import torch

from .ar import TokenLayout


def process_logits(
    cond: torch.Tensor,
    uncond: torch.Tensor | None,
    layout: TokenLayout,
    cfg_scale: float | None,
    top_k: int | None,
    temperature: float,
) -> torch.Tensor:
    """Logits [B, V] (float64) -> probabilities over image codes [B, K] (float64)."""
    logits = cond.double()
    if cfg_scale is not None:
        logits = uncond.double() + cfg_scale * (logits - uncond.double())
    logits = logits[:, : layout.codebook_size]
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -torch.inf)
    return torch.softmax(logits / temperature, dim=-1)


@torch.no_grad()
def sample_tokens(
    model,
    layout: TokenLayout,
    class_indices: torch.Tensor,
    *,
    cfg_scale: float | None = 3.0,
    top_k: int | None = None,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``layout.num_image_tokens`` codes for each class index [B] with a KV cache.

    Returns (tokens [B, N] int64, top1 [B, N] float64: the largest probability of the
    distribution each token was drawn from).
    """
    from transformers import DynamicCache

    batch = class_indices.shape[0]
    cls = torch.as_tensor([layout.class_id(int(c)) for c in class_indices])
    ids = cls[:, None]
    if cfg_scale is not None:
        ids = torch.cat([ids, torch.full_like(ids, layout.null_class_id)])
    cache = DynamicCache(config=model.config)
    tokens = torch.empty(batch, layout.num_image_tokens, dtype=torch.int64)
    top1 = torch.empty(batch, layout.num_image_tokens, dtype=torch.float64)
    import inspect

    cache_kwarg = (
        "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    )
    for position in range(layout.num_image_tokens):
        logits = model(input_ids=ids, use_cache=True, **{cache_kwarg: cache}).logits[:, -1]
        uncond = logits[batch:] if cfg_scale is not None else None
        probs = process_logits(logits[:batch], uncond, layout, cfg_scale, top_k, temperature)
        u = torch.rand(batch, 1, generator=generator, dtype=torch.float64)
        cdf = probs.cumsum(-1)
        nxt = (
            torch.searchsorted(cdf, u * cdf[:, -1:]).clamp(max=layout.codebook_size - 1).squeeze(1)
        )
        tokens[:, position] = nxt
        top1[:, position] = probs.max(-1).values
        ids = nxt[:, None]
        if cfg_scale is not None:
            ids = torch.cat([ids, ids])
    return tokens, top1


@torch.no_grad()
def logits_checksum(model, layout: TokenLayout, class_index: int, tokens: torch.Tensor) -> dict:
    """Sum, sum of |.| and first values of the model's float64-summed logits for
    [class token] + tokens (a fixed input), to check that stored weights reproduce."""
    ids = torch.cat([torch.tensor([layout.class_id(class_index)]), tokens.long()])[None]
    logits = model(input_ids=ids).logits[0].double()
    return {
        "sum": float(logits.sum()),
        "abs_sum": float(logits.abs().sum()),
        "first_row_head": [float(v) for v in logits[0, :8]],
        "last_row_head": [float(v) for v in logits[-1, :8]],
    }
