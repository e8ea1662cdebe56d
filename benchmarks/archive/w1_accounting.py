"""Measure the similarity-aware distortion on the stand-in: its cost, its estimator's error, and
the matched-NFE outcome on TV and W1.

One image per class and seed (10 classes x ``--seeds``), decoded by AR, SJD, GSD at G = 3, 10,
50, Amplify at k = 1.5, 2, 3 and LANTERN at two budgets (``RunCache``, TV and W1 recorded, W1
estimated from ``--draws`` rows per image; ``gsd_lab.accounting.transport``). Prints and writes (``--out``,
JSON):

- overhead: per image, the seconds of W1 accounting against the rest of the image's cost in a
  figures run (decoding wall time plus the TV accounting), summed over all images, and per rule;
- the estimator's error against the exact value: ``--exact-images`` images of GSD (G = 10),
  Amplify (k = 2) and LANTERN (the first budget) decoded again with exact W1 for every token (the
  same seeds: the same tokens), their estimate from the run beside the exact mean, and the
  estimator's RMS error over 20,000 simulated draws from the exact per-token values;
- distortion against NFE on both measures, and ``matched.matched_nfe`` rows with the summary.

Run: nice -n 10 python benchmarks/archive/w1_accounting.py [--seeds 0] [--draws 4] [--exact-images 1]
(one thread; several minutes on a quiet core).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from gsd_lab.experiments import matched, tables
from gsd_lab.experiments.image_model import load_image_model
from gsd_lab.experiments.runs import FilterSettings, RunCache, build_clusters, build_lantern, generate_one
from gsd_lab.accounting.transport import DEFAULT_DRAWS, pps_error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--draws", type=int, default=DEFAULT_DRAWS)
    parser.add_argument("--exact-images", type=int, default=1)
    parser.add_argument("--lantern", type=float, nargs=2, default=[0.001, 0.003])
    parser.add_argument("--out", default="benchmarks/results/w1_accounting_standin.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    model = load_image_model("standin")
    prompts = list(model.default_prompts)
    curves = {"GSD": [tables.gsd(g) for g in (3, 10, 50)], "Amplify": [tables.amplify(k) for k in (1.5, 2.0, 3.0)],
              "LANTERN": [tables.lantern(d) for d in args.lantern], "AR": [tables.AR], "SJD": [tables.SJD]}
    cache = RunCache(model, prompts, args.seeds, FilterSettings.for_model(model.name), w1_draws=args.draws)
    points = tables.pareto_points(cache, curves)

    # Overhead: W1's seconds against the rest of each image's cost (decoding + TV accounting).
    overhead = {}
    for name, specs in curves.items():
        records = [r for spec in specs for r in cache.records(spec)]
        w1 = sum(r.w1_seconds for r in records)
        rest = sum(r.wall_seconds + r.accounting_seconds - r.w1_seconds for r in records)
        overhead[name] = {"images": len(records), "w1_seconds": w1, "rest_seconds": rest, "added": w1 / rest}
    total_w1 = sum(v["w1_seconds"] for v in overhead.values())
    total_rest = sum(v["rest_seconds"] for v in overhead.values())
    overhead["all"] = {"images": sum(v["images"] for v in overhead.values()), "w1_seconds": total_w1,
                       "rest_seconds": total_rest, "added": total_w1 / total_rest}
    print("W1 accounting overhead (seconds of W1 / seconds of decoding + TV accounting):")
    for name, v in overhead.items():
        print(f"  {name:8s} {v['images']:3d} images  W1 {v['w1_seconds']:7.1f} s  rest {v['rest_seconds']:7.1f} s  "
              f"+{v['added']:.1%}  ({v['w1_seconds'] / v['images']:.2f} s per image)")

    # The estimator against the exact value on a sample of images.
    checks = []
    filters = FilterSettings.for_model(model.name)
    for spec in (tables.gsd(10), tables.amplify(2.0), tables.lantern(args.lantern[0])):
        clusters, lantern = build_clusters(spec, model, filters), build_lantern(spec, model)
        for record in cache.records(spec)[: args.exact_images]:
            began = time.perf_counter()
            result, _ = generate_one(model, spec, record.prompt, record.seed, clusters=clusters, lantern=lantern,
                                     record_distortion=True, record_w1=True, w1_draws=None)
            assert torch.equal(result.tokens, record.tokens)  # the same seed: the same image
            error = pps_error(result.distortion, result.w1.tokens, args.draws)
            checks.append({"method": spec.label, "prompt": record.prompt, "exact": result.w1.mean,
                           "run_estimate": record.w1, "run_estimate_se": record.w1_sem,
                           "exact_seconds": time.perf_counter() - began, "rows": result.w1.rows, **error})
            c = checks[-1]
            print(f"  {spec.label:30s} {record.prompt:22s} exact {c['exact']:.5f}  run estimate {c['run_estimate']:.5f} "
                  f"(SE {c['run_estimate_se']:.5f})  estimator RMS error {c['rms_error']:.5f} "
                  f"({c['relative_rms_error']:.1%}), mean reported SE {c['rms_reported_se']:.5f}; "
                  f"exact for {c['rows']} rows took {c['exact_seconds']:.0f} s")

    print("\nDistortion against NFE (mean over images, +- SE over images):")
    for name, rows in points.items():
        for r in rows:
            print(f"  {r['method']:30s} NFE {r['nfe']:6.1f} +- {r['nfe_sem'] or 0:4.1f}   TV {r['distortion']:.4f} "
                  f"+- {r['distortion_sem'] or 0:.4f}   W1 {r['w1']:.5f} +- {r['w1_sem'] or 0:.5f} "
                  f"(sampling {r.get('w1_sampling_sem') or 0:.5f})")
    rows = [row for measure in ("distortion", "w1") for row in matched.matched_nfe(points, measure)]
    print("\n" + matched.matched_summary(rows))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"seeds": args.seeds, "draws": args.draws, "prompts": prompts,
                                          "overhead": overhead, "estimator_checks": checks, "points": points,
                                          "matched_nfe": rows, "seconds": time.perf_counter() - started},
                                         indent=1, default=float))
    print(f"\nwrote {args.out} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
