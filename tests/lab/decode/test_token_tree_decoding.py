"""A token tree's forward (``gsd_lab.models.tree.forward_nodes``): every node's row equals a plain
forward of its path, and the cache kept for a path (``keep_nodes``) is a plain forward's
(proofs/16, causality); the method's tree option and its refusals; ``tree_step``'s candidates and
declared rows at every depth (the model's forward stubbed), depth >= 2 and the tail included."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

import gsd_lab.decode.loop as loop  # noqa: E402
from gsd_core import level_tree, verify_tree  # noqa: E402
from gsd_core.multidraft import one_hot, without_replacement_rows  # noqa: E402
from gsd_lab.decode.methods import DecodingMethod  # noqa: E402
from gsd_lab.decode.methods import ClusterAcceptance
from gsd_lab.models import tree  # noqa: E402
from gsd_lab.models.adapter import CausalLMAdapter  # noqa: E402
from test_multidraft_decoding import TOL, _keys, tiny_llama  # noqa: E402


def path_of(parent: torch.Tensor, node: int) -> list[int]:
    out = []
    while node >= 0:
        out.append(node)
        node = int(parent[node])
    return out[::-1]


@pytest.mark.parametrize("cfg", [None, 2.0])
def test_node_rows_and_rollback_equal_plain_forwards(cfg):
    model = tiny_llama()
    CausalLMAdapter(model, compute_dtype=torch.float64)  # casts the model in place
    uncond = torch.tensor([4]) if cfg else None
    prompt = torch.tensor([1, 2, 3])

    def fresh():
        adapter = CausalLMAdapter(model, cfg_scale=cfg)
        adapter.start(prompt, uncond)
        return adapter

    parent, _, _ = level_tree((2, 2), 1)
    tokens = torch.tensor([5, 8, 6, 9, 6, 9, 7, 7, 7, 7])
    adapter = fresh()
    p0, rows = tree.forward_nodes(adapter, prompt, tokens, parent)
    for node in range(tokens.numel()):
        path = path_of(parent, node)
        plain = fresh().forward(torch.cat([prompt, tokens[path]]), num_rows=len(path) + 1)
        assert (plain[0] - p0).abs().max() <= TOL
        assert (plain[-1] - rows[node]).abs().max() <= TOL
    kept = path_of(parent, 7)  # [0, 3, 7]: depth 1's first, depth 2's second, then the tail
    tree.keep_nodes(adapter, kept)
    ref = fresh()
    ref.forward(torch.cat([prompt, tokens[kept]]))
    ours, theirs = _keys(adapter.cache), _keys(ref.cache)
    assert len(ours) == len(theirs) > 0
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and (a - b).abs().max() <= TOL
    assert adapter.seq_len == ref.seq_len
    with pytest.raises(ValueError, match="forward_tree"):
        tree.keep_nodes(adapter, [0])


def test_keep_nodes_needs_a_path():
    adapter = CausalLMAdapter(tiny_llama(), compute_dtype=torch.float64)
    adapter.start(torch.tensor([1, 2]))
    parent, _, _ = level_tree((2, 2), 0)
    tree.forward_nodes(adapter, torch.tensor([1, 2]), torch.tensor([3, 4, 5, 6, 5, 6]), parent)
    with pytest.raises(ValueError, match="path"):
        tree.keep_nodes(adapter, [1, 2])  # node 2's parent is node 0


def test_tree_option():
    method = DecodingMethod("sjd", window=4, tree=[2, 2])
    assert method.tree == (2, 2) and method.tree_shape == (2, 2) and method.branching
    assert DecodingMethod("sjd", candidates=3).tree_shape == (3,)
    assert not DecodingMethod("sjd").branching
    assert DecodingMethod.from_dict(method.to_dict()) == method
    assert DecodingMethod("sjd").to_dict()["tree"] is None
    with pytest.raises(ValueError, match="not both"):
        DecodingMethod("sjd", candidates=2, tree=(2, 2))
    with pytest.raises(ValueError, match="one branch"):
        DecodingMethod("sjd", tree=(1, 1))
    with pytest.raises(ValueError, match="deeper than the window"):
        DecodingMethod("sjd", window=2, tree=(2, 2, 2))
    assert DecodingMethod("sjd", window=3, tree=(2, 2, 2)).tree_shape == (2, 2, 2)
    with pytest.raises(ValueError, match="tree must be"):
        DecodingMethod("sjd", tree=(2, 0))
    with pytest.raises(ValueError, match="candidates"):
        DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=2), tree=(2, 2))


def test_side_tail_option():
    """A spine tree's side tail: kept by to_dict / from_dict, absent from other methods' dicts
    (their keys unchanged), refused without a tree or below 0."""
    method = DecodingMethod("sjd", window=4, tree=(3, 2), side_tail=1)
    assert DecodingMethod.from_dict(method.to_dict()) == method
    assert "side_tail" not in DecodingMethod("sjd", tree=(2,)).to_dict()
    for bad in (dict(side_tail=1), dict(tree=(2,), side_tail=-1), dict(tree=(2,), side_tail=1.5)):
        with pytest.raises(ValueError, match="side_tail"):
            DecodingMethod("sjd", **bad)


def test_command_line_generate_with_a_tree(capsys):
    import json

    from gsd_lab.cli import main

    args = ["generate", "--model", "tiny-random", "--class", "1", "--seed", "3", "--method", "sjd",
            "--tree", "2", "2", "--json", "--threads", "1"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tree"] == [2, 2] and len(report["tokens"]) == 64
    assert len(report["tokens_processed"]) == report["nfe"]
    assert main(args + ["--side-tail", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["side_tail"] == 1 and 21 in report["tokens_processed"]  # 1 + 16 + 2 + 2
    with pytest.raises(SystemExit) as caught:
        main(["generate", "--model", "tiny-random", "--method", "gsd", "--tree", "2", "2"])
    assert caught.value.code == 2 and "candidates" in capsys.readouterr().err


def test_shape_model_counts_and_ranks():
    """E(shape, L) by hand; positional acceptance from walks; the ranking keeps the budget."""
    from gsd_lab.accounting.roofline import Roofline
    from gsd_lab.decode.tree_shapes import (expected_committed, positional_acceptance,
                                            ranked_shapes, tree_tokens)

    acceptance = torch.tensor([[0.5, 0.75], [0.4, 0.6], [0.2, 0.2]], dtype=torch.float64)
    assert expected_committed((2,), 3, acceptance) == pytest.approx(
        1 + 0.75 + 0.75 * 0.4 + 0.75 * 0.4 * 0.2)
    assert expected_committed((1, 2), 2, acceptance) == pytest.approx(1 + 0.5 + 0.5 * 0.6)
    assert tree_tokens((2, 2), 3) == 1 + 2 + 4 + 4 and tree_tokens((4,), 1) == 5
    walks = [([2, 1], [1, None]), ([2], [None]), ([2, 1, 1], [0, 0, None])]
    measured = positional_acceptance(walks, 3, 2)
    assert measured[0].tolist() == [1 / 3, 2 / 3] and measured[1, 0] == 0.5
    assert torch.isnan(measured[1, 1])
    roofline = Roofline(parameters=7_013_158_912, cfg_batch=2)
    ranked = ranked_shapes(acceptance[:, :2], roofline, [2, 3], budget=8, max_depth=2)
    assert ranked and all(s.tokens <= 8 for s in ranked)
    assert [s.cost_per_token for s in ranked] == sorted(s.cost_per_token for s in ranked)
    shallow = ranked_shapes(acceptance[:, :2], roofline, [1, 2], budget=8, max_depth=3)
    assert shallow and all(len(s.shape) <= s.window for s in shallow)
    assert len({(s.shape, s.window) for s in shallow}) == len(shallow)
    assert {s.shape for s in shallow if s.window == 1} == {(2,)}


# --- tree_step's candidates and declared rows, the model stubbed ------------------------------

V = 4
Q = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.5, 0.0, 0.5, 0.0],
                  [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
# (shape, L, row_drafts, allowed tokens, drafts): three model-row depths (depth 3's row has two
# tokens: its third candidate is exhausted) and a tail; one model-row depth, then given
# candidates from two allowed tokens (the third exhausted) and a tail.
PASSES = {"model rows at depths 1-3": ((2, 3, 3), 4, 3, [0, 1, 2, 3], [0, 3, 2, 1]),
          "given candidates at depth >= 2": ((2, 3), 3, 1, [1, 3], [1, 3, 1])}


class _Stub:
    """The adapter as ``tree_step`` reads it; ``forward_nodes`` is stubbed beside it."""

    def __init__(self, allowed):
        self.allowed_tokens = torch.tensor(allowed)
        self.prompt = torch.tensor([0])


def _pass_loop(shape, L, row_drafts, allowed, drafts, seed):
    """A DecodeLoop holding one pass's window (drafts, q, row_drafts), nothing else."""
    state = object.__new__(loop.DecodeLoop)
    state.shape, state.vocab, state.device = shape, V, torch.device("cpu")
    state.generator = torch.Generator().manual_seed(seed)
    state.adapter = _Stub(allowed)
    state.drafts = torch.tensor(drafts)
    given = one_hot(state.drafts, V)  # the fresh drafts' one-hot q
    state.q = torch.where(torch.arange(L).unsqueeze(-1) < row_drafts, Q[:L], given)
    state.row_drafts, state.done, state.accepted, state.processed = row_drafts, 0, [], []
    state.method, state.held = DecodingMethod("sjd", window=L, tree=shape), None
    state.out = torch.zeros(16, dtype=torch.long)
    return state


