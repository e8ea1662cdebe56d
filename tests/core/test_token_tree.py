"""A token tree verified by recursive rejection at every node is lossless (proofs/16): the exact
law of the Jacobi tree's output, every candidate draw enumerated, against the target's joint;
the sampler against the exact law; negative controls the same test catches.

The setting: V = 3, a target of full support whose row depends on the whole prefix; the tree
``level_tree((2, 2), 1)`` (two candidates at each of two depths, one shared set per depth, then a
tail draft): support 3 > branching 2, so a wrongly declared second candidate is seen.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy.stats import chisquare

import gsd_core.token_tree as token_tree
from gsd_core import level_tree, spine_tree, spine_tree_size, tree_law, tree_size, verify_tree
from gsd_core.multidraft import normalised, one_hot

TOL = 1e-12
V = 3
SHAPE, TAIL = (2, 2), 1
HORIZON = len(SHAPE) + TAIL + 1  # the longest emission: every node of a path, then the bonus


def rows_by_prefix(seed: int) -> dict[tuple[int, ...], torch.Tensor]:
    """The target: a row of full support (weights 1..5) for every prefix of length < HORIZON."""
    gen = torch.Generator().manual_seed(seed)
    table = {}
    for n in range(HORIZON + 1):
        for prefix in itertools.product(range(V), repeat=n):
            table[prefix] = normalised(torch.randint(1, 6, (V,), generator=gen).double())
    return table


TARGET = rows_by_prefix(0)
SOURCES = [normalised(torch.tensor(w, dtype=torch.float64))
           for w in ([1, 2, 4], [3, 1, 1], [2, 2, 1])]  # the draft rows of depths 1, 2, the tail


def ar_joint(length: int) -> dict[tuple[int, ...], float]:
    out = {}
    for z in itertools.product(range(V), repeat=length):
        prob = 1.0
        for m in range(length):
            prob *= float(TARGET[z[:m]][z[m]])
        out[z] = prob
    return out


def extended(law: dict[tuple[int, ...], float]) -> dict[tuple[int, ...], float]:
    """The walk's output law, each emission continued by the target to HORIZON tokens."""
    out: dict[tuple[int, ...], float] = {}
    for z, prob in law.items():
        for rest in itertools.product(range(V), repeat=HORIZON - len(z)):
            full, weight = z + rest, prob
            for m in range(len(z), HORIZON):
                weight *= float(TARGET[full[:m]][full[m]])
            out[full] = out.get(full, 0.0) + weight
    return out


def without(row: torch.Tensor, removed: int) -> torch.Tensor:
    rest = row.clone()
    rest[removed] = 0
    return normalised(rest)


def tree_of(draws: tuple[int, ...], declare_iid: bool = False, shared_rows: bool = False,
            side_tail: int | None = None):
    """(p, q, tokens, parent) of the tree whose depth-d candidates are draws[2d], draws[2d + 1]
    (drawn from SOURCES[d] without replacement) and whose tail draft is draws[-1]: the level
    tree, or with ``side_tail`` the spine tree of the same drafts."""
    parent, depth, rank = (level_tree(SHAPE, TAIL) if side_tail is None
                           else spine_tree(SHAPE, len(SHAPE) + TAIL, side_tail))
    count = parent.numel()
    tokens = torch.empty(count, dtype=torch.long)
    q = torch.empty(count, V, dtype=torch.float64)
    paths: list[tuple[int, ...]] = []
    for i in range(count):
        d, j = int(depth[i]) - 1, int(rank[i])
        source = SOURCES[d]
        if d < len(SHAPE):
            tokens[i] = draws[2 * d + j]
            q[i] = source if j == 0 or declare_iid else without(source, draws[2 * d])
        else:
            tokens[i] = draws[-1]
            q[i] = source
        up = int(parent[i])
        paths.append((paths[up] if up >= 0 else ()) + (int(tokens[i]),))
    if shared_rows:  # every row computed after the first candidate of depth 1 (a leaked mask)
        paths = [(draws[0],) + path[1:] for path in paths]
    p = torch.stack([TARGET[()]] + [TARGET[path] for path in paths])
    return p, q, tokens, parent


def draw_probability(draws: tuple[int, ...]) -> float:
    prob = 1.0
    for d in range(len(SHAPE)):
        a, b = draws[2 * d], draws[2 * d + 1]
        if a == b:
            return 0.0
        prob *= float(SOURCES[d][a]) * float(without(SOURCES[d], a)[b])
    return prob * float(SOURCES[len(SHAPE)][draws[-1]])


def decode_law(**tree_options) -> dict[tuple[int, ...], float]:
    """The exact law of the Jacobi tree's emission over every candidate draw, extended."""
    law: dict[tuple[int, ...], float] = {}
    for draws in itertools.product(range(V), repeat=2 * len(SHAPE) + 1):
        prob = draw_probability(draws)
        if prob == 0:
            continue
        for z, c in tree_law(*tree_of(draws, **tree_options)).items():
            law[z] = law.get(z, 0.0) + prob * c
    return extended(law)


