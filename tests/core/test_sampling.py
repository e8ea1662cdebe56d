"""Sampled checks of ``verify`` (fixed seeds, outside Hypothesis): the emitted token follows p
by a chi-square test, and the same test catches two broken verifiers (negative controls).

Method (PyTorch's distribution tests): N draws of one verification step, cells with expected
count < 5 pooled into one, Pearson's chi-square against the exact law, rejected at a fixed
level ALPHA. Every case runs under several fixed seeds.
"""

from __future__ import annotations

import pytest
import torch
from scipy import stats

import gsd_core.rules as rules
from gsd_core import RankBinnedClusters, group_probs, residual_distribution, verify

ALPHA = 1e-3
DRAWS = 20_000
SEEDS = range(4)

CASES = {
    "overlapping": ([0.30, 0.25, 0.20, 0.15, 0.10, 0.00], [0.10, 0.10, 0.20, 0.20, 0.20, 0.20]),
    "p-equals-q": ([0.30, 0.25, 0.20, 0.15, 0.10, 0.00], [0.30, 0.25, 0.20, 0.15, 0.10, 0.00]),
    "one-hot-draft": ([0.30, 0.25, 0.20, 0.15, 0.10, 0.00], [0.00, 0.00, 0.00, 0.00, 0.00, 1.00]),
    "one-hot-in-support": ([0.30, 0.25, 0.20, 0.15, 0.10, 0.00], [1.00, 0.00, 0.00, 0.00, 0.00, 0.00]),
    "disjoint": ([0.50, 0.50, 0.00, 0.00, 0.00, 0.00], [0.00, 0.00, 0.25, 0.25, 0.25, 0.25]),
}


def chi_square_pvalue(samples: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of Pearson's test that ``samples`` (ids) are draws from ``probs``, pooling the
    cells with expected count < 5. A draw in a cell of probability 0 gives 0."""
    n = samples.numel()
    observed = torch.bincount(samples, minlength=probs.numel()).double()
    expected = probs.double() * n
    if bool((observed[expected == 0] > 0).any()):
        return 0.0
    keep = expected >= 5
    obs = observed[keep].tolist()
    exp = expected[keep].tolist()
    pooled_exp = expected[~keep].sum().item()
    if pooled_exp > 0:
        obs.append(observed[~keep].sum().item())
        exp.append(pooled_exp)
    if len(obs) < 2:
        return 1.0  # a single cell: nothing to test
    scale = sum(obs) / sum(exp)  # exact renormalisation against float rounding in expected
    return float(stats.chisquare(obs, [e * scale for e in exp]).pvalue)


def first_emitted(p: torch.Tensor, q: torch.Tensor, seed: int, rule=None) -> torch.Tensor:
    """DRAWS independent one-step verifications: x ~ q, then verify; returns the emitted tokens."""
    gen = torch.Generator().manual_seed(seed)
    drafts = torch.multinomial(q.expand(DRAWS, -1), 1, replacement=True, generator=gen)
    result = verify(p.expand(DRAWS, 1, -1), q.expand(DRAWS, 1, -1), drafts, rule, generator=gen)
    assert bool((result.num_emitted == 1).all())
    return result.tokens[:, 0]


def _pq(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    p, q = CASES[name]
    return torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("seed", SEEDS)
def test_standard_sd_samples_follow_p(name, seed):
    p, q = _pq(name)
    assert chi_square_pvalue(first_emitted(p, q, seed), p) > ALPHA


@pytest.mark.parametrize("seed", SEEDS)
def test_bonus_token_follows_the_extra_target_row(seed):
    gen = torch.Generator().manual_seed(100 + seed)
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    q = p[:1]
    drafts = torch.multinomial(q.expand(DRAWS, -1), 1, replacement=True, generator=gen)
    result = verify(p.expand(DRAWS, 2, 4), q.expand(DRAWS, 1, 4), drafts, generator=gen)
    assert bool((result.num_accepted == 1).all())  # p == q at the drafted position
    assert chi_square_pvalue(result.tokens[:, 1], p[1]) > ALPHA


@pytest.mark.parametrize("seed", SEEDS)
def test_cluster_exact_residual_samples_follow_the_cluster_masses(seed):
    p, q = _pq("overlapping")
    rule = RankBinnedClusters(2, "cluster")
    labels = rule.partition_labels(p)
    tokens = first_emitted(p, q, seed, rule)
    assert chi_square_pvalue(labels[tokens], group_probs(p, labels)) > ALPHA


# --- negative controls: the same check must fail --------------------------------------------


@pytest.mark.parametrize("name", ["overlapping", "one-hot-draft", "disjoint"])
@pytest.mark.parametrize("seed", SEEDS)
def test_control_always_accept_is_caught(name, seed):
    p, q = _pq(name)
    one_cluster = torch.zeros(p.numel(), dtype=torch.long)  # C(x) = V: p(C)/q(C) = 1, always accepts
    tokens = first_emitted(p, q, seed, one_cluster)
    assert torch.equal(tokens, first_emitted(q, q, seed))  # it emits the drafts
    assert chi_square_pvalue(tokens, p) < ALPHA


# Not "one-hot-draft" or "disjoint": there q(x) = 0 wherever p(x) > 0, so the residual *is* p
# and resampling from p is correct.
@pytest.mark.parametrize("name", ["overlapping", "one-hot-in-support"])
@pytest.mark.parametrize("seed", SEEDS)
def test_control_resampling_from_p_instead_of_the_residual_is_caught(monkeypatch, name, seed):
    p, q = _pq(name)
    assert not torch.allclose(residual_distribution(p, q), p)
    monkeypatch.setattr(rules, "token_residual", lambda p_, q_: p_)
    assert chi_square_pvalue(first_emitted(p, q, seed), p) < ALPHA