def _run_pass(monkeypatch, case, seed):
    """Run ``tree_step`` with fixed model rows; return (loop, tokens, declared, parent) as
    ``verify_tree`` received them."""
    state = _pass_loop(*PASSES[case], seed)
    seen = {}

    def verify(targets, declared, tokens, parent, uniforms):
        seen.update(declared=declared, tokens=tokens, parent=parent)
        return verify_tree(targets, declared, tokens, parent, uniforms)

    def forward_nodes(adapter, head, tokens, parent):
        rows = torch.arange(1.0, V + 1, dtype=torch.float64)
        return rows / rows.sum(), (rows.flip(0) / rows.sum()).expand(tokens.numel(), V)

    monkeypatch.setattr(loop, "forward_nodes", forward_nodes)
    monkeypatch.setattr(loop, "keep_nodes", lambda adapter, nodes: None)
    monkeypatch.setattr(loop, "verify_tree", verify)
    state.tree_step(state.drafts.numel())
    return state, seen["tokens"], seen["declared"], seen["parent"]


def _levels(state, tokens, declared, parent):
    """Per depth d <= D: (candidates [k_d], declared [k_d, V]), the same under every node of
    depth d - 1 (asserted); then the tail nodes' (token, row) per depth."""
    shape, L = state.shape, state.drafts.numel()
    ref_parent, depth, rank = level_tree(shape, L - len(shape))
    assert torch.equal(parent, ref_parent)
    levels = []
    for d, k in enumerate(shape, start=1):
        groups = {}
        for node in torch.nonzero(depth == d).flatten().tolist():
            groups.setdefault(int(parent[node]), []).append(node)
        sets = [(tokens[g], declared[g]) for g in groups.values()]
        assert all(len(g) == k for g in groups.values())
        for tok, rows in sets[1:]:
            assert torch.equal(tok, sets[0][0]) and torch.equal(rows, sets[0][1])
        levels.append(sets[0])
    tail = [(tokens[depth == d], declared[depth == d]) for d in range(len(shape) + 1, L + 1)]
    return levels, tail


