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
from functools import lru_cache

import torch
from torch import Tensor

from ._validation import (
    check_acceptance_scale,
    check_device,
    check_pair,
    check_probability_tensor,
    check_token_tensor,
    check_tokens,
    check_uniform_tensor,
    host_ranges,
    judge_probabilities,
    judge_tokens,
    judge_uniforms,
    probability_parts,
    working_dtype,
)
from .grouping import (
    ClusterRule,
    DynamicClusters,
    _arange,
    _group_sum,
    _SupportSize,
    as_cluster_rule,
    rule_members,
)

RESIDUAL_MODES = ("token", "cluster")


def _ratio(p_mass: Tensor, q_mass: Tensor, scale: float = 1.0) -> Tensor:
    """min(1, s * p/q), and 0 where q = 0 (the token could not have been drafted).

    Computed as min(s p, q) / q: for q > 0 it is s p / q when s p < q and q / q = 1 exactly
    otherwise (IEEE division is correctly rounded), so bit for bit min(1, s p / q); for q = 0 it
    is 0 / 0 = NaN, mapped to 0. Three elementwise kernels where a quotient, clamp and mask take
    four. Invalid (unvalidated) NaN masses also give 0: such a draft is rejected."""
    credited = p_mass if scale == 1.0 else scale * p_mass
    return torch.minimum(credited, q_mass).div_(q_mass).nan_to_num_(0.0)


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
    token = check_tokens(token, shape[-1], device=p.device).expand(shape[:-1]).unsqueeze(-1)
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


def _residual(p: Tensor, q: Tensor, labels: Tensor | None, normalise: bool = True) -> Tensor:
    """norm((p - q)+), or with labels the cluster-exact residual; p where the residual mass is
    ~0. normalise=False (token level only): the weights (p - q)+ themselves, for sampling."""
    tiny = torch.finfo(p.dtype).eps
    if labels is None:
        excess = (p - q).clamp(min=0)
        mass = excess.sum(-1, keepdim=True)
        if not normalise:
            return torch.where(mass > tiny, excess, p)
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


def _draw(dist: Tensor, uniform: Tensor) -> Tensor:
    """Inverse-CDF draw without checks: the first y with cdf(y) > u * total, the target kept
    below the total so that rounding never passes the last positive weight; always in
    [0, V), whatever the row holds (a NaN row gives some id in range, no sync).
    dist: [..., V]; uniform: [..., 1] (the shape of the total). Returns int64 [..., 1]."""
    cdf = dist.cumsum(-1)
    total = cdf[..., -1:]
    if uniform.dtype != cdf.dtype:
        uniform = uniform.to(cdf.dtype)
    target = torch.minimum(uniform * total, torch.nextafter(total, _zero(cdf.dtype, cdf.device)))
    return torch.searchsorted(cdf, target, right=True).clamp_(max=dist.shape[-1] - 1)


@lru_cache(maxsize=16)
def _zero(dtype: torch.dtype, device: torch.device) -> Tensor:
    return torch.zeros((), dtype=dtype, device=device)


def sample_categorical(dist: Tensor, uniform: Tensor, *, validate: bool = True) -> Tensor:
    """Inverse-CDF draw: the first token y with cdf(y) > u * total. dist: [..., V] (unnormalised
    weights >= 0 with a positive finite total), uniform: [...] in [0, 1). Returns int64 [...].

    Never returns a zero-probability token: where rounding puts u * total at or above the
    final cdf value, the draw falls back to the first token at which the cdf reaches its total
    (that token has positive weight, as does every first crossing of the cdf). Never returns
    an id outside [0, V): with ``validate`` (one host sync) a row with NaN, inf, a negative
    weight or a zero total raises ``ValueError``; without it such a row gives some id in range.
    """
    if not isinstance(dist, Tensor) or not dist.is_floating_point() or dist.ndim < 1 or dist.shape[-1] < 1:
        raise ValueError("dist must be a floating-point tensor [..., V] of weights, V >= 1")
    if not isinstance(uniform, Tensor) or not uniform.is_floating_point():
        raise ValueError("uniform must be a floating-point tensor of U[0, 1) draws")
    check_device(uniform, dist.device, "uniform", "dist")
    index = _draw(dist, uniform.unsqueeze(-1)).squeeze(-1)
    if validate and dist.numel():
        sums, minima, u_range = host_ranges([dist.sum(-1).reshape(-1), dist.amin(-1).reshape(-1), uniform.reshape(-1)])
        if not all(v == v and abs(v) != float("inf") for v in (*sums, *minima)):
            raise ValueError("dist contains NaN or inf: cannot sample")
        if minima[0] < 0 or sums[0] <= 0:
            raise ValueError("dist must hold weights >= 0 with a positive total in every row")
        judge_uniforms(u_range)
    return index


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


