"""gsd_core input edges: the sum tolerance of each dtype (float64's for every float64 tensor),
empty windows and batches, checked uniforms (dtype, range, not with a generator), device
mismatches, absurd cluster labels, O(V G) exact rates, NaN rows."""

from __future__ import annotations

import time

import pytest
import torch

from gsd_core import (
    DynamicClusters,
    acceptance_rate,
    dynamic_cluster,
    group_probs,
    output_distribution,
    sample_categorical,
    verify,
)


def _softmax32(seed: int, shape: tuple[int, ...]) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.softmax(3 * torch.randn(*shape, generator=gen), -1)  # float32


def test_a_float64_tensor_gets_the_float64_tolerance_whatever_its_values():
    """A float32 softmax cast to float64 is off by ~1e-7: float64's tolerance (1e-9) applies, as
    to any float64 tensor (the old core gave float32-representable values float32's 1e-4). The
    float32 tensor itself passes, and so does the cast one once renormalised."""
    p32, q32 = _softmax32(0, (4, 5000)), _softmax32(1, (4, 5000))
    p, q = p32.double(), q32.double()
    assert float((p.sum(-1) - 1).abs().max()) > 1e-9  # off by more than the float64 tolerance
    with pytest.raises(ValueError, match="tolerance 1e-09 for torch.float64.*renormalise"):
        acceptance_rate(p, q)
    drafts = torch.multinomial(q32[:3], 1, generator=torch.Generator().manual_seed(2)).squeeze(-1)
    with pytest.raises(ValueError, match="sum to 1"):
        verify(p, q[:3], drafts, DynamicClusters(4), generator=torch.Generator().manual_seed(3))
    assert acceptance_rate(p32, q32).dtype == torch.float32
    rate = acceptance_rate(p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True))
    assert rate.dtype == torch.float64 and bool(((rate > 0) & (rate < 1)).all())


def test_real_mistakes_are_still_rejected():
    p = _softmax32(0, (2, 50)).double()
    off = p.clone()
    off[:, 0] += 1e-3  # no longer float32 numbers, and off by 1e-3
    with pytest.raises(ValueError, match="sum to 1"):
        acceptance_rate(off, p)
    off32 = p.clone()
    off32[:, 0] = (off32[:, 0] + 1e-3).float().double()  # float32 numbers, still off by ~1e-3
    with pytest.raises(ValueError, match="sum to 1"):
        acceptance_rate(off32, p)
    negative = p.clone()
    negative[0, 0], negative[0, 1] = -0.25, negative[0, 1] + negative[0, 0] + 0.25
    with pytest.raises(ValueError, match="negative"):
        acceptance_rate(negative, p)
    with pytest.raises(ValueError, match="sum to 1"):  # float64 numbers: the float64 tolerance
        acceptance_rate(torch.full((3,), 1 / 3 + 1e-8, dtype=torch.float64), torch.full((3,), 1 / 3, dtype=torch.float64))


def test_empty_window_and_empty_batches():
    p = torch.tensor([[0.25, 0.75]], dtype=torch.float64)
    u = torch.tensor([0.5], dtype=torch.float64)
    bonus_only = verify(p, p[:0], torch.zeros(0, dtype=torch.long), uniforms=u)  # L = 0, a bonus row
    assert int(bonus_only.num_accepted) == 0 and int(bonus_only.num_emitted) == 1
    assert bonus_only.tokens.tolist() == [1] and bonus_only.accept_probs.shape == (0,)
    nothing = verify(p[:0], p[:0], torch.zeros(0, dtype=torch.long), uniforms=u)  # L = 0, no bonus row
    assert int(nothing.num_emitted) == 0 and nothing.tokens.tolist() == [-1]
    rows = torch.empty(0, 3, 2, dtype=torch.float64)
    result = verify(rows, rows[:, :2], torch.zeros(0, 2, dtype=torch.long), DynamicClusters(2),
                    generator=torch.Generator().manual_seed(0))
    assert result.tokens.shape == (0, 3) and result.num_accepted.shape == (0,)
    empty = torch.empty(0, 4, dtype=torch.float64)
    assert acceptance_rate(empty, empty).shape == (0,)
    assert acceptance_rate(empty, empty, DynamicClusters(2)).shape == (0,)
    assert output_distribution(empty, empty).shape == (0, 4)


P = torch.tensor([[0.5, 0.3, 0.2, 0.0]], dtype=torch.float64)
Q = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)


@pytest.mark.parametrize(
    "uniforms,message",
    [
        (torch.tensor([float("nan"), 0.5], dtype=torch.float64), "\\[0, 1\\)"),
        (torch.tensor([0.5, 1.5], dtype=torch.float64), "\\[0, 1\\)"),
        (torch.tensor([0.5, 1.0], dtype=torch.float64), "\\[0, 1\\)"),
        (torch.tensor([-0.1, 0.5], dtype=torch.float64), "\\[0, 1\\)"),
        (torch.zeros(2, dtype=torch.long), "float32 or float64"),
        (torch.full((2,), 0.5, dtype=torch.bfloat16), "float32 or float64"),
        (torch.full((2,), 0.5, dtype=torch.float16), "float32 or float64"),
    ],
)
def test_uniforms_are_checked(uniforms, message):
    with pytest.raises(ValueError, match=message):
        verify(P, Q, torch.tensor([1]), uniforms=uniforms)