def check_pass(state, tokens, declared, parent):
    """Each depth's candidates and declared rows against what the draw uses: a model-row depth
    (d <= row_drafts) ``without_replacement_rows(q[d], candidates)``, a given one one-hot rows
    (zero for an exhausted candidate), the tail the window's drafts with their q."""
    levels, tail = _levels(state, tokens, declared, parent)
    allowed = state.adapter.allowed_tokens.tolist()
    for d, (cands, rows) in enumerate(levels):
        assert cands[0] == state.drafts[d]  # x_1: the window's draft
        if d < state.row_drafts:
            support = torch.nonzero(state.q[d] > 0).flatten().tolist()
            expected = without_replacement_rows(state.q[d], cands)
        else:
            support = allowed
            present = (torch.arange(cands.numel()) < len(allowed)).to(torch.float64)
            expected = one_hot(cands, V) * present.unsqueeze(-1)
        live = min(cands.numel(), len(support))
        assert set(cands[:live].tolist()) <= set(support)
        assert len(set(cands[:live].tolist())) == live  # without replacement
        assert torch.equal(cands[live:], cands[:1].expand(cands.numel() - live))  # placeholders
        assert (rows[live:] == 0).all()  # exhausted: zero rows
        assert (rows - expected).abs().max() <= 1e-15
    for t, (tok, rows) in enumerate(tail, start=len(levels)):
        assert (tok == state.drafts[t]).all() and (rows == state.q[t]).all()


