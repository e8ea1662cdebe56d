"""GSD's distance-filter threshold: the quantile of squared embedding distances, computed once
at export and stored with the stand-in's weights (keyed by the embeddings' digest), equals the
computation bit for bit; a stored value for other embeddings is never used."""

from __future__ import annotations

import pytest
import torch

from gsd_lab.decode.methods import (
    FilterSettings,
    distance_quantile,
    distance_quantile_entry,
    embeddings_digest,
)


def test_chunked_pairs_equal_one_difference_bit_for_bit():
    """Above 4096 rows: 10^6 random pairs, summed in chunks of rows; the same bits as one
    [10^6, D] difference (the computation before chunking)."""
    emb = torch.randn(5000, 24, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randint(5000, (2, 1_000_000), generator=generator)
    whole = (emb[a[a != b]] - emb[b[a != b]]).square().sum(-1)
    for q in (0.1, 0.9):
        assert distance_quantile(emb, q) == float(torch.quantile(whole.float(), q))
    small = emb[:300]  # all pairs below 4096 rows
    upper = torch.triu(torch.ones(300, 300, dtype=torch.bool), 1)
    pairs = torch.cdist(small, small).square()[upper]
    assert distance_quantile(small, 0.9) == float(torch.quantile(pairs.float(), 0.9))


def test_known_values_are_used_only_for_their_embeddings():
    emb = torch.randn(200, 8, generator=torch.Generator().manual_seed(1)).double()  # float32 values
    tokens = torch.arange(150)
    entry = distance_quantile_entry(emb, tokens, 0.9)
    assert entry["value"] == FilterSettings().resolve(emb, tokens)
    fake = {**entry, "value": 123.0}
    assert FilterSettings().resolve(emb, tokens, known=[fake]) == 123.0  # looked up, not recomputed
    assert FilterSettings().resolve(emb.float(), tokens, known=[fake]) == 123.0  # same values
    other = emb.clone()
    other[0, 0] += 1e-12
    assert FilterSettings().resolve(other, tokens, known=[fake]) == entry["value"]
    assert FilterSettings().resolve(emb, torch.arange(149), known=[fake]) != 123.0
    assert FilterSettings(distance_quantile=0.5).resolve(emb, tokens, known=[fake]) != 123.0
    assert FilterSettings().resolve(emb, tokens, seed=1, known=[fake]) == entry["value"]
    assert FilterSettings(max_embedding_distance=2.0).resolve(emb, tokens, known=[fake]) == 2.0
    # the shape counts, not only the bytes
    assert embeddings_digest(emb[:2]) != embeddings_digest(emb[:2].T.contiguous())


@pytest.fixture(scope="module")
def standin():
    from gsd_lab.standin.adapter import load_standin

    return load_standin()


def test_stored_standin_quantile_equals_the_computation(standin):
    """The manifest's value is the one the computation gives on these weights, bit for bit."""
    stored = standin.distance_quantiles
    assert len(stored) == 1 and stored[0]["quantile"] == FilterSettings().distance_quantile
    fresh = distance_quantile_entry(standin.embeddings, standin.allowed_tokens.cpu(), 0.9)
    assert fresh == stored[0]
    assert FilterSettings().resolve(standin.embeddings, standin.allowed_tokens.cpu(),
                                    known=stored) == fresh["value"]


def test_generate_gives_the_same_tokens_with_the_stored_quantile(standin):
    """The quick path of ``generate`` (the stored quantile) decodes the same tokens and NFE as
    the path that recomputes it (64 tokens of a GSD G = 25 decode, class brick)."""
    from dataclasses import replace

    from gsd_lab.experiments.image_model import standin_image_model
    from gsd_lab.experiments.runs import generate_one
    from gsd_lab.decode.methods import DecodingMethod, ClusterAcceptance

    model = replace(standin_image_model(standin, with_metrics=False), num_tokens=64, decode=None)
    method = DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=25))
    stored = standin.distance_quantiles
    quick = method.resolve(standin, model_name="standin")
    try:
        standin.distance_quantiles = []
        slow = method.resolve(standin, model_name="standin")
    finally:
        standin.distance_quantiles = stored
    assert quick.clusters.max_embedding_distance == slow.clusters.max_embedding_distance
    assert quick.clusters.max_embedding_distance == stored[0]["value"]
    a, _ = generate_one(model, quick, "brick", 0)
    b, _ = generate_one(model, slow, "brick", 0)
    assert a.nfe == b.nfe and torch.equal(a.tokens, b.tokens)
