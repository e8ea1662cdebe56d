"""Quality proxies for the stand-in (analogues of CLIP score and FID; their numbers are NOT
comparable to CLIP score or FID, only their movement between decoding methods is).

condition_consistency: 100 * mean_i P_classifier(y = c_i | x_i), the probability that the
    stand-in's crop classifier assigns to the conditioning class c_i of generated image x_i.
frechet_distance: between Gaussians N(mu1, S1), N(mu2, S2) fitted to features (the
    classifier's penultimate layer),
        d^2 = |mu1 - mu2|^2 + tr(S1) + tr(S2) - 2 tr((S1^{1/2} S2 S1^{1/2})^{1/2}),
    with the matrix square roots of the symmetric PSD matrices taken by eigen-decomposition in
    float64 (tr (S1 S2)^{1/2} = tr (S1^{1/2} S2 S1^{1/2})^{1/2}, since the two products are
    similar).
paired_bootstrap: a 95% interval for the mean per-image difference of a proxy between two methods
    decoded on the same prompts and seeds (error bars against AR).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


def _as_float_images(images: Tensor) -> Tensor:
    """uint8 [N, H, W, 3] or float [N, 3, H, W] in [-1, 1] -> float [N, 3, H, W] in [-1, 1]."""
    images = torch.as_tensor(images)
    if images.dim() != 4:
        raise ValueError(f"images must be 4-D, got shape {tuple(images.shape)}")
    if images.dtype == torch.uint8:
        if images.shape[-1] != 3:
            raise ValueError(f"uint8 images must be [N, H, W, 3], got {tuple(images.shape)}")
        return images.permute(0, 3, 1, 2).float() / 127.5 - 1.0
    if images.shape[1] != 3:
        raise ValueError(f"float images must be [N, 3, H, W], got {tuple(images.shape)}")
    return images.float()


@torch.no_grad()
def condition_consistency(
    classifier: torch.nn.Module, images: Tensor, class_indices: Tensor, batch_size: int = 256
) -> float:
    """100 * mean P(class = conditioning class | image) under ``classifier`` (higher is better)."""
    x = _as_float_images(images)
    labels = torch.as_tensor(class_indices).long().reshape(-1)
    if labels.numel() != x.shape[0]:
        raise ValueError(f"{labels.numel()} class indices for {x.shape[0]} images")
    classifier.eval()
    probs = torch.cat(
        [torch.softmax(classifier(chunk).double(), -1) for chunk in x.split(batch_size)]
    )
    if labels.min() < 0 or labels.max() >= probs.shape[1]:
        raise ValueError(f"class indices must lie in [0, {probs.shape[1]})")
    return float(100.0 * probs.gather(1, labels[:, None]).mean())


@torch.no_grad()
def classifier_features(
    classifier: torch.nn.Module, images: Tensor, batch_size: int = 256
) -> Tensor:
    """Penultimate features [N, D] (float64) of ``classifier.features``."""
    x = _as_float_images(images)
    classifier.eval()
    return torch.cat([classifier.features(chunk).double() for chunk in x.split(batch_size)])


def gaussian_statistics(features: Tensor) -> tuple[Tensor, Tensor]:
    """(mean [D], unbiased covariance [D, D]) of features [N, D], N >= 2, in float64."""
    f = torch.as_tensor(features).double()
    if f.dim() != 2 or f.shape[0] < 2:
        raise ValueError(f"features must be [N >= 2, D], got {tuple(f.shape)}")
    mu = f.mean(0)
    centred = f - mu
    return mu, centred.T @ centred / (f.shape[0] - 1)


def psd_sqrt(matrix: Tensor) -> Tensor:
    """Square root of a symmetric positive semi-definite matrix by eigen-decomposition
    (negative round-off eigenvalues clipped to 0), float64."""
    m = torch.as_tensor(matrix).double()
    m = 0.5 * (m + m.T)
    values, vectors = torch.linalg.eigh(m)
    return (vectors * values.clamp(min=0).sqrt()) @ vectors.T


def frechet_distance(mu1: Tensor, sigma1: Tensor, mu2: Tensor, sigma2: Tensor) -> float:
    """Squared Frechet (2-Wasserstein) distance between N(mu1, sigma1) and N(mu2, sigma2)."""
    mu1, mu2 = torch.as_tensor(mu1).double(), torch.as_tensor(mu2).double()
    s1, s2 = torch.as_tensor(sigma1).double(), torch.as_tensor(sigma2).double()
    d = mu1.shape[0]
    if mu2.shape != (d,) or s1.shape != (d, d) or s2.shape != (d, d):
        raise ValueError(
            f"shape mismatch: mu {tuple(mu1.shape)}/{tuple(mu2.shape)}, "
            f"sigma {tuple(s1.shape)}/{tuple(s2.shape)}"
        )
    root1 = psd_sqrt(s1)
    cross = psd_sqrt(root1 @ s2 @ root1)
    value = (mu1 - mu2).pow(2).sum() + torch.trace(s1) + torch.trace(s2) - 2 * torch.trace(cross)
    return float(value.clamp(min=0))


def frechet_distance_features(features_a: Tensor, features_b: Tensor) -> float:
    """Frechet distance between Gaussians fitted to two feature sets [N_a, D], [N_b, D]."""
    return frechet_distance(*gaussian_statistics(features_a), *gaussian_statistics(features_b))


def classifier_frechet_distance(
    classifier: torch.nn.Module, generated: Tensor, reference: Tensor
) -> float:
    """Frechet distance between the classifier's penultimate features of two image sets."""
    return frechet_distance_features(
        classifier_features(classifier, generated), classifier_features(classifier, reference)
    )


