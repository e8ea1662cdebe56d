"""The digits model's AR accuracy against the sampling settings a user would choose: CFG scale
and top-k, on one fixed set of seeds (selection), then the chosen setting on fresh seeds.

Per setting (cfg_scale s, top_k k): ``--per-class`` AR samples of every digit for each seed in
``--seeds`` (``gsd_train.digits.export.generation_statistics``: the reference sampler, float64
model, one generator per seed, the same seeds for every setting), scored by the digits
classifier: accuracy (argmax = prompted digit), mean log p(prompted digit), KID against the
held-out digits, the flat-token share. The selection is the largest accuracy; its number on
these seeds is the selected maximum, biased upwards, so the selected setting is measured again on
fresh seeds (``--confirm-seeds``, disjoint from the selection's): the number to report, beside
the adapter's defaults on the same seeds.

    nice -n 5 python benchmarks/archive/digits_sampling.py
    # default --out benchmarks/results/digits_sampling
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
KEEP = ("cfg_scale", "top_k", "seeds", "per_class_per_seed", "images", "accuracy",
        "logp_prompted_mean", "kid_vs_heldout", "share_top1_below_5pct", "accuracy_per_digit")


def main(argv: list[str] | None = None) -> int:
    from gsd_lab.digits.adapter import DEFAULT_CFG_SCALE, DEFAULT_TOP_K, WEIGHTS_DIR
    from gsd_train.digits.export import generation_statistics

    parser = argparse.ArgumentParser()
    parser.add_argument("--cfg", type=float, nargs="+", default=[1.5, 2.0, 3.0, 5.0, 7.0, 10.0])
    parser.add_argument("--top-k", type=int, nargs="+", default=[0, 100, 10],
                        help="0: no top-k")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1000])
    parser.add_argument("--confirm-seeds", type=int, nargs="+", default=[2000, 2001, 2002])
    parser.add_argument("--per-class", type=int, default=10)
    parser.add_argument("--weights", type=Path, default=WEIGHTS_DIR)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/digits_sampling")
    args = parser.parse_args(argv)
    if set(args.seeds) & set(args.confirm_seeds):
        raise ValueError(f"confirmation seeds {args.confirm_seeds} overlap the selection's")
    torch.set_num_threads(1)

    rows = []
    for cfg_scale in args.cfg:
        for k in args.top_k:
            stats, _, _ = generation_statistics(
                args.weights, args.per_class, tuple(args.seeds), cfg_scale, k or None)
            rows.append({key: stats[key] for key in KEEP})
            print(f"cfg {cfg_scale:g} top-k {k or '-'}: accuracy {stats['accuracy']:.3f} "
                  f"log p {stats['logp_prompted_mean']:.3f} KID {stats['kid_vs_heldout']:.4f}",
                  flush=True)
    best = max(rows, key=lambda r: r["accuracy"])
    confirmed, _, _ = generation_statistics(
        args.weights, args.per_class, tuple(args.confirm_seeds), best["cfg_scale"], best["top_k"])
    defaults, _, _ = generation_statistics(
        args.weights, args.per_class, tuple(args.confirm_seeds), DEFAULT_CFG_SCALE, DEFAULT_TOP_K)
    result = {
        "command": " ".join(["python benchmarks/archive/digits_sampling.py",
                             *(sys.argv[1:] if argv is None else argv)]),
        "selection_rule": "largest accuracy on the selection seeds",
        "settings": rows,
        "selected": {"cfg_scale": best["cfg_scale"], "top_k": best["top_k"],
                     "accuracy_on_selection_seeds": best["accuracy"]},
        "confirmed": {key: confirmed[key] for key in KEEP},
        "defaults_on_confirmation_seeds": {key: defaults[key] for key in KEEP},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({**result["selected"], "confirmed": confirmed["accuracy"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
