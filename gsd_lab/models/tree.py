"""One forward pass over a token tree, and the KV-cache rollback to one of its branches.

The multi-draft decoder (``gsd_lab.decode.loop``, ``DecodingMethod(candidates=k)``) verifies k
candidates for the first undecided position n, each followed by the window's drafts for
n+1 .. n+L-1, in ONE forward of a ``CausalLMAdapter``. The input is

    [head (T0 tokens: the last committed token, or the prompt at the first forward),
     branch 0 (L tokens), branch 1 (L tokens), ..., branch k-1 (L tokens)]      W = T0 + k L

Branch j's token t sits at logical position (head's last) + 1 + t in every branch (its RoPE
position; all branches share positions) and attends to the cache, the head and branch j's
tokens 0..t only: the 4-D boolean mask ``tree_mask`` [B, 1, W, S], S = cache + W (key s visible
to query i; AND the CFG padding of the cached prompt). Every row is then exactly the row a plain
forward of that branch's own prefix computes (the same keys, values and positions; tested to
float64 rounding in ``tests/lab/decode/test_multidraft_decoding.py``).

The rows returned, the rollback ``keep_branch``, its cost, and the models ``forward_tree`` covers:
docs/runtimes.md.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .adapter import CausalLMAdapter


def ancestry(parent: Tensor) -> Tensor:
    """[N, N] bool: node j is node i or one of its ancestors (parent [N], -1 the root,
    parent[i] < i)."""
    count = parent.numel()
    seen = torch.eye(count, dtype=torch.bool, device=parent.device)
    for i, up in enumerate(parent.tolist()):
        if up >= 0:
            seen[i] |= seen[up]
    return seen


def node_mask(past: int, head: int, parent: Tensor) -> Tensor:
    """Visibility [W, past + W] bool, W = head + N: the cached keys and the head's earlier
    tokens (causal) for the head; for node i, the cache, the whole head, node i and its
    ancestors (module docstring)."""
    width, device = head + parent.numel(), parent.device
    new = torch.zeros(width, width, dtype=torch.bool, device=device)
    new[:head, :head] = torch.ones(head, head, dtype=torch.bool, device=device).tril()
    new[head:, :head] = True
    new[head:, head:] = ancestry(parent)
    cached = torch.ones(width, past, dtype=torch.bool, device=device)
    return torch.cat([cached, new], 1)


def chain_parents(branches: int, depth: int) -> Tensor:
    """parent [k L] of k chains of L nodes each, listed branch by branch."""
    index = torch.arange(branches * depth)
    return torch.where(index % depth == 0, -1, index - 1)


def tree_mask(past: int, head: int, branches: int, depth: int, device: torch.device) -> Tensor:
    """``node_mask`` of k = ``branches`` chains of L = ``depth`` tokens: for token t of branch
    j, the cache, the whole head and branch j's tokens 0..t."""
    return node_mask(past, head, chain_parents(branches, depth).to(device))


def _kv_tensors(cache: object) -> list[Tensor]:
    """The key and value tensors [B, H, S, d] of every layer of a ``DynamicCache`` or the
    stand-in's ``KVCache``; ValueError for any other cache."""
    if isinstance(getattr(cache, "keys", None), list):  # gsd_lab.standin.llama_forward.KVCache
        return [t for t in cache.keys + cache.values if t is not None]
    layers = getattr(cache, "layers", None)
    if layers is None or any(type(layer).__name__ != "DynamicLayer" for layer in layers):
        raise ValueError(
            f"a token tree's rollback needs a DynamicCache or the stand-in's KVCache, got "
            f"{type(cache).__name__}"
        )
    return [t for layer in layers if layer.is_initialized for t in (layer.keys, layer.values)]


def check_tree_adapter(adapter: CausalLMAdapter) -> None:
    """ValueError unless ``forward_tree`` can run on ``adapter`` (module docstring)."""
    if type(adapter).compute_logits is not CausalLMAdapter.compute_logits:
        raise ValueError(
            f"candidates > 1 or a tree needs a tree forward; {type(adapter).__name__} computes "
            "its logits its own way (compute_logits) and has none: decode it with candidates=1 "
            "and no tree"
        )


def forward_tree(
    adapter: CausalLMAdapter, head_ids: Tensor, branches: Tensor
) -> tuple[Tensor, Tensor]:
    """One forward pass over ``head_ids`` [T0] and ``branches`` [k, L] (module docstring):
    returns (p_0 [V], rows [k, L, V]); ``forward_nodes`` of k chains. Call ``keep_branch``
    before anything else touches the adapter."""
    k, depth = branches.shape
    parent = chain_parents(k, depth).to(branches.device)
    p0, rows = forward_nodes(adapter, head_ids, branches.reshape(-1), parent)
    return p0, rows.view(k, depth, -1)


