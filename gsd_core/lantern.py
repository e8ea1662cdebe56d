"""LANTERN's relaxed acceptance (Jang et al., ICLR 2025, arXiv 2410.03355), a peer of GSD.

The rule. Each token x has a *latent neighbourhood* B_k(x): x itself, then the tokens nearest
to x in an embedding space (Euclidean distance between rows of ``embeddings`` [V, D]), k
tokens in all, optionally only those within ``max_distance``. Walking B_k(x) outwards, the
target mass of the neighbours y_1, y_2, ... is credited to x as long as the cumulative
credited mass stays within the total-variation budget delta:

    m(x) = max { S_j : S_j <= delta, j = 0 .. k - 1 },   S_j = p(y_1) + ... + p(y_j),   S_0 = 0,

and the drafted token is accepted with probability a(x) = min(1, (p(x) + m(x)) / q(x)).
Moving the mass of A(x) = {y_1 .. y_j} onto x changes p by exactly TV = m(x) <= delta (the
paper's "total variation distance bound", per drafted token). On rejection the token-level
residual norm((p - q)+) is sampled, as in standard speculative sampling.

Exact output law of one step (``lantern_output_distribution``; proofs/08_lantern.md):

    out(y) = q(y) a(y) + (1 - beta) r(y),   beta = sum_x q(x) a(x),   r = norm((p - q)+),

and TV(out, p) = beta - beta_SD = sum_x min((q(x) - p(x))+, m(x)) exactly: the distortion
equals the acceptance gained over standard speculative sampling. It is at most
sum_x min((q(x) - p(x))+, delta) and at most TV(p, q), but *not* at most delta: the per-token
budget does not bound the output law (proofs/08 has an example with delta = 1/4, TV = 1).

Choices where our reading of the paper (and its released code) needed one:

1. k counts the drafted token itself: B_k(x) = {x} + (k - 1) nearest others, so k = 1 is
   standard speculative sampling. The released code's ``lantern_k`` counts only the others
   (its k = our k - 1).
2. Distance: Euclidean between embedding rows (the released code uses L2 distances between VQ
   codebook latents). Ties in distance: the smaller token id first; x itself always first,
   even when another token shares its embedding. ``max_distance`` (our addition, "within a
   distance"; None = no limit) keeps only neighbours at distance <= max_distance.
3. The budget test is ``S_j <= delta`` (inclusive) on the cumulative mass of the neighbours in
   proximity order, a prefix of B_k(x): the walk stops at the first neighbour that would
   exceed delta, it does not skip it to credit farther, lighter ones. delta must lie in
   [0, 1]; the released code's delta > 1 branch (LANTERN++'s lambda, a budget relative to
   p(x)) is not implemented and is refused.
4. Neighbours are credited whatever their own draft probability; q(x) alone is in the
   denominator (not q of the neighbourhood, unlike GSD's p(C)/q(C)).
5. Residual: norm((p - q)+) with the unmodified q. The released tree verifier zeroes q on
   the neighbourhood before resampling; that belongs to its multi-candidate tree walk, not to
   the one-draft rule, and would make the output law depend on the rejected draft.

Shapes: p, q [..., V]; neighbourhood tables [V, k] (built once from the embeddings).
Vectorised: gathers over [..., T, k], never a loop over tokens or window positions. The exact
law needs a(x) only where q(x) > 0, so it gathers O(K k) per row, K = the support of q (1 for
Jacobi's one-hot drafts, the top-k for truncated rows, V at worst).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ._validation import (
    check_pair,
    check_probabilities,
    host_ranges,
    judge_probabilities,
    judge_tokens,
    judge_uniforms,
    probability_parts,
    working_dtype,
)
from .verification import (
    VerifyResult,
    _check_verify_inputs,
    _finish_window,
    _ratio,
    _residual,
    _verify_empty_window,
)

_CHUNK_ELEMENTS = 1 << 24  # gathered entries at a time in the all-token functions


@dataclass(frozen=True)
class LatentNeighbourhoods:
    """B_k(x) for every token x: ``index`` int64 [V, k] (column 0 is x itself, then the others
    by distance, ties by id) and ``valid`` bool [V, k] (False past ``max_distance``; a prefix
    of each row). Build with ``latent_neighbourhoods``."""

    index: Tensor
    valid: Tensor

    def __post_init__(self) -> None:
        index, valid = self.index, self.valid
        if not isinstance(index, Tensor) or index.dtype != torch.int64 or index.ndim != 2 or index.shape[1] < 1:
            raise ValueError("index must be an int64 tensor [V, k], k >= 1")
        if not isinstance(valid, Tensor) or valid.dtype != torch.bool or valid.shape != index.shape:
            raise ValueError(f"valid must be a bool tensor of index's shape {tuple(index.shape)}")
        vocab = index.shape[0]
        if not bool((index[:, 0] == torch.arange(vocab, device=index.device)).all()):
            raise ValueError("column 0 of index must be the token itself (B_k(x) starts at x)")
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= vocab):
            raise ValueError(f"index has ids out of range [0, {vocab})")
        if not bool(valid[:, 0].all()):
            raise ValueError("the token itself (column 0) must be valid")

    @property
    def vocab_size(self) -> int:
        return self.index.shape[0]

    @property
    def k(self) -> int:
        return self.index.shape[1]


def latent_neighbourhoods(
    embeddings: Tensor, k: int, max_distance: float | None = None, *, chunk_elements: int = 1 << 22
) -> LatentNeighbourhoods:
    """The k-token latent neighbourhoods B_k(x) of all V tokens from ``embeddings`` [V, D].

    Distances d(x, y) = ||e_x - e_y||_2 in float64, computed directly (no |a|^2 + |b|^2 - 2ab
    expansion, so ties and thresholds are exact for integer embeddings); each row is stably
    sorted, so equal distances keep id order, with x forced first. k is clipped to V. A token
    y != x is valid iff d(x, y) <= max_distance (None: all are). Memory: ``chunk_elements``
    distances at a time (rows in chunks, a fixed number of ops per chunk); O(V^2 log V) time,
    once per embedding table.
    """
    if not isinstance(embeddings, Tensor) or embeddings.ndim != 2 or not embeddings.is_floating_point():
        raise ValueError(f"embeddings must be a float tensor [V, D], got {getattr(embeddings, 'shape', embeddings)!r}")
    if embeddings.shape[0] < 1:
        raise ValueError("embeddings must have at least one row (token)")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1 (k = 1: the token alone, standard SD), got {k!r}")
    if max_distance is not None and not (isinstance(max_distance, (int, float)) and max_distance >= 0):
        raise ValueError(f"max_distance must be a number >= 0 or None, got {max_distance!r}")
    emb = embeddings.to(torch.float64)
    if not bool(torch.isfinite(emb).all()):
        raise ValueError("embeddings contain NaN or inf")
    vocab = emb.shape[0]
    k = min(k, vocab)
    step = max(1, chunk_elements // vocab)
    index_parts, valid_parts = [], []
    for start in range(0, vocab, step):  # chunks of rows, bounded memory
        rows = torch.arange(start, min(vocab, start + step), device=emb.device)
        dist = torch.cdist(emb[rows], emb, compute_mode="donot_use_mm_for_euclid_dist")
        dist[torch.arange(rows.numel(), device=emb.device), rows] = -1.0  # x itself first
        order = torch.sort(dist, dim=-1, stable=True)
        index_parts.append(order.indices[:, :k])
        near = order.values[:, :k]
        valid_parts.append(near <= (math.inf if max_distance is None else float(max_distance)))
    return LatentNeighbourhoods(torch.cat(index_parts), torch.cat(valid_parts))


@dataclass(frozen=True)
class Lantern:
    """LANTERN's rule: the neighbourhoods B_k and the total-variation budget delta in [0, 1].
    delta = 0 or k = 1 is standard speculative sampling."""

    neighbourhoods: LatentNeighbourhoods
    delta: float

    def __post_init__(self) -> None:
        if not isinstance(self.neighbourhoods, LatentNeighbourhoods):
            raise ValueError("neighbourhoods must be a LatentNeighbourhoods (see latent_neighbourhoods)")
        delta = self.delta
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (0 <= delta <= 1):
            raise ValueError(
                f"delta must be a number in [0, 1] (a total-variation budget), got {delta!r}; "
                "LANTERN++'s relative budget (the released code's delta > 1) is not implemented"
            )

    @classmethod
    def from_embeddings(
        cls, embeddings: Tensor, k: int, delta: float, max_distance: float | None = None
    ) -> Lantern:
        return cls(latent_neighbourhoods(embeddings, k, max_distance), delta)

    def tables(self, vocab: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """(index, valid) [V, k] on ``device``; the vocabulary must be the table's."""
        hood = self.neighbourhoods
        if hood.vocab_size != vocab:
            raise ValueError(
                f"the neighbourhoods cover {hood.vocab_size} tokens but p has a vocabulary of {vocab}"
            )
        return hood.index.to(device), hood.valid.to(device)


