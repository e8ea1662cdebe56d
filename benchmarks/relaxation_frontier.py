"""The relaxations and dials against SJD and GSD on the stand-in, side by side: NFE and the
distortion per token, by TV (default) or by W1 (``--w1``).

Same prompts and generator seeds for every configuration (class i, generator seed
``generator_seed(seed, i)``, the figures' images), window 16, the figures' adapter.

TV (the TV-optimal relaxation and the certified dial): mean NFE (s.e.), mean exact TV per token
(``record_distortion``), and the distortion's split over the emitted tokens by

- draft kind: a *fresh* draft (one-hot q: a random token filling the window's end) or a Jacobi
  *re-draft* (q a row of an earlier pass);
- outcome: an *accepted* draft, or the *stop* token (drawn at the window's first rejection, or
  the bonus token);
- window position (0-3, 4-7, 8-15);
- the row's T = TV(p_i, q_i): below 0.15 (a nearly converged position, which SJD already accepts
  with probability 1 - T) or not (bonus tokens: T = 0);

then the rows the trajectory visits, per image: the sums of T, of the exact TV and of T - TV (the
expected number of stops of a rule on the one-step bound, proofs/10), the stops counted, and the
mean top-1 probability of p. The split is read by ``generate``'s ``on_window`` hook.

W1 (``--w1``: the transport relaxation and the W1 dial against SJD, MC-SJD, GSD and MC-GSD): mean
NFE (s.e.), mean W1 per emitted token (``record_w1``, the PPS estimate from ``DEFAULT_DRAWS`` rows
per image, content distance on the [-1, 1] pixel scale), mean TV per token (exact), the certified
spend per image (the dial), and the seconds per image outside the model's forward (wall_seconds -
model_seconds; accounting excluded) with that overhead per forward pass, and the wall seconds per
image. The transport plan's solver is ``relaxation_w1.TRANSPORT_SOLVER``. ``--k K --eps E1 ...``:
instead of the fixed configurations, the transport relaxation with maximal drafts on K content
neighbours at each eps (a wider support); the first configuration's ``resolve`` seconds include
building the K-neighbour table. A measurement script, not a test.

    nice -n 10 python benchmarks/relaxation_frontier.py --classes 10
    nice -n 10 python benchmarks/relaxation_frontier.py --w1 --classes 10
    nice -n 19 python benchmarks/relaxation_frontier.py --w1 --classes 10 --k 1024 --eps 1.0 0.2
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np
import torch

from gsd_lab.decode.loop import VerifiedWindow
from gsd_lab.decode.methods import (BudgetAcceptance, ClusterAcceptance, DecodingMethod,
                                    RelaxationAcceptance, TransportAcceptance)
from gsd_lab.decode.relaxation_w1 import TRANSPORT_SOLVER
from gsd_lab.experiments.runs import mean_sem


def sjd(acceptance: object = None, maximal: bool = False) -> DecodingMethod:
    """SJD with ``acceptance`` (None: SD's), maximal-coupling drafts when ``maximal``."""
    draft = "maximal" if maximal else "independent"
    return DecodingMethod("sjd", acceptance=acceptance, draft=draft)


def gsd(maximal: bool = False) -> DecodingMethod:
    """GSD with G = 50, maximal-coupling drafts when ``maximal``."""
    return DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=50),
                          draft="maximal" if maximal else "independent")


def relax(delta: float) -> RelaxationAcceptance:
    return RelaxationAcceptance(delta=delta)


def dial(budget: float, cap: float, **kwargs: str) -> BudgetAcceptance:
    return BudgetAcceptance(budget=budget, cap=cap, **kwargs)


def transport(eps: float, k: int = 16) -> TransportAcceptance:
    return TransportAcceptance(eps=eps, k=k)


