"""Exact distortion accounting: TV(one-step output law, p) for every verified position.

For a verified position with target row p and draft row q, the token it emits has an exactly
known law out(p, q) (gsd_core.output_distribution, proofs/06 and 08): draw x ~ q, accept with
a(x), else resample from the residual. The distortion of that position is

    D = TV(out, p) = 1/2 sum_y |out(y) - p(y)|,

0 for standard speculative sampling (proofs/02) and for a bonus token (drawn from p itself), and
noise-free: no sampling, no quality proxy. Rows are checked at their own precision (as
everywhere in gsd_core), then taken to float64 and renormalised, so that the rounding of a
float32 softmax (~1e-8 a row) is not counted as distortion. The method is a gsd_core rule, as
``verify`` takes it (``decode.methods.ResolvedMethod.rule`` builds it from a decoding method):
None (SD / SJD), ``DynamicClusters`` (GSD), ``RankBinnedClusters`` (token or cluster residual),
``Amplify(k, rule)``, ``Lantern``, or any rule: what a rule's class registers in
``gsd_lab.engine.capabilities`` picks the path, else gsd_core's enumeration of the law.

Cost per rule and the fixed summation order: docs/decoding.md.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

from gsd_core import Rule, as_rule, check_pair, fixed_order_sum, output_distribution, output_law

from .. import rules  # noqa: F401 (the rules' accounting paths, registered on import)
from ..engine import support_accept
from ..engine.capabilities import direct_tv, embedding_filter, member_slots, rows_of

_MAX_ELEMENTS = 1 << 22  # probabilities per chunk of rows


def _check_rows(p: object, q: object) -> tuple[Tensor, Tensor]:
    if not isinstance(p, Tensor) or not isinstance(q, Tensor):
        raise ValueError("p and q must be tensors of rows [L, V]")
    if p.ndim != 2 or q.ndim != 2 or p.shape != q.shape:
        raise ValueError(
            "p and q must be rows of one shape [L, V] (one target and one draft "
            f"row per position), got {tuple(p.shape)} and {tuple(q.shape)}"
        )
    p, q = check_pair(p, q)  # rows sum to 1 within their own precision's tolerance, >= 0, finite
    # float64, renormalised: a float32 softmax is off by ~1e-8 per row, which would otherwise
    # show up as distortion of every method, standard SD included.
    p, q = p.to(torch.float64), q.to(torch.float64)
    return p / fixed_order_sum(p, keepdim=True), q / fixed_order_sum(q, keepdim=True)


# --- Laws on the support of q (what makes accounting affordable at V = 8192) ---
#
# The embedding filter ||e_y - e_x||^2 <= d of dynamic clusters depends on the pair alone, so it
# is read from a [V, V] bool table built once per (embeddings, d) instead of gathering [K, M, D]
# embedding differences per row (the gather dominates the row's cost at V = 8203).

# (embeddings as passed, their float64 copy, d, table); at most 2 entries (~67 MB each at V = 8192)
_ADJACENCY_CACHE: list[tuple[Tensor, Tensor, float, Tensor]] = []


def embedding_adjacency(
    embeddings: Tensor, max_distance: float, vocab: int, *, chunk_rows: int = 512
) -> Tensor:
    """bool [V, V]: ||e_y - e_x||^2 <= max_distance for the first V rows of ``embeddings``, the
    decision of ``DynamicClusters``' filter (float64 differences, squared, summed over D).

    Screened with the expansion |e_x|^2 + |e_y|^2 - 2 e_x.e_y (one matmul per chunk of rows:
    O(V^2 D) flops, not O(V^2 D) memory traffic); pairs whose expanded distance lies within
    1e-9 (|e_x|^2 + |e_y|^2 + 1) of the threshold, where the expansion's rounding could flip the
    decision, are recomputed by gsd_core's own formula. Cached (two entries) by embeddings and d."""
    for source, cached, distance, table in _ADJACENCY_CACHE:
        if source is embeddings and distance == max_distance and table.shape[0] == vocab:
            return table  # the same tensor object: no comparison needed
    emb = embeddings[:vocab].detach().to(torch.float64)
    for index, (source, cached, distance, table) in enumerate(_ADJACENCY_CACHE):
        if (
            distance == max_distance
            and table.shape[0] == vocab
            and cached.shape == emb.shape
            and cached.device == emb.device
            and torch.equal(cached, emb)
        ):
            _ADJACENCY_CACHE[index] = (embeddings, cached, distance, table)  # next time by identity
            return table
    norms = emb.square().sum(-1)
    table = torch.empty(vocab, vocab, dtype=torch.bool, device=emb.device)
    for start in range(0, vocab, chunk_rows):  # chunks of rows: O(chunk V) memory
        rows = emb[start : start + chunk_rows]
        scale = norms[start : start + chunk_rows, None] + norms[None, :]
        expanded = scale - 2 * rows @ emb.T
        table[start : start + chunk_rows] = expanded <= max_distance
        near = ((expanded - max_distance).abs() <= 1e-9 * (scale + 1)).nonzero()
        if near.numel():
            x, y = near[:, 0] + start, near[:, 1]
            exact = (emb[y] - emb[x]).square().sum(-1)  # gsd_core's formula: e_y - e_x
            table[x, y] = exact <= max_distance
    _ADJACENCY_CACHE.insert(0, (embeddings, emb, max_distance, table))
    del _ADJACENCY_CACHE[2:]
    return table


