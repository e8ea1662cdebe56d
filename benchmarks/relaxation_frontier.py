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
import time
from collections import defaultdict

import numpy as np
import torch

from gsd_lab.decode import loop as decoding
from gsd_lab.decode.methods import DecodingMethod
from gsd_lab.experiments.runs import mean_sem

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
    "dial B=32 sure .5 + max": DecodingMethod(
        "sjd", budget=32.0, budget_policy="sure", budget_cap=0.5, draft="maximal"
    ),
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
                SplitLog.rows.append(
                    (
                        fresh[i] if inside else False,
                        i < num_accepted,
                        i,
                        totals[i] if inside else 0.0,
                        value,
                    )
                )
        return tv


KEYS = ("fresh", "redraft", "accepted", "stop", "pos 0-3", "pos 4-7", "pos 8-15", "T<.15", "T>=.15")


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
    from gsd_lab.experiments.runs import Recording, generate_one, generator_seed, resolve_for

    model = load_image_model("standin")
    prompts = model.default_prompts[: args.classes]
    print(
        f"{model.num_tokens} tokens per image, {len(prompts) * len(args.seeds)} images, window 16; "
        "per kind of emitted token: share of the distortion / mean TV / tokens per image",
        flush=True,
    )
    for label in args.configs:
        resolved = resolve_for(model, CONFIGS[label])
        SplitLog.rows = []
        nfe, tv, spent, seconds = [], [], [], []
        for seed in args.seeds:
            for index, prompt in enumerate(prompts):
                started = time.perf_counter()
                result, _ = generate_one(
                    model, resolved, prompt, generator_seed(seed, index), Recording(distortion=True)
                )
                seconds.append(time.perf_counter() - started)
                nfe.append(result.nfe)
                tv.append(float(result.distortion.mean()))
                spent.append(float(result.distortion.sum()))
        split = defaultdict(float)
        counts = defaultdict(int)
        for fresh, accepted, position, total_tv, value in SplitLog.rows:
            for key in (
                ("fresh" if fresh else "redraft"),
                ("accepted" if accepted else "stop"),
                "pos 0-3" if position < 4 else "pos 4-7" if position < 8 else "pos 8-15",
                "T<.15" if total_tv < 0.15 else "T>=.15",
            ):
                split[key] += value
                counts[key] += 1
        total = sum(value for *_, value in SplitLog.rows) or 1.0  # SJD: no distortion
        images = len(prompts) * len(args.seeds)
        cells = " ".join(
            f"{k}: {split[k] / total:.2f} / {split[k] / counts[k] if counts[k] else 0:.4f} / "
            f"{counts[k] / images:.1f}"
            for k in KEYS
        )
        print(
            f"{label:24s} NFE {mean_sem(nfe)[0]:6.1f} ({mean_sem(nfe)[1]:4.1f})  TV/token {np.mean(tv):.4f}"
            f"  TV/image {np.mean(spent):6.2f}  {np.mean(seconds):5.1f} s/image\n    {cells}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
