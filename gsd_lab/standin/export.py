"""Export stage: data manifest, recorded reference outputs of the stored weights (for the
tests), generation statistics (top-1 flatness, condition consistency, Frechet distance),
teacher-forced flatness on real held-out windows, and a sample grid. Everything is computed
from the files in ``out``; the AR model runs in float64 (as ``load_standin`` does on CPU).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from . import data
from .ar import TokenMapDataset, make_batch, teacher_forced_statistics
from .classifier import heldout_set
from .loading import load_ar_model, load_classifier, load_tokenizer
from .sampling import logits_checksum, sample_tokens
from .weights_io import read_json, write_json

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
    tokens, top1 = sample_tokens(model, layout, torch.tensor([REFERENCE_CLASS]),
                                 cfg_scale=REFERENCE_CFG, top_k=DEFAULT_TOP_K, generator=generator)
    image = tokenizer.decode(tokens.view(1, layout.grid, layout.grid))
    logits = classifier(image)[0].double()
    return {
        "class_index": REFERENCE_CLASS, "seed": REFERENCE_SEED, "cfg_scale": REFERENCE_CFG,
        "top_k": DEFAULT_TOP_K, "temperature": 1.0, "model_dtype": "float64",
        "sampler": "gsd_lab.standin.sampling.sample_tokens",
        "tokens": tokens[0].tolist(), "top1_mean": float(top1.mean()),
        "logits_checksum": logits_checksum(model, layout, REFERENCE_CLASS, tokens[0, :-1]),
        "decoded_pixel_sum": float(image.double().sum()),
        "classifier_logits": [float(v) for v in logits],
    }


def save_grid(images_uint8: torch.Tensor, rows: int, path: Path, scale: int = 1) -> None:
    """uint8 [rows * cols, H, W, 3] -> one PNG with a 2-pixel white gutter."""
    from PIL import Image

    n, h, w, _ = images_uint8.shape
    cols = n // rows
    gut = 2
    canvas = torch.full((rows * (h + gut) + gut, cols * (w + gut) + gut, 3), 255, dtype=torch.uint8)
    for i in range(rows * cols):
        r, c = divmod(i, cols)
        canvas[gut + r * (h + gut): gut + r * (h + gut) + h, gut + c * (w + gut): gut + c * (w + gut) + w] = images_uint8[i]
    img = Image.fromarray(canvas.numpy())
    if scale != 1:
        img = img.resize((img.width * scale, img.height * scale), Image.NEAREST)
    img.save(path)


def flatness(top1: torch.Tensor) -> dict:
    """top1 [images, positions] -> pooled share below 0.05, per-image min / max share, median."""
    per_image = (top1 < 0.05).double().mean(1)
    return {"share_top1_below_5pct": float((top1 < 0.05).double().mean()),
            "share_per_image_min": float(per_image.min()), "share_per_image_max": float(per_image.max()),
            "top1_median": float(top1.median()), "top1_mean": float(top1.mean())}


@torch.no_grad()
def generation_statistics(directory: Path, per_class: int, seed: int, cfg_scale: float | None,
                          top_k: int | None = DEFAULT_TOP_K) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Sample ``per_class`` images per class; flatness and quality proxies against held-out crops."""
    from ..metrics import classifier_frechet_distance, condition_consistency

    model, layout, _ = load_ar_model(directory, dtype=torch.float64)
    tokenizer = load_tokenizer(directory)
    classifier = load_classifier(directory)
    classes = torch.arange(layout.num_classes).repeat_interleave(per_class)
    generator = torch.Generator().manual_seed(seed)
    start = time.time()
    tokens, top1 = sample_tokens(model, layout, classes, cfg_scale=cfg_scale, top_k=top_k,
                                 generator=generator)
    images = torch.cat([tokenizer.decode(t.view(-1, layout.grid, layout.grid)) for t in tokens.split(64)])
    real, _ = heldout_set()
    stats = {
        "cfg_scale": cfg_scale, "top_k": top_k, "images": int(classes.numel()), "seed": seed,
        **flatness(top1),
        "condition_consistency": condition_consistency(classifier, images, classes),
        "frechet_distance_vs_heldout": classifier_frechet_distance(classifier, images, real),
        "distinct_codes_generated": int(torch.unique(tokens).numel()),
        "sampling_seconds": round(time.time() - start, 1),
    }
    return stats, images, classes