TV_CONFIGS = {
    "SJD": sjd(), "SJD + max (MC-SJD)": sjd(maximal=True), "GSD G=50": gsd(),
    "relax d=0.05": sjd(relax(0.05)), "relax d=0.15": sjd(relax(0.15)),
    "relax d=0.3": sjd(relax(0.3)),
    "relax d=0.05 + max": sjd(relax(0.05), True), "relax d=0.15 + max": sjd(relax(0.15), True),
    "dial B=8 cap .15": sjd(dial(8.0, 0.15)), "dial B=32 cap .15": sjd(dial(32.0, 0.15)),
    "dial B=32 sure .5": sjd(dial(32.0, 0.5, policy="sure")),
    "dial B=32 sure .5 + max": sjd(dial(32.0, 0.5, policy="sure"), True),
}
W1_CONFIGS = {
    "SJD": sjd(), "MC-SJD": sjd(maximal=True), "GSD G=50": gsd(), "MC-GSD G=50": gsd(True),
    "transport e=0.01": sjd(transport(0.01)), "transport e=0.04": sjd(transport(0.04)),
    "transport e=0.01 + max": sjd(transport(0.01), True),
    "transport e=0.04 + max": sjd(transport(0.04), True),
    "transport e=0.04 k=128 + max": sjd(transport(0.04, 128), True),
    "W1 dial B=1 cap .04 + max": sjd(dial(1.0, 0.04, measure="w1"), True),
    "W1 dial B=4 cap .04 + max": sjd(dial(4.0, 0.04, measure="w1"), True),
    "W1 dial B=4 sure .1 + max": sjd(dial(4.0, 0.1, measure="w1", policy="sure"), True),
}
KEYS = ("fresh", "redraft", "accepted", "stop", "pos 0-3", "pos 4-7", "pos 8-15", "T<.15", "T>=.15")


def wide_configs(k: int, eps_values: list[float]) -> dict[str, DecodingMethod]:
    """The transport relaxation with maximal drafts on ``k`` content neighbours, one per eps."""
    return {f"transport e={eps:g} k={k} + max": sjd(transport(eps, k), True) for eps in eps_values}


