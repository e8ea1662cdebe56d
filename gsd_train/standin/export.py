"""Export stage: data manifest, recorded reference outputs of the stored weights (for the
tests), generation statistics (top-1 flatness, condition consistency, Frechet distance),
teacher-forced flatness on real held-out windows, and a sample grid. Everything is computed
from the files in ``out``; the AR model runs in float64 (as ``load_standin`` does on CPU).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from gsd_lab.standin import data
from gsd_lab.standin.classifier import heldout_set
from gsd_lab.standin.loading import load_ar_model, load_classifier, load_tokenizer
from gsd_lab.standin.sampling import logits_checksum, sample_tokens
from gsd_lab.standin.weights_io import read_json, write_json

from .ar import TokenMapDataset, encode_maps, make_batch, teacher_forced_statistics

REFERENCE_CLASS = 0
REFERENCE_SEED = 0
REFERENCE_CFG = 3.0
DEFAULT_TOP_K = 2000  # Lumina-mGPT's reference image top-k (the stand-in has 8192 codes too)


@torch.no_grad()
def reference_outputs(directory: Path) -> dict:
    """Fixed-seed generation (class 0, cfg 3, top-k 2000, seed 0) and checksums of logits,
    decoded pixels and classifier logits, all from the stored weights in ``directory``."""
    model, layout, _ = load_ar_model(directory, dtype=torch.float64)
    tokenizer = load_tokenizer(directory)
    classifier = load_classifier(directory)
    generator = torch.Generator().manual_seed(REFERENCE_SEED)
    tokens, top1 = sample_tokens(
        model,
        layout,
        torch.tensor([REFERENCE_CLASS]),
        cfg_scale=REFERENCE_CFG,
        top_k=DEFAULT_TOP_K,
        generator=generator,
    )
    image = tokenizer.decode(tokens.view(1, layout.grid, layout.grid))
    logits = classifier(image)[0].double()
    return {
        "class_index": REFERENCE_CLASS,
        "seed": REFERENCE_SEED,
        "cfg_scale": REFERENCE_CFG,
        "top_k": DEFAULT_TOP_K,
        "temperature": 1.0,
        "model_dtype": "float64",
        "sampler": "gsd_lab.standin.sampling.sample_tokens",
        "tokens": tokens[0].tolist(),
        "top1_mean": float(top1.mean()),
        "logits_checksum": logits_checksum(model, layout, REFERENCE_CLASS, tokens[0, :-1]),
        "decoded_pixel_sum": float(image.double().sum()),
        "classifier_logits": [float(v) for v in logits],
    }


def distance_quantiles(directory: Path) -> list[dict]:
    """GSD's distance-filter threshold for the stand-in (``FilterSettings``' default quantile of
    squared distances between image-code input embeddings, 10^6 random pairs, seed 0), as
    ``gsd_lab.decode.methods.distance_quantile_entry`` records: a constant of the weights, stored in
    the manifest so that a decode need not recompute it (seconds) on every load."""
    from gsd_lab.decode.methods import FilterSettings, distance_quantile_entry
    from gsd_lab.standin.adapter import load_standin

    adapter = load_standin(weights_dir=directory)
    return [
        distance_quantile_entry(
            adapter.embeddings, adapter.allowed_tokens.cpu(), FilterSettings().distance_quantile
        )
    ]


def save_grid(images_uint8: torch.Tensor, rows: int, path: Path, scale: int = 1) -> None:
    """uint8 [rows * cols, H, W, 3] -> one PNG with a 2-pixel white gutter, stored with a
    256-colour palette (a preview: a quarter of the RGB file's size)."""
    from PIL import Image

    n, h, w, _ = images_uint8.shape
    cols = n // rows
    gut = 2
    canvas = torch.full((rows * (h + gut) + gut, cols * (w + gut) + gut, 3), 255, dtype=torch.uint8)
    for i in range(rows * cols):
        r, c = divmod(i, cols)
        canvas[
            gut + r * (h + gut) : gut + r * (h + gut) + h,
            gut + c * (w + gut) : gut + c * (w + gut) + w,
        ] = images_uint8[i]
    img = Image.fromarray(canvas.numpy())
    if scale != 1:
        img = img.resize((img.width * scale, img.height * scale), Image.NEAREST)
    img = img.quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    img.save(path, optimize=True)


def flatness(top1: torch.Tensor) -> dict:
    """top1 [images, positions] -> pooled share below 0.05, per-image median / min / max share,
    median and mean top-1."""
    per_image = (top1 < 0.05).double().mean(1)
    return {
        "share_top1_below_5pct": float((top1 < 0.05).double().mean()),
        "share_per_image_median": float(per_image.median()),
        "share_per_image_min": float(per_image.min()),
        "share_per_image_max": float(per_image.max()),
        "top1_median": float(top1.median()),
        "top1_mean": float(top1.mean()),
    }


@torch.no_grad()
def generation_statistics(
    directory: Path,
    per_class: int,
    seeds: tuple[int, ...],
    cfg_scale: float | None,
    top_k: int | None = DEFAULT_TOP_K,
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """For every seed, sample ``per_class`` images per class (one batch, one generator seeded
    with the seed); flatness pooled, per image and per class, and quality proxies against the
    held-out crops. Returns (statistics, images [n, 3, 256, 256], classes [n])."""
    from gsd_lab.quality.metrics import classifier_frechet_distance, condition_consistency

    model, layout, _ = load_ar_model(directory, dtype=torch.float64)
    tokenizer = load_tokenizer(directory)
    classifier = load_classifier(directory)
    start = time.time()
    all_tokens, all_top1, all_classes = [], [], []
    for seed in seeds:
        classes = torch.arange(layout.num_classes).repeat_interleave(per_class)
        tokens, top1 = sample_tokens(
            model,
            layout,
            classes,
            cfg_scale=cfg_scale,
            top_k=top_k,
            generator=torch.Generator().manual_seed(seed),
        )
        all_tokens.append(tokens), all_top1.append(top1), all_classes.append(classes)
    tokens, top1, classes = torch.cat(all_tokens), torch.cat(all_top1), torch.cat(all_classes)
    images = torch.cat(
        [tokenizer.decode(t.view(-1, layout.grid, layout.grid)) for t in tokens.split(64)]
    )
    real, _ = heldout_set()
    per_class_table = {}
    for c, name in enumerate(data.CLASS_NAMES[: layout.num_classes]):
        rows = classes == c
        per_class_table[name] = {
            **flatness(top1[rows]),
            "images": int(rows.sum()),
            "condition_consistency": condition_consistency(classifier, images[rows], classes[rows]),
        }
    stats = {
        "cfg_scale": cfg_scale,
        "top_k": top_k,
        "temperature": 1.0,
        "images": int(classes.numel()),
        "seeds": list(seeds),
        "per_class_per_seed": per_class,
        **flatness(top1),
        "condition_consistency": condition_consistency(classifier, images, classes),
        "frechet_distance_vs_heldout": classifier_frechet_distance(classifier, images, real),
        "distinct_codes_generated": int(torch.unique(tokens).numel()),
        "sampling_seconds": round(time.time() - start, 1),
        "per_class": per_class_table,
    }
    return stats, images, classes


@torch.no_grad()
def heldout_teacher_forced(directory: Path, windows: int, seed: int) -> dict:
    """Teacher-forced NLL and flatness (conditional model, codes only, float64) on ``windows``
    real held-out windows (only their tokens inside held-out cells count; views in the
    training windows' proportions) and on as many training windows, with the generalisation
    gap and the code unigram entropy."""
    model, layout, cfg = load_ar_model(directory, dtype=torch.float64)
    maps = encode_maps(load_tokenizer(directory), "classes", shifts=((0, 0),))
    out = {
        "windows": windows,
        "code_unigram_entropy_train": cfg["training"]["code_unigram_entropy"],
    }
    train = TokenMapDataset(grid=layout.grid, split="train", maps=maps)
    heldout = TokenMapDataset(grid=layout.grid, split="heldout", maps=maps, like=train)
    for split, dataset in (("heldout", heldout), ("train", train)):
        generator = torch.Generator().manual_seed(seed)
        tokens, classes, scored = dataset.sample_with_mask(windows, generator)
        ids = make_batch(tokens, classes, layout, 0.0, generator)
        parts = [
            teacher_forced_statistics(model, i, layout, m)
            for i, m in zip(ids.split(25), scored.split(25))
        ]
        count = sum(p["tokens"] for p in parts)
        out[split] = {
            k: sum(p[k] * p["tokens"] for p in parts) / count
            for k in ("nll", "share_top1_below_5pct")
        }
        out[split].update({"tokens": count, "windows_available": dataset.num_windows})
    out["gap_nats"] = out["heldout"]["nll"] - out["train"]["nll"]
    out["heldout_below_unigram_nats"] = out["code_unigram_entropy_train"] - out["heldout"]["nll"]
    return out


def _write_manifest(out: Path, seed: int) -> None:
    """manifest.json: the data manifest, the stages' training settings, the held-out sets and
    the tokenizer's distance quantiles."""
    tok_cfg = read_json(out / "tokenizer_config.json")
    cls_cfg = read_json(out / "classifier_config.json")
    ar_cfg = read_json(out / "ar_config.json")
    shifts = ar_cfg["training"].get(
        "class_shifts", [(0, 0), (8, 8)]
    )  # weights from before v3.1: two
    write_json(
        out / "manifest.json",
        data.manifest(
            tokenizer_training={
                "kmeans_iterations": tok_cfg["metrics"]["iterations"],
                "patches": tok_cfg["metrics"]["training_patches"],
                "sources": "training regions of all sources, every scale, mirrored or not",
                "seed": seed,
            },
            classifier_training={
                "image_size": data.IMAGE_SIZE,
                "steps": cls_cfg["metrics"]["steps"],
                "seed": seed,
                "inputs": "real training crops and their reconstructions",
            },
            ar_training={
                "windows": "16x16 token windows of training-region token maps: every scale, "
                f"mirrored or not, pixel shifts {', '.join(str(tuple(x)) for x in shifts)}; "
                "extra sources (shift (0, 0)) with the null class",
                **ar_cfg["training"],
            },
            heldout_eval_sets={
                "tokenizer": "10 held-out crops/class, seed 1234",
                "classifier": "40 held-out crops/class, seed 4321",
                "ar": "windows overlapping held-out cells; tokens inside them scored",
            },
            seeds={"global": seed},
        ),
    )
    manifest = read_json(out / "manifest.json")
    write_json(out / "manifest.json", {**manifest, "distance_quantiles": distance_quantiles(out)})


def _baselines(out: Path, seed: int) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """(the real-image baselines of the quality proxies, the training-region real crops
    [40 per class, 3, H, W] and their labels): held-out accuracy per class, condition
    consistency and Frechet distances of real, reconstructed and training-region crops."""
    from gsd_lab.quality.metrics import classifier_frechet_distance, condition_consistency

    classifier = load_classifier(out)
    real, real_labels = heldout_set()
    half = real.shape[0] // 2
    perm = torch.randperm(real.shape[0], generator=torch.Generator().manual_seed(seed + 300))
    tokenizer = load_tokenizer(out)
    recon = torch.cat([tokenizer.decode(tokenizer.encode(c)) for c in real.split(100)])
    train_real, train_labels = data.class_crops("train", 40, seed + 500, flip=False)
    with torch.no_grad():
        predicted = classifier(real).argmax(-1)
    baselines = {
        "classifier_heldout_accuracy_per_class": {
            name: float((predicted[real_labels == c] == c).double().mean())
            for c, name in enumerate(data.CLASS_NAMES)
        },
        "condition_consistency_heldout_real": condition_consistency(classifier, real, real_labels),
        "condition_consistency_heldout_reconstructed": condition_consistency(
            classifier, recon, real_labels
        ),
        "condition_consistency_train_region_real": condition_consistency(
            classifier, train_real, train_labels
        ),
        "frechet_train_region_real_vs_heldout": classifier_frechet_distance(
            classifier, train_real, real
        ),
        "frechet_heldout_half_vs_half": classifier_frechet_distance(
            classifier, real[perm[:half]], real[perm[half:]]
        ),
        "frechet_reconstructed_vs_heldout": classifier_frechet_distance(classifier, recon, real),
    }
    return baselines, train_real, train_labels


def export(
    out: Path,
    *,
    seed: int = 0,
    num_samples: int = 4,
    num_seeds: int = 3,
    teacher_windows: int = 200,
    log=print,
) -> dict:
    """Write the manifest, reference outputs, statistics and sample grid for the files in
    ``out``; generation: ``num_samples`` images per class for each of ``num_seeds`` seeds."""
    out = Path(out)
    _write_manifest(out, seed)
    reference = reference_outputs(out)
    write_json(out / "reference_outputs.json", reference)
    log({"stage": "export", "reference_tokens_head": reference["tokens"][:8]})
    baselines, train_real, train_labels = _baselines(out, seed)
    log({"stage": "export", "baselines": baselines})
    teacher = heldout_teacher_forced(out, windows=teacher_windows, seed=seed + 600)
    log({"stage": "export", "heldout_teacher_forced": teacher})
    stats = {"baselines": baselines, "heldout_teacher_forced": teacher, "generation": []}
    grid_images = None
    for cfg_scale in (3.0, None):
        seeds = tuple(seed + 400 + i for i in range(num_seeds))
        s, images, classes = generation_statistics(out, num_samples, seeds, cfg_scale)
        stats["generation"].append(s)
        log({"stage": "export", "generation": s})
        if cfg_scale == 3.0:
            grid_images, grid_classes = images, classes
    # grid: per class one real training-region crop, then up to 5 samples (cfg 3)
    per_row = min(5, int((grid_classes == 0).sum()))
    rows = []
    for c in range(len(data.CLASS_NAMES)):
        rows.append(train_real[train_labels == c][:1])
        rows.append(grid_images[grid_classes == c][:per_row])
    save_grid(data.to_uint8(torch.cat(rows)), len(data.CLASS_NAMES), out / "samples.png")
    write_json(out / "generation_stats.json", stats)
    return stats