@dataclass(frozen=True)
class BootstrapInterval:
    """mean(a - b) over paired items and its bootstrap percentile interval [low, high] at
    ``level`` (low = high = None with fewer than 2 pairs)."""

    difference: float
    low: float | None
    high: float | None
    level: float
    resamples: int


def paired_bootstrap(
    a: object,
    b: object,
    *,
    num_resamples: int = 2000,
    level: float = 0.95,
    generator: torch.Generator | None = None,
) -> BootstrapInterval:
    """Paired bootstrap of the mean difference of per-item values a, b [N] (item i of a and of b
    share an image's prompt and seed): resample the N differences d_i = a_i - b_i with replacement
    ``num_resamples`` times (one [B, N] draw, vectorised), take the (1 - level)/2 and
    (1 + level)/2 quantiles of the resampled means. Pairing removes the prompt-to-prompt
    variation that both share, so the interval is narrower than one from two independent sets.
    ``generator``: the resampling's randomness; None means a fresh ``torch.Generator`` seeded 0
    (never the global RNG), so the same inputs always give the same interval."""
    a64 = torch.as_tensor(np.asarray(a, dtype=np.float64))
    b64 = torch.as_tensor(np.asarray(b, dtype=np.float64))
    if a64.ndim != 1 or a64.shape != b64.shape:
        raise ValueError(
            "a and b must be paired 1-D arrays of one length, "
            f"got {tuple(a64.shape)} and {tuple(b64.shape)}"
        )
    if a64.numel() == 0 or not bool(torch.isfinite(a64).all() and torch.isfinite(b64).all()):
        raise ValueError("a and b must be non-empty and finite")
    if isinstance(num_resamples, bool) or not isinstance(num_resamples, int) or num_resamples < 1:
        raise ValueError(f"num_resamples must be an int >= 1, got {num_resamples!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    diff = a64 - b64
    n = diff.numel()
    if n < 2:
        return BootstrapInterval(float(diff.mean()), None, None, level, num_resamples)
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    index = torch.randint(n, (num_resamples, n), generator=generator)
    means = diff[index].mean(-1)
    bounds = torch.quantile(
        means, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    )
    return BootstrapInterval(
        float(diff.mean()), float(bounds[0]), float(bounds[1]), level, num_resamples
    )
