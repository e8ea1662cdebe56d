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
"""

from __future__ import annotations

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
