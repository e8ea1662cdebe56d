"""Small CNN that predicts the source class of a crop (256x256 images; 128x128 held-out crops).

Used by quality.metrics: its softmax gives the condition-consistency score and its penultimate
features (global-average-pooled, ``FEATURE_DIM``) feed the Frechet distance. Its training is
``gsd_train.standin.classifier``.
"""

from __future__ import annotations

import torch
from torch import nn

from . import data

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
