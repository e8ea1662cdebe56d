"""A quality measure that sees digit structure: the digits classifier (``CropClassifier``
trained on the training split) scores each generated image against its prompted digit, and
KID compares sets of images in its feature space.

Per image x prompted with digit c:  log p(c | x) (the classifier's log-softmax) and
    correct(x) = [argmax_y p(y | x) = c].
KID (Binkowski et al. 2018): the unbiased MMD^2 between feature sets X [m, D], Y [n, D] under
    k(x, y) = (x . y / D + 1)^3,
    KID = sum_{i != j} k(x_i, x_j) / (m (m-1)) + sum_{i != j} k(y_i, y_j) / (n (n-1))
          - 2 sum_{i, j} k(x_i, y_j) / (m n)    (float64; 0 in expectation for one law).
Paired KID differences between two methods decoded on the same prompts and seeds:
    KID(A, R) - KID(B, R) with a bootstrap SE that resamples the image pairs (i of A with i of B)
    together, the reference R fixed: the "bootstrap standard deviation" of
    ``gsd_lab.experiments.verdicts`` for a statistic that is not a plain mean.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..quality.metrics import _as_float_images, classifier_features


@torch.no_grad()
def prompted_scores(
    classifier: torch.nn.Module, images: Tensor, prompted: Tensor, batch_size: int = 256
) -> tuple[Tensor, Tensor]:
    """(log p(prompted | image) [N] float64, argmax == prompted [N] bool)."""
    x = _as_float_images(images)
    labels = torch.as_tensor(prompted).long().reshape(-1)
    if labels.numel() != x.shape[0]:
        raise ValueError(f"{labels.numel()} prompted digits for {x.shape[0]} images")
    classifier.eval()
    logp = torch.cat(
        [torch.log_softmax(classifier(chunk).double(), -1) for chunk in x.split(batch_size)]
    )
    if labels.min() < 0 or labels.max() >= logp.shape[1]:
        raise ValueError(f"prompted digits must lie in [0, {logp.shape[1]})")
    return logp.gather(1, labels[:, None])[:, 0], logp.argmax(1) == labels


def _kernel(a: Tensor, b: Tensor) -> Tensor:
    return (a @ b.T / a.shape[1] + 1.0) ** 3


def kid(features_a: Tensor, features_b: Tensor) -> float:
    """Unbiased KID (module doc) of features [m, D] and [n, D], m, n >= 2."""
    a, b = torch.as_tensor(features_a).double(), torch.as_tensor(features_b).double()
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1] or min(a.shape[0], b.shape[0]) < 2:
        raise ValueError(
            f"features must be [m >= 2, D] and [n >= 2, D], got {tuple(a.shape)}, {tuple(b.shape)}"
        )
    m, n = a.shape[0], b.shape[0]
    kaa, kbb = _kernel(a, a), _kernel(b, b)
    within_a = (kaa.sum() - kaa.diagonal().sum()) / (m * (m - 1))
    within_b = (kbb.sum() - kbb.diagonal().sum()) / (n * (n - 1))
    return float(within_a + within_b - 2.0 * _kernel(a, b).mean())


def features(classifier: torch.nn.Module, images: Tensor) -> Tensor:
    """The classifier's penultimate features [N, D] (float64)."""
    return classifier_features(classifier, images)


def paired_kid_difference(
    features_a: Tensor, features_b: Tensor, reference: Tensor, *, draws: int = 200, seed: int = 0
) -> dict:
    """KID(A, R) - KID(B, R) for paired feature sets A, B [n, D] (row i of both from one prompt
    and seed) and reference R, with its bootstrap SE over the pairs (``draws`` resamples of the
    n pair indices with replacement, a generator seeded with ``seed``; a resample repeating a
    row keeps both copies, so the unbiased estimate's diagonal exclusion drops only i = j
    positions). Returns {"difference", "se", "n", "kid_a", "kid_b"}."""
    a, b = torch.as_tensor(features_a).double(), torch.as_tensor(features_b).double()
    if a.shape != b.shape:
        raise ValueError(f"paired features must have one shape, got {a.shape} and {b.shape}")
    n = a.shape[0]
    kid_a, kid_b = kid(a, reference), kid(b, reference)
    generator = torch.Generator().manual_seed(seed)
    boots = []
    for _ in range(draws):
        pick = torch.randint(0, n, (n,), generator=generator)
        boots.append(kid(a[pick], reference) - kid(b[pick], reference))
    se = float(torch.tensor(boots, dtype=torch.float64).std()) if draws > 1 else math.nan
    return {"difference": kid_a - kid_b, "se": se, "n": int(n), "kid_a": kid_a, "kid_b": kid_b}
