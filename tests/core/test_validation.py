"""Bad inputs raise ValueError naming the problem; low-precision inputs are computed in float32;
inputs are never modified in place; the public API's shape (verify's six parameters)."""

from __future__ import annotations

import pytest
import torch

import inspect

from gsd_core import (
    Amplify,
    DynamicClusters,
    FixedPartition,
    Lantern,
    RankBinnedClusters,
    accept_probability,
    acceptance_rate,
    dynamic_cluster,
    group_probs,
    output_distribution,
    residual_distribution,
    tv_distance,
    latent_neighbourhoods,
    verify,
)

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
    per_row = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])  # one partition per row: the exact laws' only
    for rule in (per_row, Amplify(2.0, FixedPartition(per_row, "cluster"))):
        with pytest.raises(ValueError, match="one partition of the vocabulary"):
            verify(P, Q, DRAFTS, rule)
    with pytest.raises(ValueError, match="rule must be"):
        acceptance_rate(P, Q, "dynamic")


@pytest.mark.parametrize("tokens", [torch.tensor([4, 0]), torch.tensor([-1, 0]), torch.tensor([0.0, 1.0])])
def test_token_ids_out_of_range_or_not_integers(tokens):
    with pytest.raises(ValueError, match="draft_tokens"):
        verify(P.unsqueeze(0), Q.unsqueeze(0), tokens.unsqueeze(0))
    with pytest.raises(ValueError, match="token"):
        accept_probability(P, Q, tokens)
    with pytest.raises(ValueError, match="token"):
        dynamic_cluster(P, tokens, 2)


def test_unknown_residual_mode():
    for make in (lambda: RankBinnedClusters(3, "cluster-exact"), lambda: FixedPartition(torch.arange(4), "exact")):
        with pytest.raises(ValueError, match="residual mode"):
            make()


def test_rule_parameters_are_checked():
    for bad in (-1, 0, 1.5, True):
        with pytest.raises(ValueError, match="group_size"):
            DynamicClusters(bad)
        with pytest.raises(ValueError, match="group_size"):
            RankBinnedClusters(bad)
    with pytest.raises(ValueError, match="embeddings"):
        DynamicClusters(4, max_embedding_distance=0.5)
    with pytest.raises(ValueError, match="max_prob_gap"):
        DynamicClusters(4, max_prob_gap=-0.1)
    with pytest.raises(ValueError, match="embeddings"):
        DynamicClusters(4, embeddings=torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="rows"):
        dynamic_cluster(P, 0, 2, embeddings=torch.zeros(3, 2), max_embedding_distance=1.0)


def test_verify_takes_six_parameters_and_no_validate_flag():
    """The reference's verify: the window, the rule and one source of randomness; validation is
    always on (``check_window``), the engine (gsd_lab.engine) has the GPU options."""
    assert list(inspect.signature(verify).parameters) == ["p", "q", "draft_tokens", "rule", "uniforms", "generator"]


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
    rules = (None, labels, FixedPartition(labels, "cluster"), DynamicClusters(4, 0.5, 0.3, emb),
             DynamicClusters(4, rank_by="q"), RankBinnedClusters(2), RankBinnedClusters(2, "cluster"),
             Amplify(2.0, RankBinnedClusters(3)), Lantern(latent_neighbourhoods(emb, 3), 0.2))
    for rule in rules:
        verify(p, q, drafts, rule, uniforms=u)
        acceptance_rate(p[:, :4], q, rule)
        output_distribution(p[:, :4], q, rule)
        residual_distribution(p[:, :4], q, rule)
    tv_distance(p[:, :4], q)
    group_probs(p, labels)
    dynamic_cluster(p, drafts[:, :1].expand(3, 5), 4)
    for now, before in zip((p, q, drafts, u, labels, emb), originals):
        assert torch.equal(now, before)
