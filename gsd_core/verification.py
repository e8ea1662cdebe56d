"""Verifying a window of drafts left to right (Leviathan et al. 2023, Alg. 1; GSD Algorithm 3).

A window holds L drafted tokens x_0 .. x_{L-1}, x_i drawn from the draft row q_i, and the
target rows p_0 .. p_{L-1} (and maybe a bonus row p_L). With a rule's a_i = min(1, P_i / Q_i)
(``rules``) and uniforms u_0 .. u_L:

1. accept x_i iff u_i < a_i, for every i at once;
2. the window accepts the leading run: n = #{i : u_0 < a_0, ..., u_i < a_i};
3. at the first rejection (n < L) one token is drawn from the rule's residual of row n by
   inverse CDF with u_L; if all L were accepted and p has the bonus row, from p_L (the
   residual with q = 0, which is p_L itself);
4. emitted: x_0 .. x_{n-1}, then the drawn token (if any).

Vectorised over the window and any batch dimensions, as Hugging Face's
``_speculative_sampling``: no loop over positions or tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .checks import check_pair, check_tokens, check_uniforms, check_window
from .rules import Rule, as_rule, mass_ratio, window_rule


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of verifying a window of L drafts: num_accepted [...], n, the drafts accepted;
    tokens [..., L + 1], the emitted tokens, then -1; num_emitted [...], n + 1 if a token was
    drawn (a rejection, or the bonus row), else n; accept_probs [..., L], a_i at every position."""

    num_accepted: Tensor
    tokens: Tensor
    num_emitted: Tensor
    accept_probs: Tensor


def draw(weights: Tensor, uniform: Tensor) -> Tensor:
    """Inverse-CDF draw without checks: the first y with cdf(y) > u * total, and never past the
    first y whose cdf reaches the total (a positive weight: rounding in u * total cannot step
    onto trailing zeros). weights [..., V] >= 0 (unnormalised, any floating dtype); uniform
    [..., 1] (the shape of the total). cdf(y) = sum_{z <= y} w(z), the total and u * total are
    float64 whatever the dtype of w: P(y) = (cdf(y) - cdf(y - 1)) / total = w(y) / sum(w) up to
    float64 rounding (a running sum in float32 would round each w(y) to its resolution), for a
    float64 u (a float32 u lies on a grid of 2^-24). Always an id in [0, V), NaN rows included.
    Returns int64 [..., 1]."""
    cdf = weights.cumsum(-1, dtype=torch.float64)
    total = cdf[..., -1:]
    uniform = uniform if uniform.dtype == torch.float64 else uniform.to(torch.float64)
    drawn = torch.searchsorted(cdf, uniform * total, right=True)  # first y with cdf(y) > u * total
    last = torch.searchsorted(cdf, total.contiguous())  # first y with cdf(y) = total: weight > 0
    return torch.minimum(drawn, last).clamp_(max=weights.shape[-1] - 1)  # the clamp: NaN rows


def sample_categorical(weights: Tensor, uniform: Tensor) -> Tensor:
    """``draw`` with checks: weights [..., V] >= 0, finite, with a positive total per row;
    uniform [...] in [0, 1). Returns int64 [...]."""
    if not (isinstance(weights, Tensor) and weights.is_floating_point() and weights.ndim >= 1
            and weights.shape[-1] >= 1):
        raise ValueError("weights must be a floating-point tensor [..., V] of weights, V >= 1")
    check_uniforms(uniform, None, weights.device, "uniform", "weights")
    if weights.numel() and not bool(torch.isfinite(weights).all()):
        raise ValueError("weights contain NaN or inf: cannot sample")
    if weights.numel() and (float(weights.min()) < 0 or float(weights.sum(-1).min()) <= 0):
        raise ValueError("weights must be >= 0 with a positive total in every row")
    return draw(weights, uniform.unsqueeze(-1)).squeeze(-1)


