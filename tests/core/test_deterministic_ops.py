"""gsd_core is deterministic by construction: none of its computations use an op whose result
depends on the order of parallel accumulation (scatter_add / index_add, nondeterministic on
CUDA) or picks members by ``topk`` on ties. Checked on the ops torch.profiler records for every
rule's window, exact laws and residual; rank-bin masses are sums of the sorted row reshaped."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from gsd_core import (
    Amplify,
    DynamicClusters,
    FixedPartition,
    Lantern,
    RankBinnedClusters,
    acceptance_rate,
    group_probs,
    latent_neighbourhoods,
    output_distribution,
    residual_distribution,
    verify,
    verify_block,
)

ORDER_DEPENDENT = ("scatter_add", "index_add", "index_put", "index_reduce", "scatter_reduce", "topk", "put_")


def _rules(vocab: int):
    emb = torch.randn(vocab, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    labels = torch.arange(vocab) % 4
    return {"sd": None, "dynamic": DynamicClusters(5, 2.0, 0.1, emb), "dynamic-q": DynamicClusters(4, rank_by="q"),
            "bins": RankBinnedClusters(3), "bins-cluster": RankBinnedClusters(3, "cluster"),
            "labels-cluster": FixedPartition(labels, "cluster"), "amplify": Amplify(2.0, RankBinnedClusters(3)),
            "lantern": Lantern(latent_neighbourhoods(emb, 3), 0.2)}


@pytest.mark.parametrize("name", list(_rules(9)))
def test_no_order_dependent_ops(name):
    gen = torch.Generator().manual_seed(1)
    vocab, window = 9, 4
    p = torch.softmax(torch.randn(2, window + 1, vocab, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(2, window, vocab, generator=gen, dtype=torch.float64), -1)
    drafts = torch.randint(0, vocab, (2, window), generator=gen)
    rule = _rules(vocab)[name]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        verify(p, q, drafts, rule, generator=gen)
        acceptance_rate(p[:, :window], q, rule)
        output_distribution(p[:, :window], q, rule)
        residual_distribution(p[:, :window], q, rule)
        group_probs(p, torch.arange(vocab) % 3)
        if rule is None:  # block verification is SD's
            verify_block(p, q, drafts, generator=gen)
    used = {e.name for e in prof.events()}
    assert not [op for op in used if any(bad in op for bad in ORDER_DEPENDENT)], sorted(used)


def test_rank_bin_masses_are_the_sums_of_consecutive_ranks():
    gen = torch.Generator().manual_seed(2)
    w = torch.randint(0, 3, (4, 11), generator=gen).double() + (torch.arange(11) == 0)  # ties and zeros
    p, q = w / w.sum(-1, keepdim=True), torch.softmax(torch.randn(4, 11, generator=gen, dtype=torch.float64), -1)
    p_bins, q_bins, labels = RankBinnedClusters(3).cluster_masses(p, q)
    for i in range(4):
        order = sorted(range(11), key=lambda y: (-p[i, y].item(), y))
        for b in range(4):
            members = order[3 * b: 3 * b + 3]
            assert p_bins[i, b].item() == pytest.approx(p[i, members].sum().item(), abs=1e-15)
            assert q_bins[i, b].item() == pytest.approx(q[i, members].sum().item(), abs=1e-15)
            assert all(int(labels[i, y]) == b for y in members)
