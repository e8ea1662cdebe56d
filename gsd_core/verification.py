"""One step of speculative verification: acceptance, residual resampling, and a whole
window verified left to right (Leviathan et al. 2023, Alg. 1; GSD Algorithm 3).

Notation: p is the target (the model's distribution now), q the draft distribution the
drafted token was sampled from.

Acceptance scale: every acceptance test uses min(1, s * p(C)/q(C)) with s =
``acceptance_scale``. s = 1 is the exact rule. s > 1 is our definition of the naive lossy
relaxation the GSD paper compares against as "Amplify (k)" (the paper's formula was not found;
min(1, k p/q) is inferred). s > 1
accepts more often and keeps the residual unchanged (norm((p - q)+)), so the output is no
longer p even for singletons; ``output_distribution`` gives its exact law. s < 1 is accepted
as well (it rejects more and is lossy too). s must be finite and > 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ._validation import check_acceptance_scale, check_pair, check_probabilities, check_tokens, working_dtype
from .grouping import ClusterRule, _group_sum, as_cluster_rule, rule_members

RESIDUAL_MODES = ("token", "cluster")


def _ratio(p_mass: Tensor, q_mass: Tensor, scale: float = 1.0) -> Tensor:
    """min(1, s * p/q), and 0 where q = 0 (the token could not have been drafted)."""
    # Where q = 0 the quotient is inf or NaN, and discarded by the where.
    ratio = p_mass / q_mass if scale == 1.0 else (scale * p_mass) / q_mass
    return torch.where(q_mass > 0, ratio.clamp(max=1.0), 0.0)


def accept_probability(
    p: Tensor, q: Tensor, token: Tensor | int, cluster: Tensor | None = None, *, acceptance_scale: float = 1.0
) -> Tensor:
    """Probability of accepting the drafted ``token``: min(1, s * p(C) / q(C)), s = acceptance_scale.

    C is the bool mask ``cluster`` [..., V] (it must contain the token), or {token} when None
    (standard speculative sampling, min(1, p(x)/q(x))). q(C) = 0 gives 0. s = 1 is the exact
    rule; s > 1 is the lossy "Amplify" relaxation. p, q: [..., V]; token: [...]. Returns [...].
    """
    scale = check_acceptance_scale(acceptance_scale)
    p, q = check_pair(p, q)
    shape = torch.broadcast_shapes(p.shape, q.shape)
    token = check_tokens(token, shape[-1]).to(p.device).expand(shape[:-1]).unsqueeze(-1)
    if cluster is None:
        return _ratio(p.expand(shape).gather(-1, token), q.expand(shape).gather(-1, token), scale).squeeze(-1)
    if not isinstance(cluster, Tensor) or cluster.dtype != torch.bool or cluster.shape[-1] != shape[-1]:
        raise ValueError(f"cluster must be a bool mask [..., V={shape[-1]}]")
    cluster = cluster.expand(shape)
    if not bool(cluster.gather(-1, token).all()):
        raise ValueError("cluster must contain the drafted token")
    return _ratio((p * cluster).sum(-1), (q * cluster).sum(-1), scale)


def _partition_labels(rule: ClusterRule | None, p: Tensor) -> Tensor | None:
    if rule is None:
        return None
    if not rule.is_partition:
        raise ValueError(
            f"the cluster-exact residual needs a partition; {type(rule).__name__} is token-dependent "
            "(use residual='token', or a partition such as RankBinnedClusters or fixed labels)"
        )
    return rule.partition_labels(p)


def _residual(p: Tensor, q: Tensor, labels: Tensor | None) -> Tensor:
    """norm((p - q)+), or with labels the cluster-exact residual; p where the residual mass is ~0."""
    tiny = torch.finfo(p.dtype).eps
    if labels is None:
        excess = (p - q).clamp(min=0)
        mass = excess.sum(-1, keepdim=True)
        out = excess / mass.clamp(min=tiny)
    else:
        labels = labels.expand(torch.broadcast_shapes(p.shape, q.shape))
        p_group, q_group = _group_sum(p, labels), _group_sum(q, labels)
        excess = (p_group - q_group).clamp(min=0)
        mass = excess.sum(-1, keepdim=True)
        # P(cluster) from norm((p' - q')+), then P(token | cluster) = p(y) / p'(C).
        weight = excess / mass.clamp(min=tiny) / p_group.clamp(min=torch.finfo(p.dtype).tiny)
        out = p * weight.gather(-1, labels)
    return torch.where(mass > tiny, out, p.expand_as(out))


def residual_distribution(p: Tensor, q: Tensor, labels: Tensor | ClusterRule | None = None) -> Tensor:
    """The distribution to resample from after a rejection.

    Token level (the paper, SJD): r = (p - q)+ / sum (p - q)+.
    With partition ``labels`` [V] (or a partition rule such as ``RankBinnedClusters``), the
    cluster-exact variant: a cluster C ~ norm((p' - q')+) over cluster masses, then a token
    y ~ p(y | C) = p(y) / p'(C); it keeps every cluster's output mass equal to p'(C) (proofs/03).
    When the residual mass is zero (p == q up to rounding, so a rejection has probability 0)
    p itself is returned: never NaN, never an out-of-range index.
    p, q: [..., V]. Returns [..., V].
    """
    p, q = check_pair(p, q)
    rule = as_cluster_rule(labels, p.shape[-1])
    return _residual(p, q, _partition_labels(rule, p))


def sample_categorical(dist: Tensor, uniform: Tensor) -> Tensor:
    """Inverse-CDF draw: the first token y with cdf(y) > u * total. dist: [..., V] (unnormalised
    weights >= 0 with a positive total), uniform: [...] in [0, 1).

    Never returns a zero-probability token: where rounding puts u * total at or above the
    final cdf value, the draw falls back to the first token at which the cdf reaches its total
    (that token has positive weight, as does every first crossing of the cdf)."""
    cdf = dist.cumsum(-1)
    total = cdf[..., -1:]
    target = uniform.to(cdf.dtype).unsqueeze(-1) * total
    cdf = cdf.contiguous()
    index = torch.searchsorted(cdf, target.contiguous(), right=True).squeeze(-1)
    last = torch.searchsorted(cdf, total.contiguous()).squeeze(-1)
    return torch.minimum(index, last)


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of verifying one window.

    num_accepted: [...] drafts accepted (the leading run of acceptances).
    tokens: [..., L + 1] emitted tokens: the accepted prefix, then the resampled (or bonus)
    token, then -1 padding. num_emitted: [...] = num_accepted + (1 if a token was resampled
    or a bonus row was given). accept_probs: [..., L] min(1, p(C)/q(C)) per position.
    """

    num_accepted: Tensor
    tokens: Tensor
    num_emitted: Tensor
    accept_probs: Tensor