def _cluster_masses(p: Tensor, q: Tensor, token: Tensor, rule: ClusterRule | None,
                    support: Tensor | _SupportSize | None = None) -> tuple[Tensor, Tensor]:
    """p(C(x)), q(C(x)) for tokens [...] against rows p, q [..., V]; ``support``: ids [..., K]
    including every id with p > 0 per row, or the rows' support sizes, used by
    ``DynamicClusters`` ranking by p."""
    if rule is None:
        t = token.unsqueeze(-1)
        return p.gather(-1, t).squeeze(-1), q.gather(-1, t).squeeze(-1)
    if support is not None and uses_support(rule):
        index, keep = rule._members(p, token, q, support)
    else:
        index, keep = rule_members(rule, p, token, q)
    return (torch.where(keep, p.gather(-1, index), 0.0).sum(-1),
            torch.where(keep, q.gather(-1, index), 0.0).sum(-1))


def _check_verify_inputs(
    p: object, q: object, draft_tokens: object, uniforms: object, generator: torch.Generator | None
) -> tuple[torch.Size, int, bool]:
    """Shapes, dtypes and devices of ``verify``'s arguments (no values read). Returns the batch
    shape, the window length L and whether p has a bonus row."""
    if not isinstance(p, Tensor) or not isinstance(q, Tensor) or p.ndim < 2 or q.ndim < 2:
        raise ValueError("p and q must be tensors of shape [..., L, V] (p may have L + 1 rows)")
    check_probability_tensor(p, "p"), check_probability_tensor(q, "q")
    window = q.shape[-2]
    if p.shape[-2] not in (window, window + 1):
        raise ValueError(f"p must have L or L + 1 rows for L = {window} drafts, got {p.shape[-2]}")
    if not isinstance(draft_tokens, Tensor) or draft_tokens.ndim < 1 or draft_tokens.shape[-1] != window:
        raise ValueError(f"draft_tokens must have shape [..., L={window}]")
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(f"p and q must share the vocabulary size (last dim): {p.shape[-1]} vs {q.shape[-1]}")
    check_device(q, p.device, "q")
    check_token_tensor(draft_tokens, p.device, "draft_tokens")
    try:
        batch = torch.broadcast_shapes(p.shape[:-2], q.shape[:-2], draft_tokens.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"batch shapes do not match: p {tuple(p.shape)}, q {tuple(q.shape)}, drafts {tuple(draft_tokens.shape)}"
        ) from None
    if uniforms is not None:
        check_uniform_tensor(uniforms, (*batch, window + 1), p.device)
    elif generator is not None and torch.device(generator.device).type != p.device.type:
        raise ValueError(f"generator is on {generator.device} but p is on {p.device}")
    return batch, window, p.shape[-2] == window + 1