def _credited(p: Tensor, token: Tensor, index: Tensor, valid: Tensor, delta: float) -> Tensor:
    """p(x) + m(x) for tokens [..., T] against rows p [..., V] (leading dims equal). [..., T]."""
    members = index[token]  # [..., T, k]
    probs = p.gather(-1, members.flatten(-2)).view(members.shape)
    probs = torch.where(valid[token], probs, 0.0)
    own = probs[..., 0]
    if members.shape[-1] == 1:
        return own
    # Cumulative neighbour mass is non-decreasing (also in floating point), so the S_j <= delta
    # form a prefix and the largest of them is m(x); S_0 = 0 when none fits.
    cumulative = probs[..., 1:].cumsum(-1)
    return own + torch.where(cumulative <= delta, cumulative, 0.0).amax(-1)


def lantern_credited_mass(p: Tensor, token: Tensor | int, rule: Lantern) -> Tensor:
    """p(x) + m(x): the target mass LANTERN credits to the drafted ``token`` (the numerator of
    its acceptance ratio). p: [..., V]; token: [...] (broadcast). Returns [...]."""
    p = check_probabilities(p, "p")
    index, valid = rule.tables(p.shape[-1], p.device)
    token = torch.as_tensor(token, device=p.device)
    if token.is_floating_point() or token.dtype == torch.bool:
        raise ValueError(f"token must hold integer ids, got {token.dtype}")
    batch = torch.broadcast_shapes(p.shape[:-1], token.shape)
    token = token.long().expand(batch)
    judge_tokens(host_ranges([token.reshape(-1)])[0], p.shape[-1], "token")
    return _credited(p.expand(*batch, p.shape[-1]), token.unsqueeze(-1), index, valid, rule.delta).squeeze(-1)


