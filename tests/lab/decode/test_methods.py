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
from gsd_lab.decode.methods import AmplifyAcceptance, ClusterAcceptance, LanternAcceptance, SDAcceptance
from gsd_lab.rules.clusters import ReleaseDistanceClusters

M = DecodingMethod
A, C, L = AmplifyAcceptance, ClusterAcceptance, LanternAcceptance
GSD = dict(kind="gsd", acceptance=C())

BAD = {
    "unknown kind": (lambda: M("beam"), "unknown method kind 'beam'"),
    "window 0": (lambda: M("sjd", window=0), "window must be an int >= 1"),
    "window bool": (lambda: M("sjd", window=True), "window must be an int >= 1"),
    "window float": (lambda: M("sjd", window=4.0), "window must be an int >= 1"),
    "unknown init": (lambda: M("sjd", init="zeros"), "unknown init 'zeros'"),
    "unknown draft": (lambda: M("sjd", draft="telepathic"), "unknown draft 'telepathic'"),
    "unknown residual": (lambda: M("sjd", residual="bogus"), "unknown residual 'bogus'"),
    "scale 0": (lambda: M("sjd", acceptance=A(0.0)), "Amplify's scale must be a finite number > 0"),
    "scale inf": (lambda: M("sjd", acceptance=A(float("inf"))), "Amplify's scale must be a finite number"),
    "scale nan": (lambda: M("sjd", acceptance=A(float("nan"))), "Amplify's scale must be a finite number"),
    "scale 1": (lambda: M("sjd", acceptance=A(1.0)), "Amplify's scale 1 is the rule itself"),
    "scale for AR": (lambda: M("ar", acceptance=A(2.0)), "AR has no acceptance test"),
    "clusters for SJD": (lambda: M("sjd", acceptance=C()), "ClusterAcceptance belongs to method 'gsd'"),
    "clusters for AR": (lambda: M("ar", acceptance=C(group_size=3)), "belongs to method 'gsd'"),
    "GSD with SD": (lambda: M("gsd", acceptance=SDAcceptance()), "method 'gsd' verifies clusters"),
    "unknown clusters": (lambda: M("gsd", acceptance=C("kmeans")), "unknown clusters 'kmeans'"),
    "G 0": (lambda: M("gsd", acceptance=C(group_size=0)), "group_size (G, tokens per cluster) must be an int >= 1"),
    "float G": (lambda: M("gsd", acceptance=C(group_size=2.5)), "group_size (G, tokens per cluster) must be an int >= 1"),
    "cluster residual, dynamic": (lambda: M(**GSD, residual="cluster"), "residual 'cluster' needs a partition"),
    "cluster residual, SJD": (lambda: M("sjd", residual="cluster"), "residual 'cluster' needs a partition"),
    "filters without a filter": (lambda: M("gsd", acceptance=C("rank-binned"), filters=FilterSettings()),
                                 "filters apply to clusters"),
    "filters not settings": (lambda: M(**GSD, filters={"max_prob_gap": 0.1}), "filters must be a FilterSettings"),
    "acceptance not a spec": (lambda: M("sjd", acceptance="sd"), "acceptance must be a gsd_lab.decode.acceptance spec"),
    "negative lantern k": (lambda: M("sjd", acceptance=L(-1)), "LANTERN's k (tokens per neighbourhood) must be an int >= 1"),
    "delta above 1": (lambda: M("sjd", acceptance=L(5, 1.5)), "LANTERN's delta must be a number in"),
    "k 0": (lambda: M("sjd", acceptance=L(0, 0.1)), "LANTERN's k (tokens per neighbourhood) must be an int >= 1"),
    "LANTERN on AR": (lambda: M("ar", acceptance=L(5)), "use method 'sjd'"),
    "LANTERN amplified": (lambda: M("sjd", acceptance=A(2.0, L(5))), "replaces SJD's acceptance test"),
    "unknown preset": (lambda: M("sjd", preset="fast"), "unknown preset 'fast'"),
    "release window": (lambda: M("sjd", window=16, preset="release"), "preset 'release' fixes the window at 15"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_every_bad_combination_is_refused_by_name(case):
    build, message = BAD[case]
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


@pytest.mark.parametrize("fields, spec", [
    (dict(group_size=50), "acceptance=ClusterAcceptance(group_size=50)"),
    (dict(clusters="static", group_size=8), "acceptance=ClusterAcceptance(clusters='static', group_size=8)"),
    (dict(lantern_k=1001, lantern_delta=0.1), "acceptance=LanternAcceptance(k=1001, delta=0.1)"),
    (dict(acceptance_scale=2.0), "acceptance=AmplifyAcceptance(scale=2.0)"),
    (dict(budget=0.5, budget_measure="w1"), "acceptance=BudgetAcceptance(budget=0.5, measure='w1')"),
])
def test_a_rule_s_field_given_to_the_method_names_its_spec(fields, spec):
    with pytest.raises(TypeError, match=re.escape(spec)):
        DecodingMethod("gsd", **fields)


def test_a_flat_record_at_its_defaults_is_told_to_leave_them_out():
    """A record in the old flat form names the form, and hints only the fields not at its
    defaults: AmplifyAcceptance(scale=1.0) or ClusterAcceptance(group_size=0) would be refused."""
    with pytest.raises(TypeError) as error:
        DecodingMethod("sjd", clusters=None, group_size=0, acceptance_scale=1.0, lantern_k=0)
    assert "old flat form" in str(error.value) and "leave them out" in str(error.value)
    assert "acceptance=" not in str(error.value)
    with pytest.raises(ValueError) as error:
        DecodingMethod.from_dict({"kind": "gsd", "group_size": 8, "acceptance_scale": 1.0})
    assert "write acceptance=ClusterAcceptance(group_size=8)" in str(error.value)
    assert "AmplifyAcceptance" not in str(error.value)


def test_an_unknown_field_is_named():
    with pytest.raises(TypeError, match=re.escape("unknown fields ['beta']")):
        DecodingMethod("sjd", beta=1)


def test_each_kind_has_its_default_rule():
    assert DecodingMethod("gsd").acceptance == ClusterAcceptance("dynamic", 25)
    assert DecodingMethod("sjd").acceptance == DecodingMethod("ar").acceptance == SDAcceptance()
    assert DecodingMethod("gsd") == DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=25))


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
    with pytest.raises(ValueError, match=re.escape("unknown fields ['beta']")):
        DecodingMethod.from_dict({"kind": "sjd", "beta": 1})
    with pytest.raises(ValueError, match="window"):
        DecodingMethod.from_dict({"kind": "sjd", "window": 0})
    with pytest.raises(ValueError, match="a dict with a 'kind'"):
        DecodingMethod.from_dict({"window": 4})
    assert DecodingMethod.from_dict({"kind": "sjd"}) == DecodingMethod("sjd")