@torch.no_grad()
def heldout_teacher_forced(directory: Path, windows: int, seed: int) -> dict:
    """Teacher-forced flatness and NLL on real held-out windows (conditional model, codes only)."""
    model, layout, cfg = load_ar_model(directory, dtype=torch.float64)
    heldout = TokenMapDataset(load_tokenizer(directory), grid=layout.grid, split="heldout")
    generator = torch.Generator().manual_seed(seed)
    ids = make_batch(*heldout.sample(windows, generator), layout, 0.0, generator)
    parts = [teacher_forced_statistics(model, chunk, layout) for chunk in ids.split(25)]
    out = {k: sum(p[k] for p in parts) / len(parts) for k in ("nll", "share_top1_below_5pct")}
    out.update({"windows": windows, "heldout_windows_available": heldout.num_windows,
                "code_unigram_entropy_train": cfg["training"]["code_unigram_entropy"],
                "top1_median_of_chunk_medians": sorted(p["top1_median"] for p in parts)[len(parts) // 2]})
    return out


def export(out: Path, *, seed: int = 0, num_samples: int = 16, log=print) -> dict:
    from ..metrics import classifier_frechet_distance, condition_consistency

    out = Path(out)
    tok_cfg = read_json(out / "tokenizer_config.json")
    cls_cfg = read_json(out / "classifier_config.json")
    ar_cfg = read_json(out / "ar_config.json")
    write_json(out / "manifest.json", data.manifest(
        tokenizer_training={"kmeans_iterations": tok_cfg["metrics"]["iterations"],
                            "patches": tok_cfg["metrics"]["training_patches"],
                            "sources": "training regions of all sources, every scale, mirrored or not",
                            "seed": seed},
        classifier_training={"image_size": data.IMAGE_SIZE, "steps": cls_cfg["metrics"]["steps"],
                             "seed": seed, "inputs": "real training crops and their reconstructions"},
        ar_training={"windows": "16x16 token windows of training-region token maps: every scale, "
                     "mirrored or not, 2 x 2 pixel shifts", **ar_cfg["training"]},
        heldout_eval_sets={"tokenizer": "10 crops/class, seed 1234", "classifier": "40 crops/class, seed 4321"},
        seeds={"global": seed},
    ))
    reference = reference_outputs(out)
    write_json(out / "reference_outputs.json", reference)
    log({"stage": "export", "reference_tokens_head": reference["tokens"][:8]})

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
            for c, name in enumerate(data.CLASS_NAMES)},
        "condition_consistency_heldout_real": condition_consistency(classifier, real, real_labels),
        "condition_consistency_heldout_reconstructed": condition_consistency(classifier, recon, real_labels),
        "condition_consistency_train_region_real": condition_consistency(classifier, train_real, train_labels),
        "frechet_train_region_real_vs_heldout": classifier_frechet_distance(classifier, train_real, real),
        "frechet_heldout_half_vs_half": classifier_frechet_distance(
            classifier, real[perm[:half]], real[perm[half:]]),
        "frechet_reconstructed_vs_heldout": classifier_frechet_distance(classifier, recon, real),
    }
    log({"stage": "export", "baselines": baselines})
    teacher = heldout_teacher_forced(out, windows=200 if num_samples > 2 else 10, seed=seed + 600)
    log({"stage": "export", "heldout_teacher_forced": teacher})
    stats = {"baselines": baselines, "heldout_teacher_forced": teacher, "generation": []}
    grid_images = None
    for cfg_scale in (3.0, None):
        s, images, classes = generation_statistics(out, num_samples, seed + 400, cfg_scale)
        stats["generation"].append(s)
        log({"stage": "export", "generation": s})
        if cfg_scale == 3.0:
            grid_images = images
    # grid: per class one real held-out crop, then up to 7 samples (cfg 3)
    per_row = min(7, num_samples)
    rows = []
    for c in range(len(data.CLASS_NAMES)):
        rows.append(real[real_labels == c][:1])
        rows.append(grid_images[c * num_samples: c * num_samples + per_row])
    save_grid(data.to_uint8(torch.cat(rows)), len(data.CLASS_NAMES), out / "samples.png")
    write_json(out / "generation_stats.json", stats)
    return stats
