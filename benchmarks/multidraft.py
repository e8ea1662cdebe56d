"""Multiple drafts (``DecodingMethod(candidates=k)``: k candidates at the first undecided position,
recursive rejection sampling, one tree forward; proofs/15) against MC-SJD and MC-GSD on the
stand-in, paired image by image.

Images: the frontier's 30 (``figures/results.json``'s frontier table: its prompts x seeds 0, 1, 2,
generator seed ``generator_seed(seed, i)``), the figures' adapter settings (window 16, CFG 3,
top-k 2000, float64 forward: the quick stand-in, the same logits bit for bit). Configurations:
MC-SJD (maximal drafts; decoded again here, its per-image NFE checked equal to the stored ones)
and MC-SJD with k candidates for each ``--candidates``. The stored MC-SJD and MC-GSD (G=50,
maximal) per-image NFE pair with every configuration.

Per configuration: NFE (mean, s.e.), exact distortion (``record_distortion``, mean per token: SD's
TV formula per token, 0 by construction for this rule, so not evidence of losslessness; that is
proofs/15 and tests/lab/test_decode_laws_exact.py), accepted tokens per forward (committed tokens / NFE), tokens processed per forward (the input
tokens of each forward, the prompt included at the first), wall seconds per image (this CPU,
shared: indicative only), and the paired differences with their standard errors and
``verdicts.verdict``:

- target: NFE(k) < 0.9 NFE(MC-SJD), per image NFE(k) - 0.9 NFE(MC-SJD), expected sign -1;
- moonshot: NFE(k) <= NFE(MC-GSD), per image NFE(k) - NFE(MC-GSD), expected sign -1.

Cost model for a 7B model on an H200 (stated, not measured: no GPU run here): a forward over W
input tokens with a CFG pair reads the weights once (2 bytes x P parameters at ``BANDWIDTH``) and
computes 2 x 2 P W FLOPs (``PEAK_FLOPS``, bf16 dense); on this roofline its time is
max(read, compute), flat until W_ridge = read time x PEAK_FLOPS / (4 P) tokens. P and the CFG
batch come from ``benchmarks/results/gpu_lumina_shapes_h200.jsonl``, whose measured forwards at
W = 1 and 16 (kernel-launch bound, far above the read time) are reported beside it. The modelled
time of a decode is sum over forwards of max(1, W / W_ridge) read times; attention over the
context is left out (it grows with W too).

    nice -n 10 python benchmarks/multidraft.py --candidates 2 4 \
        --out benchmarks/results/multidraft_standin
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
BANDWIDTH = 4.8e12  # H200 HBM3e bytes / s (NVIDIA's data sheet)
PEAK_FLOPS = 989e12  # H200 dense bf16 FLOP / s (NVIDIA's data sheet, without sparsity)
BYTES_PER_PARAMETER = 2  # bf16


def _said(row: dict) -> str:
    """A stored verdict in the one vocabulary; "no difference detected" names the smallest
    difference the run could have detected (80% power)."""
    from gsd_lab.experiments.verdicts import minimum_detectable, word

    text = word(row["verdict"])
    if row["verdict"] == "noise":
        text += f" (detectable: |d| >= {minimum_detectable(row['se']):.2f})"
    return text


def stored_frontier() -> dict:
    """The frontier table of ``figures/results.json``: MC-SJD and MC-GSD rows (per image)."""
    results = json.loads((ROOT / "figures" / "results.json").read_text())
    curves = results["tables"]["frontier"]["curves"]
    return {
        "MC-SJD": curves["MC-SJD (maximal)"][0],
        "MC-GSD": curves["MC-GSD (G=50, maximal)"][0],
        "prompts": results["tables"]["frontier"]["prompts"],
        "seeds": results["tables"]["frontier"]["seeds"],
    }


def cost_model() -> dict:
    """The roofline numbers (module docstring) from the stored H200 shapes run."""
    line = (ROOT / "benchmarks" / "results" / "gpu_lumina_shapes_h200.jsonl").read_text()
    record = json.loads(line.splitlines()[-1])
    params, cfg = record["parameters"], record["cfg_batch"]
    read_s = BYTES_PER_PARAMETER * params / BANDWIDTH
    ridge = read_s * PEAK_FLOPS / (2 * cfg * params)
    return {
        "parameters": params,
        "cfg_batch": cfg,
        "bandwidth_bytes_per_s": BANDWIDTH,
        "peak_flops": PEAK_FLOPS,
        "weight_read_ms": 1e3 * read_s,
        "ridge_tokens": ridge,
        "measured_forward_ms": record["forward_ms"],
        "measured_commit": record["git_commit"],
    }


def paired(a: np.ndarray, b: np.ndarray, scale: float = 1.0) -> tuple[float, float]:
    """Mean and standard error of a - scale b over images."""
    diff = a - scale * b
    return float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(diff.size))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--images", type=int, default=None, help="the first N of the 30 only")
    parser.add_argument("--check-images", type=int, default=None,
                        help="re-decode MC-SJD on the first N images only (the pairing check)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/multidraft_standin"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from gsd_lab.decode.loop import generate
    from gsd_lab.decode.methods import DecodingMethod
    from gsd_lab.experiments.image_model import load_image_model
    from gsd_lab.experiments.runs import generator_seed
    from gsd_lab.experiments.verdicts import verdict

    stored = stored_frontier()
    model = load_image_model("standin", quick=True)
    images = [(p, i, s) for s in stored["seeds"] for i, p in enumerate(stored["prompts"])]
    images = images[: args.images] if args.images else images
    n = len(images)
    seeds = [generator_seed(s, i) for _, i, s in images]
    if seeds != stored["MC-SJD"]["per_image"]["seed"][:n]:
        raise SystemExit("the stored frontier's image order differs from prompts x seeds")
    ref = {
        name: np.asarray(stored[name]["per_image"]["nfe"][:n], float)
        for name in ("MC-SJD", "MC-GSD")
    }
    costs = cost_model()
    configs = {"MC-SJD (decoded here)": DecodingMethod("sjd", draft="maximal")}
    for k in args.candidates:
        configs[f"MC-SJD, {k} candidates"] = DecodingMethod("sjd", draft="maximal", candidates=k)

    rows = {}
    check = n if args.check_images is None else min(args.check_images, n)
    for label, method in configs.items():
        nfe, dist, acc, proc, wall, modelled = [], [], [], [], [], []
        count = check if method.candidates == 1 else n
        for (prompt, index, seed), gseed in zip(images[:count], seeds[:count]):
            ids, uncond = model.encode(prompt)
            start = time.perf_counter()
            result = generate(model.adapter, ids, method, num_tokens=model.num_tokens,
                              generator=torch.Generator().manual_seed(gseed),
                              uncond_prompt_ids=uncond, record_distortion=True)
            wall.append(time.perf_counter() - start)
            processed = result.tokens_processed or [
                d + (ids.numel() if f == 0 else 1) for f, d in enumerate(result.drafted)
            ]
            nfe.append(result.nfe)
            dist.append(float(result.distortion.mean()))
            acc.append(result.tokens.numel() / result.nfe)
            proc.append(sum(processed) / result.nfe)
            modelled.append(sum(max(1.0, w / costs["ridge_tokens"]) for w in processed))
            print(f"{label} {prompt} seed {gseed}: nfe {result.nfe}", flush=True)
        nfe_a = np.asarray(nfe, float)
        row = {
            "images": count,
            "nfe": float(nfe_a.mean()), "nfe_sem": float(nfe_a.std(ddof=1) / math.sqrt(count)),
            "distortion": float(np.mean(dist)), "distortion_max": float(np.max(dist)),
            "accepted_per_forward": float(np.mean(acc)),
            "tokens_processed_per_forward": float(np.mean(proc)),
            "modelled_read_times": float(np.mean(modelled)),
            "wall_seconds": float(np.mean(wall)),
            "per_image": {"nfe": nfe, "distortion": dist, "seed": seeds[:count]},
        }
        for name, scale, key in (("MC-SJD", 0.9, "target"), ("MC-GSD", 1.0, "moonshot")):
            diff, se = paired(nfe_a, ref[name][:count], scale)
            row[key] = {"against": name, "scale": scale, "difference": diff, "se": se,
                        "verdict": verdict(diff, se, -1)}
        ratio_diff, ratio_se = paired(nfe_a, ref["MC-SJD"][:count])
        row["nfe_ratio_to_mc_sjd"] = float(nfe_a.mean() / ref["MC-SJD"][:count].mean())
        row["difference_to_mc_sjd"] = {"difference": ratio_diff, "se": ratio_se}
        rows[label] = row
    decoded = rows["MC-SJD (decoded here)"]["per_image"]["nfe"]
    same = decoded == list(ref["MC-SJD"][:check].astype(int))
    out = {
        "benchmark": "multidraft", "images": n, "check_images": check,
        "num_tokens": model.num_tokens, "window": 16,
        "stored": {name: {"nfe": float(ref[name].mean()),
                          "nfe_sem": float(ref[name].std(ddof=1) / math.sqrt(n))} for name in ref},
        "mc_sjd_reproduced_image_by_image": bool(same),
        "cost_model": costs, "rows": rows,
    }
    path = Path(args.out)
    path.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    mc_sjd, mc_gsd = out["stored"]["MC-SJD"]["nfe"], out["stored"]["MC-GSD"]["nfe"]
    lines = [
        f"multidraft on the stand-in: {n} images, window 16, {model.num_tokens} tokens; stored "
        f"MC-SJD {mc_sjd:.2f} NFE, MC-GSD (G=50) {mc_gsd:.2f}; MC-SJD re-decoded equal image by "
        f"image ({check} images): {same}",
        f"cost model: weight read {costs['weight_read_ms']:.2f} ms, ridge "
        f"{costs['ridge_tokens']:.0f} tokens (measured forward ms {costs['measured_forward_ms']})",
    ]
    for label, row in rows.items():
        t, m = row["target"], row["moonshot"]
        lines.append(
            f"{label}: NFE {row['nfe']:.2f} +- {row['nfe_sem']:.2f} "
            f"({row['nfe_ratio_to_mc_sjd']:.3f}x MC-SJD), distortion {row['distortion']:.2e} "
            f"(max {row['distortion_max']:.2e}), accepted/forward "
            f"{row['accepted_per_forward']:.2f}, processed/forward "
            f"{row['tokens_processed_per_forward']:.1f}, modelled read times "
            f"{row['modelled_read_times']:.1f}, wall {row['wall_seconds']:.1f} s; target "
            f"(< 0.9 MC-SJD) {t['difference']:+.2f} +- {t['se']:.2f}: {_said(t)}; moonshot "
            f"(<= MC-GSD) {m['difference']:+.2f} +- {m['se']:.2f}: {_said(m)}"
        )
    path.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