def _credited_in_chunks(
    rows: Tensor, token: Tensor, rule: Lantern, chunk_elements: int = _CHUNK_ELEMENTS
) -> Tensor:
    """p(x) + m(x) for tokens [N, T] against rows [N, V]: [N, T], O(T k) memory per row, at
    most ``chunk_elements`` gathered entries at a time (chunks of tokens, not single tokens)."""
    index, valid = rule.tables(rows.shape[-1], rows.device)
    n, width = token.shape
    step = max(1, chunk_elements // max(1, n * index.shape[1]))
    out = torch.empty(n, width, dtype=rows.dtype, device=rows.device)
    for start in range(0, width, step):
        out[:, start: start + step] = _credited(rows, token[:, start: start + step], index, valid, rule.delta)
    return out


def _accept_all(p: Tensor, q: Tensor, rule: Lantern) -> Tensor:
    """a(x) = min(1, (p(x) + m(x)) / q(x)) for every token, 0 where q(x) = 0: [..., V].

    a is 0 off the support of q, so m(x) is computed on that support only: the K largest
    entries of each row of q, K the largest support (one host sync reads it). Jacobi's
    one-hot drafts and top-k-truncated rows cost O(K k) per row instead of O(V k)."""
    vocab = p.shape[-1]
    p_rows, q_rows = p.reshape(-1, vocab), q.reshape(-1, vocab)
    if q_rows.shape[0] == 0:
        return torch.zeros_like(q)
    width = int((q_rows > 0).sum(-1).max())
    if 2 * width > vocab:  # a wide support: every token, no selection
        tokens = torch.arange(vocab, device=p.device).expand(p_rows.shape[0], -1)
        return _ratio(_credited_in_chunks(p_rows, tokens, rule), q_rows).view(q.shape)
    top = torch.topk(q_rows, max(1, width), dim=-1)  # distinct ids per row: the support (+ zeros)
    accept = _ratio(_credited_in_chunks(p_rows, top.indices, rule), top.values)
    return torch.zeros_like(q_rows).scatter_(-1, top.indices, accept).view(q.shape)


def _prepare(p: Tensor, q: Tensor) -> tuple[Tensor, Tensor]:
    p, q = check_pair(p, q)
    shape = torch.broadcast_shapes(p.shape, q.shape)
    return p.expand(shape), q.expand(shape)


def lantern_token_accept_probabilities(p: Tensor, q: Tensor, rule: Lantern) -> Tensor:
    """a(x) = min(1, (p(x) + m(x)) / q(x)) for every token x (0 where q(x) = 0). [..., V]."""
    p, q = _prepare(p, q)
    return _accept_all(p, q, rule)


def lantern_acceptance_rate(p: Tensor, q: Tensor, rule: Lantern) -> Tensor:
    """Exact probability that one LANTERN step accepts: beta = sum_x q(x) a(x). [..., V] -> [...]."""
    p, q = _prepare(p, q)
    return (q * _accept_all(p, q, rule)).sum(-1)


def lantern_output_distribution(p: Tensor, q: Tensor, rule: Lantern) -> Tensor:
    """Exact law of the token one LANTERN step emits: out = q a + (1 - beta) norm((p - q)+).

    a(x) = min(1, (p(x) + m(x)) / q(x)), beta = sum_x q(x) a(x) (proofs/08). delta = 0 or
    k = 1 gives out = p exactly; otherwise TV(out, p) = beta - beta_SD. p, q: [..., V]."""
    p, q = _prepare(p, q)
    accept = _accept_all(p, q, rule)
    beta = (q * accept).sum(-1, keepdim=True)
    # 1 - beta >= 0 exactly; rounding can make it -1e-16 when every draft is accepted.
    return q * accept + (1 - beta).clamp(min=0) * _residual(p, q, None)


def verify_lantern(
    p: Tensor,
    q: Tensor,
    draft_tokens: Tensor,
    rule: Lantern,
    generator: torch.Generator | None = None,
    *,
    uniforms: Tensor | None = None,
    validate: bool = True,
) -> VerifyResult:
    """Verify one window of L drafts left to right with LANTERN's relaxed acceptance.

    Position i accepts iff u_i < min(1, (p_i(x_i) + m_i(x_i)) / q_i(x_i)); the first rejection
    is resampled from norm((p_i - q_i)+) and ends the window; if all L are accepted and p has
    an (L+1)-th row, a bonus token is drawn from it. Arguments, randomness (``uniforms``
    [..., L + 1], else drawn from ``generator``), ``validate`` and the result are as in
    ``gsd_core.verify`` (clusters=None there is delta = 0 here). One pass for the whole window
    and batch: the neighbourhood masses of all L positions by one gather [..., L, k].
    """
    if not isinstance(rule, Lantern):
        raise ValueError(f"rule must be a gsd_core.Lantern, got {type(rule).__name__}")
    batch, window, has_bonus = _check_verify_inputs(p, q, draft_tokens, uniforms, generator)
    vocab = p.shape[-1]
    index, valid = rule.tables(vocab, p.device)
    if validate:
        parts = probability_parts(p) + probability_parts(q) + [draft_tokens]
        ranges = host_ranges(parts + ([] if uniforms is None else [uniforms]))  # the one sync
        judge_probabilities(p, "p", ranges[0:2])
        judge_probabilities(q, "q", ranges[2:4])
        judge_tokens(ranges[4], vocab, "draft_tokens")
        judge_uniforms(ranges[5] if uniforms is not None else None)
    dtype = working_dtype(p, q)
    p = p.to(dtype).expand(*batch, *p.shape[-2:])
    q = q.to(dtype).expand(*batch, window, vocab)
    draft_tokens = draft_tokens.long().expand(*batch, window)
    if uniforms is None:
        uniforms = torch.rand(*batch, window + 1, generator=generator, dtype=torch.float64, device=p.device)
    if window == 0:
        return _verify_empty_window(p, uniforms, has_bonus)

    credited = _credited(p[..., :window, :], draft_tokens.unsqueeze(-1), index, valid, rule.delta).squeeze(-1)
    drafted_q = q.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)
    accept_probs = _ratio(credited, drafted_q)
    at = (uniforms[..., :window] < accept_probs).cumprod(-1).sum(-1, keepdim=True)  # [..., 1]

    return _finish_window(p, q, draft_tokens, uniforms, at, accept_probs, has_bonus)