def _check_support(support: object, batch: torch.Size, window: int, device: torch.device) -> Tensor:
    """Shape, dtype and device of ``verify``'s ``support`` (values: ``_support_parts``): integer
    ids [..., L, K], K >= 1, leading dims that broadcast to the batch (and do not widen it).
    Returns it as int64."""
    if (not isinstance(support, Tensor) or support.ndim < 2 or support.shape[-2] != window
            or support.shape[-1] < 1):
        got = tuple(support.shape) if isinstance(support, Tensor) else type(support).__name__
        raise ValueError(f"support must be a tensor of token ids [..., L={window}, K >= 1] "
                         f"(one row per draft), got {got}")
    support = check_token_tensor(support, device, "support")
    try:
        fits = torch.broadcast_shapes(support.shape[:-2], batch) == batch
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"support's batch shape {tuple(support.shape[:-2])} does not broadcast to "
                         f"the batch shape {tuple(batch)} of p, q and draft_tokens")
    return support


def _support_parts(p_rows: Tensor, support: Tensor, batch: torch.Size) -> list[Tensor]:
    """What ``verify`` reads back to check ``support``: (min, max) of its ids, and the row
    maxima and minima of r = p - (the support's values p(s) taken back off at s). r = 0 iff
    the support holds every id with p > 0 of its row, each once: a missing positive id leaves
    r = p > 0, a repeated one r = -p < 0 (ids with p = 0 may repeat). Exact: p(s) - p(s) = 0.
    p_rows: [..., L, V] in the caller's dtype; support: [..., L, K]. One O(N V) copy and two
    reductions."""
    vocab, rows_shape = p_rows.shape[-1], (*batch, *p_rows.shape[-2:])
    rows = p_rows if p_rows.shape == rows_shape else p_rows.expand(rows_shape)
    safe = support.clamp(0, vocab - 1)  # in range for the reads below, before the read-back
    if safe.shape[:-1] != rows_shape[:-1]:
        safe = safe.expand(*rows_shape[:-1], safe.shape[-1])
    left = rows.scatter_add(-1, safe, rows.gather(-1, safe).neg())
    empty = not support.numel()
    id_range = support.new_empty(0) if empty else torch.stack(list(torch.aminmax(support)))
    row_extrema = (left.amax(-1), left.amin(-1))
    return [id_range] + [x if x.ndim == 1 else x.reshape(-1) for x in row_extrema]


