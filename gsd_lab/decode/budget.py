"""The certified dial: a total distortion budget B spent through the TV-optimal relaxation
(measure "tv") or the transport relaxation (measure "w1"); the allowances, forced positions and
what "w1" certifies in full: docs/certified-dial.md.

Before its test, window position i gets an allowance from B, what the path spent so far and
T_j = TV(p_j, q_j); it is verified by ``gsd_core.OptimalRelaxation(delta_i)`` (law within
s_i = min(delta_i, T_i) of p_i, proofs/10) or by the transport relaxation with budget eps_i
(plan cost s_i, W1(r_i, p_i) <= s_i, proofs/12). With R_i = B - spent - (s_0 + .. + s_{i-1}) and
c = ``budget_cap``:

    "cap":   delta_i = min(c, R_i)
    "sure":  delta_i = T_i if T_i <= min(c, R_i) else 0     (spend only for a certain acceptance)

The path is charged s_0 + .. + s_n (n the first rejection), so every path's charges sum to at
most B: the joint law is within B of the model's in TV (proofs/11); for "w1" the step-by-step
substitution's expected content change is at most B (proofs/13, not the joint law's W1). Forced
positions get 0 and spend 0.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gsd_core import OptimalRelaxation, fixed_order_sum

from .choices import BUDGET_MEASURES, BUDGET_POLICIES
from .planned import PlannedTargets
from .relaxation_w1 import TRANSPORT_SOLVER, plan_rows

SURE_TOLERANCE = 1e-12  # "moves all of T": M >= T - this


def _check_policy(policy: str) -> None:
    if policy not in BUDGET_POLICIES:
        raise ValueError(f"unknown budget policy {policy!r}; expected one of {BUDGET_POLICIES}")


def allowances(
    totals: list[float],
    left: float,
    policy: str,
    cap: float,
    forced: list[bool] | None = None,
) -> tuple[list[float], list[float]]:
    """(delta_i, s_i) for every position of a window from T_i (``totals``), the budget ``left``
    before the window, the policy and the per-token cap (docs/certified-dial.md). ``forced``: the
    positions whose token is forced (docs/certified-dial.md): delta_i = s_i = 0 there."""
    _check_policy(policy)
    deltas, spends = [], []
    for i, total in enumerate(totals):
        room = max(0.0, min(cap, left))
        if forced is not None and forced[i]:
            delta = total = 0.0
        elif policy == "cap":
            delta = room
        else:
            delta = total if total <= room else 0.0
        spend = min(delta, total)
        deltas.append(delta)
        spends.append(spend)
        left -= spend
    return deltas, spends


def transport_allowances(
    p: Tensor,
    q: Tensor,
    totals: list[float],
    left: float,
    policy: str,
    cap: float,
    neighbours: object,
    solver: str = TRANSPORT_SOLVER,
    forced: list[bool] | None = None,
) -> PlannedTargets:
    """The window's planned targets for rows p, q [L, V] (float64) under the W1 measure (module
    docstring): T_i ``totals``, ``left`` the budget before the window, ``forced`` the positions
    whose token is forced (eps_i = 0 there). The charges s_i are the plans' costs
    (``PlannedTargets.cost``)."""
    _check_policy(policy)
    window = q.shape[0]
    free = [True] * window if forced is None else [not f for f in forced]
    first = max(0.0, min(cap, left))
    solved = [first if f else 0.0 for f in free]
    r, moved, cost = plan_rows(neighbours, p, q, torch.tensor(solved, dtype=torch.float64), solver)
    for i in range(window):
        room = max(0.0, min(cap, left)) if free[i] else 0.0
        if room != solved[i]:  # R_i fell below what the window was solved at: solve row i again
            r[i : i + 1], moved[i : i + 1], cost[i : i + 1] = plan_rows(
                neighbours,
                p[i : i + 1],
                q[i : i + 1],
                torch.tensor([room], dtype=torch.float64),
                solver,
            )
        if policy == "sure" and not float(moved[i]) >= totals[i] - SURE_TOLERANCE:
            r[i], moved[i], cost[i] = p[i].to(torch.float64), 0.0, 0.0
        left -= float(cost[i])
    return PlannedTargets(r, moved, cost)


class BudgetDial:
    """One decode's budget state: ``budget`` B, ``policy``, ``cap``, ``measure`` ("tv" or "w1";
    "w1" needs the content ``neighbours`` and the plan's ``solver``); ``spent`` so far (the sum
    of the charges of the emitted tokens). ``step`` gives a window's rule, ``charge`` books
    what the window emitted."""

    def __init__(
        self,
        budget: float,
        policy: str = "cap",
        cap: float = 1.0,
        *,
        measure: str = "tv",
        neighbours: object = None,
        solver: str = TRANSPORT_SOLVER,
    ) -> None:
        if not (isinstance(budget, (int, float)) and not isinstance(budget, bool) and budget >= 0):
            raise ValueError(f"budget must be a number >= 0, got {budget!r}")
        if measure not in BUDGET_MEASURES:
            raise ValueError(
                f"unknown budget measure {measure!r}; expected one of {BUDGET_MEASURES}"
            )
        top = 1 if measure == "tv" else math.inf
        if not (isinstance(cap, (int, float)) and not isinstance(cap, bool) and 0 < cap <= top):
            raise ValueError(f"budget_cap must be a number in (0, {top}], got {cap!r}")
        _check_policy(policy)
        if measure == "w1" and neighbours is None:
            raise ValueError("the W1 dial needs the content neighbours (content_neighbours)")
        self.budget, self.policy, self.cap = float(budget), policy, float(cap)
        self.measure, self.neighbours, self.solver = measure, neighbours, solver
        self.spent = 0.0
        self._spends: list[float] = []

    def step(
        self, p: Tensor, q: Tensor, forced: Tensor | None = None
    ) -> OptimalRelaxation | PlannedTargets:
        """The rule of one window: p [L (+1), V] target rows, q [L, V] draft rows, ``forced``
        bool [L] (or None) the positions whose token is forced whatever the rule does (their
        allowance is 0: docs/certified-dial.md). TV: the allowances [L] in float64 on p's device
        (one host read of the L totals and flags); W1: the window's planned targets
        (``PlannedTargets``: verify ``verify_rows(p)`` with SD)."""
        window = q.shape[0]
        rows = p[:window].to(torch.float64)
        q64 = q.to(torch.float64)
        tv = 0.5 * fixed_order_sum((rows - q64).abs())
        if forced is None:
            totals, flags = tv.tolist(), None
        else:
            if forced.dtype != torch.bool or forced.dim() != 1 or forced.shape[0] < window:
                raise ValueError(
                    f"forced must be a bool [>= L = {window}] tensor (True where the token is "
                    f"forced), got {forced.dtype} {tuple(forced.shape)}"
                )
            totals, read = torch.stack([tv, forced[:window].to(tv)]).tolist()
            flags = [flag != 0 for flag in read]
        left = self.budget - self.spent
        if self.measure == "w1":
            planned = transport_allowances(
                rows, q64, totals, left, self.policy, self.cap, self.neighbours, self.solver, flags
            )
            self._spends = planned.cost.tolist()
            return planned
        deltas, self._spends = allowances(totals, left, self.policy, self.cap, flags)
        return OptimalRelaxation(
            torch.tensor(deltas, dtype=torch.float64, device=p.device).clamp(0, 1)
        )

    def for_window(
        self, p: Tensor, q: Tensor, forced: Tensor | None = None
    ) -> OptimalRelaxation | PlannedTargets:
        """The decoding loop's hook (``AcceptanceSpec.windows``): ``step``."""
        return self.step(p, q, forced)

    def charge(self, accepted: int) -> float:
        """Book the window's emitted positions 0 .. min(accepted, L - 1) (the bonus row spends 0);
        returns this window's charge."""
        charged = sum(self._spends[: accepted + 1])
        self.spent += charged
        self._spends = []
        return charged
