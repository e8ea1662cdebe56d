"""A token tree's forward (``gsd_lab.models.tree.forward_nodes``): every node's row equals a plain
forward of its path, and the cache kept for a path (``keep_nodes``) is a plain forward's
(proofs/16, causality); the method's tree option and its refusals."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from gsd_core import level_tree  # noqa: E402
from gsd_lab.decode.methods import DecodingMethod  # noqa: E402
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
    kept = path_of(parent, 7)  # the second candidate, then its first child, then the tail
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
    assert "tree" not in DecodingMethod("sjd").to_dict()  # earlier keys unchanged
    with pytest.raises(ValueError, match="not both"):
        DecodingMethod("sjd", candidates=2, tree=(2, 2))
    with pytest.raises(ValueError, match="one branch"):
        DecodingMethod("sjd", tree=(1, 1))
    with pytest.raises(ValueError, match="tree must be"):
        DecodingMethod("sjd", tree=(2, 0))
    with pytest.raises(ValueError, match="candidates"):
        DecodingMethod("gsd", clusters="dynamic", group_size=2, tree=(2, 2))


def test_command_line_generate_with_a_tree(capsys):
    import json

    from gsd_lab.cli import main

    args = ["generate", "--model", "tiny-random", "--class", "1", "--seed", "3", "--method", "sjd",
            "--tree", "2", "2", "--json", "--threads", "1"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tree"] == [2, 2] and len(report["tokens"]) == 64
    assert len(report["tokens_processed"]) == report["nfe"]
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