def test_the_key_is_stable_and_follows_every_field():
    # Pinned: a change here changes every recorded run identity (evaluate refuses old runs).
    paper = DecodingMethod("gsd").for_model("lumina-mgpt-7b-768")
    assert paper.key == (
        '{"acceptance":{"clusters":"dynamic","group_size":25,"rule":"clusters"},"candidates":1,'
        '"draft":"independent","filters":{"distance_quantile":0.9,"max_embedding_distance":0.5,'
        '"max_prob_gap":0.15},"init":"random","kind":"gsd","preset":"default","residual":"token",'
        '"tree":null,"verifier":"token","window":16}')
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
    def rule(clusters="dynamic", **fields):
        method = DecodingMethod("gsd", acceptance=ClusterAcceptance(clusters, 4), **fields)
        return method.resolve(adapter).clusters

    paper = rule(filters=FilterSettings(max_prob_gap=0.1, max_embedding_distance=2.0))
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
    def rule(kind="gsd", acceptance=None, **fields):
        return DecodingMethod(kind, acceptance=acceptance, **fields).resolve(adapter).rule

    assert rule("sjd") == SD() and rule("ar") == SD()
    assert rule("sjd", A(2)) == Amplify(2.0, SD())
    assert rule(acceptance=C("rank-binned", 3)) == RankBinnedClusters(3)
    assert rule(acceptance=C("rank-binned", 3), residual="cluster") == RankBinnedClusters(3, "cluster")
    amplified = rule(acceptance=A(1.5, C("dynamic-nofilter", 3)))
    assert amplified == Amplify(1.5, DynamicClusters(3))
    assert isinstance(rule("sjd", L(3, 0.2)), Lantern)


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
    with pytest.raises(ValueError, match="lantern must be given exactly for a LanternAcceptance"):
        ResolvedMethod(DecodingMethod("sjd"), lantern=lantern)
    with pytest.raises(ValueError, match="not the method's"):
        ResolvedMethod(DecodingMethod("sjd", acceptance=LanternAcceptance(k=4, delta=0.2)), lantern=lantern)
    with pytest.raises(ValueError, match="not the method's"):
        ResolvedMethod(DecodingMethod("sjd", acceptance=LanternAcceptance(k=5, delta=0.1)), lantern=lantern)
    with pytest.raises(ValueError, match="DecodingMethod"):
        ResolvedMethod("sjd")

