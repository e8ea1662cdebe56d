"""What one window of the engine's ``verify`` costs, for every rule the decoding loop can call:
top-level aten ops (a kernel launch or a view each on a GPU) and host syncs, counted by
torch.profiler (deterministic, unlike times), on the loop's window (L = 16 drafts and the bonus
row, V = 4096 after top-k 200), for random and converged drafts.

Measured: with ``validate=False`` no host sync for any rule, except one for dynamic clusters
ranked by p without ``support`` (the widest support it ranks); with validation exactly one
(everything read back together). Ops: at most BUDGETS[rule] = (the loop's call with the support,
without it, validated), today's counts (torch 2.13, CPU), so any op added to a path fails here.
The fused core before the split counted 72 / 74 / 80 for ``DynamicClusters(14)`` and 39 / 39 / 46
for SD; it synced 1 to 7 times for rank bins and labels, and its test covered two rules.
"""

from __future__ import annotations

import pytest
import torch

from gsd_core import Amplify, DynamicClusters, FixedPartition, Lantern, LatentNeighbourhoods, RankBinnedClusters
import gsd_lab.rules  # noqa: F401 (the clusters' registered paths, whose costs are pinned here)
from gsd_lab.engine import uses_support, verify
from gsd_lab.engine.profiling import ops_and_syncs

VOCAB, WINDOW, TOP_K = 4096, 16, 200


def _window(kind: str, seed: int):
    gen = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(WINDOW + 1, VOCAB, generator=gen, dtype=torch.float64)
    kth = torch.topk(logits, TOP_K, dim=-1).values[:, -1:]
    p = torch.softmax(logits.masked_fill(logits < kth, -torch.inf), -1)
    if kind == "random":  # one-hot q on a uniform draw (SJD's random initialisation)
        drafts = torch.randint(0, VOCAB, (WINDOW,), generator=gen)
        q = torch.nn.functional.one_hot(drafts, VOCAB).double()
    else:  # converged: q = p, every draft accepted
        q = p[:WINDOW]
        drafts = torch.multinomial(q, 1, generator=gen).squeeze(-1)
    return p, q, drafts, torch.topk(p[:WINDOW], TOP_K, dim=-1).indices


def _rules() -> dict[str, object]:
    emb = torch.randn(VOCAB, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    labels = torch.arange(VOCAB) % 300
    ring = (torch.arange(VOCAB).unsqueeze(-1) + torch.arange(20)) % VOCAB  # B_20(x): x and the next 19 ids
    hood = LatentNeighbourhoods(ring, torch.ones(VOCAB, 20, dtype=torch.bool))
    return {"sd": None, "gsd": DynamicClusters(14), "gsd-filters": DynamicClusters(14, 2.0, 0.1, emb),
            "gsd-rank-q": DynamicClusters(14, rank_by="q"), "bins": RankBinnedClusters(14),
            "bins-cluster": RankBinnedClusters(14, "cluster"), "labels": FixedPartition(labels),
            "labels-cluster": FixedPartition(labels, "cluster"), "lantern": Lantern(hood, 0.1),
            "amplify": Amplify(2.0), "amplify-gsd": Amplify(1.5, DynamicClusters(14))}


RULES = _rules()
BUDGETS = {"sd": (36, 36, 43), "gsd": (69, 72, 77), "gsd-filters": (92, 95, 100), "gsd-rank-q": (56, 56, 63),
           "bins": (49, 49, 56), "bins-cluster": (67, 67, 74), "labels": (54, 54, 61),
           "labels-cluster": (77, 77, 84), "lantern": (50, 50, 57), "amplify": (37, 37, 44),
           "amplify-gsd": (70, 73, 78)}  # 2 fewer each since resolve_window's zero q row


@pytest.mark.parametrize("kind", ["random", "converged"])
@pytest.mark.parametrize("name", list(RULES))
def test_every_rule_has_bounded_ops_and_the_measured_syncs(name, kind):
    """As the decoding loop calls it (uniforms drawn inside from a generator, validate=False, the
    adapter's support where the rule uses it), without the support, and validated."""
    p, q, drafts, support = _window(kind, seed=3)
    rule = RULES[name]
    generator = torch.Generator().manual_seed(0)
    calls = {"loop": {"validate": False, "support": support}, "no-support": {"validate": False}, "validated": {}}
    syncs_wanted = {"loop": 0, "no-support": int(uses_support(rule)), "validated": 1}
    for (call_name, options), budget in zip(calls.items(), BUDGETS[name]):
        def call():
            return verify(p, q, drafts, rule, generator=generator, **options)

        call()  # warm the cached index tensors, as a decoding loop would
        ops, syncs = ops_and_syncs(call)
        assert ops <= budget, (call_name, ops, budget)
        assert syncs == syncs_wanted[call_name], (call_name, syncs)
    if kind == "converged" and name in ("sd", "gsd", "bins", "labels"):
        assert int(verify(p, q, drafts, rule, generator=generator).num_accepted) == WINDOW


def test_the_counter_sees_syncs():
    x = torch.ones(3)
    assert ops_and_syncs(lambda: (x.sum().item(), x.tolist(), x.nonzero()))[1] == 3
