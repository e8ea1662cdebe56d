"""Similarity-aware distortion: W1(one-step output law, p) with the distance between the codes'
decoded content as the ground cost, beside ``gsd_lab.accounting.distortion``'s TV (the why, the
estimator's derivation and the substitution cost: docs/w1-accounting.md).

- ground cost: d(x, y) = ||c_x - c_y||_2 / sqrt(D), c_y in R^D the content code y decodes to
  (the adapter's ``code_content()``); ``content_distances``;
- ``w1_from_laws``: W1(out, p) = m W1(delta+ / m, delta- / m), delta = out - p, m = TV(out, p),
  solved exactly by POT's network simplex on that support;
- ``W1Log(draws=n)``: an image's mean W1 per token, estimated from n rows drawn with probability
  proportional to their exact TV D_t (Hansen-Hurwitz: What = (T / N) mean_j W1_J / D_J, with its
  SE), by weighted reservoirs filled as tokens are emitted, from a generator of its own;
- ``substitution_cost``: S = sum_C min(q'(C), p'(C)) W1(q(. | C), p(. | C)) >= W1(out, p), for a
  partition with the cluster-exact residual at acceptance scale 1 only.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gsd_core import as_rule

from .. import rules  # noqa: F401 (the partitions' couplings, registered on import)
from ..engine.capabilities import coupling, rows_of
from .distortion import _check_rows, targets_and_laws

DEFAULT_DRAWS = (
    4  # rows solved per image in decoding runs: +22% to decoding and TV accounting on stand-in v2
)
ROUNDING_FLOOR = 1e-12  # a row whose TV is at most this is float64 rounding of out = p
_MAX_ITERATIONS = 10**9  # network simplex pivots; POT stops at optimality long before


# (content, tokens, vocab, float64 content, index) as last checked; at most 2 entries. A decoding
# run solves a few rows per image against one content table: checking it (finite, distinct ids)
# and copying it to float64 again for every row costs a sizeable share of the solve.
_CONTENT_CACHE: list[tuple[Tensor, Tensor, int, Tensor, Tensor]] = []


def _check_content(content: object, tokens: object, vocab: int) -> tuple[Tensor, Tensor]:
    """content [K, D] float, tokens [K] distinct ids < vocab -> (float64 content, index [V]: the
    content row of each vocabulary id, -1 for ids without content). Cached by the identity of
    the two tensors (the same objects: the adapter's ``code_content()`` and ``allowed_tokens``),
    so a table is checked and converted once; callers must not modify the tensors in place."""
    for source, ids, size, content64, index in _CONTENT_CACHE:
        if source is content and ids is tokens and size == vocab:
            return content64, index
    content64, index = _check_content_uncached(content, tokens, vocab)
    _CONTENT_CACHE.insert(0, (content, tokens, vocab, content64, index))
    del _CONTENT_CACHE[2:]
    return content64, index


def _check_content_uncached(
    content: object, tokens: object, vocab: int
) -> tuple[Tensor, Tensor]:
    """``_check_content`` without the cache."""
    if not isinstance(content, Tensor) or content.ndim != 2 or not content.is_floating_point():
        raise ValueError(
            "content must be a float tensor [K, D] (the adapter's "
            f"code_content()), got {content!r:.80}"
        )
    if not isinstance(tokens, Tensor) or tokens.ndim != 1 or tokens.shape[0] != content.shape[0]:
        raise ValueError(f"tokens must be ids [K] for the K = {content.shape[0]} content rows")
    if not bool(torch.isfinite(content).all()):
        raise ValueError("content has non-finite entries")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab):
        raise ValueError(f"tokens must be vocabulary ids in [0, {vocab})")
    index = torch.full((vocab,), -1, dtype=torch.long)
    index[tokens.cpu().long()] = torch.arange(tokens.numel())
    if int((index >= 0).sum()) != tokens.numel():
        raise ValueError("tokens must be distinct (one content row per token)")
    return content.detach().to("cpu", torch.float64), index


def content_distances(content: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
    """d(x, y) = ||c_x - c_y|| / sqrt(D) for content rows ``rows`` [n1] x ``cols`` [n2]: float64
    [n1, n2]. The Gram expansion |c_x|^2 + |c_y|^2 - 2 c_x.c_y (one matmul), clamped at 0: its
    rounding is ~eps (|c_x|^2 + |c_y|^2), so d is off by at most
    ~sqrt(4 eps max|c|^2) ~ 3e-8 max|c|."""
    a, b = content[rows], content[cols]
    square = (a * a).sum(-1, keepdim=True) + (b * b).sum(-1) - 2 * a @ b.T
    return square.clamp(min=0).sqrt() / math.sqrt(content.shape[1])


def _w1_of_difference(delta: Tensor, content: Tensor, index: Tensor) -> float:
    """W1 of one row's out - p (float64 [V], CPU) by POT: m * emd(delta+ / m, delta- / m)."""
    nonzero = delta != 0
    if bool((nonzero & (index < 0)).any()):
        raise ValueError(
            "the output law and p differ on tokens without decoded content (outside the "
            "adapter's allowed_tokens): W1 needs every moved token's content"
        )
    plus, minus = (delta > 0).nonzero().squeeze(-1), (delta < 0).nonzero().squeeze(-1)
    if plus.numel() == 0 or minus.numel() == 0:
        return 0.0
    a, b = delta[plus], -delta[minus]
    mass_a, mass_b = float(a.sum()), float(b.sum())  # both TV(out, p), up to rounding
    cost = content_distances(content, index[plus], index[minus])
    value, log = _emd2((a / mass_a).numpy(), (b / mass_b).numpy(), cost.numpy())
    if log["warning"] is not None:
        raise RuntimeError(
            f"POT's network simplex did not reach an optimal transport: {log['warning']}"
        )
    return 0.5 * (mass_a + mass_b) * float(value)


def _emd2(a: np.ndarray, b: np.ndarray, cost: np.ndarray) -> tuple[float, dict]:
    import ot

    return ot.emd2(a, b, cost, numItermax=_MAX_ITERATIONS, log=True)


def w1_from_laws(p: Tensor, out: Tensor, content: Tensor, tokens: Tensor) -> Tensor:
    """W1(out_i, p_i) for rows p, out [N, V] (float64, each summing to 1; ``out`` the one-step
    laws of ``accounting.distortion.one_step_output_laws``) -> float64 [N], exact (module
    docstring).

    content [K, D], tokens [K]: the decoded content of ids ``tokens`` (``code_content()`` and
    ``allowed_tokens``); out and p must agree on every other id (they do for a top-k model: no
    rule moves mass to a token neither p nor q carries)."""
    if (
        not isinstance(p, Tensor)
        or not isinstance(out, Tensor)
        or p.ndim != 2
        or p.shape != out.shape
    ):
        raise ValueError("p and out must be rows [N, V] of one shape")
    content64, index = _check_content(content, tokens, p.shape[-1])
    delta = (out.to(torch.float64) - p.to(torch.float64)).cpu()
    return torch.tensor(
        [_w1_of_difference(row, content64, index) for row in delta], dtype=torch.float64
    )


def w1_distortion(
    p: Tensor, q: Tensor, content: Tensor, tokens: Tensor, rule: object = None
) -> Tensor:
    """W1(out_i, p_i) of the one-step law of each row p, q [L, V] -> float64 [L], exact; the rule
    as ``verify`` takes it (None: SD), the rows renormalised as ``accounting.distortion`` does."""
    targets, laws = targets_and_laws(p, q, rule)
    return w1_from_laws(targets, laws, content, tokens)


# ---- the rule's own coupling ---------------------------------------------------------------------


def substitution_defined(rule: object) -> bool:
    """Whether the rule's own randomness couples the emitted token with a Y ~ p
    (docs/w1-accounting.md): SD, or a partition with the cluster-exact residual (not under
    ``Amplify``, not LANTERN): the rules with a ``gsd_lab.engine.capabilities.coupling``."""
    return coupling(as_rule(rule)) is not None


def substitution_cost(
    p: Tensor, q: Tensor, content: Tensor, tokens: Tensor, rule: object = None
) -> Tensor:
    """S_i = sum_C min(q'(C), p'(C)) W1(q_i(. | C), p_i(. | C)) for rows p, q [L, V] -> float64 [L]:
    E[d(emitted, Y)] under the rule's own cluster-level coupling with Y ~ p
    (docs/w1-accounting.md), each W1 exact (POT). ValueError where it is not defined
    (``substitution_defined``)."""
    if not substitution_defined(rule):
        raise ValueError(
            "the substitution cost is defined for SD or a partition with the cluster-exact "
            "residual (no Amplify, no LANTERN): other rules' randomness does "
            "not draw a Y ~ p (gsd_lab.accounting.transport docstring)"
        )
    targets, drafts = _check_rows(p, q)
    content64, index = _check_content(content, tokens, p.shape[-1])
    labels = coupling(as_rule(rule))(targets)
    if labels is None:
        return torch.zeros(p.shape[0], dtype=torch.float64)  # singletons: Y = the emitted token
    labels = labels.expand(targets.shape).cpu()
    targets, drafts = targets.cpu(), drafts.cpu()
    return torch.tensor(
        [
            _row_substitution(targets[i], drafts[i], labels[i], content64, index)
            for i in range(p.shape[0])
        ],
        dtype=torch.float64,
    )


def _row_substitution(
    p: Tensor, q: Tensor, labels: Tensor, content: Tensor, index: Tensor
) -> float:
    drafted = (q > 0).nonzero().squeeze(-1)
    p_mass = torch.zeros(int(labels.max()) + 1, dtype=torch.float64).index_add_(0, labels, p)
    q_mass = torch.zeros_like(p_mass).index_add_(0, labels, q)
    total = 0.0
    for cluster in torch.unique(labels[drafted]).tolist():
        accepted = min(
            float(q_mass[cluster]), float(p_mass[cluster])
        )  # P(accept in C) = q'(C) a(C)
        if accepted <= 0:
            continue
        xs = drafted[labels[drafted] == cluster]
        ys = ((labels == cluster) & (p > 0)).nonzero().squeeze(-1)
        if bool((index[xs] < 0).any()) or bool((index[ys] < 0).any()):
            raise ValueError(
                "a drafted or target token has no decoded content (outside allowed_tokens)"
            )
        a, b = q[xs] / q[xs].sum(), p[ys] / p[ys].sum()
        value, log = _emd2(
            a.numpy(), b.numpy(), content_distances(content, index[xs], index[ys]).numpy()
        )
        if log["warning"] is not None:
            raise RuntimeError(
                f"POT's network simplex did not reach an optimal transport: {log['warning']}"
            )
        total += accepted * float(value)
    return total


# ---- accounting during decoding ------------------------------------------------------------------


@dataclass(frozen=True)
class W1Estimate:
    """One image's similarity-aware distortion (``W1Log.finish``).

    mean: the mean W1 per emitted token (exact when ``draws`` is None, else the PPS estimate of
    docs/w1-accounting.md); sem: its sampling standard error (0 when exact; None with one draw);
    draws: n (None: exact for every token); rows: distinct rows whose W1 was solved; tokens:
    [N] per-token W1 when exact, else None; substitution / substitution_sem: the same for the
    rule's own coupling where defined (else None); seconds: the time this took."""

    mean: float
    sem: float | None
    draws: int | None
    rows: int
    tokens: Tensor | None
    substitution: float | None
    substitution_sem: float | None
    seconds: float


class W1Log:
    """Records W1(out_t, p_t) of one decoding call (``decode.loop.generate(record_w1=True)``).

    ``add`` takes one forward pass's rows and their exact TVs (``DistortionLog.add``); ``finish``
    returns the ``W1Estimate``. draws None: exact W1 of every verified row, at ``add`` (slow: a
    few tenths of a second per row at top-k 2000; a row whose TV is at most ``ROUNDING_FLOOR``
    counts 0, within d_max x 1e-12 of its exact W1). draws n >= 1: the PPS estimator (module
    docstring), rows held in n reservoirs and solved at ``finish``. seed: the reservoirs' own
    generator (CPU); no randomness is drawn from decoding's."""

    def __init__(
        self,
        content: Tensor,
        tokens: Tensor,
        capacity: int,
        rule: object = None,
        *,
        draws: int | None = None,
        seed: int = 0,
    ) -> None:
        if draws is not None and (
            isinstance(draws, bool) or not isinstance(draws, int) or draws < 1
        ):
            raise ValueError(
                f"draws must be an int >= 1 (or None: exact for every token), got {draws!r}"
            )
        self.content, self.tokens = content, tokens
        self.rule = as_rule(rule)
        self.substitution = substitution_defined(self.rule)
        self.draws = draws
        self.exact = torch.zeros(capacity, dtype=torch.float64) if draws is None else None
        self.exact_substitution = (
            torch.zeros(capacity, dtype=torch.float64) if draws is None else None
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.total = 0.0  # T: sum of the TVs above the floor of the tokens emitted so far
        self.held: list[tuple[int, float, Tensor, Tensor, object] | None] = [None] * (draws or 0)
        self.rows_solved = 0
        self.seconds = 0.0

    def add(self, start: int, p: Tensor, q: Tensor, tv: Tensor, rule: object = None) -> None:
        """Rows of one forward pass: p [L + 1, V], q [L, V], tv [E] the exact TVs of its E emitted
        tokens (E - 1 accepted drafts and one more; the first min(E, L) came from verified rows).
        rule: this step's rule of its verified rows 0 .. min(E, L) - 1 (None: the log's rule), so
        a rule that changes every step (the certified dial, the transport relaxation's planned
        targets) is kept for each held row, restricted to it (``engine.capabilities.rows_of``)."""
        began = time.perf_counter()
        rule = self.rule if rule is None else as_rule(rule)
        if self.substitution and not substitution_defined(rule):
            self.substitution = False  # undefined for this row, so for the image's mean
        verified = min(tv.numel(), q.shape[0])
        if verified:
            values = tv[:verified].tolist()
            if self.draws is None:
                rows = [i for i, v in enumerate(values) if v > ROUNDING_FLOOR]
                if rows:
                    p_rows, q_rows = p[rows], q[rows]
                    row_rule = rows_of(rule, rows)
                    w1 = w1_distortion(p_rows, q_rows, self.content, self.tokens, row_rule)
                    self.exact[[start + i for i in rows]] = w1
                    if self.substitution:
                        cost = substitution_cost(
                            p_rows, q_rows, self.content, self.tokens, row_rule
                        )
                        self.exact_substitution[[start + i for i in rows]] = cost
                    self.rows_solved += len(rows)
            else:
                self._offer(start, p, q, values, rule)
        self.seconds += time.perf_counter() - began

    def _offer(self, start: int, p: Tensor, q: Tensor, values: list[float], rule: object) -> None:
        """Each reservoir takes row i with probability D_i / T
        (T: the total so far, row i included), with the rule of row i."""
        for i, weight in enumerate(values):
            if weight <= ROUNDING_FLOOR:
                continue
            self.total += weight
            uniforms = torch.rand(self.draws, generator=self.generator, dtype=torch.float64)
            for j in (uniforms * self.total < weight).nonzero().squeeze(-1).tolist():
                self.held[j] = (start + i, weight, p[i].clone(), q[i].clone(), rows_of(rule, [i]))

    def finish(self, num_tokens: int) -> W1Estimate:
        """The image's estimate over its ``num_tokens`` emitted tokens (docs/w1-accounting.md)."""
        began = time.perf_counter()
        if self.draws is None:
            tokens = self.exact[:num_tokens].clone()
            mean = float(tokens.mean()) if num_tokens else 0.0
            sub = (
                float(self.exact_substitution[:num_tokens].mean())
                if self.substitution and num_tokens
                else None
            )
            self.seconds += time.perf_counter() - began
            return W1Estimate(
                mean,
                0.0,
                None,
                self.rows_solved,
                tokens,
                sub,
                0.0 if sub is not None else None,
                self.seconds,
            )
        drawn = [h for h in self.held if h is not None]
        if not drawn:  # every row lossless up to rounding: W1 = 0 (each row below d_max x 1e-12)
            self.seconds += time.perf_counter() - began
            return W1Estimate(
                0.0,
                0.0,
                self.draws,
                0,
                None,
                0.0 if self.substitution else None,
                0.0 if self.substitution else None,
                self.seconds,
            )
        unique = {h[0]: h for h in drawn}  # a row drawn twice is solved once
        order = sorted(unique)
        # Each held row with its own rule (one row at a time: at most ``draws`` rows).
        w1, cost = {}, {}
        for t in order:
            _, weight, p_row, q_row, rule = unique[t]
            w1[t] = float(
                w1_distortion(p_row[None], q_row[None], self.content, self.tokens, rule)[0]
            )
            w1[t] /= weight
            if self.substitution:
                cost[t] = float(
                    substitution_cost(p_row[None], q_row[None], self.content, self.tokens, rule)[0]
                )
                cost[t] /= weight
        mean, sem = self._estimate([w1[h[0]] for h in drawn], num_tokens)
        sub = sub_sem = None
        if self.substitution:
            sub, sub_sem = self._estimate([cost[h[0]] for h in drawn], num_tokens)
        self.rows_solved = len(order)
        self.seconds += time.perf_counter() - began
        return W1Estimate(mean, sem, self.draws, len(order), None, sub, sub_sem, self.seconds)

    def _estimate(self, ratios: list[float], num_tokens: int) -> tuple[float, float | None]:
        scale = self.total / num_tokens
        values = np.asarray(ratios, dtype=np.float64)
        sem = (
            float(scale * values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else None
        )
        return float(scale * values.mean()), sem


def pps_error(
    tv: Tensor,
    w1: Tensor,
    draws: int,
    *,
    repeats: int = 20000,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """The estimator's error on one image whose exact per-token TV and W1 are known ([N] each,
    e.g. a run with ``w1_draws=None``): ``repeats`` simulated estimates from ``draws`` rows drawn
    as ``W1Log`` draws them (with replacement, P(t) = TV_t / T over the tokens above the floor).
    Returns the exact mean, the estimates' mean, their RMS error (absolute and relative to the
    exact mean) and the root mean square of the standard errors the estimator reports."""
    tv, w1 = tv.to(torch.float64).cpu(), w1.to(torch.float64).cpu()
    if tv.shape != w1.shape or tv.ndim != 1 or tv.numel() == 0:
        raise ValueError("tv and w1 must be per-token values [N] of one image")
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise ValueError(f"draws must be an int >= 1, got {draws!r}")
    exact = float(w1.mean())
    weights = torch.where(tv > ROUNDING_FLOOR, tv, 0.0)
    if float(weights.sum()) == 0:
        return {
            "exact": exact,
            "mean": 0.0,
            "rms_error": abs(exact),
            "relative_rms_error": math.nan,
            "rms_reported_se": 0.0,
        }
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    index = torch.multinomial(
        weights.expand(repeats, -1), draws, replacement=True, generator=generator
    )
    ratio = (w1 / weights.clamp(min=ROUNDING_FLOOR))[index]  # [repeats, draws]
    scale = float(weights.sum()) / tv.numel()
    estimates = scale * ratio.mean(-1)
    reported = (
        scale * ratio.std(-1, correction=1) / math.sqrt(draws)
        if draws > 1
        else torch.full_like(estimates, math.nan)
    )
    rms = float((estimates - exact).square().mean().sqrt())
    return {
        "exact": exact,
        "mean": float(estimates.mean()),
        "rms_error": rms,
        "relative_rms_error": rms / exact if exact > 0 else math.nan,
        "rms_reported_se": float(reported.square().mean().sqrt()),
    }
