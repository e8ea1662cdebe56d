"""The stand-in's crop classifier, trained: ``train_classifier`` writes
``classifier.safetensors`` and ``classifier_config.json`` (the model is
``gsd_lab.standin.classifier.CropClassifier``)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from gsd_lab.standin import data
from gsd_lab.standin.classifier import FEATURE_DIM, CropClassifier, accuracy, heldout_set
from gsd_lab.standin.weights_io import save_module, write_json

from .train_tokenizer import step_and_log


def train_classifier(
    out: Path,
    tokenizer,
    *,
    steps: int = 500,
    batch: int = 32,
    lr: float = 2e-3,
    seed: int = 0,
    width: int = 32,
    pool: int = 100,
    eval_per_class: int = 40,
    log=print,
) -> tuple[CropClassifier, dict]:
    """Cross-entropy on training-region crops (random scale and mirror, light brightness jitter).

    A pool of ``pool`` 256-pixel crops per class is drawn once, with their tokenizer
    reconstructions (the tiles, without the seam decoder), so that the classifier judges decoded
    samples by content, not by the tokenizer's tile seams. Every other batch is a random
    ``data.HELDOUT_CROP`` sub-crop of its images (the held-out evaluation crops are that size).
    Accuracy is measured on ``heldout_set(eval_per_class)``."""
    out = Path(out)
    with torch.random.fork_rng():
        torch.manual_seed(seed + 100)  # parameter init only
        classifier = CropClassifier(len(data.CLASS_NAMES), width=width)
    generator = torch.Generator().manual_seed(seed + 101)
    start = time.time()
    real, labels_all = data.class_crops("train", pool, seed + 102)
    recon = torch.cat(
        [tokenizer.decode_tiles(tokenizer.encode(c)) for c in real.split(100)]
    ).float()
    pool_images = torch.cat([real, recon])
    pool_labels = torch.cat([labels_all, labels_all])
    opt = torch.optim.AdamW(classifier.parameters(), lr=lr, weight_decay=1e-4)
    log(
        {
            "stage": "classifier",
            "pool_images": int(pool_images.shape[0]),
            "prep_s": round(time.time() - start, 1),
        }
    )
    for step in range(steps):
        frac = step / max(1, steps - 1)
        for group in opt.param_groups:
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * frac))
        pick = torch.randint(0, pool_images.shape[0], (batch,), generator=generator)
        images, labels = pool_images[pick], pool_labels[pick]
        if step % 2:
            size = data.HELDOUT_CROP
            top, left = (
                int(v)
                for v in torch.randint(0, images.shape[-1] - size + 1, (2,), generator=generator)
            )
            images = images[:, :, top : top + size, left : left + size]
        mirror = torch.rand(batch, generator=generator) < 0.5
        images = torch.where(mirror[:, None, None, None], images.flip(-1), images)
        # brightness jitter so that the classifier does not key on exact global intensity only
        images = (images + 0.1 * (torch.rand(batch, 1, 1, 1, generator=generator) - 0.5)).clamp(
            -1, 1
        )
        classifier.train()
        step_and_log(
            opt,
            F.cross_entropy(classifier(images), labels),
            stage="classifier",
            step=step,
            steps=steps,
            every=50,
            start=start,
            log=log,
        )
    images, labels = heldout_set(eval_per_class)
    recon_heldout = torch.cat(
        [tokenizer.decode_tiles(tokenizer.encode(c)) for c in images.split(100)]
    ).float()
    metrics = {
        "heldout_accuracy": accuracy(classifier, images, labels),
        "heldout_tiles_accuracy": accuracy(classifier, recon_heldout, labels),
        "heldout_images": int(labels.numel()),
        "steps": steps,
        "batch": batch,
        "seed": seed,
        "wall_seconds": round(time.time() - start, 1),
    }
    log({"stage": "classifier", "eval": metrics})
    save_module(classifier, out / "classifier.safetensors")
    write_json(
        out / "classifier_config.json",
        {
            "num_classes": len(data.CLASS_NAMES),
            "width": width,
            "feature_dim": FEATURE_DIM,
            "class_names": list(data.CLASS_NAMES),
            "metrics": metrics,
        },
    )
    return classifier, metrics
