"""gsd_lab.decode.methods: every bad combination of a decoding method's fields is refused with a message
naming the problem; the spec survives JSON; its key is stable (run identity); resolving builds
the gsd_core rule objects, once where expensive. That ``generate`` with a spec emits the tokens
it did before the spec existed is pinned by test_decoding.py and test_decoding_lossless.py."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import torch

from gsd_core import SD, Amplify, DynamicClusters, FixedPartition, Lantern, RankBinnedClusters
from gsd_lab.decode.methods import DRAFTS, DecodingMethod, FilterSettings, ResolvedMethod
from gsd_lab.decode.methods import AmplifyAcceptance, ClusterAcceptance, LanternAcceptance
from gsd_lab.decode.presets import ReleaseDistanceClusters

GSD = dict(kind="gsd", clusters="dynamic", group_size=25)

BAD = {
    "unknown kind": (dict(kind="beam"), "unknown method kind 'beam'"),
    "window 0": (dict(kind="sjd", window=0), "window must be an int >= 1"),
    "window bool": (dict(kind="sjd", window=True), "window must be an int >= 1"),
    "window float": (dict(kind="sjd", window=4.0), "window must be an int >= 1"),
    "unknown init": (dict(kind="sjd", init="zeros"), "unknown init 'zeros'"),
    "unknown draft": (dict(kind="sjd", draft="telepathic"), "unknown draft 'telepathic'"),
    "unknown residual": (dict(kind="sjd", residual="bogus"), "unknown residual 'bogus'"),
    "scale 0": (dict(kind="sjd", acceptance_scale=0.0), "acceptance_scale must be a finite number > 0"),
    "scale inf": (dict(kind="sjd", acceptance_scale=float("inf")), "acceptance_scale must be a finite number"),
    "scale nan": (dict(kind="sjd", acceptance_scale=float("nan")), "acceptance_scale must be a finite number"),
    "scale for AR": (dict(kind="ar", acceptance_scale=2.0), "AR has no acceptance test"),
    "clusters for SJD": (dict(kind="sjd", clusters="dynamic"), "belong to method 'gsd'"),
    "group size for AR": (dict(kind="ar", group_size=3), "belong to method 'gsd'"),
    "GSD without clusters": (dict(kind="gsd", group_size=3), "method 'gsd' needs clusters"),
    "unknown clusters": (dict(GSD, clusters="kmeans"), "unknown clusters 'kmeans'"),
    "G 0": (dict(GSD, group_size=0), "group_size (G, tokens per cluster) must be an int >= 1"),
    "float G": (dict(GSD, group_size=2.5), "group_size (G, tokens per cluster) must be an int >= 1"),
    "cluster residual, dynamic": (dict(GSD, residual="cluster"), "residual 'cluster' needs a partition"),
    "cluster residual, SJD": (dict(kind="sjd", residual="cluster"), "residual 'cluster' needs a partition"),
    "filters without a filter": (dict(GSD, clusters="rank-binned", filters=FilterSettings()),
                                 "filters apply to clusters"),
    "filters not settings": (dict(GSD, filters={"max_prob_gap": 0.1}), "filters must be a FilterSettings"),
    "negative lantern_k": (dict(kind="sjd", lantern_k=-1), "lantern_k must be an int >= 0"),
    "delta above 1": (dict(kind="sjd", lantern_k=5, lantern_delta=1.5), "lantern_delta must be a number in"),
    "delta without k": (dict(kind="sjd", lantern_delta=0.1), "needs lantern_k > 0"),
    "LANTERN on GSD": (dict(GSD, lantern_k=5, lantern_delta=0.1), "use method 'sjd'"),
    "LANTERN amplified": (dict(kind="sjd", acceptance_scale=2.0, lantern_k=5), "use method 'sjd'"),
    "LANTERN on AR": (dict(kind="ar", lantern_k=5), "use method 'sjd'"),
    "unknown preset": (dict(kind="sjd", preset="fast"), "unknown preset 'fast'"),
    "release window": (dict(kind="sjd", window=16, preset="release"), "preset 'release' fixes the window at 15"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_every_bad_combination_is_refused_by_name(case):
    fields, message = BAD[case]
    with pytest.raises(ValueError, match=re.escape(message)):
        DecodingMethod(**fields)


@pytest.mark.parametrize("fields, message", [
    (dict(max_prob_gap=-0.1), "max_prob_gap"),
    (dict(max_embedding_distance=-1.0), "max_embedding_distance"),
    (dict(distance_quantile=0.0), "distance_quantile"),
    (dict(distance_quantile=1.5), "distance_quantile"),
])
def test_bad_filter_settings_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        FilterSettings(**fields)


VALID = [
    DecodingMethod("ar"),
    DecodingMethod("sjd", window=8, init="repeat_row"),
    DecodingMethod("sjd", acceptance=AmplifyAcceptance(scale=3)),
    DecodingMethod("sjd", acceptance=LanternAcceptance(k=1001, delta=0.1)),
    DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=25), filters=FilterSettings(max_embedding_distance=0.5)),
    DecodingMethod("gsd", acceptance=ClusterAcceptance(clusters="dynamic-gap", group_size=10)),
    DecodingMethod("gsd", acceptance=AmplifyAcceptance(scale=1.5, inner=ClusterAcceptance(clusters="rank-binned", group_size=50)), residual="cluster"),
    DecodingMethod("gsd", acceptance=ClusterAcceptance(clusters="static", group_size=8), draft=DRAFTS[0]),
    DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=14), window=15, preset="release"),
    DecodingMethod("ar", preset="release"),  # AR keeps any window
]


@pytest.mark.parametrize("method", VALID, ids=lambda m: m.key)
def test_json_round_trip(method):
    data = json.loads(json.dumps(method.to_dict()))
    again = DecodingMethod.from_dict(data)
    assert again == method and again.key == method.key and hash(again) == hash(method)


def test_from_dict_refuses_unknown_fields_and_validates():
    with pytest.raises(ValueError, match=r"unknown decoding method fields \['beta'\]"):
        DecodingMethod.from_dict({"kind": "sjd", "beta": 1})
    with pytest.raises(ValueError, match="window"):
        DecodingMethod.from_dict({"kind": "sjd", "window": 0})
    assert DecodingMethod.from_dict({"kind": "sjd"}) == DecodingMethod("sjd")


def test_the_key_is_stable_and_follows_every_field():
    # Pinned: a change here changes every recorded run identity (evaluate refuses old runs).
    paper = DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=25)).for_model("lumina-mgpt-7b-768")
    assert paper.key == (
        '{"acceptance_scale":1.0,"clusters":"dynamic","draft":"independent","filters":{"distance_quantile":0.9,'
        '"max_embedding_distance":0.5,"max_prob_gap":0.15},"group_size":25,"init":"random","kind":"gsd",'
        '"lantern_delta":0.0,"lantern_k":0,"preset":"default","residual":"token","window":16}')
    # Numbers are normalised: an int scale and its float are one method.
    assert DecodingMethod("sjd", acceptance=AmplifyAcceptance(scale=2)).key == DecodingMethod("sjd", acceptance=AmplifyAcceptance(scale=2.0)).key
    keys = {m.key for m in VALID} | {m.key for m in (DecodingMethod("sjd", window=15), DecodingMethod("sjd"))}
    assert len(keys) == len(VALID) + 2


def test_filters_default_to_the_model_s():
    gsd = DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=25))
    assert gsd.filters is None
    assert gsd.for_model("lumina-mgpt-7b-512").filters == FilterSettings(max_embedding_distance=0.5)
    assert gsd.for_model("standin").filters == FilterSettings()
    own = FilterSettings(max_prob_gap=0.05)
    assert DecodingMethod(**GSD, filters=own).for_model("lumina-mgpt-7b-512").filters == own
    rank = DecodingMethod("gsd", acceptance=ClusterAcceptance(clusters="rank-binned", group_size=5))
    assert rank.for_model("lumina-mgpt-7b-512") == rank  # no filters to fill


@pytest.fixture
def adapter():
    """What ``resolve`` reads from a CausalLMAdapter, on 12 tokens (ids 2..11 are image codes)."""
    embeddings = torch.randn(12, 3, generator=torch.Generator().manual_seed(0))
    return SimpleNamespace(embeddings=embeddings, allowed_tokens=torch.arange(2, 12), vocab_size=12,
                           device=torch.device("cpu"))


def test_resolve_builds_each_kind_s_rule(adapter):
    def rule(**fields):
        return DecodingMethod("gsd", group_size=4, **fields).resolve(adapter).clusters

    paper = rule(clusters="dynamic", filters=FilterSettings(max_prob_gap=0.1, max_embedding_distance=2.0))
    assert isinstance(paper, DynamicClusters) and (paper.group_size, paper.max_prob_gap) == (4, 0.1)
    assert paper.max_embedding_distance == 2.0 and paper.embeddings is adapter.embeddings
    quantile = rule(clusters="dynamic-distance")
    assert quantile.max_prob_gap is None and quantile.max_embedding_distance == FilterSettings().resolve(
        adapter.embeddings, adapter.allowed_tokens)
    gap = rule(clusters="dynamic-gap")
    assert gap.max_prob_gap == 0.15 and gap.max_embedding_distance is None
    assert rule(clusters="dynamic-q").rank_by == "q"
    assert isinstance(rule(clusters="rank-binned"), RankBinnedClusters)
    static = rule(clusters="static", residual="cluster")
    assert isinstance(static, FixedPartition) and static.labels.shape == (12,)
    assert static.labels[0] != static.labels[1]  # ids outside the image codes are singletons
    release = rule(clusters="dynamic", window=15, preset="release",
                   filters=FilterSettings(max_prob_gap=0.1, max_embedding_distance=2.0))
    assert isinstance(release, ReleaseDistanceClusters) and release.max_prob_gap == 0.1
    assert release.adjacency.shape == (12, 12)


def test_the_resolved_rule_is_the_one_verify_takes(adapter):
    def rule(kind="gsd", **fields):
        return DecodingMethod(kind, **fields).resolve(adapter).rule

    assert rule("sjd") == SD() and rule("ar") == SD()
    assert rule("sjd", acceptance_scale=2) == Amplify(2.0, SD())
    assert rule(clusters="rank-binned", group_size=3) == RankBinnedClusters(3)
    assert rule(clusters="rank-binned", group_size=3, residual="cluster") == RankBinnedClusters(3, "cluster")
    amplified = rule(clusters="dynamic-nofilter", group_size=3, acceptance_scale=1.5)
    assert amplified == Amplify(1.5, DynamicClusters(3))
    assert isinstance(rule("sjd", lantern_k=3, lantern_delta=0.2), Lantern)


def test_resolve_builds_lantern_s_table_once_per_k(adapter):
    cache: dict = {}
    first = DecodingMethod("sjd", acceptance=LanternAcceptance(k=4, delta=0.1)).resolve(adapter, cache=cache)
    second = DecodingMethod("sjd", acceptance=LanternAcceptance(k=4, delta=0.3)).resolve(adapter, cache=cache)
    assert isinstance(first.lantern, Lantern) and (first.lantern.delta, second.lantern.delta) == (0.1, 0.3)
    assert first.lantern.neighbourhoods is second.lantern.neighbourhoods
    assert first.lantern.neighbourhoods.k == 4
    uncached = DecodingMethod("sjd", acceptance=LanternAcceptance(k=4, delta=0.1)).resolve(adapter)
    assert torch.equal(uncached.lantern.neighbourhoods.index, first.lantern.neighbourhoods.index)
    other = torch.randn(12, 3, generator=torch.Generator().manual_seed(1))
    moved = DecodingMethod("sjd", acceptance=LanternAcceptance(k=4, delta=0.1)).resolve(adapter, embeddings=other)
    assert not torch.equal(moved.lantern.neighbourhoods.index, first.lantern.neighbourhoods.index)


def test_a_resolved_method_must_match_its_spec(adapter):
    lantern = DecodingMethod("sjd", acceptance=LanternAcceptance(k=4, delta=0.1)).resolve(adapter).lantern
    with pytest.raises(ValueError, match="clusters must be given exactly for method 'gsd'"):
        ResolvedMethod(DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=3)))
    with pytest.raises(ValueError, match="clusters must be given exactly"):
        ResolvedMethod(DecodingMethod("sjd"), clusters=DynamicClusters(3))
    with pytest.raises(ValueError, match="lantern must be given exactly when lantern_k > 0"):
        ResolvedMethod(DecodingMethod("sjd"), lantern=lantern)
    with pytest.raises(ValueError, match="not the method's"):
        ResolvedMethod(DecodingMethod("sjd", acceptance=LanternAcceptance(k=4, delta=0.2)), lantern=lantern)
    with pytest.raises(ValueError, match="not the method's"):
        ResolvedMethod(DecodingMethod("sjd", acceptance=LanternAcceptance(k=5, delta=0.1)), lantern=lantern)
    with pytest.raises(ValueError, match="DecodingMethod"):
        ResolvedMethod("sjd")

