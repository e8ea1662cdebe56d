"""The certified dial: a total distortion budget B spent through the TV-optimal relaxation.

A Jacobi window verifies drafts d_0 .. d_{L-1} against rows p_i, q_i (gsd_lab.decode.loop). Before
the test, each position i gets an allowance delta_i from what is known before its own test
(B, what the path spent so far, T_j = TV(p_j, q_j) and the allowances for j <= i), and is
verified by ``gsd_core.OptimalRelaxation(delta)``, which emits a token whose law is within

    s_i = min(delta_i, T_i)                                            (proofs/10)

of p_i in TV. With R_i = B - spent - (s_0 + .. + s_{i-1}) (what is left if the positions before
i are emitted), the policies are

    "cap":   delta_i = min(c, R_i)
    "sure":  delta_i = T_i if T_i <= min(c, R_i) else 0     (spend only for a certain acceptance)

(c = ``budget_cap``). The window emits positions 0 .. n (n the first rejection; the bonus row,
a draw from p, spends 0); the path is charged s_0 + .. + s_n, and the positions after n release
what they were allotted. By construction every path's charges sum to at most B, so the law of
the whole sequence is within B of the model's in TV (the chain-rule coupling, proofs/11). Once
R = 0 every allowance is 0 and the rest is decoded losslessly (SD; with coupled drafts when the
method's ``draft`` says so).
"""

from __future__ import annotations

import torch
from torch import Tensor

from gsd_core import OptimalRelaxation
from gsd_core.exact import fixed_order_sum

POLICIES = ("cap", "sure")


def allowances(
    totals: list[float], left: float, policy: str, cap: float
) -> tuple[list[float], list[float]]:
    """(delta_i, s_i) for every position of a window from T_i (``totals``), the budget ``left``
    before the window, the policy and the per-token cap (module docstring)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown budget policy {policy!r}; expected one of {POLICIES}")
    deltas, spends = [], []
    for total in totals:
        room = max(0.0, min(cap, left))
        if policy == "cap":
            delta = room
        else:
            delta = total if total <= room else 0.0
        spend = min(delta, total)
        deltas.append(delta)
        spends.append(spend)
        left -= spend
    return deltas, spends


class BudgetDial:
    """One decode's budget state: ``budget`` B, ``policy``, ``cap``; ``spent`` so far (the sum of
    the charges of the emitted tokens). ``step`` gives a window's rule, ``charge`` books what
    the window emitted."""

    def __init__(self, budget: float, policy: str = "cap", cap: float = 1.0) -> None:
        if not (isinstance(budget, (int, float)) and not isinstance(budget, bool) and budget >= 0):
            raise ValueError(f"budget must be a number >= 0, got {budget!r}")
        if not (isinstance(cap, (int, float)) and 0 < cap <= 1):
            raise ValueError(f"budget_cap must be a number in (0, 1], got {cap!r}")
        if policy not in POLICIES:
            raise ValueError(f"unknown budget policy {policy!r}; expected one of {POLICIES}")
        self.budget, self.policy, self.cap = float(budget), policy, float(cap)
        self.spent = 0.0
        self._spends: list[float] = []

    def step(self, p: Tensor, q: Tensor) -> OptimalRelaxation:
        """The rule of one window: p [L (+1), V] target rows, q [L, V] draft rows; the
        allowances [L] in float64 on p's device (one host read of the L totals)."""
        window = q.shape[0]
        rows = p[:window].to(torch.float64)
        totals = (0.5 * fixed_order_sum((rows - q.to(torch.float64)).abs())).tolist()
        deltas, self._spends = allowances(totals, self.budget - self.spent, self.policy, self.cap)
        return OptimalRelaxation(
            torch.tensor(deltas, dtype=torch.float64, device=p.device).clamp(0, 1)
        )

    def charge(self, accepted: int) -> float:
        """Book the window's emitted positions 0 .. min(accepted, L - 1) (the bonus row spends 0);
        returns this window's charge."""
        charged = sum(self._spends[: accepted + 1])
        self.spent += charged
        self._spends = []
        return charged
