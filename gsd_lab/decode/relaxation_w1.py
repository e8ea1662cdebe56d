"""The transport relaxation: the most accepting verifier within a W1 budget eps per token, on a
neighbour support (proofs/12).

With T = TV(p, q), excess E = (p - q)+ and deficit D = (q - p)+, a plan f(y, x) >= 0 moves mass
from excess tokens y to deficit tokens x along *allowed edges* (x among y's k nearest codes by
the decoded-content distance d of ``gsd_lab.accounting.transport``), with

    sum_x f(y, x) <= E(y),   sum_y f(y, x) <= D(x),   sum f(y, x) d(y, x) <= eps.

The target becomes r = p - out_f + in_f (out_f(y) = sum_x f(y, x), in_f(x) = sum_y f(y, x)), and
speculative sampling toward r (accept min(1, r(x)/q(x)), residual norm((r - q)+)) emits exactly r
(proofs/02 with target r), with W1(r, p) <= sum f d <= eps (f is a transport from p to r) and
acceptance alpha = 1 - TV(q, r) = 1 - T + M, M = sum f (the moved mass). Any feasible plan gives
these three facts; the solvers differ only in how much mass they move. Solvers for the plan:

Solvers (``ranked_plans``: "ranked", "lp", "greedy") and the rule ``TransportRelaxation``:
docs/decoding.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from torch import Tensor

from gsd_core import token_residual

from ..accounting.transport import _check_content, content_distances
from ..engine.capabilities import rows_of, slice_rows
from .planned import PlannedTargets

# The transport plan's solver in decoding (one of ``SOLVERS``).
TRANSPORT_SOLVER = "ranked"

SOLVERS = ("ranked", "greedy", "lp")
COST_LEVELS = 16  # the "ranked" solver's cost levels (quantiles of the neighbour table's costs)


@dataclass(frozen=True)
class ContentNeighbours:
    """Each vocabulary id's k nearest other codes by decoded content: ``index`` int64 [V, k]
    (-1 where none: ids without content, or fewer than k other codes) and ``cost`` float64
    [V, k], d(y, index[y, j]) (inf where index is -1). Build with ``content_neighbours``."""

    index: Tensor
    cost: Tensor

    def __post_init__(self) -> None:
        if (
            not isinstance(self.index, Tensor)
            or self.index.dtype != torch.int64
            or self.index.ndim != 2
        ):
            raise ValueError("index must be an int64 tensor [V, k]")
        if (
            not isinstance(self.cost, Tensor)
            or self.cost.dtype != torch.float64
            or self.cost.shape != self.index.shape
        ):
            raise ValueError("cost must be a float64 tensor of index's shape [V, k]")

    @cached_property
    def padded(self) -> Tensor:
        """``index`` as int32 with V in place of an empty entry (index -1, or a non-finite
        cost): a column no row's deficit reaches."""
        vocab = self.index.shape[0]
        live = (self.index >= 0) & torch.isfinite(self.cost)
        return torch.where(live, self.index, vocab).to(torch.int32)

    @cached_property
    def level(self) -> Tensor:
        """The cost level of every entry, uint8 [V, k]: level i holds the costs in
        (b_{i-1}, b_i], b the ``COST_LEVELS`` quantiles of the finite costs (ties merged);
        COST_LEVELS where the entry is empty. Row independent, so computed once."""
        finite = torch.isfinite(self.cost) & (self.index >= 0)
        costs = torch.sort(self.cost[finite]).values
        at = (torch.arange(1, COST_LEVELS) * costs.numel()) // COST_LEVELS
        bounds = torch.unique(costs[at]) if costs.numel() else costs
        level = torch.bucketize(self.cost, bounds)
        return torch.where(finite, level, COST_LEVELS).to(torch.uint8)