def _cluster_masses(p: Tensor, q: Tensor, token: Tensor, rule: ClusterRule | None) -> tuple[Tensor, Tensor]:
    """p(C(x)), q(C(x)) for tokens [...] against rows p, q [..., V]."""
    if rule is None:
        t = token.unsqueeze(-1)
        return p.gather(-1, t).squeeze(-1), q.gather(-1, t).squeeze(-1)
    index, keep = rule_members(rule, p, token, q)
    keep = keep.to(p.dtype)
    return (p.gather(-1, index) * keep).sum(-1), (q.gather(-1, index) * keep).sum(-1)


def _accept_probs_in_rounds(
    p: Tensor, q: Tensor, draft_tokens: Tensor, rule: ClusterRule | None, scale: float, uniforms: Tensor
) -> Tensor:
    """accept_probs [..., L] evaluated in rounds of doubling length (positions 0, 1-2, 3-6,
    7-14, ...): a round covers only the windows that accepted every position before it, and
    the rest stay NaN. Same values where evaluated; the clusters computed are at most about
    twice those the windows need, in log2(L) + 1 rounds at most.
    p, q: [..., L, V]; draft_tokens [..., L]; uniforms [..., >= L]."""
    batch, window = p.shape[:-2], p.shape[-2]
    if rule is None:  # singletons cost two gathers: evaluate every position at once
        return _ratio(*_cluster_masses(p, q, draft_tokens, rule), scale)
    out = torch.full((*batch, window), torch.nan, dtype=p.dtype, device=p.device)
    start, size = 0, 1
    go = None  # windows (as a batch index) still accepting; None: all of them
    while start < window:
        stop = min(window, start + size)
        if len(batch) == 0:
            probs = _ratio(*_cluster_masses(p[start:stop], q[start:stop], draft_tokens[start:stop], rule), scale)
            out[start:stop] = probs
            if stop == window or not bool((uniforms[start:stop] < probs).all()):
                break
        else:
            # Copy only the windows that continue (p may be a strided view of a larger tensor).
            index = (slice(None),) * len(batch) if go is None else go
            rows = (*index, slice(start, stop))
            probs = _ratio(*_cluster_masses(p[rows], q[rows], draft_tokens[rows], rule), scale)
            out[rows] = probs
            if stop == window:
                break
            accepted_all = (uniforms[..., :stop] < out[..., :stop]).all(-1)  # NaN compares False
            if not bool(accepted_all.any()):
                break
            go = accepted_all.nonzero(as_tuple=True)
        start, size = stop, 2 * size
    return out