def check_frequencies(monkeypatch, case, runs=600):
    """The declared rows are the draw's law: at each model-row depth, candidate j's frequency
    over seeds equals the mean of its declared row (row j is its law given x_1 .. x_{j-1}), for
    j >= 2 (x_1, the window's draft, is fixed here)."""
    counts, means = {}, {}
    for seed in range(runs):
        state, tokens, declared, parent = _run_pass(monkeypatch, case, seed)
        levels, _ = _levels(state, tokens, declared, parent)
        for d, (cands, rows) in enumerate(levels[: state.row_drafts]):
            live = int((rows.sum(-1) > 0).sum())
            counts[d] = counts.get(d, 0) + one_hot(cands[1:live], V) / runs
            means[d] = means.get(d, 0) + rows[1:live] / runs
    for d in counts:  # binomial sd <= 0.5 / sqrt(runs) = 0.02
        assert (counts[d] - means[d]).abs().max() <= 0.08, d


@pytest.mark.parametrize("case", list(PASSES))
def test_tree_step_declares_the_rows_it_draws_from(monkeypatch, case):
    for seed in range(20):
        check_pass(*_run_pass(monkeypatch, case, seed))
    check_frequencies(monkeypatch, case)


def test_control_depth_two_declared_iid_is_caught(monkeypatch):
    """``tree_step`` declaring depth 2's model-row candidates i.i.d. (every row the source
    row): both checks fail."""
    real = loop.without_replacement_rows
    calls = []

    def rows(source, candidates):
        calls.append(1)
        if len(calls) % 3 == 2:  # the second model-row depth of each pass
            return (source / source.sum()).expand(candidates.numel(), source.numel())
        return real(source, candidates)

    monkeypatch.setattr(loop, "without_replacement_rows", rows)
    with pytest.raises(AssertionError):
        check_pass(*_run_pass(monkeypatch, "model rows at depths 1-3", 0))
    calls.clear()
    with pytest.raises(AssertionError):
        check_frequencies(monkeypatch, "model rows at depths 1-3")


def test_a_side_branch_keeps_the_window_drafts_past_it(monkeypatch):
    """A spine tree's walk ending on a side leaf at depth 1 (``verify_tree`` stubbed to accept
    it): the pass returns the branch's rows only, and after ``redraft`` the window holds the
    drafts of the positions past the branch as they were, their q and model-row count kept."""
    from gsd_core import TreeResult
    from gsd_lab.decode.coupling import DraftChain

    state = _pass_loop((2,), 4, 3, [0, 1, 2, 3], [0, 3, 2, 1], seed=0)
    state.method = DecodingMethod("sjd", window=4, tree=(2,), side_tail=0, draft="maximal")
    state.chain = DraftChain("maximal", V, state.device, state.generator)
    before_drafts, before_q = state.drafts.clone(), state.q.clone()

    def side_leaf(targets, declared, tokens, parent, uniforms):
        assert parent.tolist() == [-1, -1, 0, 2, 3]  # spine_tree((2,), 4, 0)
        return TreeResult(torch.tensor([1]), torch.stack([tokens[1], tokens[0]]), 1, [1])

    rows = torch.full((V,), 1.0 / V, dtype=torch.float64)
    monkeypatch.setattr(loop, "forward_nodes",
                        lambda adapter, head, tokens, parent: (rows, rows.expand(5, V)))
    monkeypatch.setattr(loop, "keep_nodes", lambda adapter, nodes: None)
    monkeypatch.setattr(loop, "verify_tree", side_leaf)
    p, accepted = state.tree_step(4)
    assert p.shape == (2, V) and accepted == 1
    state.redraft(p, accepted, p.shape[0] - 1)  # the whole side branch accepted
    assert torch.equal(state.drafts, before_drafts[2:]) and torch.equal(state.q, before_q[2:])
    assert state.row_drafts == 1 and state.held is None  # old model-row drafts 0..2: index 2