def _judge_support(ranges: list[tuple[float, float] | None], vocab: int) -> None:
    """Raise the ``ValueError`` that ``_support_parts``' ranges show, if any."""
    judge_tokens(ranges[0], vocab, "support")
    if ranges[1] is not None and ranges[1][1] > 0:
        raise ValueError("support must hold every token id with p > 0 in its row of p[..., :L, :] "
                         "(ids with p = 0 may be added): a row misses one")
    if ranges[2] is not None and ranges[2][0] < 0:
        raise ValueError("support must hold each token id with p > 0 once: a row repeats one")


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
    support: Tensor | None = None,
) -> VerifyResult:
    """Verify one window of L drafted tokens left to right (GSD Algorithm 3; SD when clusters=None).

    Position i accepts with probability min(1, s * p_i(C_i) / q_i(C_i)) (u_i < that, u_i ~ U[0, 1);
    s = ``acceptance_scale``, 1 for the exact rule, > 1 for the lossy "Amplify" relaxation);
    the first rejection is resampled from the residual of its row and ends the window. If all
    L are accepted and p has an (L+1)-th row, a bonus token is drawn from it.

    p: [..., L or L+1, V] targets; q: [..., L, V] drafts; draft_tokens: [..., L], all on one
    device. clusters: None, partition labels [V], or a rule (``DynamicClusters``,
    ``RankBinnedClusters``). residual: "token" (the paper's norm((p - q)+)) or "cluster"
    (cluster-exact; partitions only). Randomness: ``uniforms`` [..., L + 1] if given
    (acceptance tests, then the inverse-CDF draw), else drawn from ``generator``.

    One pass for the whole window and batch, a fixed number of ops: the clusters of all L
    positions at once (rank windows from one sort of the support, exact under ties), then the
    stopping row's residual and one draw. No host sync but ``validate``'s one (all arguments
    reduced to a few scalars read back together; for ``DynamicClusters`` ranking by p it also
    reads the size of the largest support), and one reading that size where it is not known
    yet (rank-window rules without ``validate`` or ``support``). With ``support`` and
    ``validate=False``: no host sync at all. L = 0 is allowed: the bonus row's draw, or
    nothing without one; batch dimensions may be empty.

    support: optional ids [..., L, K] per draft row that include every id with p > 0 in p's
    rows 0..L-1, each once (ids with p = 0 may be added), e.g. the top-k ids the target was
    restricted to. ``DynamicClusters`` ranking by p then ranks these K entries instead of
    finding the support in all V: no count, no host sync, no selection over V (other rules
    ignore it). The result is the same as without it. Under ``validate`` it is checked (ids
    in range; every positive id listed once) in the same fused pass and read-back.

    stop_early: report accept_probs only up to each window's first rejection (NaN after it);
    the decisions and tokens are the same and so is the work (one pass either way).
    validate=False skips the value checks (probabilities, token ids, uniforms in [0, 1)) for
    callers that guarantee valid inputs; invalid values then give meaningless results but
    never an out-of-range token id (a NaN row still emits an id in [0, V)).
    """
    if residual not in RESIDUAL_MODES:
        raise ValueError(f"unknown residual mode {residual!r}; expected one of {RESIDUAL_MODES}")
    scale = check_acceptance_scale(acceptance_scale)
    batch, window, has_bonus = _check_verify_inputs(p, q, draft_tokens, uniforms, generator)
    vocab = p.shape[-1]
    if support is not None:
        support = _check_support(support, batch, window, p.device)
    rule = as_cluster_rule(clusters, vocab)
    if validate:
        parts = probability_parts(p) + probability_parts(q) + [draft_tokens]
        # The support sizes a p-ranked rank window needs travel with the validation read-back.
        needs_sizes = support is None and window > 0 and uses_support(rule)
        sizes = _support_sizes(p, window) if needs_sizes else None
        if support is not None:
            parts += _support_parts(p[..., :window, :], support, batch)
        elif sizes is not None:
            parts.append(sizes if sizes.ndim == 1 else sizes.reshape(-1))
        ranges = host_ranges(parts + ([] if uniforms is None else [uniforms]))  # the one sync
        judge_probabilities(p, "p", ranges[0:2])
        judge_probabilities(q, "q", ranges[2:4])
        judge_tokens(ranges[4], vocab, "draft_tokens")
        if support is not None:
            _judge_support(ranges[5:8], vocab)
        elif sizes is not None:
            sizes = sizes if sizes.shape[:-1] == batch else sizes.expand(*batch, window)
            support = _SupportSize(sizes if sizes.ndim == 1 else sizes.reshape(-1),
                                   int(ranges[5][1]) if ranges[5] is not None else 0)
        judge_uniforms(ranges[-1] if uniforms is not None else None)
    dtype = working_dtype(p, q)
    p = p if p.dtype == dtype else p.to(dtype)
    q = q if q.dtype == dtype else q.to(dtype)
    if draft_tokens.dtype != torch.int64:
        draft_tokens = draft_tokens.long()
    if p.shape[:-2] != batch:
        p = p.expand(*batch, *p.shape[-2:])
    if q.shape[:-2] != batch:
        q = q.expand(*batch, window, vocab)
    if draft_tokens.shape[:-1] != batch:
        draft_tokens = draft_tokens.expand(*batch, window)
    # With singletons (rule None) the cluster-exact residual is the token residual.
    if residual == "cluster" and rule is not None and not rule.is_partition:
        _partition_labels(rule, p)  # raises the explanatory error
    if uniforms is None:
        uniforms = torch.rand(*batch, window + 1, generator=generator, dtype=torch.float64, device=p.device)

    if window == 0:
        return _verify_empty_window(p, uniforms, has_bonus)
    accept_probs = _ratio(*_cluster_masses(p[..., :window, :], q, draft_tokens, rule, support), scale)
    # The leading run of acceptances, [..., 1] (int64).
    at = (uniforms[..., :window] < accept_probs).cumprod(-1).sum(-1, keepdim=True)
    if stop_early:  # report only positions up to the first rejection
        accept_probs = torch.where(_arange(window, p.device) <= at, accept_probs, torch.nan)

    partition = rule if residual == "cluster" and rule is not None else None
    return _finish_window(p, q, draft_tokens, uniforms, at, accept_probs, has_bonus, partition)


