"""The transport relaxation and the W1 dial against SJD, MC-SJD, GSD and MC-GSD on the stand-in:
NFE, mean W1 per token and the decoding work outside the model, side by side.

Same prompts and generator seeds for every configuration (class i, generator seed
``generator_seed(seed, i)``, the figures' images), window 16, the figures' adapter. For each
configuration: mean NFE (s.e.), mean W1 per emitted token (``record_w1``, the PPS estimate from
``DEFAULT_DRAWS`` rows per image, content distance on the [-1, 1] pixel scale), mean TV per token
(exact), the certified spend per image (the dial), and the seconds per image outside the model's
forward (wall_seconds - model_seconds; accounting excluded) with that overhead per forward pass, and
the wall seconds per image.
The transport plan's solver is ``relaxation_w1.TRANSPORT_SOLVER``. A measurement script, not a test.
``--k K --eps E1 E2 ...``: instead of the fixed configurations, the transport relaxation with
maximal drafts on K content neighbours at each eps (a wider support); the first configuration's
``resolve`` seconds include building the K-neighbour table.

    nice -n 10 python benchmarks/w1_dial_frontier.py --classes 10
    nice -n 19 python benchmarks/w1_dial_frontier.py --classes 10 --k 1024 --eps 1.0 0.2 0.05
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from gsd_lab.decode.methods import DecodingMethod
from gsd_lab.decode.relaxation_w1 import TRANSPORT_SOLVER
from gsd_lab.experiments.runs import mean_sem

K = 16
CONFIGS = {
    "SJD": DecodingMethod("sjd"),
    "MC-SJD": DecodingMethod("sjd", draft="maximal"),
    "GSD G=50": DecodingMethod("gsd", clusters="dynamic", group_size=50),
    "MC-GSD G=50": DecodingMethod("gsd", clusters="dynamic", group_size=50, draft="maximal"),
    "transport e=0.01": DecodingMethod("sjd", transport_eps=0.01, transport_k=K),
    "transport e=0.04": DecodingMethod("sjd", transport_eps=0.04, transport_k=K),
    "transport e=0.01 + max": DecodingMethod(
        "sjd", transport_eps=0.01, transport_k=K, draft="maximal"
    ),
    "transport e=0.04 + max": DecodingMethod(
        "sjd", transport_eps=0.04, transport_k=K, draft="maximal"
    ),
    "transport e=0.04 k=128 + max": DecodingMethod(
        "sjd", transport_eps=0.04, transport_k=128, draft="maximal"
    ),
    "W1 dial B=1 cap .04 + max": DecodingMethod(
        "sjd", budget=1.0, budget_measure="w1", budget_cap=0.04, transport_k=K, draft="maximal"
    ),
    "W1 dial B=4 cap .04 + max": DecodingMethod(
        "sjd", budget=4.0, budget_measure="w1", budget_cap=0.04, transport_k=K, draft="maximal"
    ),
    "W1 dial B=4 sure .1 + max": DecodingMethod(
        "sjd",
        budget=4.0,
        budget_measure="w1",
        budget_policy="sure",
        budget_cap=0.1,
        transport_k=K,
        draft="maximal",
    ),
}


def wide_configs(k: int, eps_values: list[float]) -> dict[str, DecodingMethod]:
    """The transport relaxation with maximal drafts on ``k`` content neighbours, one per eps."""
    return {
        f"transport e={eps:g} k={k} + max": DecodingMethod(
            "sjd", transport_eps=eps, transport_k=k, draft="maximal"
        )
        for eps in eps_values
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--configs", nargs="+", default=None, choices=list(CONFIGS))
    parser.add_argument("--k", type=int, default=None, help="wider support: transport_k")
    parser.add_argument("--eps", type=float, nargs="+", default=None, help="with --k (0.04)")
    args = parser.parse_args(argv)
    if args.k is not None and args.configs is not None:
        parser.error("--k builds its own configurations: give --k or --configs, not both")
    if args.k is None and args.eps is not None:
        parser.error("--eps sets the configurations of --k: give --k with it")
    configs = CONFIGS if args.k is None else wide_configs(args.k, args.eps or [0.04])
    labels = list(configs) if args.configs is None else args.configs
    torch.set_num_threads(args.threads)

    from gsd_lab.experiments.image_model import load_image_model
    from gsd_lab.experiments.runs import Recording, generate_one, generator_seed, resolve_for

    model = load_image_model("standin")
    prompts = model.default_prompts[: args.classes]
    print(
        f"{model.num_tokens} tokens per image, {len(prompts) * len(args.seeds)} images, window "
        f"16, transport solver {TRANSPORT_SOLVER}; W1 in RMS pixel units on [-1, 1]",
        flush=True,
    )
    for label in labels:
        started = time.perf_counter()
        resolved = resolve_for(model, configs[label])
        resolve_seconds = time.perf_counter() - started
        nfe, w1, tv, spent, outside, per_forward, wall = [], [], [], [], [], [], []
        for seed in args.seeds:
            for index, prompt in enumerate(prompts):
                result, _ = generate_one(
                    model,
                    resolved,
                    prompt,
                    generator_seed(seed, index),
                    Recording(distortion=True, w1=True),
                )
                nfe.append(result.nfe)
                w1.append(result.w1.mean)
                tv.append(float(result.distortion.mean()))
                spent.append(result.budget_spent or 0.0)
                outside.append(result.wall_seconds - result.model_seconds)
                wall.append(result.wall_seconds)
                per_forward.append((result.wall_seconds - result.model_seconds) / result.nfe)
        n, n_se = mean_sem(nfe)
        w, w_se = mean_sem(w1)
        print(
            f"{label:30s} NFE {n:6.1f} ({n_se:4.1f})  W1/token {w:.4f} ({w_se:.4f})  "
            f"TV/token {np.mean(tv):.4f}  spent/image {np.mean(spent):6.3f}  "
            f"outside model {np.mean(outside):6.2f} s/image ({1e3 * np.mean(per_forward):6.1f} "
            f"ms/forward)  wall {np.mean(wall):6.2f} s/image  resolve {resolve_seconds:.1f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