def keep_branch(adapter: CausalLMAdapter, branch: int) -> None:
    """Roll the cache back from the k chains of the last ``forward_tree`` to [cache, head,
    branch] (module docstring)."""
    state = getattr(adapter, "_tree", None)
    if state is None:
        raise ValueError("keep_branch() needs a forward_tree() before it")
    count, depth = state[3], state[6]
    k = count // depth
    if not 0 <= branch < k:
        raise ValueError(f"branch must be in [0, {k}), got {branch!r}")
    keep_nodes(adapter, list(range(branch * depth, (branch + 1) * depth)))


def forward_nodes(
    adapter: CausalLMAdapter, head_ids: Tensor, tokens: Tensor, parent: Tensor
) -> tuple[Tensor, Tensor]:
    """One forward pass over ``head_ids`` [T0] and a tree of N nodes, ``tokens`` [N] with
    ``parent`` [N] (-1: the head; parent[i] < i): node i at the position after its parent, seeing
    the cache, the head and its ancestors (``node_mask``). Returns (p_0 [V], rows [N, V]): the
    head's last row and the row after each node, float64, processed as
    ``CausalLMAdapter.forward``'s rows are. Counted as one forward (``num_forwards``,
    ``model_seconds``). The cache then holds the tree: call ``keep_nodes`` before anything else
    touches the adapter."""
    check_tree_adapter(adapter)
    if adapter._prompt is None:
        raise ValueError("call start(prompt_ids) before forward_tree()")
    if getattr(adapter, "_tree", None) is not None:
        raise ValueError("keep_branch() must follow forward_tree() before the next forward")
    count = tokens.numel()
    if parent.shape != (count,):
        raise ValueError(f"parent must be [{count}] like tokens, got {list(parent.shape)}")
    parent = parent.to(adapter.device)
    depth = torch.ones(count, dtype=torch.long)
    for i, up in enumerate(parent.tolist()):
        if not -1 <= up < i:
            raise ValueError(f"parent[{i}] must be in [-1, {i}), got {up}")
        depth[i] = 1 if up < 0 else depth[up] + 1
    depth = depth.to(adapter.device)
    head_ids = torch.as_tensor(head_ids, device=adapter.device)
    head_batch, head_mask, head_positions = adapter._layout(head_ids)
    batch_size, head = head_batch.shape
    flat = tokens.reshape(1, -1).to(adapter.device).expand(batch_size, -1)
    batch_ids = torch.cat([head_batch, flat], 1)  # [B, W]
    cache_before = adapter._cache_length()
    width = batch_ids.shape[1]
    # The padding of the cached prompt (CFG), then real tokens: [B, S], or None.
    padding = None if head_mask is None else torch.cat([head_mask, torch.ones_like(flat)], 1)
    positions = torch.cat([head_positions, head_positions[:, -1:] + depth], 1)  # [B, W]
    visible = node_mask(cache_before, head, parent)  # [W, S]
    mask = visible.expand(batch_size, 1, width, cache_before + width)
    if padding is not None:
        mask = mask & padding.to(torch.bool)[:, None, None, :]
    logits = adapter._timed_logits(batch_ids, mask, positions, 1 + count)
    # Row 0 predicts generated position g0 (the first undecided one); node i's row g0 + depth.
    g0 = adapter._seq_len + head_ids.numel() - adapter.prompt_len
    generated = torch.cat([torch.tensor([g0], device=adapter.device), g0 + depth])
    probs = adapter._process(logits, generated)
    chain = int(depth.max()) if count else 0
    adapter._tree = (cache_before, head, head_ids.numel(), count, padding, parent, chain)
    return probs[0], probs[1:]


def keep_nodes(adapter: CausalLMAdapter, nodes: list[int]) -> None:
    """Roll the cache back from the tree of the last ``forward_nodes`` to [cache, head, the
    ``nodes``] (a root-to-node path, in order): their entries are copied onto the first slots in
    every layer and the rest cropped, so the cache holds what a plain forward over [head, those
    tokens] leaves; the adapter's logical sequence is then the head and those nodes."""
    state = getattr(adapter, "_tree", None)
    if state is None:
        raise ValueError("keep_branch() needs a forward_tree() before it")
    cache_before, head, head_tokens, count, padding, parent = state[:6]
    up = -1
    for node in nodes:
        if not (0 <= node < count and int(parent[node]) == up):
            adapter._tree = None
            raise ValueError(f"nodes must be a path from the root of the tree, got {nodes!r}")
        up = node
    if adapter._cache_length() != cache_before + head + count:
        adapter._tree = None
        raise ValueError("the cache changed since forward_tree() (start() or a forward ran)")
    start, kept = cache_before + head, len(nodes)
    if nodes != list(range(kept)):
        source = torch.tensor(nodes, device=adapter.device) + start
        with torch.inference_mode():
            for tensor in _kv_tensors(adapter.cache):
                tensor[..., start : start + kept, :] = tensor[..., source, :]
    removed = count - kept
    if removed:
        adapter.cache.crop(-removed)
    if adapter._padded:
        adapter._mask = padding[:, : start + kept]
    adapter._seq_len += head_tokens + kept
    adapter._tree = None