def uses_support(clusters: object) -> bool:
    """Whether ``verify(..., clusters, support=ids)`` uses the ids: only for ``DynamicClusters``
    ranking by p (its rank windows rank p's rows, so knowing their support spares the selection
    over V); every other rule, labels and None ignore ``support``."""
    return isinstance(clusters, DynamicClusters) and clusters.ranks_by_p


def _support_sizes(p: Tensor, window: int) -> Tensor:
    """#{y : p(y) > 0} of rows 0..L-1 of p [..., L(+1), V]: int32 [..., L]."""
    return (p[..., :window, :] > 0).sum(-1, dtype=torch.int32)


def _finish_window(p: Tensor, q: Tensor, draft_tokens: Tensor, uniforms: Tensor, at: Tensor,
                   accept_probs: Tensor, has_bonus: bool, partition=None) -> VerifyResult:
    """Everything after the accept decisions, shared by ``verify`` and ``verify_lantern``: the
    stop row at = #accepted [..., 1], the token drawn there from the residual (cluster-exact
    over ``partition``'s labels when given, else the token-level (p - q)+), the emitted tokens."""
    batch = at.shape[:-1]
    window = draft_tokens.shape[-1]
    # The row where the window stops, [..., 1, V]: the first rejection, or the bonus row when
    # all L are accepted (its draft row counts as q = 0, so the excess below is p_L itself).
    last_draft = at.clamp(max=window - 1)
    p_stop = _rows(p, at if has_bonus else last_draft)
    q_stop = _rows(q, last_draft)
    if has_bonus:
        q_stop = q_stop * (at < window).unsqueeze(-1) if batch else q_stop * (at < window)
    if partition is not None:
        dist = _residual(p_stop, q_stop, partition.partition_labels(p_stop))
    else:  # (p - q)+, sampled unnormalised; p where the excess mass is ~0
        dist = _residual(p_stop, q_stop, None, normalise=False)
    u_stop = uniforms[..., window:]
    new_token = _draw(dist, u_stop.unsqueeze(-1) if batch else u_stop).view(*batch, 1)

    # Emitted: drafts before the stop, the new token at it (unless all L were accepted
    # without a bonus row), -1 after.
    if not has_bonus:
        new_token = torch.where(at < window, new_token, -1)
    tokens = torch.cat([draft_tokens, new_token], -1).scatter(-1, at, new_token)
    tokens = torch.where(_arange(window + 1, p.device) <= at, tokens, -1)
    num_accepted = at.view(batch)
    num_emitted = num_accepted + 1 if has_bonus else num_accepted + (num_accepted < window)
    return VerifyResult(num_accepted, tokens, num_emitted, accept_probs)


def _rows(x: Tensor, index: Tensor) -> Tensor:
    """Row ``index`` [..., 1] of x [..., R, V] for every batch entry: [..., 1, V]."""
    if x.ndim == 2:  # one window: indexing with a one-element index (no sync)
        return x[index]
    return x.take_along_dim(index.unsqueeze(-1), -2)


def _verify_empty_window(p: Tensor, uniforms: Tensor, has_bonus: bool) -> VerifyResult:
    """L = 0: nothing to accept; the bonus row (if any) gives the one emitted token."""
    batch = uniforms.shape[:-1]
    zeros = torch.zeros(batch, dtype=torch.int64, device=p.device)
    empty = torch.empty(*batch, 0, dtype=p.dtype, device=p.device)
    if not has_bonus:
        return VerifyResult(zeros, torch.full((*batch, 1), -1, device=p.device), zeros, empty)
    token = _draw(p[..., 0, :], uniforms[..., 0:1])
    return VerifyResult(zeros, token, zeros + 1, empty)