def support_output_laws(
    p: Tensor, q: Tensor, rule: Rule, *, max_table: int | None = None, chunk_elements: int = 1 << 24
) -> Tensor:
    """``gsd_core.output_distribution(p, q, rule)`` for a rule with ``member_slots`` (dynamic
    clusters, LANTERN, Amplify of them), with a(x) on the support of q only: rows p, q [N, V]
    float64 -> [N, V], bit for bit gsd_core's law.

    Member tables [N, K, M] (K the widest support of q, M the window's slots or LANTERN's k) of
    at most ``chunk_elements`` entries: rows in chunks. An embedding filter (``embedding_filter``)
    reads a one-off [V, V] table (``embedding_adjacency``) when V^2 <= ``max_table`` (default
    2^27 bools on a CPU, V <= 11585, the stand-in's 8203; 2^33 on a GPU), else gsd_core's
    filter on the embedding differences (O(N K M D) time)."""
    n, vocab = p.shape
    slots = member_slots(rule, vocab)
    if slots is None:
        raise ValueError(
            f"{type(rule).__name__} has no members per token (capabilities.member_slots): its "
            "law is gsd_core.output_distribution's"
        )
    width = max(1, int((q > 0).sum(-1).max())) if n else 1
    rows = max(1, chunk_elements // (width * slots))
    if n > rows:  # bounded memory
        return torch.cat(
            [
                support_output_laws(
                    p[i : i + rows],
                    q[i : i + rows],
                    rule,
                    max_table=max_table,
                    chunk_elements=chunk_elements,
                )
                for i in range(0, n, rows)
            ]
        )
    adjacency, filter_ = None, embedding_filter(rule)
    if filter_ is not None:
        embeddings, max_distance = filter_
        if embeddings.shape[0] < vocab:
            raise ValueError(
                f"embeddings has {embeddings.shape[0]} rows but the vocabulary has {vocab} tokens"
            )
        if (
            max_table is None
        ):  # 128 MB of bools on a CPU; 8 GB on a GPU (Lumina-mGPT's 65,536^2: 4.3 GB)
            max_table = (1 << 33) if p.device.type == "cuda" else (1 << 27)
        if (
            vocab * vocab <= max_table
        ):  # else (Lumina-mGPT: 65,536) gsd_core's filter, in chunks of tokens
            adjacency = embedding_adjacency(embeddings.to(p.device), max_distance, vocab)
    accept = support_accept(rule, p, q, adjacency=adjacency, chunk_elements=chunk_elements)
    return output_law(rule, p, q, accept)


def one_step_output_laws(p: Tensor, q: Tensor, rule: object = None) -> Tensor:
    """The exact law out_i of the token verified position i emits, for rows p, q [L, V]:
    ``gsd_core.output_distribution`` row by row, in float64. Returns [L, V]; O(L V) memory
    (use ``exact_distortion`` for the distortion alone)."""
    return targets_and_laws(p, q, rule)[1]


def targets_and_laws(p: Tensor, q: Tensor, rule: object = None) -> tuple[Tensor, Tensor]:
    """(p_i, out_i): the target rows as the laws were computed from them (float64, renormalised in
    the fixed order) and ``one_step_output_laws``, both [L, V]: the one path to the law that every
    distortion compares with its p (TV here, W1 in ``gsd_lab.accounting.transport``)."""
    p, q = _check_rows(p, q)
    rule = as_rule(rule)
    if member_slots(rule, p.shape[-1]) is not None:
        return p, support_output_laws(p, q, rule)
    return p, output_distribution(p, q, rule)


def exact_distortion(
    p: Tensor, q: Tensor, rule: object = None, *, max_elements: int = _MAX_ELEMENTS
) -> Tensor:
    """TV(out_i, p_i) for every row i: p, q [L, V] -> float64 [L], batched (one call per chunk
    of rows, at most ``max_elements`` // V rows at a time; one call for a decoding window).
    rule: as ``verify`` takes it (module docstring). 0 (up to rounding, ~1e-16) for SD."""
    p, q = _check_rows(p, q)
    rule = as_rule(rule)
    if max_elements < 1:
        raise ValueError(f"max_elements must be >= 1, got {max_elements!r}")
    rows = max(1, max_elements // max(1, p.shape[-1]))
    parts = []
    for start in range(0, p.shape[0], rows):  # chunks of rows: bounded memory for long runs
        p_part, q_part = p[start : start + rows], q[start : start + rows]
        rule_part = rows_of(rule, slice(start, start + rows))  # a per-row rule: these rows'
        tv = direct_tv(rule_part, p_part, q_part)
        if tv is None:
            out = one_step_output_laws(p_part, q_part, rule_part)
            tv = 0.5 * fixed_order_sum((out - p_part).abs())
        parts.append(tv)
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64, device=p.device)


def emitted_distortion(p: Tensor, q: Tensor, num_accepted: int, rule: object = None) -> Tensor:
    """The distortion of each token one verified window emitted, in order: float64 [E].

    p: [L or L + 1, V] (the window's target rows, with the bonus row if any); q: [L, V];
    num_accepted: a (the accepted prefix, as ``verify`` returned it). Positions 0..min(a, L - 1)
    were verified and get TV(out_i, p_i); when a = L and p has a bonus row the bonus token is an
    exact draw from p_L and gets 0. E = the window's number of emitted tokens."""
    if not isinstance(p, Tensor) or not isinstance(q, Tensor) or p.ndim != 2 or q.ndim != 2:
        raise ValueError("p and q must be tensors of rows: p [L or L + 1, V], q [L, V]")
    window = q.shape[0]
    if p.shape[0] not in (window, window + 1):
        raise ValueError(f"p must have L or L + 1 rows for L = {window} drafts, got {p.shape[0]}")
    if (
        isinstance(num_accepted, bool)
        or not isinstance(num_accepted, int)
        or not 0 <= num_accepted <= window
    ):
        raise ValueError(f"num_accepted must be an int in [0, {window}], got {num_accepted!r}")
    verified = min(num_accepted + 1, window)
    tv = exact_distortion(p[:verified], q[:verified], rule)
    if num_accepted == window and p.shape[0] == window + 1:
        tv = torch.cat([tv, tv.new_zeros(1)])
    return tv


class DistortionLog:
    """Per-token exact distortion of one decoding call (``gsd_lab.decode.loop.generate`` with
    ``record_distortion=True``): D_t = TV(out_t, p_t) for every emitted token t, in float64.

    ``add`` takes one forward pass's rows (p [L + 1, V], q [L, V], the accepted count a) and
    writes the a + 1 committed tokens' distortions (``emitted_distortion``; an AR step, L = 0,
    writes 0: a draw from p itself). It draws no random numbers, so decoding with and without
    the log emits the same tokens. ``seconds`` is the wall time spent here (host syncs
    included), kept apart from the method's decoding time: accounting is a measurement, not
    part of the method (O(K G) per verified row for dynamic clusters, K the support of q; O(V log V)
    for rank bins; O(K k) for LANTERN: the module docstring)."""

    def __init__(self, capacity: int, device: torch.device, rule: object = None) -> None:
        self.values = torch.zeros(capacity, dtype=torch.float64, device=device)
        self.rule = as_rule(rule)
        self.seconds = 0.0

    def add(self, start: int, p: Tensor, q: Tensor, num_accepted: int) -> Tensor | None:
        """Write the distortions of tokens start .. start + num_accepted (one forward pass) and
        return them ([num_accepted + 1], None for an AR step)."""
        began = time.perf_counter()
        tv = None
        if q.shape[0] > 0:  # an AR step (L = 0) leaves its 0 in place
            tv = emitted_distortion(p, q, num_accepted, self.rule)
            self.values[start : start + tv.numel()] = tv
        self.seconds += time.perf_counter() - began
        return tv

    def result(self, num_tokens: int) -> Tensor:
        """[num_tokens] float64 on the CPU."""
        return self.values[:num_tokens].cpu()