def _verify_one_window(
    p: Tensor,
    q: Tensor,
    draft_tokens: Tensor,
    rule: ClusterRule | None,
    cluster_residual: bool,
    uniforms: Tensor,
    scale: float,
    stop_early: bool,
) -> VerifyResult:
    """``verify`` for a single window (no batch dimensions), as the decoding loop calls it:
    the same computation, with the stopping row picked by a Python index instead of gathers
    and the emitted tokens written in place. p: [L or L+1, V]; q: [L, V]; draft_tokens: [L];
    uniforms: [L + 1]."""
    window = q.shape[0]
    if stop_early and window > 1:
        accept_probs = _accept_probs_in_rounds(p[:window], q, draft_tokens, rule, scale, uniforms)
    else:
        accept_probs = _ratio(*_cluster_masses(p[:window], q, draft_tokens, rule), scale)
    num_accepted = (uniforms[:window] < accept_probs).to(torch.int64).cumprod(-1).sum(-1)
    accepted = int(num_accepted)
    if stop_early and accepted + 1 < window:
        accept_probs[accepted + 1 :] = torch.nan  # report only positions up to the first rejection
    tokens = torch.full((window + 1,), -1, dtype=torch.int64, device=p.device)
    tokens[:accepted] = draft_tokens[:accepted]
    has_bonus = p.shape[0] == window + 1
    emits_extra = accepted < window or has_bonus
    if emits_extra:
        if accepted == window:  # all accepted: the bonus row
            dist = p[window]
        else:
            p_stop, q_stop = p[accepted], q[accepted]
            labels = rule.partition_labels(p_stop) if cluster_residual and rule is not None else None
            dist = _residual(p_stop, q_stop, labels)
        tokens[accepted] = sample_categorical(dist, uniforms[window])
    return VerifyResult(num_accepted, tokens, num_accepted + int(emits_extra), accept_probs)