def content_neighbours(
    content: Tensor, tokens: Tensor, vocab: int, k: int, *, chunk: int = 512
) -> ContentNeighbours:
    """The k nearest other codes of every code (``transport.content_distances``; ties by id).
    content [K, D] and tokens [K] as ``code_content()`` and ``allowed_tokens`` give them."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    content64, _ = _check_content(content, tokens, vocab)
    tokens = tokens.cpu().long()
    count = tokens.numel()
    width = min(k, max(count - 1, 0))
    index = torch.full((vocab, k), -1, dtype=torch.int64)
    cost = torch.full((vocab, k), math.inf, dtype=torch.float64)
    every = torch.arange(count)
    for start in range(0, count, chunk):
        rows = every[start : start + chunk]
        dist = content_distances(content64, rows, every)
        dist[torch.arange(rows.numel()), rows] = math.inf  # not itself
        order = torch.sort(dist, dim=-1, stable=True)
        index[tokens[rows], :width] = tokens[order.indices[:, :width]]
        cost[tokens[rows], :width] = order.values[:, :width]
    return ContentNeighbours(index, cost)


def _edges(p: np.ndarray, q: np.ndarray, hood: ContentNeighbours) -> tuple[np.ndarray, ...]:
    """Allowed edges from excess to deficit tokens: (y, x, cost), by cost, then y, then x."""
    excess, deficit = np.clip(p - q, 0, None), np.clip(q - p, 0, None)
    sources = np.nonzero(excess > 0)[0]
    index, cost = hood.index.numpy()[sources], hood.cost.numpy()[sources]
    y = np.repeat(sources, index.shape[1]).reshape(index.shape)
    keep = (index >= 0) & np.isfinite(cost)
    keep[keep] &= deficit[index[keep]] > 0
    y, x, c = y[keep], index[keep], cost[keep]
    order = np.lexsort((x, y, c))
    return y[order], x[order], c[order], excess, deficit


def transport_plan(
    p: Tensor, q: Tensor, hood: ContentNeighbours, eps: float, solver: str = TRANSPORT_SOLVER
) -> tuple[Tensor, float, float]:
    """The target r [V] of one row p, q [V] (float64), the moved mass M and the plan's cost
    (<= eps): module docstring."""
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; expected one of {SOLVERS}")
    if solver == "ranked":
        cpu = {"device": "cpu", "dtype": torch.float64}
        r, moved, cost = ranked_plans(
            p.detach().to(**cpu)[None],
            q.detach().to(**cpu)[None],
            hood,
            torch.tensor([float(eps)], **cpu),
        )
        return r[0].to(p.device), moved.item(), cost.item()
    p_np, q_np = p.detach().cpu().double().numpy(), q.detach().cpu().double().numpy()
    y, x, c, excess, deficit = _edges(p_np, q_np, hood)
    flow = np.zeros(len(c))
    if len(c) and eps > 0:
        flow = (
            _greedy(y, x, c, excess.copy(), deficit.copy(), eps)
            if solver == "greedy"
            else _linear_programme(y, x, c, excess, deficit, eps)
        )
    r = p_np.copy()
    np.subtract.at(r, y, flow)
    np.add.at(r, x, flow)
    r = np.clip(r, 0, None)  # rounding below 0 at a drained excess token
    return torch.from_numpy(r).to(p.device), float(flow.sum()), float((flow * c).sum())


def ranked_plans(
    p: Tensor, q: Tensor, hood: ContentNeighbours, eps: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The "ranked" plan of every row at once: p, q float64 [N, V] and eps float64 [N] on the
    CPU -> (r [N, V], moved M [N], cost [N]), all float64.

    The live edges (y, x) (y an excess token of the row, x one of its k neighbours and a deficit
    token of the row) are taken level by level, cheapest cost level first (``hood.level``).
    Within a level every edge at once: each proposes min(e(y), d(x)) (e, d the remaining excess
    and deficit); proposals leaving one y are scaled by min(1, e(y) / their sum), then those
    entering one x by min(1, d(x) / their sum), then a row's whole level by
    min(1, left / its cost) (left: the row's unspent budget; a row with left = 0 stops, even on
    edges of cost 0, so eps = 0 moves nothing). So every level keeps
    sum_x f <= e(y), sum_y f <= d(x) and cost <= left, up to float64 rounding of the sums (e
    and d are clamped at 0; the cost can pass eps by rounding only, a relative ~1e-15).

    r = p - (E - e) + (D - d) with e in [0, E], d in [0, D]: r >= 0 exactly, r(y) >= q(y) - ulp at
    an excess token, r(x) <= q(x) + ulp at a deficit token, every untouched token keeps p(x) bit
    for bit, and r sums to 1 up to rounding. Every sum is an ``index_add_`` in one fixed order
    (serial on the CPU), so the bits do not depend on the thread count."""
    vocab = hood.index.shape[0]
    if p.ndim != 2 or p.shape != q.shape or p.shape[1] != vocab:
        raise ValueError(
            f"p and q must be [N, V] with the neighbours' V = {vocab}, got {tuple(p.shape)} "
            f"and {tuple(q.shape)}"
        )
    if eps.shape != (p.shape[0],):
        raise ValueError(f"eps must be [N] = [{p.shape[0]}], got {tuple(eps.shape)}")
    rows_n = p.shape[0]
    width = hood.index.shape[1]
    diff = (p - q).reshape(-1)
    every = torch.arange(rows_n * vocab)
    source = every.masked_select(diff > 0)  # flat (row, y), row major
    sink = every.masked_select(diff < 0)
    sinks = sink.numel()
    # the sink number of each (row, x) in rows of vocab + 1 (the last column: no neighbour);
    # `sinks` where x is no deficit token of the row
    stride = vocab + 1
    number = torch.full((rows_n * stride,), sinks, dtype=torch.int32)
    number[sink + sink // vocab] = torch.arange(sinks, dtype=torch.int32)
    row, token = source // vocab, source % vocab
    neighbour = hood.padded.index_select(0, token)
    neighbour += (row * stride).to(torch.int32)[:, None]
    edge_sink = number.index_select(0, neighbour.view(-1))
    edge = (edge_sink < sinks).nonzero().squeeze(1)  # s * width + j, of the live edges
    entry = token.index_select(0, edge // width) * width + edge % width
    order = torch.sort(hood.level.reshape(-1).index_select(0, entry), stable=True)
    edge, entry = edge.index_select(0, order.indices), entry.index_select(0, order.indices)
    counts = torch.bincount(order.values.long(), minlength=COST_LEVELS + 1).tolist()
    s_all = edge // width  # the source's number
    t_all = edge_sink.index_select(0, edge)
    c_all = hood.cost.reshape(-1).index_select(0, entry)
    r_all = row.index_select(0, s_all)
    e0, d0 = diff.index_select(0, source), diff.index_select(0, sink).neg_()
    e, d = e0.clone(), d0.clone()
    left = eps.clone()
    spent = torch.zeros(rows_n, dtype=torch.float64)
    start = 0
    for count in counts:
        if count == 0 or not bool((left > 0).any()):
            start += count
            continue
        s, t, c, owner = (a[start : start + count] for a in (s_all, t_all, c_all, r_all))
        start += count
        e_s, d_t = e.index_select(0, s), d.index_select(0, t)
        flow = torch.minimum(e_s, d_t)
        # flow * min(1, cap / sum): fmin keeps flow where the ratio is >= 1 or NaN (0 / 0)
        out = e.new_zeros(e.shape).index_add_(0, s, flow).index_select(0, s)
        flow = torch.fmin(flow, flow * (e_s / out))
        into = d.new_zeros(d.shape).index_add_(0, t, flow).index_select(0, t)
        flow = torch.fmin(flow, flow * (d_t / into))
        spend = spent.new_zeros(rows_n).index_add_(0, owner, flow * c)
        # a spent budget stops its row, even on edges of cost 0 (as "greedy"; eps = 0 is SD)
        factor = torch.where(left > 0, torch.where(spend > left, left / spend, 1.0), 0.0)
        if bool((factor < 1).any()):
            flow = flow * factor.index_select(0, owner)
            spend = spent.new_zeros(rows_n).index_add_(0, owner, flow * c)
        e.index_add_(0, s, flow, alpha=-1).clamp_(min=0)
        d.index_add_(0, t, flow, alpha=-1).clamp_(min=0)
        left = (left - spend).clamp_(min=0)
        spent += spend
    received = d0 - d
    r = p.reshape(-1).clone()
    r.index_add_(0, source, e0 - e, alpha=-1)
    r.index_add_(0, sink, received)
    moved = spent.new_zeros(rows_n).index_add_(0, sink // vocab, received)
    return r.view(rows_n, vocab), moved, spent


def _greedy(y, x, c, excess, deficit, eps) -> np.ndarray:
    flow, left = np.zeros(len(c)), float(eps)
    for j in range(len(c)):
        amount = min(excess[y[j]], deficit[x[j]], left / c[j] if c[j] > 0 else math.inf)
        if amount <= 0:
            continue
        flow[j] = amount
        excess[y[j]] -= amount
        deficit[x[j]] -= amount
        left -= amount * c[j]
        if left <= 0:
            break
    return flow


def _linear_programme(y, x, c, excess, deficit, eps) -> np.ndarray:
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix, vstack

    n = len(c)
    ys, y_row = np.unique(y, return_inverse=True)
    xs, x_row = np.unique(x, return_inverse=True)
    columns = np.arange(n)
    out = coo_matrix((np.ones(n), (y_row, columns)), shape=(len(ys), n))
    into = coo_matrix((np.ones(n), (x_row, columns)), shape=(len(xs), n))
    budget = coo_matrix(c.reshape(1, n))
    result = linprog(
        -np.ones(n),
        A_ub=vstack([out, into, budget]).tocsr(),
        b_ub=np.concatenate([excess[ys], deficit[xs], [eps]]),
        bounds=(0, None),
        method="highs",
    )
    if result.status != 0:
        raise RuntimeError(f"the transport LP did not solve: {result.message}")
    flow = np.clip(result.x, 0, None)
    spent = float((flow * c).sum())
    return (
        flow * min(1.0, eps / spent) if spent > eps else flow
    )  # HiGHS's tolerance, never over eps


@dataclass(frozen=True, eq=False)
class TransportRelaxation:
    """Speculative sampling toward the transported target r (module docstring) as a gsd_core
    rule: P(x) = r(x), Q(x) = q(x), residual norm((r - q)+). ``neighbours`` from
    ``content_neighbours``; ``eps`` >= 0 in the content distance's units
    (``gsd_lab.accounting.transport``): a float, or a floating-point tensor of one budget per row
    that broadcasts against p's rows [...] (for ``verify``'s window [..., L, V]: [..., L]), as
    ``gsd_core.OptimalRelaxation.delta``. A row with eps = 0 is SD bit for bit (r = p)."""

    neighbours: ContentNeighbours
    eps: float | Tensor
    solver: str = TRANSPORT_SOLVER

    def __post_init__(self) -> None:
        if not isinstance(self.neighbours, ContentNeighbours):
            raise ValueError("neighbours must be a ContentNeighbours (see content_neighbours)")
        eps = self.eps
        if isinstance(eps, Tensor):
            if not eps.is_floating_point():
                raise ValueError(f"eps must be a float or a floating-point tensor, got {eps.dtype}")
            if eps.numel() and not bool(((eps >= 0) & (eps < math.inf)).all()):
                raise ValueError(
                    "eps (a W1 budget per row) must be finite and >= 0; NaN is refused"
                )
            object.__setattr__(self, "eps", eps.detach().to(torch.float64))
        elif isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < math.inf:
            raise ValueError(f"eps (a W1 budget) must be a finite number >= 0, got {eps!r}")
        else:
            object.__setattr__(self, "eps", float(eps))
        if self.solver not in SOLVERS:
            raise ValueError(f"unknown solver {self.solver!r}; expected one of {SOLVERS}")

    def budgets(self, rows: torch.Size, device: torch.device | None = None) -> Tensor:
        """eps per row, float64 [*rows]."""
        if not isinstance(self.eps, Tensor):
            return torch.full(tuple(rows), self.eps, dtype=torch.float64, device=device)
        try:
            return torch.broadcast_to(self.eps.to(device), tuple(rows))
        except RuntimeError:
            raise ValueError(
                f"per-row eps of shape {tuple(self.eps.shape)} does not broadcast against p's "
                f"rows {tuple(rows)} (to verify a window with eps per row, verify "
                "window_target(p, q) with plain SD)"
            ) from None

    def plan(self, p: Tensor, q: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One plan per row of p, q [..., V]: the target r [..., V] (p's dtype), the moved mass
        M [...] and the plan's cost [...] (float64; cost <= that row's eps). Rows with eps = 0
        give r = p bit for bit, M = cost = 0."""
        vocab = self.neighbours.index.shape[0]
        if p.shape[-1] != vocab or q.shape[-1] != vocab:
            raise ValueError(
                f"the neighbours cover {vocab} tokens but p, q have vocabularies of "
                f"{p.shape[-1]}, {q.shape[-1]}"
            )
        p, q = torch.broadcast_tensors(p, q)
        rows = p.shape[:-1]
        eps = self.budgets(rows, p.device)
        flat_p, flat_q = p.reshape(-1, vocab), q.reshape(-1, vocab)
        flat_eps = eps.reshape(-1)
        if self.solver == "ranked":
            cpu = {"device": "cpu", "dtype": torch.float64}
            r, moved, cost = ranked_plans(
                flat_p.detach().to(**cpu),
                flat_q.detach().to(**cpu),
                self.neighbours,
                flat_eps.to(**cpu),
            )
            r = torch.where((flat_eps.cpu() == 0).unsqueeze(-1), flat_p.cpu(), r)
            to = {"device": p.device}
            return (
                r.to(device=p.device, dtype=p.dtype).view(p.shape),
                moved.to(**to).view(rows),
                cost.to(**to).view(rows),
            )
        targets, moved, cost = [], [], []
        for a, b, e in zip(flat_p, flat_q, flat_eps.tolist()):
            r, m, c = transport_plan(a, b, self.neighbours, e, self.solver)
            targets.append(r.to(p.dtype))
            moved.append(m)
            cost.append(c)
        r = torch.stack(targets).view(p.shape) if targets else p.clone()
        r = torch.where((eps == 0).unsqueeze(-1), p, r)
        as_rows = {"dtype": torch.float64, "device": p.device}
        return (
            r,
            torch.tensor(moved, **as_rows).view(rows),
            torch.tensor(cost, **as_rows).view(rows),
        )

    def window_target(self, p: Tensor, q: Tensor) -> Tensor:
        """The rows to verify a Jacobi window against with plain SD (``gsd_core.verify``'s
        default rule): p [..., L or L+1, V], q [..., L, V] -> [..., L or L+1, V], r (``plan``)
        on the L drafted rows and p's bonus row L unchanged (no draft there; this rule's plan
        of it is p): ``PlannedTargets.verify_rows`` of the plans. One plan per row, computed
        once; ``verify(window_target(p, q), q, drafts)`` is bit for bit
        ``verify(p, q, drafts, self)`` for a float eps, and also serves eps per row [..., L],
        which ``verify`` with the rule cannot: it asks the residual of the stop row alone,
        without its index."""
        window = q.shape[-2]
        if p.shape[-2] not in (window, window + 1):
            raise ValueError(f"p must have L or L + 1 rows for q's L = {window}, got {p.shape[-2]}")
        return PlannedTargets(*self.plan(p[..., :window, :], q)).verify_rows(p)

    def targets(self, p: Tensor, q: Tensor) -> Tensor:
        """r for every row of p, q [..., V]: [..., V] (``plan``'s first output)."""
        return self.plan(p, q)[0]

    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        p, q = torch.broadcast_tensors(p, q)
        return self.targets(p, q).gather(-1, x), q.gather(-1, x)

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        p, q = torch.broadcast_tensors(p, q)
        return token_residual(self.targets(p, q), q)


rows_of.register(TransportRelaxation, slice_rows)  # eps: a float, or one budget per row


def plan_rows(
    neighbours: object, p: Tensor, q: Tensor, eps: Tensor, solver: str
) -> tuple[Tensor, Tensor, Tensor]:
    """(r [n, V] float64, moved [n], cost [n]) of rows p, q [n, V] with per-row budgets eps [n]:
    ``TransportRelaxation(neighbours, eps, solver).plan``. Rows whose budget is 0 are p itself
    (no solver call)."""
    p64, q64 = p.to(torch.float64), q.to(torch.float64)
    n = p64.shape[0]
    r = p64.clone()
    moved = torch.zeros(n, dtype=torch.float64)
    cost = torch.zeros(n, dtype=torch.float64)
    eps = eps.to(torch.float64).cpu()
    live = (eps > 0).nonzero().flatten()
    if live.numel() == 0:
        return r, moved, cost
    rule = TransportRelaxation(neighbours, eps[live], solver)
    r_live, moved_live, cost_live = rule.plan(p64[live], q64[live])
    r[live] = r_live.to(r.device, torch.float64)
    moved[live] = moved_live.to(torch.float64).cpu()
    cost[live] = cost_live.to(torch.float64).cpu()
    return r, moved, cost


class PlannedWindows:
    """The transport relaxation's windows in one decode (``AcceptanceSpec.windows``): each
    window's plans solved once, at the rule's eps on every drafted row, as ``PlannedTargets``
    (verified as SD on the transported rows); nothing to charge."""

    spent = None

    def __init__(self, rule: TransportRelaxation) -> None:
        self.rule = rule

    def for_window(self, p: Tensor, q: Tensor, forced: Tensor | None) -> PlannedTargets:
        """p [L + 1, V], q [L, V] -> the window's planned targets (``forced`` is not read: the
        loop overrules a draft accepted where another token is forced)."""
        window = q.shape[0]
        eps = torch.full((window,), self.rule.eps, dtype=torch.float64)
        rule = self.rule
        return PlannedTargets(*plan_rows(rule.neighbours, p[:window], q, eps, rule.solver))

    def charge(self, accepted: int) -> None:
        """Nothing: the relaxation's budget is per token, not a total."""
