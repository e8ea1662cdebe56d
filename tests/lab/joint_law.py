"""Shared by the whole-generation law checks (test_decoding_lossless.py,
test_coupled_drafts_lossless.py): the exact AR joint of a tiny model by enumeration, and the
chi-square test of sampled sequences against it."""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats


def exact_joint(adapter, prompt: torch.Tensor, sequences: list[tuple[int, ...]], uncond=None) -> np.ndarray:
    """P(sequence) under AR sampling from the adapter's processed conditionals, one uncached pass
    per sequence (all of the same length)."""
    length = len(sequences[0])
    joint = []
    for seq in sequences:
        adapter.start(prompt, uncond)
        rows = adapter.forward(torch.cat([prompt, torch.tensor(seq[:-1], dtype=torch.long)]), num_rows=length)
        joint.append(float(rows[torch.arange(length), torch.tensor(seq)].prod()))
    joint = np.array(joint)
    assert abs(joint.sum() - 1) < 1e-9
    return joint


def chi_square_pvalue(counts: np.ndarray, pmf: np.ndarray) -> float:
    """Goodness of fit of ``counts`` to ``pmf``; cells expected below 5 pooled into one.
    A sample in a zero-probability cell gives p = 0."""
    n = counts.sum()
    if counts[pmf == 0].sum() > 0:
        return 0.0
    expected = pmf * n
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert exp.sum() > 0.9 * n, "distribution too sparse for the test"
    return float(stats.chisquare(obs, exp).pvalue)
