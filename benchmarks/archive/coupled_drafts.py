"""NFE of coupled drafts (MC-SJD / SCD, ``gsd_lab.decode.coupling``) against SJD, GSD and AR on the
stand-in, side by side: the same prompts and generator seeds for every configuration, so the
differences are paired image by image.

Configurations (window 16, the figures' adapter: float64 forward on CPU, CFG 3, top-k 2000):
AR; SJD; SJD + maximal coupling; SJD + Gumbel coupling; GSD G = 50 with the paper's filters
(``resolve_for``: ``FilterSettings.for_model``; G as ``DynamicClusters(50)`` defines it at this
commit); GSD G = 50 + maximal coupling. Images: class i with generator seed ``generator_seed(seed, i)`` (= i for seed
0), for i < ``--classes`` and each ``--seeds``. Prints per configuration the mean NFE with its
standard error, and for each pair (A, B) of interest the mean paired difference NFE(A) - NFE(B)
with its standard error (the s.e. of the per-image differences); GSD rows also give the mean
exact distortion (``record_distortion``). ``--json`` writes every image's record.

    nice -n 10 python benchmarks/archive/coupled_drafts.py --classes 10 --seeds 0 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace

import numpy as np
import torch

from gsd_lab.decode.methods import DecodingMethod, ClusterAcceptance
from gsd_lab.experiments.runs import mean_sem

CONFIGS = {  # label: the decoding method (its window set by --window)
    "AR": DecodingMethod("ar"),
    "SJD": DecodingMethod("sjd"),
    "SJD + maximal": DecodingMethod("sjd", draft="maximal"),
    "SJD + gumbel": DecodingMethod("sjd", draft="gumbel"),
    "GSD G=50": DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=50)),
    "GSD G=50 + maximal": DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=50), draft="maximal"),
}
PAIRS = [("SJD + maximal", "SJD"), ("SJD + gumbel", "SJD"), ("SJD + maximal", "SJD + gumbel"),
         ("SJD + maximal", "GSD G=50"), ("SJD + gumbel", "GSD G=50"), ("GSD G=50 + maximal", "GSD G=50")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--json", default=None, help="write the per-image records here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from gsd_lab.experiments.image_model import load_image_model
    from gsd_lab.experiments.runs import Recording, generate_one, generator_seed, resolve_for

    model = load_image_model("standin")
    prompts = model.default_prompts[: args.classes]
    records: dict[str, list[dict]] = {}
    for label in args.configs:
        method = CONFIGS[label] if CONFIGS[label].kind == "ar" else replace(CONFIGS[label], window=args.window)
        resolved = resolve_for(model, method)  # GSD: the paper's filters for this model
        records[label] = []
        for seed in args.seeds:
            for index, prompt in enumerate(prompts):
                gseed = generator_seed(seed, index)
                started = time.perf_counter()
                result, _ = generate_one(model, resolved, prompt, gseed, Recording(distortion=method.kind == "gsd"))
                records[label].append({"prompt": prompt, "seed": gseed, "nfe": result.nfe,
                                       "distortion": float(result.distortion.mean()) if method.kind == "gsd" else 0.0,
                                       "seconds": time.perf_counter() - started})
                print(f"{label:20s} {prompt:12s} seed {gseed:8d}  NFE {result.nfe:4d}", flush=True)

    print(f"\n{'configuration':22s} {'images':>6s} {'NFE':>8s} {'s.e.':>6s} {'x AR':>6s} {'distortion':>11s}")
    ar = mean_sem([r["nfe"] for r in records["AR"]])[0] if "AR" in records else math.nan
    for label, rows in records.items():
        nfe, sem = mean_sem([r["nfe"] for r in rows])
        distortion = np.mean([r["distortion"] for r in rows])
        print(f"{label:22s} {len(rows):6d} {nfe:8.1f} {sem:6.1f} {ar / nfe:6.2f} {distortion:11.5f}")
    print(f"\n{'paired difference (A - B)':46s} {'mean':>7s} {'s.e.':>6s}")
    for a, b in PAIRS:
        if a in records and b in records:
            diff, sem = mean_sem([x["nfe"] - y["nfe"] for x, y in zip(records[a], records[b], strict=True)])
            print(f"{a + ' - ' + b:46s} {diff:7.1f} {sem:6.1f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"window": args.window, "classes": args.classes, "seeds": args.seeds,
                       "weights": model.weights_info, "records": records}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
