"""Helpers shared by the conformance tests: vLLM-style batches mapped onto ``gsd_core.verify``.

A peer's greedy request (draft tokens, target argmax, bonus token) is a window here with q one-hot
on each draft (a deterministic drafter), p one-hot on each target argmax (temperature 0) and a
bonus row one-hot on the bonus token: gsd draws the bonus from p_L, where vLLM takes it from its
sampler. Ragged batches run one request at a time; their rows are padded with -1 to the longest
window, as vLLM's output is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gsd_core import verify

PLACEHOLDER = -1


def one_hot(tokens: list[int], vocab: int) -> torch.Tensor:
    """[len(tokens), V] float32 one-hot rows."""
    return F.one_hot(torch.tensor(tokens, dtype=torch.int64), vocab).float()


def greedy_logits(output_tokens: list[int], vocab: int) -> torch.Tensor:
    """vLLM's ``create_logits_tensor`` for one request: logit 100 on each output token (the last
    is the bonus), -100 elsewhere. [len(output_tokens), V] float32."""
    logits = torch.full((len(output_tokens), vocab), -100.0)
    logits[torch.arange(len(output_tokens)), torch.tensor(output_tokens)] = 100.0
    return logits


def greedy_batch(spec_tokens: list[list[int]], output_tokens: list[list[int]],
                 vocab: int = 100, seed: int = 0) -> torch.Tensor:
    """Each request verified by ``verify`` (p = softmax of ``greedy_logits``, q one-hot on the
    drafts, bonus row included); rows padded with -1 to the longest window + 1. int64 [B, K + 1]."""
    width = max(len(s) for s in spec_tokens) + 1
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for drafts, outputs in zip(spec_tokens, output_tokens):
        p = torch.softmax(greedy_logits(outputs, vocab), -1)
        q = one_hot(drafts, vocab).reshape(len(drafts), vocab)
        tokens = verify(p, q, torch.tensor(drafts, dtype=torch.int64),
                        generator=generator).tokens
        rows.append(F.pad(tokens, (0, width - tokens.numel()), value=PLACEHOLDER))
    return torch.stack(rows)
