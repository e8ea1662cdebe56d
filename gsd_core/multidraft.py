"""Several candidates for one position: recursive rejection sampling (RRS).

With k candidates x_1 .. x_k for the same position, x_j drawn from a row q_j that may depend on
the candidates before it, RRS (the multi-draft verifier of SpecTr, arXiv 2310.15141, Sec. 4, and
of recursive speculative decoding, Jeon et al., arXiv 2402.14160) tests them in turn, each
against the residual the previous rejections left:

    r_1 = p
    stage j = 1 .. k:  accept x_j iff u_j < a_j = min(1, r_j(x_j) / q_j(x_j))   (0 if q_j(x_j) = 0)
                       else r_{j+1} = norm((r_j - q_j)+)
    all k rejected:    emit a draw from r_{k+1} (inverse CDF with u_{k+1})

The output's law is p when q_j is the law of x_j given everything the stages before j saw and
the uniforms are fresh (proofs/15_multiple_drafts.md). Draft schemes that fit: i.i.d. (q_j = q),
without replacement (``without_replacement_rows``), given candidates (``one_hot`` rows); each is
explained in docs/core.md. k = 1 is ``gsd_core.verify`` on a window of one draft, bit for bit.
``multidraft_law``: the exact output law and acceptance probability by enumeration (small V).

Shapes: p [..., V]; q rows [..., k, V]; candidates [..., k]; uniforms [..., k + 1].
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import Tensor

from .rules import mass_ratio, token_residual
from .verification import draw


@dataclass(frozen=True)
class MultiDraftResult:
    """accepted [...] int64: the 0-based index of the accepted candidate, or k when all k were
    rejected (the token was then drawn from r_{k+1}); token [...] int64: the emitted token;
    accept_probs [..., k] float: a_j of every stage (those after the accepted one included, as if
    reached)."""

    accepted: Tensor
    token: Tensor
    accept_probs: Tensor


def normalised(weights: Tensor) -> Tensor:
    """weights [..., V] >= 0 divided by their total; an all-zero row stays zero."""
    total = weights.sum(-1, keepdim=True)
    return torch.where(total > 0, weights / torch.where(total > 0, total, 1.0), weights)


def one_hot(candidates: Tensor, vocab: int) -> Tensor:
    """q_j = e_{x_j}: candidates [..., k] -> [..., k, V] float64."""
    rows = torch.zeros(*candidates.shape, vocab, dtype=torch.float64, device=candidates.device)
    return rows.scatter_(-1, candidates.unsqueeze(-1), 1.0)


def without_replacement_rows(q: Tensor, candidates: Tensor) -> Tensor:
    """q_j = norm(q with x_1 .. x_{j-1} set to 0): q [..., V], candidates [..., k] ->
    [..., k, V] (row j zero when nothing is left: x_j absent)."""
    k = candidates.shape[-1]
    removed = torch.zeros_like(q)
    rows = []
    for j in range(k):
        rows.append(normalised(q * (1 - removed)))
        removed = removed.scatter(-1, candidates[..., j : j + 1], 1.0)
    return torch.stack(rows, -2)


def draw_without_replacement(q: Tensor, first: Tensor, k: int, uniforms: Tensor) -> Tensor:
    """Candidates [..., k]: x_1 = ``first`` [...] (a draw from q made elsewhere, e.g. the window's
    draft), then x_j by inverse CDF from q_j = norm(q with x_1 .. x_{j-1} removed) with
    uniforms [..., k - 1]; an absent x_j (q_j = 0) repeats x_1 as its placeholder."""
    candidates = [first]
    removed = torch.zeros_like(q).scatter(-1, first.unsqueeze(-1), 1.0)
    for j in range(1, k):
        rest = q * (1 - removed)
        token = draw(rest, uniforms[..., j - 1 : j]).squeeze(-1)
        token = torch.where(rest.sum(-1) > 0, token, first)
        candidates.append(token)
        removed = removed.scatter(-1, token.unsqueeze(-1), 1.0)
    return torch.stack(candidates, -1)


def recursive_rejection(
    p: Tensor, q: Tensor, candidates: Tensor, uniforms: Tensor
) -> MultiDraftResult:
    """RRS (module docstring): p [..., V] target; q [..., k, V], row j the law of candidate j
    given the ones before it; candidates [..., k]; uniforms [..., k + 1] in [0, 1) (u_1 .. u_k
    test, u_{k+1} draws). The residual's weights (r_j - q_j)+ are those of ``token_residual``
    (r_j itself where their mass is below rounding: r_j = q_j, a rejection of probability ~0).

    >>> p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    >>> q = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    >>> x = torch.tensor([2, 1])  # two candidates drawn from q without replacement
    >>> rows = without_replacement_rows(q, x)  # q, then q without token 2: (0.4, 0.6, 0)
    >>> out = recursive_rejection(p, rows, x, torch.tensor([0.5, 0.9, 0.3], dtype=torch.float64))
    >>> out.accept_probs  # a_1 = 0.2 / 0.5; r_2 = norm((p - q)+) = (1, 0, 0): a_2 = 0 / 0.6
    tensor([0.4000, 0.0000], dtype=torch.float64)
    >>> int(out.accepted), int(out.token)  # both rejected; r_3 = r_2 = (1, 0, 0) emits 0
    (2, 0)
    """
    k = candidates.shape[-1]
    residual = p
    accept, done = [], torch.zeros(candidates.shape[:-1], dtype=torch.bool, device=p.device)
    accepted = torch.full(candidates.shape[:-1], k, dtype=torch.long, device=p.device)
    for j in range(k):
        x = candidates[..., j : j + 1]
        a = mass_ratio(residual.gather(-1, x), q[..., j, :].gather(-1, x)).squeeze(-1)
        accept.append(a)
        hit = ~done & (uniforms[..., j] < a)
        accepted = torch.where(hit, j, accepted)
        done = done | hit
        residual = normalised(token_residual(residual, q[..., j, :]))
    drawn = draw(residual, uniforms[..., k : k + 1]).squeeze(-1)
    index = accepted.clamp(max=k - 1).unsqueeze(-1)
    token = torch.where(done, candidates.gather(-1, index).squeeze(-1), drawn)
    return MultiDraftResult(accepted, token, torch.stack(accept, -1))


def stage_law(p: Tensor, q: Tensor, candidates: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """For fixed candidates: (the law [V] of RRS's emitted token, P(some candidate accepted)),
    p [V], q [k, V] the rows of these candidates; exact arithmetic in float64."""
    law = torch.zeros_like(p)
    reach, residual = 1.0, p
    for j, x in enumerate(candidates):
        a = float(mass_ratio(residual[x : x + 1], q[j, x : x + 1]))
        law[x] += reach * a
        reach *= 1 - a
        residual = normalised(token_residual(residual, q[j]))
    return law + reach * normalised(residual), torch.tensor(1 - reach, dtype=torch.float64)


def multidraft_law(p: Tensor, q: Tensor, k: int, scheme: str = "without") -> tuple[Tensor, Tensor]:
    """Exact (output law [V], acceptance probability) of RRS over k candidates drawn from q [V]
    by ``scheme``: "without" (without replacement), "iid" (with replacement, q_j = q). Enumerates
    the V^k candidate tuples: for small V only.

    >>> p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    >>> q = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    >>> law, alpha = multidraft_law(p, q, 2)
    >>> bool(torch.allclose(law, p, rtol=0, atol=1e-15)), round(float(alpha), 4)
    (True, 0.82)
    """
    if scheme not in ("without", "iid"):
        raise ValueError(f"scheme must be 'without' or 'iid', got {scheme!r}")
    vocab = p.shape[-1]
    law = torch.zeros_like(p)
    alpha = torch.zeros((), dtype=torch.float64)
    for tup in itertools.product(range(vocab), repeat=k):
        x = torch.tensor(tup)
        rows = without_replacement_rows(q, x) if scheme == "without" else q.expand(k, vocab)
        prob = float(torch.prod(rows[torch.arange(k), x]))
        if scheme == "without" and prob == 0.0:
            # Absent candidates (q exhausted): tuples whose placeholder repeats x_1 carry the mass.
            prob = _absent_tuple_probability(q, tup)
        if prob == 0.0:
            continue
        out, accepted = stage_law(p, rows, tup)
        law += prob * out
        alpha += prob * accepted
    return law, alpha


def _absent_tuple_probability(q: Tensor, tup: tuple[int, ...]) -> float:
    """Probability of ``tup`` under ``draw_without_replacement`` when q runs out: present
    candidates as drawn, then every absent one the placeholder x_1."""
    removed, prob = torch.zeros_like(q), 1.0
    for j, x in enumerate(tup):
        rest = q * (1 - removed)
        if float(rest.sum()) == 0.0:
            if x != tup[0]:
                return 0.0
            continue
        prob *= float(rest[x] / rest.sum())
        removed[x] = 1.0
    return prob if prob > 0 else 0.0
