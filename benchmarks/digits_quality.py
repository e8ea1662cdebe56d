"""AR, SJD and GSD on the digits model, paired image by image, judged by a quality measure that
sees digit structure (``gsd_lab.digits.quality``).

Images: digits 0..9 x seeds 0..S-1, digit c of seed s decoded with generator seed
``generator_seed(s, c)`` by every method (``gsd_lab.decode.batch.generate_batch``: each image's
tokens and NFE as alone), the adapter's defaults (``load_digits``: cfg 3, no top-k, float64).
Methods: AR, SJD (window 16, independent drafts) and GSD (dynamic clusters, G in ``--groups``,
window 16), and, as the noise reference, AR on other seeds (seed s + S for image (c, s)): two
draws of one law, whose differences the rule must call noise.

Per image: NFE, the share of its tokens drawn from a flat distribution (top-1 < 5 %), the
digits classifier's log p(prompted digit | image) and whether its argmax is the prompted digit.
Per method: their means and KID (classifier features) against the held-out digits.
Paired differences against AR (method minus AR, image by image; KID by a paired bootstrap) and
``verdicts.decide`` on them: NFE with the claim's sign -1 (fewer forwards), the quality
measures with the sign of a loss (accuracy and log p: -1; KID: +1), so "yes" reads "a loss
detected" and "no difference detected" names the smallest loss the run could have seen.

    nice -n 5 python benchmarks/digits_quality.py  # --out benchmarks/results/digits_quality
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from gsd_lab.decode.batch import DecodeRequest, generate_batch
from gsd_lab.decode.methods import DecodingMethod, ClusterAcceptance
from gsd_lab.digits import data
from gsd_lab.digits.adapter import WEIGHTS_DIR, load_digits
from gsd_lab.digits.quality import features, kid, paired_kid_difference, prompted_scores
from gsd_lab.experiments.runs import generator_seed
from gsd_lab.experiments.verdicts import PairedDifference, decide, paired_values
from gsd_lab.standin.loading import load_classifier

ROOT = Path(__file__).resolve().parents[1]
NOISE = "AR (other seeds)"
FLAT = 0.05
MEASURES = (  # per-image key, label, sign of a loss, digits printed
    ("nfe", "NFE", -1, 1),
    ("accuracy_points", "accuracy (points)", -1, 1),
    ("logp_prompted", "log p(prompted digit)", -1, 3),
)


def methods(groups: list[int], window: int) -> dict[str, DecodingMethod]:
    out = {"AR": DecodingMethod("ar"), "SJD": DecodingMethod("sjd", window=window)}
    for g in groups:
        out[f"GSD (G={g})"] = DecodingMethod(
            "gsd", window=window, acceptance=ClusterAcceptance(group_size=g))
    return out


def decode(adapter, method: DecodingMethod, images: list[tuple[int, int]], batch_size: int):
    """Decode (digit, seed) pairs; per image tokens, NFE and the flat-token share."""
    requests = [
        DecodeRequest(
            adapter.prompt_ids(c), method, adapter.num_image_tokens,
            torch.Generator().manual_seed(generator_seed(s, c)), adapter.uncond_prompt_ids(),
        )
        for c, s in images
    ]
    results = generate_batch(adapter, requests, batch_size=batch_size, record_top1=True)
    return {
        "tokens": torch.stack([r.tokens for r in results]),
        "nfe": [float(r.nfe) for r in results],
        "flat_share": [float((r.top1 < FLAT).double().mean()) for r in results],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--groups", type=int, nargs="+", default=[10, 50])
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--weights", type=Path, default=WEIGHTS_DIR)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/digits_quality")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    adapter = load_digits(weights_dir=args.weights)
    classifier = load_classifier(args.weights)
    real_features = features(classifier, data.digits("heldout")[0])
    images = [(c, s) for s in range(args.seeds) for c in range(data.NUM_CLASSES)]
    prompted = torch.tensor([c for c, _ in images])
    runs = {}
    todo = [(name, m, images) for name, m in methods(args.groups, args.window).items()]
    todo.append((NOISE, DecodingMethod("ar"), [(c, s + args.seeds) for c, s in images]))
    for name, method, items in todo:
        start = time.time()
        run = decode(adapter, method, items, args.batch_size)
        pixels = adapter.decode_images(run["tokens"], as_uint8=False)
        logp, correct = prompted_scores(classifier, pixels, prompted)
        run.update(
            logp_prompted=logp.tolist(),
            accuracy_points=(100.0 * correct.double()).tolist(),
            features=features(classifier, pixels),
            seconds=round(time.time() - start, 1),
        )
        runs[name] = run
        print(f"{name}: {run['seconds']} s", flush=True)

    def mean(values):
        return sum(values) / len(values)

    summary, paired = {}, {}
    for name, run in runs.items():
        summary[name] = {
            "images": len(run["nfe"]),
            "nfe_mean": mean(run["nfe"]),
            "flat_share_mean": mean(run["flat_share"]),
            "accuracy": mean(run["accuracy_points"]) / 100.0,
            "logp_prompted_mean": mean(run["logp_prompted"]),
            "kid_vs_heldout": kid(run["features"], real_features),
            "seconds": run["seconds"],
        }
        if name == "AR":
            continue
        rows = {}
        for key, label, sign, digits in MEASURES:
            diff = paired_values(run[key], runs["AR"][key])
            decision = decide(diff, sign)
            rows[key] = {**diff.as_dict(), "verdict": decision.outcome,
                         "text": decision.text(digits)}
        boot = paired_kid_difference(run["features"], runs["AR"]["features"], real_features)
        diff = PairedDifference(boot["difference"], boot["se"], boot["n"])
        decision = decide(diff, +1)
        rows["kid_vs_heldout"] = {**diff.as_dict(), "verdict": decision.outcome,
                                  "text": decision.text(4), "se_from": "paired bootstrap, 200"}
        paired[name] = rows

    result = {
        "settings": {
            "seeds": args.seeds, "digits": data.NUM_CLASSES, "groups": args.groups,
            "window": args.window, "cfg_scale": adapter.cfg_scale, "top_k": adapter.top_k,
            "flat_threshold": FLAT, "noise_reference": f"{NOISE}: seed s + {args.seeds}",
            "weights": str(args.weights.resolve().relative_to(ROOT))
            if args.weights.resolve().is_relative_to(ROOT) else str(args.weights),
        },
        "summary": summary,
        "paired_vs_ar": paired,
        "per_image": {
            "digit": [c for c, _ in images],
            "seed": [s for _, s in images],
            **{name: {k: run[k] for k in ("nfe", "flat_share", "logp_prompted", "accuracy_points")}
               for name, run in runs.items()},
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        f"digits: {len(images)} images per method (10 digits x {args.seeds} seeds), paired",
        f"{'method':18s} {'NFE':>7s} {'flat':>6s} {'acc':>6s} {'log p':>8s} {'KID':>8s}",
    ]
    for name, s in summary.items():
        lines.append(
            f"{name:18s} {s['nfe_mean']:7.1f} {s['flat_share_mean']:6.3f} {s['accuracy']:6.3f} "
            f"{s['logp_prompted_mean']:8.3f} {s['kid_vs_heldout']:8.4f}"
        )
    for name, rows in paired.items():
        lines.append(f"{name} - AR:")
        for key, row in rows.items():
            lines.append(f"  {key}: {row['text']}")
    args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