def deviation(law, joint) -> float:
    return max(abs(law.get(z, 0.0) - joint[z]) for z in joint)


def test_level_tree_counts_its_nodes():
    for shape, tail in [((1,), 0), ((3,), 4), ((2, 2), 1), ((4, 2, 1), 3)]:
        parent, depth, _ = level_tree(shape, tail)
        assert parent.numel() == tree_size(shape, tail)
        assert int(depth.max()) == len(shape) + tail
    with pytest.raises(ValueError, match="shape"):
        level_tree((2, 0), 1)


def test_the_tree_emits_the_target_joint():
    """Every candidate draw and every uniform integrated out: the target's joint to 1e-12."""
    joint = ar_joint(HORIZON)
    law = decode_law()
    assert abs(sum(law.values()) - 1) <= TOL
    assert deviation(law, joint) <= TOL


def test_spine_tree_counts_its_nodes_and_extends_the_level_tree():
    """N = spine_tree_size; one depth with full side tails is the level tree, node for node."""
    for shape, length, side in [((2,), 1, 0), ((3, 2), 4, 1), ((8, 4, 3, 2, 2), 16, 5)]:
        parent, depth, rank = spine_tree(shape, length, side)
        assert parent.numel() == spine_tree_size(shape, length, side)
        assert int(depth.max()) == length and int((rank == 0).sum()) == parent.numel() - sum(
            k - 1 for k in shape)
    for k, length in [(2, 1), (3, 4)]:
        for got, want in zip(spine_tree((k,), length, length - 1), level_tree((k,), length - 1)):
            assert torch.equal(got, want)
    with pytest.raises(ValueError, match="length"):
        spine_tree((2, 2, 2), 2, 0)


@pytest.mark.parametrize("side_tail", [0, 1])
def test_spine_trees_emit_the_target_joint(side_tail):
    """The spine tree of the same drafts (extra candidates as leaves, or over one tail draft):
    every candidate draw and uniform integrated out, the target's joint to 1e-12."""
    law = decode_law(side_tail=side_tail)
    assert abs(sum(law.values()) - 1) <= TOL
    assert deviation(law, ar_joint(HORIZON)) <= TOL


def test_control_spine_candidates_declared_iid_are_caught():
    """The spine tree's second candidates declared with the row they were drawn from."""
    assert deviation(decode_law(declare_iid=True, side_tail=1), ar_joint(HORIZON)) > 1e-4


def test_control_second_candidates_declared_iid_are_caught():
    """The second candidate declared with the row it was drawn from (not without the first)."""
    assert deviation(decode_law(declare_iid=True), ar_joint(HORIZON)) > 1e-4


def test_control_a_residual_that_forgets_the_rejections_is_caught(monkeypatch):
    """Each stage tested against its node's row, the rejected candidates' mass kept."""
    monkeypatch.setattr(token_tree, "token_residual", lambda r, q: r)
    assert deviation(decode_law(), ar_joint(HORIZON)) > 1e-4


def test_control_rows_of_another_branch_are_caught():
    """Every row computed after the first candidates' path (a mask that leaks another branch)."""
    assert deviation(decode_law(shared_rows=True), ar_joint(HORIZON)) > 1e-4


def test_the_walk_samples_the_exact_law():
    """``verify_tree`` on one tree, 6000 walks, against ``tree_law`` (chi-square, p > 1e-3)."""
    draws = (2, 0, 1, 2, 1)
    p, q, tokens, parent = tree_of(draws)
    law = tree_law(p, q, tokens, parent)
    gen = torch.Generator().manual_seed(5)
    counts: dict[tuple[int, ...], int] = {}
    n = 6000
    for _ in range(n):
        u = torch.rand(tokens.numel() + 1, generator=gen, dtype=torch.float64)
        z = tuple(verify_tree(p, q, tokens, parent, u).tokens.tolist())
        counts[z] = counts.get(z, 0) + 1
    assert set(counts) <= set(law)
    keys = sorted(law)
    observed = [counts.get(z, 0) for z in keys]
    expected = [n * law[z] for z in keys]
    assert chisquare(observed, expected).pvalue > 1e-3


def test_given_candidates_at_one_level_emit_the_target():
    """Fixed candidates declared one-hot (proofs/15's given candidates), then each one's bonus."""
    parent, _, _ = level_tree((2,), 0)
    tokens = torch.tensor([2, 0])
    p = torch.stack([TARGET[()]] + [TARGET[(x,)] for x in tokens.tolist()])
    law = extended(tree_law(p, one_hot(tokens, V), tokens, parent))
    assert deviation(law, ar_joint(HORIZON)) <= TOL


def test_bad_input_is_refused():
    p, q, tokens, parent = tree_of((2, 0, 1, 2, 1))
    with pytest.raises(ValueError, match="uniforms"):
        verify_tree(p, q, tokens, parent, torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="parent"):
        verify_tree(p, q, tokens, torch.zeros_like(parent),
                    torch.zeros(tokens.numel() + 1, dtype=torch.float64))
