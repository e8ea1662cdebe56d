"""The TV-optimal relaxation and the certified dial against SJD and GSD on the stand-in: NFE and
mean exact TV per token side by side, and where each method spends its distortion.

Same prompts and generator seeds for every configuration (class i, generator seed
``generator_seed(seed, i)``, the figures' images), window 16, the figures' adapter. For each
configuration: mean NFE (s.e.), mean exact TV per token (``record_distortion``), and the
distortion's split over the emitted tokens by

- draft kind: a *fresh* draft (one-hot q: a random token filling the window's end) or a Jacobi
  *re-draft* (q a row of an earlier pass);
- outcome: an *accepted* draft, or the *stop* token (drawn at the window's first rejection, or
  the bonus token);
- window position (0-3, 4-7, 8-15);
- the row's T = TV(p_i, q_i): below 0.15 (a nearly converged position, which SJD already accepts
  with probability 1 - T) or not (bonus tokens: T = 0).

The split is read by wrapping the decoder's ``DistortionLog`` (a measurement hook in this script,
nothing changes in the decoder: same tokens). This is a measurement script, not a test.

    nice -n 10 python benchmarks/relaxation_frontier.py --classes 10
"""

from __future__ import annotations

import argparse
import math
import time
from collections import defaultdict
from dataclasses import replace

import numpy as np
import torch

import gsd_lab.decoding as decoding
from gsd_lab.methods import DecodingMethod

CONFIGS = {
    "SJD": DecodingMethod("sjd"),
    "SJD + max (MC-SJD)": DecodingMethod("sjd", draft="maximal"),
    "GSD G=50": DecodingMethod("gsd", clusters="dynamic", group_size=50),
    "relax d=0.05": DecodingMethod("sjd", relaxation_delta=0.05),
    "relax d=0.15": DecodingMethod("sjd", relaxation_delta=0.15),
    "relax d=0.3": DecodingMethod("sjd", relaxation_delta=0.3),
    "relax d=0.05 + max": DecodingMethod("sjd", relaxation_delta=0.05, draft="maximal"),
    "relax d=0.15 + max": DecodingMethod("sjd", relaxation_delta=0.15, draft="maximal"),
    "dial B=8 cap .15": DecodingMethod("sjd", budget=8.0, budget_cap=0.15),
    "dial B=32 cap .15": DecodingMethod("sjd", budget=32.0, budget_cap=0.15),
    "dial B=32 sure .5": DecodingMethod("sjd", budget=32.0, budget_policy="sure", budget_cap=0.5),
    "dial B=32 sure .5 + max": DecodingMethod("sjd", budget=32.0, budget_policy="sure", budget_cap=0.5,
                                              draft="maximal"),
}


class SplitLog(decoding.DistortionLog):
    """The decoder's log, also keeping (fresh draft?, accepted?, window position, T, TV) per
    emitted token of a verified window."""

    rows: list[tuple[bool, bool, int, float, float]] = []

    def add(self, start, p, q, num_accepted):
        tv = super().add(start, p, q, num_accepted)
        if tv is not None:
            fresh = (q.amax(-1) == 1).tolist()
            window = q.shape[0]
            totals = (0.5 * (p[:window].double() - q.double()).abs().sum(-1)).tolist()
            for i, value in enumerate(tv.tolist()):
                inside = i < window
                SplitLog.rows.append((fresh[i] if inside else False, i < num_accepted, i,
                                      totals[i] if inside else 0.0, value))
        return tv


def mean_sem(values) -> tuple[float, float]:
    array = np.asarray(values, dtype=np.float64)
    return float(array.mean()), float(array.std(ddof=1) / math.sqrt(len(array))) if len(array) > 1 else math.nan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    decoding.DistortionLog = SplitLog  # the measurement hook (module docstring)

    from gsd_lab.experiments.image_model import load_image_model
    from gsd_lab.experiments.runs import generate_one, generator_seed, resolve_for

    model = load_image_model("standin")
    prompts = model.default_prompts[: args.classes]
    table = {}
    for label in args.configs:
        resolved = resolve_for(model, CONFIGS[label])
        SplitLog.rows = []
        nfe, tv, spent, seconds = [], [], [], []
        for seed in args.seeds:
            for index, prompt in enumerate(prompts):
                started = time.perf_counter()
                result, _ = generate_one(model, resolved, prompt, generator_seed(seed, index), record_distortion=True)
                seconds.append(time.perf_counter() - started)
                nfe.append(result.nfe)
                tv.append(float(result.distortion.mean()))
                spent.append(float(result.distortion.sum()))
        split = defaultdict(float)
        counts = defaultdict(int)
        for fresh, accepted, position, total_tv, value in SplitLog.rows:
            for key in (("fresh" if fresh else "redraft"), ("accepted" if accepted else "stop"),
                        "pos 0-3" if position < 4 else "pos 4-7" if position < 8 else "pos 8-15",
                        "T<.15" if total_tv < 0.15 else "T>=.15"):
                split[key] += value
                counts[key] += 1
        total = sum(value for *_, value in SplitLog.rows) or math.nan
        table[label] = (mean_sem(nfe), float(np.mean(tv)), float(np.mean(spent)), split, counts, total,
                        float(np.mean(seconds)))
        print(f"{label:24s} NFE {np.mean(nfe):6.1f}  TV/token {np.mean(tv):.4f}  ({time.perf_counter():.0f})",
              flush=True)

    keys = ("fresh", "redraft", "accepted", "stop", "pos 0-3", "pos 4-7", "pos 8-15", "T<.15", "T>=.15")
    print(f"\n{model.num_tokens} tokens per image, {len(prompts) * len(args.seeds)} images, window 16\n")
    print(f"{'configuration':24s} {'NFE':>6s} {'s.e.':>5s} {'TV/tok':>7s} {'TV/img':>7s} {'s/img':>6s} | "
          "share of the distortion: " + " ".join(f"{k:>8s}" for k in keys))
    for label, (nfe, tv, spent, split, counts, total, secs) in table.items():
        shares = " ".join(f"{split[k] / total:8.2f}" for k in keys)
        print(f"{label:24s} {nfe[0]:6.1f} {nfe[1]:5.1f} {tv:7.4f} {spent:7.2f} {secs:6.1f} | "
              f"{'':25s}{shares}")
    print(f"\n{'configuration':24s} mean TV per emitted token of each kind: " + " ".join(f"{k:>8s}" for k in keys))
    for label, (_, _, _, split, counts, _, _) in table.items():
        means = " ".join(f"{split[k] / counts[k]:8.4f}" if counts[k] else f"{'-':>8s}" for k in keys)
        print(f"{label:24s} {'':40s}{means}")
    print(f"\n{'configuration':24s} emitted tokens of each kind per image: " + " ".join(f"{k:>8s}" for k in keys))
    images = len(prompts) * len(args.seeds)
    for label, (_, _, _, split, counts, _, _) in table.items():
        print(f"{label:24s} {'':39s}" + " ".join(f"{counts[k] / images:8.1f}" for k in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
