"""Ports of Hugging Face transformers' ``tests/generation/test_utils.py``
(``UtilsFunctionsTest``: ``test_speculative_sampling``,
``test_speculative_sampling_target_distribution``) to ``gsd_core.verify``.

transformers' ``_speculative_sampling`` takes the assistant's logits (q = their softmax) and the
target's (p = their softmax, one row more: the bonus row). gsd takes the two laws.
"""

from __future__ import annotations

import collections

import torch

from gsd_core import verify

INF = float("inf")
CANDIDATE_IDS = torch.tensor([[8, 0, 3, 9, 8, 1, 4, 5]])  # input length 5 + 3 candidates
CANDIDATE_LENGTH = 3


def candidate_logits() -> torch.Tensor:
    """[1, 3, 10]: the assistant generated 1, 4, 5."""
    logits = torch.full((1, 3, 10), -10.0)
    logits[0, [0, 1, 2], [1, 4, 5]] = 10.0
    return logits


def test_speculative_sampling() -> None:
    """Port of UtilsFunctionsTest.test_speculative_sampling (transformers
    tests/generation/test_utils.py): accepts 1 and 4, rejects 5 (target row one-hot on 8), emits
    8; n_matches 2, validated tokens [1, 4, 8]."""
    new_logits = torch.full((1, 4, 10), -10.0)
    new_logits[0, 0, 1] = new_logits[0, 1, 4] = 10.0
    new_logits[0, 2] = -INF
    new_logits[0, 2, 8] = 10.0
    drafts = CANDIDATE_IDS[:, -CANDIDATE_LENGTH:]
    result = verify(new_logits.softmax(-1), candidate_logits().softmax(-1), drafts,
                    generator=torch.Generator().manual_seed(0))
    assert result.num_accepted.item() == 2
    assert result.tokens[0, : result.num_emitted.item()].tolist() == [1, 4, 8]


def test_speculative_sampling_target_distribution() -> None:
    """Port of UtilsFunctionsTest.test_speculative_sampling_target_distribution (transformers
    tests/generation/test_utils.py): 10,000 windows; 1 and 4 always accepted, 5 always rejected
    (the third target row has logits 2, 1, -0.01, 2 on tokens 1, 3, 7, 8 and -inf elsewhere), so
    the third token is 1, 3, 7 or 8 with counts[1] > counts[3] > counts[7] > 0 and
    counts[8] > counts[3]. transformers' fourth (bonus) row is all -inf: its softmax is NaN and
    unused. gsd convention: verify checks every row it is given, so p has L = 3 rows here (no
    bonus row), one fewer than transformers passes."""
    new_logits = torch.full((1, 3, 10), -INF)
    new_logits[0, 0, 1] = new_logits[0, 1, 4] = 10.0
    new_logits[0, 2, [1, 3, 7, 8]] = torch.tensor([2.0, 1.0, -0.01, 2.0])
    num_samples = 10_000
    drafts = CANDIDATE_IDS[:, -CANDIDATE_LENGTH:].expand(num_samples, -1)
    p, q = new_logits.softmax(-1), candidate_logits().softmax(-1)  # broadcast over the drafts
    result = verify(p, q, drafts, generator=torch.Generator().manual_seed(0))
    assert bool((result.num_accepted == 2).all())
    assert bool((result.tokens[:, :2] == torch.tensor([1, 4])).all())
    last = result.tokens[:, 2]
    assert set(last.tolist()) <= {1, 3, 7, 8}
    counts = collections.Counter(last.tolist())
    assert counts[1] > counts[3] > counts[7] > 0
    assert counts[8] > counts[3]