class Split:
    """(fresh draft?, accepted?, window position, T, TV, top-1 of p) per emitted token of a
    verified window: an ``on_window`` hook."""

    def __init__(self) -> None:
        self.rows: list[tuple[bool, bool, int, float, float, float]] = []

    def __call__(self, window: VerifiedWindow) -> None:
        p, q, tv, L = window.p, window.q, window.tv, window.q.shape[0]
        if tv is None:
            return
        fresh = (q.amax(-1) == 1).tolist()
        totals = (0.5 * (p[:L].double() - q.double()).abs().sum(-1)).tolist()
        top = p.double().amax(-1).tolist()
        for i, value in enumerate(tv.tolist()):
            inside = i < L
            self.rows.append((fresh[i] if inside else False, i < window.accepted, i,
                              totals[i] if inside else 0.0, value, top[i]))

    def lines(self, images: int) -> str:
        """The split's cells, then the trajectory's per-image sums."""
        split, counts = defaultdict(float), defaultdict(int)
        for fresh, accepted, position, total_tv, value, _ in self.rows:
            for key in (
                "fresh" if fresh else "redraft",
                "accepted" if accepted else "stop",
                "pos 0-3" if position < 4 else "pos 4-7" if position < 8 else "pos 8-15",
                "T<.15" if total_tv < 0.15 else "T>=.15",
            ):
                split[key] += value
                counts[key] += 1
        total = sum(row[4] for row in self.rows) or 1.0  # SJD: no distortion
        cells = " ".join(
            f"{k}: {split[k] / total:.2f} / {split[k] / counts[k] if counts[k] else 0:.4f} / "
            f"{counts[k] / images:.1f}"
            for k in KEYS
        )
        a = np.array([(t, v, top, acc) for _, acc, _, t, v, top in self.rows], dtype=float)
        return (
            f"    {cells}\n    per image: sum T {a[:, 0].sum() / images:6.1f}  sum TV "
            f"{a[:, 1].sum() / images:5.1f}  sum(T-TV) {(a[:, 0] - a[:, 1]).sum() / images:6.1f}"
            f"  stops {(1 - a[:, 3]).sum() / images:5.1f}  mean top-1 of p {a[:, 2].mean():.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--w1", action="store_true", help="the W1 configurations and columns")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, default=1)
    names = sorted(set(TV_CONFIGS) | set(W1_CONFIGS))
    parser.add_argument("--configs", nargs="+", default=None, choices=names)
    parser.add_argument("--k", type=int, default=None, help="with --w1, wider: transport_k")
    parser.add_argument("--eps", type=float, nargs="+", default=None, help="with --k (0.04)")
    args = parser.parse_args(argv)
    if args.k is not None and (args.configs is not None or not args.w1):
        parser.error("--k builds its own W1 configurations: give it with --w1, not --configs")
    if args.k is None and args.eps is not None:
        parser.error("--eps sets the configurations of --k: give --k with it")
    configs = TV_CONFIGS if not args.w1 else W1_CONFIGS
    configs = configs if args.k is None else wide_configs(args.k, args.eps or [0.04])
    labels = list(configs) if args.configs is None else args.configs
    if unknown := [label for label in labels if label not in configs]:
        parser.error(f"not a configuration of this mode: {unknown}")
    torch.set_num_threads(args.threads)

    from gsd_lab.experiments.image_model import load_image_model
    from gsd_lab.experiments.runs import Recording, generate_one, generator_seed, resolve_for

    model = load_image_model("standin")
    prompts = model.default_prompts[: args.classes]
    images = len(prompts) * len(args.seeds)
    print(
        f"{model.num_tokens} tokens per image, {images} images, window 16"
        + (f", transport solver {TRANSPORT_SOLVER}; W1 in RMS pixel units on [-1, 1]" if args.w1
           else "; per kind of emitted token: share of the distortion / mean TV / tokens per "
           "image"),
        flush=True,
    )
    recording = Recording(distortion=True, w1=args.w1)
    for label in labels:
        started = time.perf_counter()
        resolved = resolve_for(model, configs[label])
        resolve_seconds = time.perf_counter() - started
        split = Split()
        results = []
        for seed in args.seeds:
            for index, prompt in enumerate(prompts):
                result, _ = generate_one(
                    model, resolved, prompt, generator_seed(seed, index), recording,
                    on_window=None if args.w1 else split,
                )
                results.append(result)
        n, n_se = mean_sem([r.nfe for r in results])
        tv = np.mean([float(r.distortion.mean()) for r in results])
        if not args.w1:  # seconds: the decode's, its accounting and the hook included
            spent = np.mean([float(r.distortion.sum()) for r in results])
            seconds = [r.wall_seconds + r.accounting_seconds for r in results]
            print(
                f"{label:24s} NFE {n:6.1f} ({n_se:4.1f})  TV/token {tv:.4f}  TV/image "
                f"{spent:6.2f}  {np.mean(seconds):5.1f} s/image\n{split.lines(images)}",
                flush=True,
            )
            continue
        w, w_se = mean_sem([r.w1.mean for r in results])
        outside = [r.wall_seconds - r.model_seconds for r in results]
        per_forward = np.mean([o / r.nfe for o, r in zip(outside, results)])
        print(
            f"{label:30s} NFE {n:6.1f} ({n_se:4.1f})  W1/token {w:.4f} ({w_se:.4f})  "
            f"TV/token {tv:.4f}  spent/image "
            f"{np.mean([r.budget_spent or 0.0 for r in results]):6.3f}  "
            f"outside model {np.mean(outside):6.2f} s/image ({1e3 * per_forward:6.1f} "
            f"ms/forward)  wall {np.mean([r.wall_seconds for r in results]):6.2f} s/image  "
            f"resolve {resolve_seconds:.1f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
