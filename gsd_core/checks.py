"""Input checks: every bad input raises a ``ValueError`` that names the argument and the problem.

Probability rows sum to 1 within their dtype's tolerance (1e-9 for float64, also when the values
came from a float32 softmax: renormalise first; 1e-4 float32; 2e-2 float16 / bfloat16); nothing is
renormalised here. Computation is in float64 if any input is float64, else float32. Uniforms are
float32 or float64 in [0, 1): a 16-bit uniform (steps of 2^-8 to 2^-11 near 1) would coarsen
u < a(x).
"""

from __future__ import annotations

import torch
from torch import Tensor

SUM_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 2e-2,
                 torch.bfloat16: 2e-2}


def working_dtype(*tensors: Tensor) -> torch.dtype:
    """float64 if any input is float64, else float32 (16-bit inputs are computed in float32)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def _same_device(x: Tensor, device: torch.device, name: str, reference: str = "p") -> None:
    if x.device != device:
        raise ValueError(f"{name} is on {x.device} but {reference} is on {device}: "
                         "put them on one device")


def check_probabilities(x: object, name: str = "p") -> Tensor:
    """``x`` [..., V] checked as probability rows, returned in float32 or float64."""
    if not isinstance(x, Tensor) or not x.is_floating_point():
        got = x.dtype if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(
            f"{name} must be a floating-point torch.Tensor of probabilities, got {got}")
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"{name} must have a non-empty last (vocabulary) dimension, "
                         f"got shape {tuple(x.shape)}")
    if x.numel():
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} contains NaN or inf")
        if bool((x < 0).any()):
            raise ValueError(f"{name} has negative entries: not a probability distribution")
        worst, tol = float((x.sum(-1).double() - 1).abs().max()), SUM_TOLERANCE[x.dtype]
        if worst > tol:
            raise ValueError(
                f"{name} rows must sum to 1 over the last dimension (tolerance {tol:g} for "
                f"{x.dtype}); worst row is off by {worst:.3g} (renormalise with "
                "p / p.sum(-1, keepdim=True))")
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def check_pair(p: object, q: object) -> tuple[Tensor, Tensor]:
    """Target p and draft q [..., V]: checked, on one device, broadcast to one shape, in one
    dtype."""
    if isinstance(p, Tensor) and isinstance(q, Tensor):
        _same_device(q, p.device, "q")
    p, q = check_probabilities(p, "p"), check_probabilities(q, "q")
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"p and q must share the vocabulary size (last dim): {p.shape[-1]} vs {q.shape[-1]}")
    dtype = working_dtype(p, q)
    try:  # the native op (torch.broadcast_shapes imports SymPy on first use)
        return tuple(torch.broadcast_tensors(p.to(dtype), q.to(dtype)))
    except RuntimeError:
        raise ValueError(f"p and q shapes do not broadcast: {tuple(p.shape)} vs "
                         f"{tuple(q.shape)}") from None


def check_tokens(tokens: object, vocab_size: int, device: torch.device, name: str = "token"
                 ) -> Tensor:
    """Token ids as an int64 tensor on ``device`` (a Python int is made there), each in
    [0, vocab_size)."""
    if isinstance(tokens, int) and not isinstance(tokens, bool):
        tokens = torch.tensor(tokens, device=device)
    if not isinstance(tokens, Tensor):
        raise ValueError(f"{name} must be an int or an integer tensor, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    _same_device(tokens, device, name)
    if tokens.numel():
        low, high = (int(v) for v in torch.aminmax(tokens))
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"{name} has ids out of range [0, {vocab_size}): min {low}, max {high}")
    return tokens.long()


def check_uniforms(uniforms: object, shape: tuple[int, ...] | None, device: torch.device,
                   name: str = "uniforms", reference: str = "p") -> Tensor:
    """U[0, 1) draws: float32 or float64, of ``shape`` (None: any), on ``device``."""
    if not isinstance(uniforms, Tensor) or uniforms.dtype not in (torch.float32, torch.float64):
        kind = uniforms.dtype if isinstance(uniforms, Tensor) else type(uniforms).__name__
        raise ValueError(f"{name} must be a float32 or float64 tensor of U[0, 1) draws, got "
                         f"{kind} (a 16-bit uniform has steps of 2^-8 to 2^-11 near 1)")
    if shape is not None and tuple(uniforms.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(uniforms.shape)}")
    _same_device(uniforms, device, name, reference)
    if uniforms.numel():
        low, high = (float(v) for v in torch.aminmax(uniforms))
        if not (low >= 0 and high < 1):  # NaN fails both comparisons
            raise ValueError(f"uniforms must lie in [0, 1) and not be NaN: min {low}, max {high}")
    return uniforms


def check_window(
    p: Tensor,
    q: Tensor,
    draft_tokens: Tensor,
    uniforms: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """``verify``'s input checks (its docstring gives the shapes): returns (p, q, draft_tokens,
    uniforms) with p and q in the working dtype and the batch dimensions broadcast and expanded."""
    if not isinstance(p, Tensor) or not isinstance(q, Tensor) or p.ndim < 2 or q.ndim < 2:
        raise ValueError("p and q must be tensors of shape [..., L, V] (p may have L + 1 rows)")
    window = q.shape[-2]
    if p.shape[-2] not in (window, window + 1):
        raise ValueError(f"p must have L or L + 1 rows for L = {window} drafts, got {p.shape[-2]}")
    if not isinstance(draft_tokens, Tensor) or draft_tokens.ndim < 1 or (
            draft_tokens.shape[-1] != window):
        raise ValueError(f"draft_tokens must have shape [..., L={window}]")
    if uniforms is not None and generator is not None:
        raise ValueError("give uniforms or a generator, not both (the generator would be ignored)")
    if generator is not None and torch.device(generator.device).type != p.device.type:
        raise ValueError(f"generator is on {generator.device} but p is on {p.device}")
    for x, name in ((q, "q"), (draft_tokens, "draft_tokens"), (uniforms, "uniforms")):
        if isinstance(x, Tensor):  # devices first: a value check would read a meta tensor
            _same_device(x, p.device, name)
    rows = [check_probabilities(p, "p"), check_probabilities(q, "q")]
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"p and q must share the vocabulary size (last dim): {p.shape[-1]} vs {q.shape[-1]}")
    drafts = check_tokens(draft_tokens, p.shape[-1], p.device, "draft_tokens")
    try:  # the batch dimensions: one entry of each row and draft stands for them
        batch = torch.broadcast_tensors(p[..., :1, :1], q[..., :1, :1], drafts[..., :1, None]
                                        )[0].shape[:-2]
    except RuntimeError:
        raise ValueError(
            f"batch shapes do not match: p {tuple(p.shape)}, q {tuple(q.shape)}, "
            f"drafts {tuple(draft_tokens.shape)}") from None
    if uniforms is not None:
        check_uniforms(uniforms, (*batch, window + 1), p.device)
    dtype, vocab = working_dtype(*rows), p.shape[-1]
    return (rows[0].to(dtype).expand(*batch, p.shape[-2], vocab),
            rows[1].to(dtype).expand(*batch, window, vocab), drafts.expand(*batch, window),
            uniforms)


def check_labels(labels: object) -> Tensor:
    """Partition labels [..., V]: integer cluster ids >= 0, as int64. Ids >= V are relabelled to
    0 .. K-1 in increasing order, so memory never follows the largest id."""
    if not isinstance(labels, Tensor) or labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError("partition labels must be an integer tensor of cluster ids, one per token")
    if labels.ndim < 1 or labels.numel() == 0:
        raise ValueError(
            f"partition labels must have shape [..., V], V >= 1, got {tuple(labels.shape)}")
    labels = labels.long()
    low, high = torch.stack(torch.aminmax(labels)).tolist()
    if low < 0:
        raise ValueError("partition labels must be non-negative cluster ids")
    return torch.unique(labels, return_inverse=True)[1] if high >= labels.shape[-1] else labels


def check_choice(value: object, name: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def check_count(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
