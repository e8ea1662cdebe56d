"""Block verification (``DecodingMethod(verifier="block")``, ``gsd_core.verify_block``, lossless:
proofs/14) on the stand-in's frontier images, paired image by image with the committed frontier's
SJD, MC-SJD (maximal) and MC-GSD (G = 50, maximal) records (issue 39).

Images: the frontier's prompts x seeds (``figures/results.json``, ``tables.frontier``), class i of
seed s decoded with generator seed ``generator_seed(s, i)`` as the frontier does, window 16, the
figures' adapter (``load_image_model("standin")``). The stored rows are read from that file (the
frontier decoded them in batches of 8; ``--check`` re-decodes MC-SJD alone on the first images and
stops if an NFE differs, so the pairing is the same image). Block verification is decoded here,
one image at a time (``generate``), with the exact per-token distortion recorded.

Per configuration: mean NFE (SE), mean distortion (SD's exact per-token TV formula, 0 up to
rounding by construction for every rule here, the lossy coupled block combination included: not
evidence of losslessness, which proofs/14 and tests/lab/test_decode_laws_exact.py give), accepted drafts per forward (sum(accepted) / NFE), tokens processed per forward (the
window's inputs, L + 1: the last committed token and L drafts; the prefill's prompt left out), and
the cost model's GPU seconds: NFE x the measured 7B forward of a 16-token window
(``benchmarks/results/gpu_lumina_shapes_h200.jsonl``, last line, ``forward_ms["16"]``; block and
token verification feed the same windows, so the model's cost per forward is the same; the
verifiers' own work, a few O(L V) row operations, is left out). Paired differences with their
paired SE and ``verdicts.verdict`` (beyond 2 paired SE).

    nohup python benchmarks/lossless_beyond.py --out benchmarks/results/lossless_beyond_standin &
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from gsd_lab.decode.methods import DecodingMethod
from gsd_lab.experiments.verdicts import POWER, minimum_detectable, paired_values, verdict, word

ROOT = Path(__file__).resolve().parents[1]
STORED = {  # label here: (frontier curve, index of the configuration on it)
    "SJD": ("TV-optimal relaxation", 0),  # relaxation_delta = 0: plain SJD, independent drafts
    "MC-SJD (maximal)": ("MC-SJD (maximal)", 0),
    "MC-GSD (G=50, maximal)": ("MC-GSD (G=50, maximal)", 0),
}
BLOCK = "SJD + block verification"
SHAPES = ROOT / "benchmarks/results/gpu_lumina_shapes_h200.jsonl"


def stored_rows(frontier: dict) -> dict[str, dict]:
    rows = {}
    for label, (curve, index) in STORED.items():
        spec = frontier["specs"][curve][index]["method"]
        if label == "SJD":
            assert spec["kind"] == "sjd" and spec["relaxation_delta"] == 0.0
            assert spec["draft"] == "independent" and spec["acceptance_scale"] == 1.0
        rows[label] = frontier["curves"][curve][index]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="path stem: writes .json and .txt")
    parser.add_argument("--images", type=int, default=None, help="the first n images only")
    parser.add_argument("--check", type=int, default=2, help="MC-SJD images re-decoded alone")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from gsd_lab.experiments.image_model import load_image_model
    from gsd_lab.experiments.runs import Recording, generate_one, generator_seed, resolve_for

    results = json.loads((ROOT / "figures/results.json").read_text())
    frontier = results["tables"]["frontier"]
    rows = stored_rows(frontier)
    prompts, seeds = frontier["prompts"], frontier["seeds"]
    images = [(seed, i, prompt) for seed in seeds for i, prompt in enumerate(prompts)]
    images = images[: args.images] if args.images else images
    for label, row in rows.items():  # the stored order is the same
        assert row["per_image"]["seed"][: len(images)] == [generator_seed(s, i)
                                                            for s, i, _ in images], label
    shape = [json.loads(line) for line in SHAPES.read_text().splitlines() if line.strip()][-1]
    forward_ms = float(shape["forward_ms"]["16"])

    model = load_image_model("standin")
    num_tokens = results["config"]["num_tokens"]
    window = results["config"]["sizes"]["window"]
    checks = []
    maximal = resolve_for(model, DecodingMethod("sjd", window=window, draft="maximal"))
    for seed, i, prompt in images[: args.check]:
        result, _ = generate_one(model, maximal, prompt, generator_seed(seed, i),
                                 Recording(images=False))
        stored = rows["MC-SJD (maximal)"]["per_image"]["nfe"][len(checks)]
        checks.append({"prompt": prompt, "seed": generator_seed(seed, i), "nfe_alone": result.nfe,
                       "nfe_stored": stored})
        if result.nfe != stored:
            raise SystemExit(f"MC-SJD re-decoded alone: NFE {result.nfe} != stored {stored}")
    block = resolve_for(model, DecodingMethod("sjd", window=window, verifier="block"))
    per_image = []
    started = time.perf_counter()
    for seed, i, prompt in images:
        result, _ = generate_one(model, block, prompt, generator_seed(seed, i),
                                 Recording(distortion=True, images=False))
        per_image.append({
            "prompt": prompt, "seed": generator_seed(seed, i), "nfe": result.nfe,
            "distortion": float(result.distortion.mean()),
            "accepted_per_forward": sum(result.accepted) / result.nfe,
            "processed_per_forward": sum(d + 1 for d in result.drafted) / result.nfe,
            "wall_seconds": result.wall_seconds,
        })
        print(f"{prompt:22s} seed {generator_seed(seed, i):8d} NFE {result.nfe:4d}", flush=True)
    seconds = time.perf_counter() - started

    n = len(images)
    nfe = {label: [float(v) for v in row["per_image"]["nfe"][:n]] for label, row in rows.items()}
    nfe[BLOCK] = [float(r["nfe"]) for r in per_image]
    summary = {}
    for label, values in nfe.items():
        mean = sum(values) / n
        se = paired_values(values, [0.0] * n).se
        stored = rows.get(label)
        summary[label] = {
            "nfe": mean, "nfe_se": se,
            "distortion": (sum(r["distortion"] for r in per_image) / n if stored is None
                           else float(sum(stored["per_image"]["distortion"][:n]) / n)),
            "max_image_distortion": (max(abs(r["distortion"]) for r in per_image)
                                     if stored is None else None),
            "accepted_per_forward": (num_tokens - mean) / mean if stored is None else
            sum((num_tokens - v) / v for v in values) / n,
            "tokens_per_forward": sum(num_tokens / v for v in values) / n,
            "gpu_seconds_7b": mean * forward_ms / 1000,
        }
    summary[BLOCK]["accepted_per_forward"] = sum(r["accepted_per_forward"] for r in per_image) / n
    summary[BLOCK]["processed_per_forward"] = sum(r["processed_per_forward"]
                                                  for r in per_image) / n
    claims = [  # (claim, a, b, scale on b): the paired difference a - scale * b, expected < 0
        ("block verification needs fewer forwards than SJD", BLOCK, "SJD", 1.0),
        ("block verification needs fewer forwards than MC-SJD", BLOCK, "MC-SJD (maximal)", 1.0),
        ("target: at most 0.9x MC-SJD's NFE", BLOCK, "MC-SJD (maximal)", 0.9),
        ("moonshot: fewer forwards than MC-GSD (G=50, maximal)", BLOCK,
         "MC-GSD (G=50, maximal)", 1.0),
    ]
    verdicts = []
    for claim, a, b, scale in claims:
        paired = paired_values(nfe[a], [scale * v for v in nfe[b]])
        verdicts.append({"claim": claim, "a": a, "b": b, "scale": scale, **paired.as_dict(),
                         "verdict": verdict(paired.difference, paired.se, -1)})
    out = {
        "benchmark": "lossless_beyond", "images": n, "prompts": prompts, "seeds": seeds,
        "num_tokens": num_tokens, "window": window, "threads": args.threads,
        "stored_from": "figures/results.json tables.frontier (git " + str(results["git"]) + ")",
        "cost_model": {"forward_ms_16": forward_ms, "source": str(SHAPES.relative_to(ROOT)),
                       "source_commit": shape["git_commit"], "device": shape["device"],
                       "rule": "GPU seconds per image = NFE x forward_ms_16 / 1000"},
        "mc_sjd_alone_check": checks, "summary": summary, "verdicts": verdicts,
        "per_image": {"block": per_image, "stored_nfe": {k: nfe[k] for k in STORED}},
        "decode_seconds": seconds,
        "note": "block verification is offered with independent drafts only (proofs/14)",
    }
    stem = Path(args.out)
    stem.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    lines = [f"{'configuration':28s} {'NFE':>7s} {'SE':>5s} {'distortion':>11s} "
             f"{'acc/fwd':>8s} {'tok/fwd':>8s} {'7B GPU s':>9s}"]
    for label, row in summary.items():
        lines.append(f"{label:28s} {row['nfe']:7.2f} {row['nfe_se']:5.2f} "
                     f"{row['distortion']:11.2e} {row['accepted_per_forward']:8.3f} "
                     f"{row['tokens_per_forward']:8.3f} {row['gpu_seconds_7b']:9.3f}")
    lines.append(f"tokens processed per forward (block): "
                 f"{summary[BLOCK]['processed_per_forward']:.3f}")
    for v in verdicts:  # the one vocabulary (verdicts.WORDS); JSON keeps the verdict's key
        diff = "-" if v["difference"] is None else f"{v['difference']:+.2f} (SE {v['se']:.2f})"
        shown = word(v["verdict"])
        detectable = minimum_detectable(v["se"])
        if v["verdict"] == "noise" and detectable is not None:
            shown += f" (detectable at {POWER:.0%} power: |d| >= {detectable:.2f})"
        lines.append(f"{v['claim']:55s} {diff:18s} {shown}")
    stem.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(math.isfinite(s["nfe"]) for s in summary.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
