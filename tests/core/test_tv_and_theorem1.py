"""TV distance axioms, acceptance = 1 - TV, and Theorem 1 for partitions (proofs/01, 02, 05)."""

from __future__ import annotations

import torch
from core_strategies import coarsen, pairs_with_partition, prob_pairs, prob_vectors
from hypothesis import example, given
from hypothesis import strategies as st

from gsd_core import RankBinnedClusters, acceptance_rate, group_probs, tv_distance

TOL = 1e-12


@st.composite
def triples(draw):
    size = draw(st.integers(1, 8))
    return draw(prob_vectors(size)), draw(prob_vectors(size)), draw(prob_vectors(size))


@given(triples())
def test_tv_is_a_metric_on_the_simplex(pqr):
    p, q, r = pqr
    d_pq, d_qp = tv_distance(p, q).item(), tv_distance(q, p).item()
    assert d_pq == d_qp  # symmetry, exactly: |a - b| == |b - a|
    assert tv_distance(p, p).item() == 0.0
    assert (d_pq == 0) == torch.equal(p, q)  # identity of indiscernibles
    assert d_pq <= tv_distance(p, r).item() + tv_distance(r, q).item() + TOL  # triangle
    assert 0.0 <= d_pq <= 1.0 + TOL


@given(prob_pairs())
def test_tv_is_one_exactly_for_disjoint_supports(pq):
    p, q = pq
    disjoint = bool(((p > 0) & (q > 0)).sum() == 0)
    assert (abs(tv_distance(p, q).item() - 1.0) < TOL) == disjoint


@given(prob_pairs())
@example((torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])))
@example((torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.5])))
def test_standard_acceptance_rate_is_one_minus_tv(pq):
    p, q = (x.double() for x in pq)
    alpha = acceptance_rate(p, q).item()
    assert abs(alpha - (1.0 - tv_distance(p, q).item())) < TOL
    assert abs(alpha - torch.minimum(p, q).sum().item()) < TOL


@given(pairs_with_partition())
def test_theorem1_partition_never_lowers_acceptance(pqc):
    p, q, labels = pqc
    grouped = acceptance_rate(p, q, labels).item()
    assert grouped >= acceptance_rate(p, q).item() - TOL
    # ... and it equals 1 - TV(p', q') on the cluster masses.
    assert abs(grouped - (1.0 - tv_distance(group_probs(p, labels), group_probs(q, labels)).item())) < TOL


@given(prob_pairs())
def test_theorem1_singletons_give_standard_sd(pq):
    p, q = pq
    singletons = torch.arange(p.shape[-1])
    assert abs(acceptance_rate(p, q, singletons).item() - acceptance_rate(p, q).item()) < TOL


@given(prob_pairs())
def test_theorem1_one_cluster_always_accepts(pq):
    p, q = pq
    one = torch.zeros(p.shape[-1], dtype=torch.long)
    assert abs(acceptance_rate(p, q, one).item() - 1.0) < TOL


@given(pairs_with_partition(), st.data())
def test_theorem1_coarsening_never_lowers_acceptance(pqc, data):
    p, q, labels = pqc
    k = int(labels.max()) + 1
    merge = data.draw(st.lists(st.integers(0, k - 1), min_size=k, max_size=k), label="merge")
    coarse = coarsen(labels, merge)
    assert acceptance_rate(p, q, coarse).item() >= acceptance_rate(p, q, labels).item() - TOL


@given(prob_pairs(max_vocab=10), st.integers(1, 11))
def test_rank_binned_clusters_satisfy_theorem1(pq, group_size):
    p, q = pq
    rule = RankBinnedClusters(group_size)
    grouped = acceptance_rate(p, q, rule).item()
    assert grouped >= acceptance_rate(p, q).item() - TOL
    labels = rule.partition_labels(p)
    assert abs(grouped - acceptance_rate(p, q, labels).item()) < TOL  # it is that fixed partition


@given(prob_pairs(max_vocab=10), st.integers(1, 11))
def test_rank_bins_are_consecutive_runs_of_the_p_ranking(pq, group_size):
    p, _ = pq
    labels = RankBinnedClusters(group_size).partition_labels(p)
    order = sorted(range(p.shape[-1]), key=lambda y: (-p[y].item(), y))
    assert [labels[y].item() for y in order] == [r // group_size for r in range(p.shape[-1])]


def test_theorem1_batched_shapes():
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(3, 4, 9, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(4, 9, generator=gen, dtype=torch.float64), -1)
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 0])
    grouped, plain = acceptance_rate(p, q, labels), acceptance_rate(p, q)
    assert grouped.shape == plain.shape == (3, 4)
    assert bool((grouped >= plain - TOL).all())
