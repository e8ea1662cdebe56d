"""Block verification of a window of drafts (Sun et al., arXiv 2403.10444, Algorithm 2).

Window of L drafts x_0 .. x_{L-1}, x_i drawn from the draft row q_i (which may depend on
x_{<i}); target rows p_0 .. p_L along the drafts (p_L the bonus row). With (t)_+ = max(t, 0):

1. weights: w_0 = 1, w_{i+1} = min(1, w_i p_i(x_i) / q_i(x_i))  (0 where q_i(x_i) = 0);
2. residual masses: rho_i = sum_y (w_i p_i(y) - q_i(y))_+ for i < L;
3. stop probabilities: h_i = rho_i / (rho_i + 1 - w_i) for 1 <= i < L (0 where 0 / 0), h_L = w_L;
4. uniforms eta_1 .. eta_L: the accepted length is the LAST passing prefix,
   tau = max{i in 1..L : eta_i < h_i}, or 0 if none passes;
5. one token y is drawn with the last uniform from norm((w_tau p_tau - q_tau)_+) (the modified
   residual; q_L = 0, so at tau = L it is p_L itself);
6. emitted: x_0 .. x_{tau-1}, then y.

``verify_block`` runs it; ``window_law`` gives the exact law of one window (both verifiers) by
enumerating every draft path of a tree model, for tests. With L = 1 this is ``verify`` exactly.
Why it is exact, what the drafts' joint law must be and why it accepts at least as many drafts
as ``verify``: docs/core.md and proofs/14_block_verification.md.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import Tensor

from .checks import check_choice, check_window
from .exact import fixed_order_sum
from .rules import mass_ratio, token_residual
from .verification import VerifyResult, draw


def block_weights(p: Tensor, q: Tensor, draft_tokens: Tensor) -> tuple[Tensor, Tensor]:
    """Steps 1-3 of the module docstring, unchecked: (w [..., L + 1], h [..., L]) for
    p [..., L + 1, V], q [..., L, V], draft_tokens [..., L]; h[..., i - 1] is h_i.

    The weights by their recursion, one elementwise step per position (L steps over the batch):
    products and minima only, correctly rounded, so the same bits on every CPU.

    >>> p = torch.tensor([[0.5, 0.5], [0.9, 0.1], [0.5, 0.5]], dtype=torch.float64)
    >>> q = torch.tensor([[0.25, 0.75], [0.5, 0.5]], dtype=torch.float64)
    >>> w, h = block_weights(p, q, torch.tensor([1, 0]))  # r = (2/3, 1.8)
    >>> w  # 1, 2/3, min(1, 2/3 * 1.8)
    tensor([1.0000, 0.6667, 1.0000], dtype=torch.float64)
    >>> h  # rho_1 = (0.6 - 0.5)_+ = 0.1: h_1 = 0.1 / (0.1 + 1/3); h_2 = w_2
    tensor([0.2308, 1.0000], dtype=torch.float64)
    """
    window = q.shape[-2]
    x = draft_tokens.unsqueeze(-1)
    p_x, q_x = p[..., :window, :].gather(-1, x).squeeze(-1), q.gather(-1, x).squeeze(-1)
    ratio = torch.where(q_x > 0, p_x / q_x.clamp(min=torch.finfo(q_x.dtype).tiny), 0)  # [..., L]
    weights = [ratio.new_ones(*ratio.shape[:-1], 1)]  # w_0 = 1
    for i in range(window):  # w_{i+1} = min(1, w_i r_i)
        weights.append((weights[i] * ratio[..., i : i + 1]).clamp(max=1))
    weights = torch.cat(weights, -1)  # [..., L + 1]
    excess = (weights[..., :window, None] * p[..., :window, :] - q).clamp(min=0)
    rho = fixed_order_sum(excess)  # [..., L]
    denominator = rho + (1 - weights[..., :window])  # >= rho in floats too: h <= 1
    tiny = torch.finfo(rho.dtype).tiny
    stop = torch.where(denominator > 0, rho / denominator.clamp(min=tiny), 0)  # 0 / 0 -> 0
    h = torch.cat([stop[..., 1:], weights[..., window:]], -1)[..., :window]  # h_1 .. h_L = w_L
    return weights, h


def block_residual(p_row: Tensor, q_row: Tensor, weight: Tensor) -> Tensor:
    """The modified residual's weights (w p - q)_+ [..., V] for rows p, q [..., V] and the weight
    w [..., 1] of the prefix (``token_residual``: w p where that mass is ~0)."""
    return token_residual(weight * p_row, q_row)


def verify_block(
    p: Tensor,
    q: Tensor,
    draft_tokens: Tensor,
    *,
    uniforms: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> VerifyResult:
    """Block verification of a window of L drafts (module docstring), lossless.

    p: [..., L + 1, V] target rows along the drafts (row L: the bonus row); q: [..., L, V] the
    declared draft rows; draft_tokens: [..., L]; batch dimensions broadcast. Randomness:
    ``uniforms`` [..., L + 1] (eta_1 .. eta_L for the prefixes, then the draw's), or drawn in
    float64 from ``generator``; not both. Returns ``verify``'s ``VerifyResult``: num_accepted
    tau, tokens [..., L + 1] (x_0 .. x_{tau-1}, y, then -1), num_emitted tau + 1, and in
    accept_probs the stop probabilities h_1 .. h_L [..., L].

    Token-wise, the first draft fails its test (u_0 = 0.9 >= a_0 = 2/3) and the window ends
    there; block verification keeps both drafts, as the two-token prefix passes (eta_2 < h_2 = 1):

    >>> from gsd_core import verify
    >>> p = torch.tensor([[0.5, 0.5], [0.9, 0.1], [0.5, 0.5]], dtype=torch.float64)
    >>> q = torch.tensor([[0.25, 0.75], [0.5, 0.5]], dtype=torch.float64)
    >>> u = torch.tensor([0.9, 0.5, 0.5], dtype=torch.float64)  # eta_1, eta_2, the draw
    >>> verify(p, q, torch.tensor([1, 0]), uniforms=u).tokens
    tensor([ 0, -1, -1])
    >>> verify_block(p, q, torch.tensor([1, 0]), uniforms=u).tokens  # then y ~ p_2
    tensor([1, 0, 1])

    With drafts (1, 1), h_2 = w_2 = 2/3 * 0.2: the first prefix passes, the second does not,
    and y is drawn from norm((w_1 p_1 - q_1)_+) = norm((0.1, 0)):

    >>> u = torch.tensor([0.1, 0.99, 0.5], dtype=torch.float64)
    >>> verify_block(p, q, torch.tensor([1, 1]), uniforms=u).tokens
    tensor([ 1,  0, -1])
    """
    p, q, draft_tokens, uniforms = check_window(p, q, draft_tokens, uniforms, generator)
    window = q.shape[-2]
    if p.shape[-2] != window + 1:
        raise ValueError(f"block verification needs the bonus row: p must have L + 1 = "
                         f"{window + 1} rows, got {p.shape[-2]}")
    if uniforms is None:
        uniforms = torch.rand(*draft_tokens.shape[:-1], window + 1, generator=generator,
                              dtype=torch.float64, device=p.device)
    weights, h = block_weights(p, q, draft_tokens)
    eta, u_draw = uniforms.split([window, 1], -1)
    passes = eta.to(h.dtype) < h  # prefix i + 1 passes: [..., L]
    lengths = torch.arange(1, window + 1, device=p.device)
    accepted = torch.where(passes, lengths, 0).amax(-1) if window else passes.sum(-1)  # tau
    stop = accepted.unsqueeze(-1)  # [..., 1]
    rows = stop.unsqueeze(-1).expand(*stop.shape, p.shape[-1])  # row tau: [..., 1, V]
    p_row = p.gather(-2, rows)[..., 0, :]
    q_row = F.pad(q, (0, 0, 0, 1)).gather(-2, rows)[..., 0, :]  # q_L = 0
    residual = block_residual(p_row, q_row, weights.gather(-1, stop))
    new_token = draw(residual, u_draw)  # [..., 1]
    kept = lengths <= stop  # the drafts before tau
    tokens = F.pad(torch.where(kept, draft_tokens, -1), (0, 1), value=-1)
    tokens = tokens.scatter(-1, stop, new_token)
    return VerifyResult(accepted, tokens, accepted + 1, h)


def block_accepted_law(p: Tensor, q: Tensor, draft_tokens: Tensor) -> Tensor:
    """Pr[tau = i | the drafts] for i = 0..L, exact over the uniforms: h_i prod_{j > i} (1 - h_j)
    with h_0 = 1. p [..., L + 1, V], q [..., L, V], draft_tokens [..., L] -> [..., L + 1]."""
    _, h = block_weights(p, q, draft_tokens)
    h = F.pad(h, (1, 0), value=1.0)  # h_0 = 1: tau = 0 when no prefix passes
    later_fail = (1 - h).flip(-1).cumprod(-1).flip(-1)  # prod_{j >= i} (1 - h_j)
    return h * F.pad(later_fail[..., 1:], (0, 1), value=1.0)


def token_accepted_law(p: Tensor, q: Tensor, draft_tokens: Tensor) -> Tensor:
    """Pr[n = i | the drafts] for token-wise verification (``verify``, SD):
    prod_{j < i} a_j (1 - a_i), a_L = 0. Shapes as ``block_accepted_law``."""
    window = q.shape[-2]
    x = draft_tokens.unsqueeze(-1)
    a = mass_ratio(p[..., :window, :].gather(-1, x), q.gather(-1, x)).squeeze(-1)
    run = F.pad(a.cumprod(-1), (1, 0), value=1.0)  # Pr[n >= i]: [..., L + 1]
    return run * (1 - F.pad(a, (0, 1)))


def window_law(target: list[Tensor], draft: list[Tensor], verifier: str = "block"
               ) -> tuple[Tensor, Tensor]:
    """The exact law of one window of L drafts on a tree model, by enumeration.

    target[i] (i = 0..L): p_i(y | s) as a float64 tensor [V] * (i + 1), indexed by the prefix s,
    then y; draft[i] (i < L): q_i(y | s), the same shape. Drafts are drawn x_i ~ q_i(. | x_{<i})
    and verified by ``verifier`` ("block": ``verify_block``; "token": ``verify``, SD). Returns
    (law [V] * (L + 1), accepted [L + 1]): law is the joint law of the first L + 1 tokens of the
    stream, the emitted block continued by the target (it is the target's joint law,
    prod_i p_i(z_i | z_{<i}), iff the verifier is lossless: proofs/14); accepted[i] is the
    probability that i drafts are accepted (the expected accepted length: sum_i i accepted[i]).
    O(V^L) draft paths: for tests on small models."""
    check_choice(verifier, "verifier", ("block", "token"))
    window, vocab = len(draft), target[0].shape[-1]
    if window < 1:
        raise ValueError("window_law needs L >= 1 drafts")
    if len(target) != window + 1:
        raise ValueError(f"target needs L + 1 = {window + 1} tables, got {len(target)}")
    paths = torch.tensor(list(itertools.product(range(vocab), repeat=window)), dtype=torch.long)
    paths = paths.reshape(-1, window)  # every draft path x: [N, L]
    p = torch.stack([_rows(target[i], paths[:, :i]) for i in range(window + 1)], 1)
    q = torch.stack([_rows(draft[i], paths[:, :i]) for i in range(window)], 1)
    prob = q.gather(-1, paths.unsqueeze(-1)).squeeze(-1).prod(-1)  # Pr[x]: [N]
    if verifier == "block":
        stops = block_accepted_law(p, q, paths)  # [N, L + 1]
        weights = block_weights(p, q, paths)[0]
    else:
        stops = token_accepted_law(p, q, paths)
        weights = torch.ones(paths.shape[0], window + 1, dtype=p.dtype)
    q_rows = F.pad(q, (0, 0, 0, 1))
    residual = block_residual(p, q_rows, weights.unsqueeze(-1))
    total = fixed_order_sum(residual, keepdim=True)
    residual = torch.where(total > 0, residual / total.clamp(min=torch.finfo(total.dtype).tiny),
                           0)  # [N, L + 1, V]; 0 where w = 0 (then Pr[tau = k] = 0)
    joint = prob.unsqueeze(-1) * stops  # Pr[x, tau = k]: [N, L + 1]
    shape = [vocab] * window
    law = torch.zeros([vocab] * (window + 1), dtype=p.dtype)
    for k in range(window + 1):
        # Pr[tau = k, x_{<k} = s, y]: summed over the drafts after k; the residual depends on
        # x_{<k} only, read on the path that continues s with zeros.
        mass = joint[:, k].reshape(shape)
        mass = mass.sum(tuple(range(k, window))) if k < window else mass  # [V] * k
        first = (slice(None),) * k + (0,) * (window - k)
        block = mass.unsqueeze(-1) * residual[:, k].reshape(shape + [vocab])[first]
        tail = torch.ones([vocab] * (window + 1), dtype=p.dtype)
        for j in range(k + 1, window + 1):  # the target continues after the block
            tail = tail * target[j].reshape([vocab] * (j + 1) + [1] * (window - j))
        law = law + block.reshape([vocab] * (k + 1) + [1] * (window - k)) * tail
    return law, joint.sum(0)


def _rows(table: Tensor, prefixes: Tensor) -> Tensor:
    """The rows of a tree table [V] * (i + 1) at prefixes [N, i]: [N, V]."""
    flat = table.reshape(-1, table.shape[-1])  # prefixes in row-major order
    vocab = table.shape[-1]
    index = torch.zeros(prefixes.shape[0], dtype=torch.long)
    for column in prefixes.T:
        index = index * vocab + column
    return flat[index]


def target_joint(target: list[Tensor]) -> Tensor:
    """prod_i p_i(z_i | z_{<i}) over z in V^(L + 1) for ``window_law``'s tables: [V] * (L + 1)."""
    vocab, length = target[0].shape[-1], len(target)
    law = torch.ones([vocab] * length, dtype=target[0].dtype)
    for j, table in enumerate(target):
        law = law * table.reshape([vocab] * (j + 1) + [1] * (length - 1 - j))
    return law
