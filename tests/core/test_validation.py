"""Bad inputs raise ValueError naming the problem; low-precision inputs are computed in float32;
inputs are never modified in place."""

from __future__ import annotations

import pytest
import torch

from gsd_core import (
    DynamicClusters,
    RankBinnedClusters,
    accept_probability,
    acceptance_rate,
    dynamic_cluster,
    group_probs,
    output_distribution,
    residual_distribution,
    tv_distance,
    verify,
)
from gsd_core._validation import host_ranges, host_values

P = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
Q = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1]], dtype=torch.float64)
DRAFTS = torch.tensor([1, 2])


def _replace(x: torch.Tensor, value: float) -> torch.Tensor:
    y = x.clone()
    y[0, 1] = value
    return y


BAD_PROBS = [
    (_replace(P, float("nan")), "NaN or inf"),
    (_replace(P, float("inf")), "NaN or inf"),
    (torch.tensor([[0.6, 0.6, -0.2, 0.0], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64), "negative"),
    (P * 1.01, "sum to 1"),
    (torch.tensor([[1, 0, 0, 0], [1, 0, 0, 0]]), "floating-point"),
    ([[0.5, 0.5]], "torch.Tensor"),
]


@pytest.mark.parametrize("bad,message", BAD_PROBS)
def test_bad_probabilities_are_rejected_everywhere(bad, message):
    calls = [
        lambda: tv_distance(bad, Q),
        lambda: acceptance_rate(Q, bad),
        lambda: output_distribution(bad, Q),
        lambda: residual_distribution(bad, Q),
        lambda: accept_probability(bad, Q, DRAFTS),
        lambda: dynamic_cluster(bad, 0, 2),
    ]
    if isinstance(bad, torch.Tensor) and bad.shape == P.shape:
        calls.append(lambda: verify(bad.unsqueeze(0), Q.unsqueeze(0), DRAFTS.unsqueeze(0)))
        calls.append(lambda: verify(P.unsqueeze(0), bad.unsqueeze(0), DRAFTS.unsqueeze(0)))
    for call in calls:
        with pytest.raises(ValueError, match=message):
            call()


def test_sum_tolerance_depends_on_the_dtype():
    off = P.clone()
    off[:, 0] += 1e-6  # fine for float32 (tolerance 1e-4), not for float64 (1e-9)
    with pytest.raises(ValueError, match="sum to 1"):
        acceptance_rate(off, Q)
    assert acceptance_rate(off.float(), Q.float()).dtype == torch.float32
    half = P.half()
    half[:, 0] += 0.01  # within the 16-bit tolerance
    acceptance_rate(half, Q.half())
    with pytest.raises(ValueError, match="sum to 1"):
        acceptance_rate(P.float() + 0.01, Q.float())


def test_shape_errors():
    with pytest.raises(ValueError, match="vocabulary size"):
        tv_distance(P, Q[:, :3] / Q[:, :3].sum(-1, keepdim=True))
    with pytest.raises(ValueError, match="broadcast"):
        acceptance_rate(P, torch.full((3, 4), 0.25, dtype=torch.float64))
    with pytest.raises(ValueError, match="L or L \\+ 1 rows"):
        verify(torch.full((3, 4, 4), 0.25, dtype=torch.float64), Q.expand(3, 2, 4), DRAFTS.expand(3, 2))
    with pytest.raises(ValueError, match="draft_tokens"):
        verify(P.unsqueeze(0), Q.unsqueeze(0), torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match="\\[..., L, V\\]"):
        verify(P[0], Q[0], DRAFTS[:1])
    with pytest.raises(ValueError, match="batch shapes"):
        verify(P.expand(3, 2, 4), Q.expand(2, 2, 4), DRAFTS.expand(3, 2))
    with pytest.raises(ValueError, match="uniforms"):
        verify(P.unsqueeze(0), Q.unsqueeze(0), DRAFTS.unsqueeze(0), uniforms=torch.rand(1, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="partition labels"):
        group_probs(P, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="partition labels"):
        acceptance_rate(P, Q, torch.tensor([0.0, 1.0, 1.0, 0.0]))
    with pytest.raises(ValueError, match="non-negative"):
        acceptance_rate(P, Q, torch.tensor([0, -1, 1, 0]))
    with pytest.raises(ValueError, match="clusters must be"):
        acceptance_rate(P, Q, "dynamic")


@pytest.mark.parametrize("tokens", [torch.tensor([4, 0]), torch.tensor([-1, 0]), torch.tensor([0.0, 1.0])])
def test_token_ids_out_of_range_or_not_integers(tokens):
    with pytest.raises(ValueError, match="draft_tokens"):
        verify(P.unsqueeze(0), Q.unsqueeze(0), tokens.unsqueeze(0))
    with pytest.raises(ValueError, match="token"):
        accept_probability(P, Q, tokens)
    with pytest.raises(ValueError, match="token"):
        dynamic_cluster(P, tokens, 2)


def test_unknown_residual_mode_and_cluster_residual_with_a_dynamic_rule():
    with pytest.raises(ValueError, match="residual mode"):
        verify(P.unsqueeze(0), Q.unsqueeze(0), DRAFTS.unsqueeze(0), residual="cluster-exact")
    with pytest.raises(ValueError, match="partition"):
        verify(P.unsqueeze(0), Q.unsqueeze(0), DRAFTS.unsqueeze(0), DynamicClusters(2), residual="cluster")
    with pytest.raises(ValueError, match="partition"):
        residual_distribution(P, Q, DynamicClusters(2))


def test_rule_parameters_are_checked():
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="group_size"):
            DynamicClusters(bad)
    with pytest.raises(ValueError, match="group_size"):
        RankBinnedClusters(0)
    with pytest.raises(ValueError, match="embeddings"):
        DynamicClusters(4, max_embedding_distance=0.5)
    with pytest.raises(ValueError, match="max_prob_gap"):
        DynamicClusters(4, max_prob_gap=-0.1)
    with pytest.raises(ValueError, match="embeddings"):
        DynamicClusters(4, embeddings=torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="rows"):
        dynamic_cluster(P, 0, 2, embeddings=torch.zeros(3, 2), max_embedding_distance=1.0)


def test_cluster_mask_must_contain_the_token():
    with pytest.raises(ValueError, match="contain"):
        accept_probability(P, Q, DRAFTS, torch.tensor([[True, False, False, False]] * 2))
    with pytest.raises(ValueError, match="bool mask"):
        accept_probability(P, Q, DRAFTS, torch.ones(2, 4))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs_are_computed_in_float32(dtype):
    p, q = P.to(dtype), Q.to(dtype)
    p32, q32 = p.float(), q.float()  # the same values, exactly representable in float32
    tv = tv_distance(p, q)
    assert tv.dtype == torch.float32 and torch.equal(tv, 0.5 * (p32 - q32).abs().sum(-1))
    alpha = acceptance_rate(p, q)
    assert alpha.dtype == torch.float32
    assert torch.allclose(alpha, torch.minimum(p32, q32).sum(-1), atol=1e-6, rtol=0)
    assert output_distribution(p, q, DynamicClusters(2)).dtype == torch.float32
    u = torch.rand(2, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    result = verify(p.unsqueeze(1), q.unsqueeze(1), DRAFTS.unsqueeze(1), uniforms=u)
    assert result.accept_probs.dtype == torch.float32
    rows = torch.arange(2)
    expected = (p32[rows, DRAFTS] / q32[rows, DRAFTS]).clamp(max=1)
    assert torch.equal(result.accept_probs.squeeze(1), expected)


def test_float64_wins_when_dtypes_are_mixed():
    assert acceptance_rate(P, Q.float()).dtype == torch.float64


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_read_back_keeps_integers_exact_beside_narrow_floats(dtype):
    """One read-back holds float parts (row sums in p's dtype) and integer parts (token ids,
    support sizes): the ints must not be rounded to the float dtype (bfloat16 holds integers
    exactly only up to 256, float16 up to 2048, float32 up to 2^24)."""
    floats = torch.tensor([0.5, 1.0], dtype=dtype)
    ids = torch.tensor([257, 2049, 2**24 + 1])
    sizes = torch.tensor([2049, 257], dtype=torch.int32)
    exact = [(0.5, 1.0), (257, 2**24 + 1), (257, 2049)]
    assert host_ranges([floats, ids, sizes]) == exact  # the few-values path (one cat)
    assert host_ranges([ids, floats, sizes]) == exact[1:2] + exact[:1] + exact[2:]
    assert host_ranges([floats.view(1, 2), ids.view(3, 1), sizes]) == exact  # reduced first
    assert host_values([floats[0], ids[0], sizes[0]]) == [0.5, 257, 2049]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_last_draft_id_passes_beside_16_bit_rows(dtype):
    """Id V - 1 = 4095 is not V: read back beside 16-bit row sums it must not round up to 4096
    (bfloat16 and float16 both would) and be refused; id V still is."""
    vocab = 4096
    p = torch.full((2, vocab), 1 / vocab, dtype=dtype)
    gen = torch.Generator().manual_seed(0)
    assert int(verify(p, p[:1], torch.tensor([vocab - 1]), generator=gen).num_accepted) == 1
    with pytest.raises(ValueError, match="draft_tokens has ids out of range"):
        verify(p, p[:1], torch.tensor([vocab]), generator=gen)


@pytest.mark.parametrize("dtype,positives", [(torch.bfloat16, 257), (torch.float16, 2049)])
def test_16_bit_rows_give_the_same_window_with_and_without_validation(dtype, positives):
    """The default GSD call reads its largest support size and the draft ids in the read-back
    of p's 16-bit row sums: more positive entries than the dtype counts exactly, and draft ids
    past that, must still rank and verify exactly as without validation. Each positive id
    and the last ids are drafted once (a batch of one-draft windows); V > 2 * positives, so
    that the rank windows come from the top-K selection, whose K is the size read back."""
    vocab = 2 * positives + 300
    gen = torch.Generator().manual_seed(21)
    p = torch.zeros(2, vocab, dtype=torch.float64)
    ids = torch.randperm(vocab, generator=gen)[:positives]
    p[:, ids] = torch.rand(2, positives, generator=gen, dtype=torch.float64) + 0.5
    p = (p / p.sum(-1, keepdim=True)).to(dtype)
    q = (p[:1] > 0).to(dtype) / positives  # uniform on p's support: p/q < 1 for many drafts
    drafts = torch.cat([ids, torch.arange(vocab - 8, vocab)]).unsqueeze(-1)
    rule = DynamicClusters(3)
    checked = verify(p, q, drafts, rule, generator=torch.Generator().manual_seed(1))
    unchecked = verify(p, q, drafts, rule, generator=torch.Generator().manual_seed(1),
                       validate=False)
    for name in ("num_accepted", "tokens", "num_emitted", "accept_probs"):
        assert torch.equal(getattr(checked, name), getattr(unchecked, name)), name
    assert bool((checked.accept_probs[:positives] > 0).all())  # each positive draft can be accepted


def test_inputs_are_never_modified_in_place():
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(3, 5, 9, generator=gen, dtype=torch.float64), -1)
    p[..., 0] = 0
    p = p / p.sum(-1, keepdim=True)
    q = torch.softmax(torch.randn(3, 4, 9, generator=gen, dtype=torch.float64), -1)
    drafts = torch.randint(0, 9, (3, 4), generator=gen)
    u = torch.rand(3, 5, generator=gen, dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3, 3])
    emb = torch.randn(9, 3, generator=gen)
    originals = [x.clone() for x in (p, q, drafts, u, labels, emb)]
    rules = (None, labels, DynamicClusters(4, 0.5, 0.3, emb), DynamicClusters(4, rank_by="q"), RankBinnedClusters(2))
    for rule in rules:
        verify(p, q, drafts, rule, uniforms=u)
        verify(p, q, drafts, rule, uniforms=u, stop_early=True)
        acceptance_rate(p[:, :4], q, rule)
        output_distribution(p[:, :4], q, rule)
        if rule is labels or isinstance(rule, RankBinnedClusters):
            verify(p, q, drafts, rule, "cluster", uniforms=u)
            residual_distribution(p[:, :4], q, rule)
    tv_distance(p[:, :4], q)
    group_probs(p, labels)
    dynamic_cluster(p, drafts[:, :1].expand(3, 5), 4)
    for now, before in zip((p, q, drafts, u, labels, emb), originals):
        assert torch.equal(now, before)
