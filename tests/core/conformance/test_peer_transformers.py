"""Ports of Hugging Face transformers' ``tests/generation/test_utils.py`` at commit
cf63921b9648e760a9a72a3c84bf797f17d1e140 (``UtilsFunctionsTest``: ``test_speculative_sampling``,
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
    tests/generation/test_utils.py at cf63921b): accepts 1 and 4, rejects 5 (target row one-hot
    on 8), emits 8; n_matches 2, validated tokens [1, 4, 8]."""
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
    tests/generation/test_utils.py at cf63921b): 10,000 windows; 1 and 4 always accepted, 5
    always rejected (the third target row has logits 2, 1, -0.01, 2 on tokens 1, 3, 7, 8 and
    -inf elsewhere), so the third token is 1, 3, 7 or 8 with counts[1] > counts[3] > counts[7]
    > 0 and counts[8] > counts[3]. Two differences: transformers makes 10,000 separate calls,
    here one batched call verifies the 10,000 windows [10000, 3] (the rows broadcast); and its
    fourth (bonus) row, all -inf (softmax NaN, unused), is dropped, since verify checks every row
    it is given: p [1, 3, 10] has L = 3 rows (no bonus row)."""
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