def verify(
    p: Tensor,
    q: Tensor,
    draft_tokens: Tensor,
    clusters: object = None,
    residual: str = "token",
    generator: torch.Generator | None = None,
    *,
    uniforms: Tensor | None = None,
    validate: bool = True,
    acceptance_scale: float = 1.0,
    stop_early: bool = False,
) -> VerifyResult:
    """Verify one window of L drafted tokens left to right (GSD Algorithm 3; SD when clusters=None).

    Position i accepts with probability min(1, s * p_i(C_i) / q_i(C_i)) (u_i < that, u_i ~ U[0, 1);
    s = ``acceptance_scale``, 1 for the exact rule, > 1 for the lossy "Amplify" relaxation);
    the first rejection is resampled from the residual of its row and ends the window. If all
    L are accepted and p has an (L+1)-th row, a bonus token is drawn from it.

    p: [..., L or L+1, V] targets; q: [..., L, V] drafts; draft_tokens: [..., L].
    clusters: None, partition labels [V], or a rule (``DynamicClusters``, ``RankBinnedClusters``).
    residual: "token" (the paper's norm((p - q)+)) or "cluster" (cluster-exact; partitions only).
    Randomness: ``uniforms`` [..., L + 1] if given (acceptance tests, then the inverse-CDF
    draw), else drawn from ``generator``. Vectorised over the window and the batch.
    stop_early: evaluate the positions in vectorised rounds of doubling length (0, 1-2, 3-6,
    ...), each only for the windows that accepted every earlier position: same decisions and
    tokens, much less work when windows stop early (e.g. random draft initialisation), but
    accept_probs is NaN after each window's first rejection. validate=False skips the input
    checks (two passes over p and q) for callers that guarantee valid inputs.
    """
    if residual not in RESIDUAL_MODES:
        raise ValueError(f"unknown residual mode {residual!r}; expected one of {RESIDUAL_MODES}")
    scale = check_acceptance_scale(acceptance_scale)
    if not isinstance(p, Tensor) or not isinstance(q, Tensor) or p.ndim < 2 or q.ndim < 2:
        raise ValueError("p and q must be tensors of shape [..., L, V] (p may have L + 1 rows)")
    window = q.shape[-2]
    if p.shape[-2] not in (window, window + 1):
        raise ValueError(f"p must have L or L + 1 rows for L = {window} drafts, got {p.shape[-2]}")
    if not isinstance(draft_tokens, Tensor) or draft_tokens.ndim < 1 or draft_tokens.shape[-1] != window:
        raise ValueError(f"draft_tokens must have shape [..., L={window}]")
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(f"p and q must share the vocabulary size (last dim): {p.shape[-1]} vs {q.shape[-1]}")
    if validate:
        p, q = check_probabilities(p, "p"), check_probabilities(q, "q")
        draft_tokens = check_tokens(draft_tokens, p.shape[-1], "draft_tokens")
    dtype = working_dtype(p, q)
    p, q = p.to(dtype), q.to(dtype)
    try:
        single = p.ndim == 2 and q.ndim == 2 and draft_tokens.ndim == 1
        batch = torch.Size() if single else torch.broadcast_shapes(p.shape[:-2], q.shape[:-2], draft_tokens.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"batch shapes do not match: p {tuple(p.shape)}, q {tuple(q.shape)}, drafts {tuple(draft_tokens.shape)}"
        ) from None
    vocab = p.shape[-1]
    has_bonus = p.shape[-2] == window + 1
    p = p.expand(*batch, *p.shape[-2:])
    q = q.expand(*batch, window, vocab)
    draft_tokens = draft_tokens.to(p.device).long().expand(*batch, window)
    rule = as_cluster_rule(clusters, vocab)
    # With singletons (rule None) the cluster-exact residual is the token residual.
    if residual == "cluster" and rule is not None and not rule.is_partition:
        _partition_labels(rule, p)  # raises the explanatory error

    if uniforms is None:
        uniforms = torch.rand(*batch, window + 1, generator=generator, dtype=torch.float64, device=p.device)
    elif uniforms.shape != (*batch, window + 1):
        raise ValueError(f"uniforms must have shape {(*batch, window + 1)}, got {tuple(uniforms.shape)}")

    if len(batch) == 0:
        return _verify_one_window(p, q, draft_tokens, rule, residual == "cluster", uniforms, scale, stop_early)
    p_rows = p[..., :window, :]
    if stop_early and window > 1:
        accept_probs = _accept_probs_in_rounds(p_rows, q, draft_tokens, rule, scale, uniforms)
    else:
        accept_probs = _ratio(*_cluster_masses(p_rows, q, draft_tokens, rule), scale)
    accepted = uniforms[..., :window] < accept_probs  # NaN (not evaluated) compares False
    num_accepted = accepted.to(torch.int64).cumprod(-1).sum(-1)
    if stop_early and window > 1:  # report only positions up to the first rejection
        positions = torch.arange(window, device=p.device)
        accept_probs = torch.where(positions <= num_accepted.unsqueeze(-1), accept_probs, torch.nan)

    # The row where the window stops: the first rejection (or, if all accepted, the bonus row).
    stop = num_accepted.clamp(max=window - 1).unsqueeze(-1).unsqueeze(-1).expand(*batch, 1, vocab)
    p_stop, q_stop = p.gather(-2, stop).squeeze(-2), q.gather(-2, stop).squeeze(-2)
    labels = None
    if residual == "cluster" and rule is not None:
        labels = rule.partition_labels(p_stop)
    dist = _residual(p_stop, q_stop, labels)
    all_accepted = num_accepted == window
    if has_bonus:
        dist = torch.where(all_accepted.unsqueeze(-1), p[..., window, :], dist)
    new_token = sample_categorical(dist, uniforms[..., window])
    emits_extra = ~all_accepted | has_bonus

    positions = torch.arange(window + 1, device=p.device)
    padded_drafts = torch.cat([draft_tokens, draft_tokens.new_full((*batch, 1), -1)], -1)
    tokens = torch.where(positions < num_accepted.unsqueeze(-1), padded_drafts, -1)
    at_stop = (positions == num_accepted.unsqueeze(-1)) & emits_extra.unsqueeze(-1)
    tokens = torch.where(at_stop, new_token.unsqueeze(-1), tokens)
    return VerifyResult(num_accepted, tokens, num_accepted + emits_extra.to(torch.int64), accept_probs)