def resolve_window(
    p: Tensor, q: Tensor, draft_tokens: Tensor, accept: Tensor, uniforms: Tensor, rule: Rule
) -> VerifyResult:
    """Steps 2-4 of the module docstring, unchecked (the engine shares them), one batch shape:
    p [..., L or L+1, V], q [..., L, V], draft_tokens and accept (a_i) [..., L],
    uniforms [..., L + 1]."""
    window, has_bonus = q.shape[-2], p.shape[-2] > q.shape[-2]
    u_tests, u_draw = uniforms.split([window, 1], -1)  # u_0 .. u_{L-1}: [..., L]; u_L: [..., 1]
    run = (u_tests < accept).cummin(-1).values  # True up to the first rejection: [..., L]
    accepted = run.sum(-1)  # n [...]
    # Row L is the bonus position: no draft was made there, so its q row is zero and its
    # residual is p_L itself. Without a bonus row, p_L is zero too and nothing is drawn there.
    q_rows = F.pad(q, (0, 0, 0, 1))  # [..., L + 1, V]
    p_rows = p if has_bonus else F.pad(p, (0, 0, 0, 1))  # [..., L + 1, V]
    stop = accepted.view(*accepted.shape, 1, 1).expand(*accepted.shape, 1, p.shape[-1])  # row n
    # The rule's residual of row n: [..., 1, V]
    residual = rule.residual_weights(p_rows.gather(-2, stop), q_rows.gather(-2, stop))
    new_token = draw(residual[..., 0, :], u_draw)  # [..., 1]
    if has_bonus:  # a rejection or the bonus row: one token is drawn either way
        emitted = accepted + 1
    else:  # all L accepted: nothing is drawn
        drawn = accepted < window
        new_token, emitted = torch.where(drawn[..., None], new_token, -1), accepted + drawn
    # Emitted: the drafts before n, the new token at n, -1 after.
    tokens = F.pad(torch.where(run, draft_tokens, -1), (0, 1), value=-1)
    tokens = tokens.scatter(-1, accepted.unsqueeze(-1), new_token)  # [..., L + 1]
    return VerifyResult(accepted, tokens, emitted, accept)


def verify(
    p: Tensor,
    q: Tensor,
    draft_tokens: Tensor,
    rule: object = None,
    *,
    uniforms: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> VerifyResult:
    """Verify a window of L drafts left to right (module docstring; SD when rule is None).

    p: [..., L or L+1, V] target rows (row L: the bonus row); q: [..., L, V] draft rows;
    draft_tokens: [..., L]; batch dimensions broadcast (``check_window``). rule: None (SD),
    partition labels [V], or a rule (``DynamicClusters``, ``RankBinnedClusters``,
    ``FixedPartition``, ``Lantern``, ``Amplify``). Randomness: ``uniforms`` [..., L + 1]
    (u_0 .. u_{L-1} for the tests, u_L for the draw; float32 or float64 in [0, 1)), or drawn in
    float64 from ``generator``; not both. L = 0 is allowed (only the bonus row's draw).

    Two drafts x = (1, 2) against rows p_0, p_1 and the bonus row p_2:

    >>> from gsd_core import DynamicClusters
    >>> p = torch.tensor([[0.5, 0.3, 0.2]] * 3, dtype=torch.float64)
    >>> q = torch.tensor([[0.2, 0.3, 0.5]] * 2, dtype=torch.float64)
    >>> u = torch.tensor([0.5, 0.9, 0.25], dtype=torch.float64)  # u_0, u_1 test; u_2 draws
    >>> result = verify(p, q, torch.tensor([1, 2]), uniforms=u)
    >>> result.accept_probs  # a_i = min(1, p(x_i) / q(x_i)): 0.3 / 0.3 and 0.2 / 0.5
    tensor([1.0000, 0.4000], dtype=torch.float64)
    >>> result.tokens  # x_0 kept (0.5 < 1), x_1 rejected (0.9 >= 0.4), then 0 ~ norm((p - q)+)
    tensor([ 1,  0, -1])
    >>> verify(p, q, torch.tensor([1, 2]), DynamicClusters(3), uniforms=u).accept_probs
    tensor([1.0000, 0.6250], dtype=torch.float64)
    """
    p, q, draft_tokens, uniforms = check_window(p, q, draft_tokens, uniforms, generator)
    rule, window = window_rule(rule), q.shape[-2]
    if uniforms is None:
        uniforms = torch.rand(*draft_tokens.shape[:-1], window + 1, generator=generator,
                              dtype=torch.float64, device=p.device)
    # P(x_i) and Q(x_i), the masses the rule credits and charges each draft: [..., L, 1]
    credited, charged = rule.masses(p[..., :window, :], q, draft_tokens.unsqueeze(-1))
    accept = mass_ratio(credited, charged).squeeze(-1)  # a_i = min(1, P_i / Q_i), 0 if Q_i = 0
    return resolve_window(p, q, draft_tokens, accept, uniforms, rule)


def accept_probability(p: Tensor, q: Tensor, tokens: Tensor | int, rule: object = None) -> Tensor:
    """a(x) = min(1, P(x) / Q(x)) of the rule for drafted tokens: p, q [..., V]; tokens an int
    (returns [...]) or [T] / [..., T] (returns [..., T]; torch.arange(V): every token)."""
    p, q = check_pair(p, q)
    x = check_tokens(tokens, p.shape[-1], p.device)
    rows = x.reshape(-1).expand(*p.shape[:-1], -1) if x.ndim < 2 else x  # [..., T]
    a = mass_ratio(*as_rule(rule).masses(p, q, rows))
    return a.squeeze(-1) if x.ndim == 0 else a
