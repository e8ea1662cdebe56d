"""``verify`` on one window runs a bounded number of top-level aten ops and host syncs (issue 12:
at most 80 ops and 3 syncs, validation included), for random and converged drafts alike, and
``stop_early`` repeats no pass. Counts from torch.profiler are deterministic, unlike times."""

from __future__ import annotations

import pytest
import torch

from gsd_core import DynamicClusters, verify
from gsd_lab.profiling import ops_and_syncs

MAX_OPS, MAX_SYNCS = 80, 3
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
    return p, q, drafts, torch.rand(WINDOW + 1, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("kind", ["random", "converged"])
@pytest.mark.parametrize("rule", [None, DynamicClusters(14)], ids=["sjd", "gsd"])
@pytest.mark.parametrize("options", [{}, {"validate": False}, {"stop_early": True, "validate": False}],
                         ids=["default", "no-validate", "early-no-validate"])
@pytest.mark.parametrize("randomness", ["generator", "uniforms"])
def test_one_window_has_bounded_ops_and_syncs(kind, rule, options, randomness):
    """The window the decoding loop verifies (L drafts and the bonus row), with the uniforms
    drawn inside from a generator as the loop does, or given."""
    p, q, drafts, u = _window(kind, seed=3)
    source = {"generator": torch.Generator().manual_seed(0)} if randomness == "generator" else {"uniforms": u}
    call = lambda: verify(p, q, drafts, rule, **source, **options)  # noqa: E731
    call()  # warm caches (cached aranges) as a decoding loop would
    ops, syncs = ops_and_syncs(call)
    assert ops <= MAX_OPS, ops
    assert syncs <= MAX_SYNCS, syncs
    if kind == "converged":
        assert int(call().num_accepted) == WINDOW


def test_stop_early_costs_no_more_than_the_full_evaluation():
    p, q, drafts, u = _window("converged", seed=4)
    rule = DynamicClusters(14)
    full = ops_and_syncs(lambda: verify(p, q, drafts, rule, uniforms=u))
    early = ops_and_syncs(lambda: verify(p, q, drafts, rule, uniforms=u, stop_early=True))
    assert early[0] <= full[0] + 2 and early[1] == full[1]  # one pass: only the NaN masking added


def test_the_counter_sees_syncs():
    x = torch.ones(3)
    assert ops_and_syncs(lambda: (x.sum().item(), x.tolist(), x.nonzero()))[1] == 3


@pytest.mark.parametrize("kind", ["random", "converged"])
def test_a_given_support_needs_no_sync_and_fewer_ops(kind):
    """``support=`` (the top-k ids): without validation no host sync at all and fewer ops than
    the default path; with it, one fused read-back (its checks add one O(N V) pass)."""
    p, q, drafts, u = _window(kind, seed=5)
    support = torch.topk(p[:WINDOW], TOP_K, dim=-1).indices
    rule = DynamicClusters(14)
    plain = ops_and_syncs(lambda: verify(p, q, drafts, rule, uniforms=u, validate=False))
    given = ops_and_syncs(lambda: verify(p, q, drafts, rule, uniforms=u, validate=False, support=support))
    assert given[1] == 0 and given[0] < plain[0] <= MAX_OPS, (given, plain)
    checked = ops_and_syncs(lambda: verify(p, q, drafts, rule, uniforms=u, support=support))
    assert checked[1] == 1, checked


@pytest.mark.parametrize("kind", ["random", "converged"])
def test_the_default_gsd_call_syncs_once(kind):
    """The support size the rank windows need is read with the validation: one read-back."""
    p, q, drafts, u = _window(kind, seed=6)
    assert ops_and_syncs(lambda: verify(p, q, drafts, DynamicClusters(14), uniforms=u))[1] == 1