def test_uniforms_and_a_generator_together_are_refused():
    """The generator would be ignored: refused rather than silently unused."""
    u = torch.tensor([0.5, 0.5], dtype=torch.float64)
    with pytest.raises(ValueError, match="not both"):
        verify(P, Q, torch.tensor([1]), uniforms=u, generator=torch.Generator().manual_seed(0))
    assert verify(P, Q, torch.tensor([1]), uniforms=u.float()).tokens.tolist() == [1, -1]  # float32 is fine (a = 1)


def test_device_mismatches_are_clear_value_errors():
    meta = torch.empty(1, 4, dtype=torch.float64, device="meta")
    with pytest.raises(ValueError, match="device"):
        verify(P, meta, torch.tensor([1]))
    with pytest.raises(ValueError, match="device"):
        verify(P, Q, torch.tensor([1], device="meta"))
    with pytest.raises(ValueError, match="device"):
        verify(P, Q, torch.tensor([1]), uniforms=torch.rand(2, dtype=torch.float64, device="meta"))
    with pytest.raises(ValueError, match="device"):
        acceptance_rate(P, meta)


def test_absurd_cluster_labels_are_relabelled_not_allocated():
    p = torch.tensor([0.3, 0.25, 0.2, 0.15, 0.1], dtype=torch.float64)
    q = torch.tensor([0.1, 0.15, 0.2, 0.25, 0.3], dtype=torch.float64)
    huge = torch.tensor([0, 50_000_000, 7, 50_000_000, 0])
    start = time.perf_counter()
    rate = acceptance_rate(p, q, huge)
    masses = group_probs(p, huge)
    assert time.perf_counter() - start < 1.0  # 4.2 s and 2.5 GB before
    assert rate.item() == pytest.approx(acceptance_rate(p, q, torch.tensor([0, 2, 1, 2, 0])).item(), abs=1e-15)
    assert masses.shape == (3,)  # ids 0, 7, 5e7 relabelled in increasing order
    assert masses.tolist() == pytest.approx([0.4, 0.2, 0.4], abs=1e-15)


def test_dynamic_acceptance_rate_needs_no_vocabulary_squared_memory():
    gen = torch.Generator().manual_seed(4)
    vocab = 65536  # a [V, V] float64 tensor would be 32 GiB
    logits = torch.randn(vocab, generator=gen, dtype=torch.float64)
    kth = torch.topk(logits, 2000).values[-1]
    p = torch.softmax(logits.masked_fill(logits < kth, -torch.inf), -1)
    q = torch.softmax(logits + torch.randn(vocab, generator=gen, dtype=torch.float64), -1)
    rate = acceptance_rate(p, q, DynamicClusters(14)).item()
    assert acceptance_rate(p, q).item() - 0.05 < rate <= 1.0
    assert output_distribution(p, q, DynamicClusters(14)).shape == (vocab,)


@pytest.mark.parametrize("rule", [DynamicClusters(4), DynamicClusters(6, max_prob_gap=0.05),
                                  DynamicClusters(4, rank_by="q")])
def test_dynamic_acceptance_rate_matches_cluster_by_cluster_enumeration(rule):
    gen = torch.Generator().manual_seed(5)
    w = torch.randint(0, 4, (3, 9), generator=gen).double()  # ties and zeros
    w[:, 0] += 1
    p = w / w.sum(-1, keepdim=True)
    q = torch.softmax(torch.randn(3, 9, generator=gen, dtype=torch.float64), -1)
    expected = torch.zeros(3, dtype=torch.float64)
    for x in range(9):
        mask = dynamic_cluster(p, torch.full((3,), x), rule.group_size, max_prob_gap=rule.max_prob_gap,
                               rank_by=rule.rank_by, q=q)
        pc, qc = (p * mask).sum(-1), (q * mask).sum(-1)
        expected += q[:, x] * torch.where(qc > 0, (pc / qc).clamp(max=1), 0.0)
    assert torch.allclose(acceptance_rate(p, q, rule), expected, rtol=0, atol=1e-14)


def test_nan_rows_are_refused():
    p = torch.full((3, 5), 0.2, dtype=torch.float64)
    p[1] = float("nan")
    q = torch.full((2, 5), 0.2, dtype=torch.float64)
    with pytest.raises(ValueError, match="NaN"):
        verify(p, q, torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="NaN"):
        sample_categorical(p[1], torch.tensor(0.5, dtype=torch.float64))
    with pytest.raises(ValueError, match="positive total"):
        sample_categorical(torch.zeros(5, dtype=torch.float64), torch.tensor(0.5, dtype=torch.float64))
