"""Small CNN that predicts the source class of a crop (256x256 images; 128x128 held-out crops).

Used by quality.metrics: its softmax gives the condition-consistency score and its penultimate
features (global-average-pooled, ``FEATURE_DIM``) feed the Frechet distance.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from . import data
from .train_tokenizer import step_and_log
from .weights_io import save_module, write_json

FEATURE_DIM = 64


class CropClassifier(nn.Module):
    """images [B, 3, H, W] in [-1, 1] (H, W multiples of 32) -> logits [B, num_classes];
    ``features`` -> [B, FEATURE_DIM] (global average of the last feature map, so any size works:
    256 for images, 128 for the held-out crops). A stride-2 stem keeps 256-pixel inputs cheap."""

    def __init__(self, num_classes: int, width: int = 32, feature_dim: int = FEATURE_DIM):
        super().__init__()
        w = width

        def block(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride=2, padding=1), nn.GroupNorm(8, cout), nn.SiLU()
            )

        self.body = nn.Sequential(
            nn.Conv2d(3, w, 4, stride=2, padding=1),
            nn.SiLU(),
            block(w, w),
            block(w, 2 * w),
            block(2 * w, 2 * w),
            block(2 * w, feature_dim),
        )
        self.head = nn.Linear(feature_dim, num_classes)
        self.num_classes = num_classes

    def features(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be [B, 3, H, W], got {tuple(images.shape)}")
        return self.body(images).mean(dim=(2, 3))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))


def heldout_set(per_class: int = 40, seed: int = 4321) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed held-out evaluation crops (``data.HELDOUT_CROP`` = 128 pixels, each inside a
    held-out cell, no flips) and labels."""
    return data.class_crops("heldout", per_class, seed, flip=False)


@torch.no_grad()
def accuracy(classifier: CropClassifier, images: torch.Tensor, labels: torch.Tensor) -> float:
    classifier.eval()
    logits = torch.cat([classifier(chunk) for chunk in images.split(100)])
    return float((logits.argmax(-1) == labels).float().mean())


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
