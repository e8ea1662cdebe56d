"""The transport relaxation's solvers side by side on the stand-in's rows
(gsd_lab.decode.relaxation_w1): seconds per window of 16 rows and moved mass M relative to the LP
(the most any plan on the same neighbour edges moves), for "ranked" (all rows at once, torch),
"greedy" and "lp" (one row at a time, numpy / HiGHS), at a few W1 budgets eps. One thread.
``--gap``: the optimality gaps instead, greedy against the LP on the same neighbour support and a
k-neighbour support against a wider one, as M (acceptance is 1 - T + M).

Rows: one SJD decode (class 0, generator seed 0, the figures' adapter), read by ``generate``'s
``on_window`` hook: ``--rows`` of its verified (p, q) rows drawn with a fixed seed form one
window. Per eps: each solver's time for the window (ranked: the median of ``--repeats`` runs)
and the median and worst over rows of M / M_lp. Then "ranked" on every full window of the decode
(all 16 rows, verified or not, as ``verify`` plans them). ``--gap`` prints per eps the mean M of
each solver and support (``--k``: several), the mean T, and the seconds per row. Times are wall
seconds on a shared machine: the load average is printed with them. A measurement script, not a
test.

    python benchmarks/transport_solver_speed.py --out benchmarks/results/transport_solver_speed_standin.txt
    python benchmarks/transport_solver_speed.py --gap --rows 16
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from gsd_lab.decode.loop import VerifiedWindow
from gsd_lab.decode.methods import DecodingMethod
from gsd_lab.decode.relaxation_w1 import (
    COST_LEVELS, content_neighbours, ranked_plans, transport_plan,
)


class Rows:
    """The verified (p, q) rows and every window of a decode: an ``on_window`` hook."""

    def __init__(self) -> None:
        self.rows: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.windows: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, window: VerifiedWindow) -> None:
        p, q = window.p.double().cpu(), window.q.double().cpu()
        self.rows += [(p[i], q[i]) for i in range(min(window.accepted + 1, q.shape[0]))]
        self.windows.append((p, q))


def normalised(p: torch.Tensor) -> torch.Tensor:
    return p / p.sum(-1, keepdim=True)


def ratios(moved: np.ndarray, best: np.ndarray) -> str:
    some = best > 1e-12
    share = moved[some] / best[some]
    return f"{np.median(share):6.3f} {share.min():6.3f}"


def gap(
    rows: Rows, p: torch.Tensor, q: torch.Tensor, hoods: dict, eps_values: list[float],
    say: Callable[[str], None],
) -> None:
    """Per eps: the mean M of greedy and LP plans on each support, and their seconds per row."""
    totals = 0.5 * (p - q).abs().sum(-1)
    say(
        f"{p.shape[0]} rows of {len(rows.rows)} verified; mean T = TV(p, q) = "
        f"{totals.mean():.4f}; fresh one-hot drafts among them: {int((q.amax(-1) == 1).sum())}"
    )
    say(
        f"{'eps':>6s} "
        + " ".join(f"{'M ' + s + ' k=' + str(k):>16s}" for k in hoods for s in ("greedy", "lp"))
        + "   s/row (greedy, lp) per k"
    )
    for eps in eps_values:
        cells, times = [], []
        for hood in hoods.values():
            for solver in ("greedy", "lp"):
                started = time.perf_counter()
                moved = [transport_plan(a, b, hood, eps, solver)[1] for a, b in zip(p, q)]
                times.append((time.perf_counter() - started) / p.shape[0])
                cells.append(np.mean(moved))
        say(
            f"{eps:6.3f} " + " ".join(f"{c:16.4f}" for c in cells) + "   "
            + " ".join(f"{t:.2f}" for t in times)
        )


def written(path: str | None, lines: list[str]) -> int:
    """Write ``lines`` to ``path`` when given; 0 (the exit status)."""
    if path:
        Path(path).write_text("\n".join(lines) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gap", action="store_true", help="the optimality gaps instead")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--eps", type=float, nargs="+", default=None,
                        help="default 3e-4 1e-3 3e-3 0.01 0.04; with --gap 0.01 0.04 0.1")
    parser.add_argument("--k", type=int, nargs="+", default=None,
                        help="default 16; with --gap 16 128 (the speed takes one)")
    parser.add_argument("--repeats", type=int, help="ranked's timed runs (20); not with --gap")
    parser.add_argument("--out", help="also write the printed lines to this file")
    args = parser.parse_args(argv)
    ks = args.k or ([16, 128] if args.gap else [16])
    if not args.gap and len(ks) != 1:
        parser.error("the solvers' speed takes one --k")
    if args.gap and args.repeats is not None:
        parser.error("--gap times each solver once: --repeats is the speed's")
    repeats = 20 if args.repeats is None else args.repeats
    eps_values = args.eps or ([0.01, 0.04, 0.1] if args.gap else [3e-4, 1e-3, 3e-3, 0.01, 0.04])
    torch.set_num_threads(1)
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    from gsd_lab.experiments.image_model import load_image_model
    from gsd_lab.experiments.runs import Recording, generate_one, resolve_for

    model = load_image_model("standin")
    rows = Rows()
    started = time.perf_counter()
    generate_one(
        model,
        resolve_for(model, DecodingMethod("sjd")),
        model.default_prompts[0],
        0,
        Recording(distortion=True),
        on_window=rows,
    )
    decode_ms = 1e3 * (time.perf_counter() - started) / len(rows.windows)
    pick = np.random.default_rng(0).choice(
        len(rows.rows), size=min(args.rows, len(rows.rows)), replace=False
    )
    p = normalised(torch.stack([rows.rows[i][0] for i in sorted(pick)]))
    q = torch.stack([rows.rows[i][1] for i in sorted(pick)])
    adapter = model.adapter
    content, tokens = adapter.code_content(), adapter.allowed_tokens
    hoods = {k: content_neighbours(content, tokens, adapter.vocab_size, k) for k in ks}
    if args.gap:
        gap(rows, p, q, hoods, eps_values, say)
        return written(args.out, lines)
    hood = hoods[ks[0]]
    _ = hood.level  # computed once per neighbour table, not per window
    totals = 0.5 * (p - q).abs().sum(-1)
    say(
        f"stand-in SJD decode (class 0, seed 0): {len(rows.rows)} verified rows, "
        f"{len(rows.windows)} windows; V = {p.shape[-1]}, k = {ks[0]}, "
        f"{COST_LEVELS} cost levels, 1 thread; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores"
    )
    say(
        f"the decode itself (model, drafting, SD verification): {decode_ms:.0f} ms per window (wall)"
    )
    say(
        f"window: {p.shape[0]} verified rows (fixed seed), mean T = TV(p, q) = "
        f"{totals.mean():.4f}; ms per window (ranked: median and fastest wall of "
        f"{repeats} runs, median process CPU time); M / M_lp over its rows: median, worst"
    )
    say(
        f"{'eps':>7s} {'ranked ms':>10s} {'fastest':>8s} {'cpu ms':>8s} {'greedy ms':>10s} "
        f"{'lp ms':>9s}   "
        f"{'ranked/lp med worst':>20s}   {'greedy/lp med worst':>20s}   {'mean M_lp':>9s}"
    )
    for eps in eps_values:
        budgets = torch.full((p.shape[0],), eps, dtype=torch.float64)
        ranked_plans(p, q, hood, budgets)
        times, cpu = [], []
        for _ in range(repeats):
            started, process = time.perf_counter(), time.process_time()
            _, moved, cost = ranked_plans(p, q, hood, budgets)
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - process)
        assert bool((cost <= budgets * (1 + 1e-12)).all())
        cells = {}
        for solver in ("greedy", "lp"):
            started = time.perf_counter()
            cells[solver] = np.array(
                [transport_plan(a, b, hood, eps, solver)[1] for a, b in zip(p, q)]
            )
            cells[solver + " s"] = time.perf_counter() - started
        best = cells["lp"]
        assert bool((moved.numpy() <= best + 1e-9).all())
        say(
            f"{eps:7.4f} {1e3 * np.median(times):10.1f} {1e3 * min(times):8.1f} "
            f"{1e3 * np.median(cpu):8.1f} {1e3 * cells['greedy s']:10.0f} "
            f"{1e3 * cells['lp s']:9.0f}   {ratios(moved.numpy(), best):>20s}   "
            f"{ratios(cells['greedy'], best):>20s}   {best.mean():9.4f}"
        )
    for eps in (1e-3, 0.01):
        times, cpu = [], []
        for wp, wq in rows.windows:
            wp = normalised(wp[: wq.shape[0]])  # p has one row more: the bonus token's
            budgets = torch.full((wq.shape[0],), eps, dtype=torch.float64)
            started, process = time.perf_counter(), time.process_time()
            ranked_plans(wp, wq, hood, budgets)
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - process)
        times, cpu = 1e3 * np.array(times), 1e3 * np.array(cpu)
        say(
            f"ranked on all {len(times)} windows of the decode ({rows.windows[0][1].shape[0]} "
            f"rows each), eps = {eps}: wall median {np.median(times):.1f} ms, 90th percentile "
            f"{np.quantile(times, 0.9):.1f} ms, fastest {times.min():.1f} ms per window; process "
            f"CPU median {np.median(cpu):.1f} ms; load average {os.getloadavg()[0]:.1f}"
        )
    return written(args.out, lines)


if __name__ == "__main__":
    raise SystemExit(main())
