"""One window's transported targets as a rule: speculative sampling toward rows r fixed before
the test (the transport relaxation, ``gsd_lab.decode.relaxation_w1``; the W1 dial,
``gsd_lab.decode.budget``).

A transport plan per row (a function of p_i, q_i and the row's budget eps_i, all known before the
test) gives the target r_i = p_i - out_f + in_f. Speculative sampling toward r_i (accept
min(1, r_i(x)/q_i(x)), residual norm((r_i - q_i)+)) emits a token whose law is exactly r_i
(proofs/02 with target r_i; proofs/12). That is SD run on the rows r_0 .. r_{L-1} and the bonus
row p_L, so the loop verifies ``verify_rows(p)`` with SD (one plan per row per step, not one per
call of the rule's methods), and the exact accounting reads ``PlannedTargets`` as a gsd_core rule
for the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gsd_core import SD, token_residual

from ..engine.capabilities import rows_of, slice_rows


@dataclass(frozen=True, eq=False)
class PlannedTargets:
    """The gsd_core rule of rows whose targets are fixed: P(x) = r(x), Q(x) = q(x), residual
    norm((r - q)+). targets r [..., n, V] (float64 in decoding), one per row of the p, q it is
    given (the rule of a step's rows, or of some of them: ``engine.capabilities.rows_of``);
    moved [..., n]: the mass each plan moved (0: r is p); cost [..., n]: each plan's cost, a
    bound on W1(r_i, p_i)."""

    targets: Tensor
    moved: Tensor
    cost: Tensor

    def _rows(self, p: Tensor) -> Tensor:
        if p.shape[:-1] != self.targets.shape[:-1] or p.shape[-1] != self.targets.shape[-1]:
            raise ValueError(
                f"planned targets of shape {tuple(self.targets.shape)} are the rule of other rows "
                f"than p's {tuple(p.shape)}"
            )
        moved = (self.moved > 0).to(p.device).unsqueeze(-1)
        # A row whose plan moved nothing is p as given (its law is p exactly, distortion 0).
        return torch.where(moved, self.targets.to(device=p.device, dtype=p.dtype), p)

    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        return self._rows(p).gather(-1, x), q.gather(-1, x)

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        return token_residual(self._rows(p), q)

    def verification(self, p: Tensor) -> tuple[Tensor, SD]:
        """What the decoding loop verifies for this window: ``verify_rows(p)`` with SD."""
        return self.verify_rows(p), SD()

    def verify_rows(self, p: Tensor) -> Tensor:
        """What SD verifies: p itself when no plan moved anything (so that a zero budget is SJD
        bit for bit), else [..., r_0 .. r_{L-1}, p_L ..] in the targets' dtype (p [..., L or
        L + 1, V], targets [..., L, V]; the window's rows: ``TransportRelaxation.window_target``
        and the decoding loop)."""
        if not bool((self.moved > 0).any()):
            return p
        window = self.targets.shape[-2]
        bonus = p[..., window:, :].to(self.targets.dtype)
        return torch.cat([self.targets.to(p.device), bonus], -2)


rows_of.register(PlannedTargets, slice_rows)  # every tensor field has a row per target row
