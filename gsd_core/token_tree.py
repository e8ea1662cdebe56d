"""A token tree verified top-down by recursive rejection at every node (multi-step speculative
sampling: SpecInfer, arXiv 2305.09781; tree shapes as in Sequoia, arXiv 2402.12374).

Node i holds a token x_i for the position after its parent (``parent[i]`` < i, -1 the root),
declared with a row q_i (its law given its parent's path and earlier siblings); p_v is the
target row after node v's path (row 0 the root's, row i + 1 node i's). From v = root:

    children c_1 .. c_m of v:  recursive rejection against p_v (tests u_{c_j})
    c_J accepted:  v <- c_J, repeat;   all rejected:  emit the last residual's draw (u_N), stop
    v a leaf:      emit the draw from p_v (the bonus row, u_N), stop

Output: the accepted path v_1 .. v_a and the tokens x_{v_1} .. x_{v_a}, y. With every q_i the
law of x_i given what the walk has read and fresh uniforms, each step emits a token of law p_v
(proofs/16_token_trees.md): the output has the target's joint law. The Jacobi loop's trees:
``level_tree`` (k_1 .. k_D children per depth, then a tail chain) and ``spine_tree`` (one chain,
extra candidates beside it over short chains); ``tree_law``: the walk's exact law.
Shapes: p [N + 1, V]; q [N, V]; tokens [N] int64; parent [N] int64; uniforms [N + 1] (u_i tests
node i, u_N draws). The walk reads one host value per node it visits: it is the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .multidraft import normalised, recursive_rejection
from .rules import mass_ratio, token_residual
from .verification import draw


@dataclass(frozen=True)
class TreeResult:
    """path [a] int64: the accepted nodes, root to leaf-ward; tokens [a + 1] int64: their tokens
    and the emitted one; stop int: the node whose children were all rejected, or the leaf
    reached (-1: the root); branch: the path, then the stop's first child, its first child, ..
    down to a leaf (the branch whose rows follow the stop)."""

    path: Tensor
    tokens: Tensor
    stop: int
    branch: list[int]


def children_of(parent: Tensor) -> dict[int, list[int]]:
    """{node: its children in index order} for parent [N] (-1 the root); ValueError unless
    parent[i] < i for every i (a tree listed parents first)."""
    parents = [int(x) for x in parent.tolist()]
    out: dict[int, list[int]] = {-1: []}
    for i, v in enumerate(parents):
        if not -1 <= v < i:
            raise ValueError(f"parent[{i}] must be in [-1, {i}), got {v}")
        out.setdefault(v, []).append(i)
        out.setdefault(i, [])
    return out


def depths(parent: Tensor) -> Tensor:
    """Depth [N] int64 of every node (1 for the root's children)."""
    out: list[int] = []
    for v in parent.tolist():
        out.append(1 if v < 0 else out[v] + 1)
    return torch.tensor(out, dtype=torch.long)


def level_tree(shape: tuple[int, ...], tail: int) -> tuple[Tensor, Tensor, Tensor]:
    """The Jacobi tree: (parent [N], depth [N], rank [N]) with ``shape[d]`` children under every
    node of depth d (depth 0: the root), listed depth by depth, then a chain of ``tail`` nodes
    under every deepest node; rank[i] is node i's index among its siblings (the candidate it
    carries: rank 0 the window's draft; tail nodes rank 0). N = sum_d prod(shape[:d + 1]) +
    prod(shape) * tail.

    >>> parent, depth, rank = level_tree((2, 2), 1)
    >>> parent.tolist(), rank.tolist()
    ([-1, -1, 0, 0, 1, 1, 2, 3, 4, 5], [0, 1, 0, 1, 0, 1, 0, 0, 0, 0])
    """
    if not shape or any(not isinstance(k, int) or k < 1 for k in shape):
        raise ValueError(f"shape must be a non-empty tuple of ints >= 1, got {shape!r}")
    if not isinstance(tail, int) or tail < 0:
        raise ValueError(f"tail must be an int >= 0, got {tail!r}")
    parent, depth, rank = [], [], []
    level = [-1]
    for d, k in enumerate(shape):
        nxt = []
        for v in level:
            for j in range(k):
                nxt.append(len(parent))
                parent.append(v), depth.append(d + 1), rank.append(j)
        level = nxt
    for t in range(tail):
        nxt = []
        for v in level:
            nxt.append(len(parent))
            parent.append(v), depth.append(len(shape) + t + 1), rank.append(0)
        level = nxt
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return as_long(parent), as_long(depth), as_long(rank)


def spine_tree(
    shape: tuple[int, ...], length: int, side_tail: int
) -> tuple[Tensor, Tensor, Tensor]:
    """A general tree with short side tails: (parent [N], depth [N], rank [N]) of a spine of
    ``length`` rank-0 nodes (the window's drafts), and beside the spine's node of depth d <= D
    the candidates of rank 1 .. k_d - 1, each over a chain of min(side_tail, length - d) rank-0
    nodes; listed depth by depth, the spine's node first at every depth. N = length +
    sum_d (k_d - 1)(1 + min(side_tail, length - d)). With one depth and side_tail = length - 1
    it is ``level_tree(shape, length - 1)``.

    >>> parent, depth, rank = spine_tree((2, 2), 3, 1)
    >>> parent.tolist(), depth.tolist(), rank.tolist()
    ([-1, -1, 0, 0, 1, 2, 3], [1, 1, 2, 2, 2, 3, 3], [0, 1, 0, 1, 0, 0, 0])
    """
    if not shape or any(not isinstance(k, int) or k < 1 for k in shape):
        raise ValueError(f"shape must be a non-empty tuple of ints >= 1, got {shape!r}")
    if not isinstance(length, int) or length < len(shape):
        raise ValueError(
            f"length must be an int >= the shape's {len(shape)} depths, got {length!r}"
        )
    if not isinstance(side_tail, int) or side_tail < 0:
        raise ValueError(f"side_tail must be an int >= 0, got {side_tail!r}")
    parent, depth, rank = [], [], []
    spine, chains = -1, []  # the spine's node at the depth above; (last node, nodes left) per side
    for d in range(1, length + 1):
        k = shape[d - 1] if d <= len(shape) else 1
        first = len(parent)
        nodes = [(spine, j) for j in range(k)] + [(end, 0) for end, _ in chains]
        for up, r in nodes:
            parent.append(up), depth.append(d), rank.append(r)
        grown = [(first + k + i, left - 1) for i, (_, left) in enumerate(chains)]
        sides = [(first + j, min(side_tail, length - d)) for j in range(1, k)]
        chains = [(end, left) for end, left in grown + sides if left > 0]
        spine = first
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return as_long(parent), as_long(depth), as_long(rank)


def spine_tree_size(shape: tuple[int, ...], length: int, side_tail: int) -> int:
    """N of ``spine_tree(shape, length, side_tail)`` (its docstring's formula)."""
    sides = sum((k - 1) * (1 + min(side_tail, length - d)) for d, k in enumerate(shape, 1))
    return length + sides


def tree_size(shape: tuple[int, ...], tail: int) -> int:
    """N of ``level_tree(shape, tail)`` (its docstring's formula)."""
    total, width = 0, 1
    for k in shape:
        width *= k
        total += width
    return total + width * tail


def first_child_chain(children: dict[int, list[int]], node: int) -> list[int]:
    """node's first child, its first child, ... down to a leaf."""
    chain = []
    while children[node]:
        node = children[node][0]
        chain.append(node)
    return chain


def verify_tree(
    p: Tensor, q: Tensor, tokens: Tensor, parent: Tensor, uniforms: Tensor
) -> TreeResult:
    """The walk of the module docstring: p [N + 1, V], q [N, V], tokens [N], parent [N],
    uniforms [N + 1] in [0, 1).

    >>> p = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.6, 0.2, 0.2]], dtype=torch.float64)
    >>> q = torch.tensor([[0.2, 0.3, 0.5], [0.0, 0.0, 1.0]], dtype=torch.float64)
    >>> out = verify_tree(p, q, torch.tensor([1, 2]), torch.tensor([-1, 0]),
    ...                   torch.tensor([0.5, 0.7, 0.9], dtype=torch.float64))
    >>> out.path.tolist(), out.tokens.tolist(), out.stop  # 0.5 < 0.3/0.3; 0.7 < 0.8/1; bonus
    ([0, 1], [1, 2, 2], 1)
    >>> out.branch
    [0, 1]
    """
    count = tokens.numel()
    if p.shape[0] != count + 1 or q.shape[0] != count or parent.numel() != count:
        raise ValueError(
            f"a tree of {count} nodes needs p [{count + 1}, V], q [{count}, V] and parent "
            f"[{count}]; got p {list(p.shape)}, q {list(q.shape)}, parent {list(parent.shape)}"
        )
    if uniforms.numel() != count + 1:
        raise ValueError(f"uniforms must be [{count + 1}], got {list(uniforms.shape)}")
    children = children_of(parent)
    final = uniforms[count : count + 1]
    node, path = -1, []
    while True:
        kids = children[node]
        if not kids:
            token = draw(p[node + 1], final).reshape(())
            break
        index = torch.tensor(kids, device=tokens.device)
        verdict = recursive_rejection(
            p[node + 1], q[index], tokens[index], torch.cat([uniforms[index], final])
        )
        j = int(verdict.accepted)
        if j == len(kids):
            token = verdict.token
            break
        node = kids[j]
        path.append(node)
    path_t = torch.tensor(path, dtype=torch.long, device=tokens.device)
    emitted = torch.cat([tokens[path_t], token.reshape(1).to(tokens.dtype)])
    return TreeResult(path_t, emitted, node, path + first_child_chain(children, node))


def tree_law(p: Tensor, q: Tensor, tokens: Tensor, parent: Tensor) -> dict[tuple[int, ...], float]:
    """Exact {emitted tokens: probability} of ``verify_tree`` over its uniforms, for given
    candidates (float64): at node v, stage j reached with weight w accepts with
    a_j = min(1, r_j(x) / q_j(x)) and recurses, else r_{j+1} = norm((r_j - q_j)+); the last
    residual (or a leaf's row) spreads its weight over V."""
    children = children_of(parent)
    law: dict[tuple[int, ...], float] = {}

    def visit(node: int, prefix: tuple[int, ...], weight: float) -> None:
        residual = p[node + 1]
        for child in children[node]:
            x = int(tokens[child])
            a = float(mass_ratio(residual[x : x + 1], q[child, x : x + 1]))
            if a > 0:
                visit(child, prefix + (x,), weight * a)
            weight *= 1 - a
            residual = normalised(token_residual(residual, q[child]))
        if weight > 0:
            for y, mass in enumerate(normalised(residual).tolist()):
                if mass > 0:
                    law[prefix + (y,)] = law.get(prefix + (y,), 0.0) + weight * mass

    visit(-1, (), 1.0)
    return law
