"""Coupled Jacobi drafts: MC-SJD, published as Speculative Coupled Decoding (SCD; So, Kook, Jang,
Park, ICML 2026, arXiv 2510.24211; code junhyukso/SCD). A coupled re-draft keeps the new draft's
law exactly the row q_new = p_j (verification stays exact: proofs/09_coupled_drafts.md) while
making it equal the previous draft as often as possible (the window's edges, fresh drafts and
where this differs from SCD's code: docs/coupled-drafts.md). ``draft=`` of ``DecodingMethod``:

- "independent" (SJD, GSD): d' = inverse-CDF draw from q_new with a fresh uniform;
- "maximal": the maximal coupling of q_old and q_new: keep d with probability
  min(1, q_new(d) / q_old(d)), else draw from norm((q_new - q_old)+): ``gsd_core.verify`` on
  windows of one draft (``maximal_coupling``), P(d' = y) = q_new(y), P(d' = d) = 1 - TV;
- "gumbel": one Gumbel vector g_k [V] per generated position k, kept until k is committed; every
  draft of k is argmax_y log q(y) + g_k(y) over q(y) > 0 (law q, Gumbel-max).

Randomness only from the explicit generator; on a CPU the tokens do not depend on the thread
count ("gumbel"'s float64 ``log`` may round differently between instruction sets).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..engine import draw, verify
from .choices import DRAFTS


def maximal_coupling(
    previous: Tensor, previous_q: Tensor, q: Tensor, generator: torch.Generator | None
) -> Tensor:
    """Drafts [M] with law q [M, V], maximally coupled to ``previous`` [M] drawn from
    ``previous_q`` [M, V]: row i keeps previous[i] = d with probability min(1, q(d)/q_prev(d)),
    else draws from norm((q - q_prev)+). A zero row of ``previous_q`` (no previous draft) draws
    from q. This is ``gsd_core.verify`` with target q and draft q_prev on M windows of one draft,
    no bonus row (``gsd_lab.engine.verify``: the same, unchecked, no host sync): 2 uniforms per
    row from ``generator``."""
    result = verify(
        q.unsqueeze(-2),
        previous_q.unsqueeze(-2),
        previous.unsqueeze(-1),
        None,
        generator=generator,
        validate=False,
    )
    return result.tokens[..., 0]


def gumbel_noise(
    rows: int, vocab: int, generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """[rows, V] float64 standard Gumbel noise g = -log(E),
    E = -log(1 - u) ~ Exp(1), u ~ U[0, 1)."""
    uniforms = torch.rand(rows, vocab, generator=generator, dtype=torch.float64, device=device)
    return uniforms.neg_().log1p_().neg_().log_().neg_()


def gumbel_argmax(q: Tensor, noise: Tensor) -> Tensor:
    """argmax_y log q(y) + g(y) over the y with q(y) > 0, per row: [..., V] -> [...] int64.
    Its law is q (Gumbel-max); ties (probability 0) go to the lowest id."""
    scores = torch.where(q > 0, q.log() + noise, -torch.inf)
    return scores.argmax(-1)


class DraftChain:
    """The drafting of ``generate``'s window under one scheme (docs/coupled-drafts.md): how the
    positions left after a pass are re-drafted, and for "gumbel" the noise vector [V] of every
    position in the window (row i: window position i)."""

    def __init__(
        self, scheme: str, vocab: int, device: torch.device, generator: torch.Generator | None
    ) -> None:
        if scheme not in DRAFTS:
            raise ValueError(f"unknown draft {scheme!r}; expected one of {DRAFTS}")
        self.scheme = scheme
        self._vocab, self._device, self._generator = vocab, device, generator
        self._noise = (
            torch.empty(0, vocab, dtype=torch.float64, device=device)
            if scheme == "gumbel"
            else None
        )

    def truncate(self, count: int) -> None:
        """The window keeps its first ``count`` positions."""
        if self._noise is not None:
            self._noise = self._noise[:count]

    def extend(self, count: int) -> None:
        """``count`` fresh drafts were appended to the window (after their tokens were drawn)."""
        if self._noise is not None and count > 0:
            self._noise = torch.cat([self._noise, self._fresh_noise(count)])

    def redraft(
        self, drafts: Tensor, q: Tensor, rows: Tensor, accepted: int
    ) -> tuple[Tensor, Tensor]:
        """Drafts for the positions after the stop of a pass that accepted ``accepted`` < L of the
        window's L ``drafts`` (drawn from ``q`` [L, V]): rows [L - accepted, V] are this pass's
        p_{a+1..L}; row j re-drafts window position a + 1 + j (the last: the position after the
        window, drafted from the bonus row). Returns the new drafts [L - accepted] and the q each
        is to be verified against: its law given the verifier's history, which is its row."""
        count = rows.shape[0]
        if self.scheme == "independent":
            uniforms = torch.rand(
                count, 1, generator=self._generator, dtype=torch.float64, device=rows.device
            )
            return draw(rows, uniforms).squeeze(-1), rows
        if self.scheme == "maximal":
            previous = torch.cat([drafts[accepted + 1 :], drafts.new_zeros(1)])
            previous_q = torch.cat([q[accepted + 1 :], q.new_zeros(1, q.shape[-1])])
            return maximal_coupling(previous, previous_q, rows, self._generator), rows
        self._noise = torch.cat([self._noise[accepted + 1 :], self._fresh_noise(1)])
        return gumbel_argmax(rows, self._noise), rows

    def clear(self) -> None:
        """Every draft was accepted: the window is empty."""
        self.truncate(0)

    def _fresh_noise(self, rows: int) -> Tensor:
        return gumbel_noise(rows, self._vocab, self._generator, self._device)
