"""gsd_lab.quality.metrics: Frechet distance against closed forms, condition-consistency score."""

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from gsd_lab.quality.metrics import (condition_consistency, frechet_distance, frechet_distance_features,
                             gaussian_statistics, psd_sqrt)


def random_spd(d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g, dtype=torch.float64)
    return a @ a.T + 0.1 * torch.eye(d, dtype=torch.float64)


def test_one_dimensional_closed_form():
    # W2^2 between N(m1, s1^2) and N(m2, s2^2) is (m1 - m2)^2 + (s1 - s2)^2.
    d = frechet_distance(torch.tensor([1.0]), torch.tensor([[4.0]]), torch.tensor([-2.0]), torch.tensor([[9.0]]))
    assert d == pytest.approx(9.0 + 1.0, rel=1e-12)


def test_commuting_covariances_closed_form():
    # Diagonal covariances: |mu1 - mu2|^2 + sum_i (sqrt(a_i) - sqrt(b_i))^2.
    a = torch.tensor([1.0, 4.0, 0.25, 9.0], dtype=torch.float64)
    b = torch.tensor([4.0, 1.0, 1.0, 9.0], dtype=torch.float64)
    mu1 = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    mu2 = torch.tensor([1.0, 1.0, 0.0, 3.0], dtype=torch.float64)
    expected = float((mu1 - mu2).pow(2).sum() + (a.sqrt() - b.sqrt()).pow(2).sum())
    assert frechet_distance(mu1, torch.diag(a), mu2, torch.diag(b)) == pytest.approx(expected, rel=1e-12)


def test_non_commuting_matches_scipy_sqrtm_formula():
    s1, s2 = random_spd(6, 0), random_spd(6, 1)
    assert not torch.allclose(s1 @ s2, s2 @ s1)
    mu1 = torch.arange(6, dtype=torch.float64)
    mu2 = torch.zeros(6, dtype=torch.float64)
    cross = scipy.linalg.sqrtm(s1.numpy() @ s2.numpy())
    expected = float(((mu1 - mu2) ** 2).sum() + np.trace(s1.numpy()) + np.trace(s2.numpy())
                     - 2 * np.trace(cross).real)
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(expected, rel=1e-9)


def test_scaled_covariance_closed_form():
    # S2 = c^2 S1 commutes with S1: distance = (1 - c)^2 tr(S1).
    s1 = random_spd(5, 2)
    mu = torch.zeros(5, dtype=torch.float64)
    assert frechet_distance(mu, s1, mu, 9.0 * s1) == pytest.approx(4.0 * float(torch.trace(s1)), rel=1e-10)


def test_identical_distributions_and_symmetry():
    s1, s2 = random_spd(4, 3), random_spd(4, 4)
    mu = torch.ones(4, dtype=torch.float64)
    assert frechet_distance(mu, s1, mu, s1) == pytest.approx(0.0, abs=1e-9)
    assert frechet_distance(mu, s1, 2 * mu, s2) == pytest.approx(frechet_distance(2 * mu, s2, mu, s1), rel=1e-9)


def test_psd_sqrt_squares_back_and_handles_singular():
    s = random_spd(5, 5)
    root = psd_sqrt(s)
    assert torch.allclose(root @ root, s, atol=1e-10)
    v = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    singular = v.T @ v  # rank 1
    r = psd_sqrt(singular)
    assert torch.allclose(r @ r, singular, atol=1e-10)


def test_sample_estimate_converges_to_closed_form():
    g = torch.Generator().manual_seed(0)
    d, n = 3, 200_000
    l1 = torch.linalg.cholesky(random_spd(d, 6))
    l2 = torch.linalg.cholesky(random_spd(d, 7))
    mu1, mu2 = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64), torch.zeros(d, dtype=torch.float64)
    x = mu1 + torch.randn(n, d, generator=g, dtype=torch.float64) @ l1.T
    y = mu2 + torch.randn(n, d, generator=g, dtype=torch.float64) @ l2.T
    exact = frechet_distance(mu1, l1 @ l1.T, mu2, l2 @ l2.T)
    assert frechet_distance_features(x, y) == pytest.approx(exact, rel=0.03)


def test_gaussian_statistics_and_bad_shapes():
    f = torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 8.0]])
    mu, cov = gaussian_statistics(f)
    assert torch.allclose(mu, torch.tensor([2.0, 4.0], dtype=torch.float64))
    assert torch.allclose(cov, torch.from_numpy(np.cov(f.numpy().T)))
    with pytest.raises(ValueError):
        gaussian_statistics(torch.zeros(1, 3))
    with pytest.raises(ValueError):
        frechet_distance(torch.zeros(2), torch.eye(2), torch.zeros(3), torch.eye(3))


class _FixedClassifier(torch.nn.Module):
    """Logits = mean colour of channels 0..2 times a fixed matrix (3 classes)."""

    def __init__(self):
        super().__init__()
        self.w = torch.tensor([[2.0, 0.0, -1.0], [0.0, 1.0, 0.0], [1.0, -1.0, 3.0]])

    def forward(self, x):
        return x.mean(dim=(2, 3)) @ self.w


def test_condition_consistency_matches_manual_softmax():
    g = torch.Generator().manual_seed(0)
    images = torch.rand(7, 3, 8, 8, generator=g) * 2 - 1
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 2])
    clf = _FixedClassifier()
    probs = torch.softmax(clf(images).double(), -1)
    expected = 100 * probs[torch.arange(7), labels].mean().item()
    assert condition_consistency(clf, images, labels) == pytest.approx(expected, rel=1e-9)
    # uint8 [N, H, W, 3] input gives the same score as the equivalent float input
    u8 = ((images + 1) * 127.5).round().clamp(0, 255).to(torch.uint8)
    back = u8.float() / 127.5 - 1
    assert condition_consistency(clf, u8.permute(0, 2, 3, 1), labels) == pytest.approx(
        condition_consistency(clf, back, labels), rel=1e-6)
    with pytest.raises(ValueError):
        condition_consistency(clf, images, labels[:3])
    with pytest.raises(ValueError):
        condition_consistency(clf, images, torch.full((7,), 5))
