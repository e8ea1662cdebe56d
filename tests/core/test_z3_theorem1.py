"""Bounded machine check of Theorem 1 with the z3 SMT solver (proofs/07).

For every vocabulary size V <= MAX_VOCAB and every partition of {0, ..., V-1}, z3 is asked for
real p, q on the simplex with

    sum_C min(p(C), q(C))  <  sum_x min(p(x), q(x))      (grouped acceptance below SD's)

and must answer "unsat": no such p, q exist, over the reals, not just on a grid. The grouped
acceptance E_{x~q}[min(1, p(C(x))/q(C(x)))] equals sum_C min(p(C), q(C)) cluster by cluster
(proofs/01), which keeps the query linear. Controls: the reverse claim (grouping never helps)
is "sat", and so is the claim for block families that miss a token; with a token counted twice
the grouped "rate" can exceed 1. So the encoding is not vacuous.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

z3 = pytest.importorskip("z3")

MAX_VOCAB = 6


def set_partitions(n: int) -> Iterator[list[list[int]]]:
    """All partitions of range(n) (Bell(n) of them), as lists of blocks."""
    if n == 0:
        yield []
        return
    for rest in set_partitions(n - 1):
        for i in range(len(rest)):
            yield rest[:i] + [rest[i] + [n - 1]] + rest[i + 1 :]
        yield rest + [[n - 1]]


def _min(a, b):
    return z3.If(a <= b, a, b)


def _simplex(solver, name: str, size: int):
    x = [z3.Real(f"{name}{i}") for i in range(size)]
    solver.add(*[v >= 0 for v in x], z3.Sum(x) == 1)
    return x


def _grouped_below_sd(blocks: list[list[int]], size: int) -> z3.CheckSatResult:
    solver = z3.Solver()
    solver.set("timeout", 20_000)
    p, q = _simplex(solver, "p", size), _simplex(solver, "q", size)
    sd = z3.Sum([_min(p[i], q[i]) for i in range(size)])
    grouped = z3.Sum([_min(z3.Sum([p[i] for i in b]), z3.Sum([q[i] for i in b])) for b in blocks])
    solver.add(grouped < sd)
    return solver.check()


def test_set_partitions_enumerates_bell_numbers():
    assert [sum(1 for _ in set_partitions(n)) for n in range(1, 7)] == [1, 2, 5, 15, 52, 203]


def test_theorem1_holds_for_every_partition_up_to_max_vocab():
    start = time.perf_counter()
    checked = 0
    for size in range(1, MAX_VOCAB + 1):
        for blocks in set_partitions(size):
            assert _grouped_below_sd(blocks, size) == z3.unsat, (size, blocks)
            checked += 1
    assert checked == 1 + 2 + 5 + 15 + 52 + 203
    assert time.perf_counter() - start < 120  # keep the suite fast; raise MAX_VOCAB consciously


def test_control_the_reverse_claim_is_refuted():
    """'Grouping never raises acceptance' is false: z3 finds p, q with grouped > SD (any V >= 2)."""
    solver = z3.Solver()
    p, q = _simplex(solver, "p", 2), _simplex(solver, "q", 2)
    sd = _min(p[0], q[0]) + _min(p[1], q[1])
    grouped = _min(p[0] + p[1], q[0] + q[1])
    solver.add(grouped > sd)
    assert solver.check() == z3.sat
    model = solver.model()
    values = [model.eval(v) for v in (*p, *q)]
    assert all(v is not None for v in values)


@pytest.mark.parametrize("blocks", [[[0, 1]], [[0], [1]], [[0, 1], [1]]])
def test_control_families_that_are_not_partitions_are_caught(blocks):
    """The same query is "sat" for families that miss a token (here token 2): the check
    depends on the blocks being a partition, as the proof does."""
    assert _grouped_below_sd(blocks, 3) == z3.sat


def test_control_a_lossy_grouped_rate_above_one_is_possible_without_a_partition():
    solver = z3.Solver()
    p, q = _simplex(solver, "p", 3), _simplex(solver, "q", 3)
    blocks = [[0, 1], [0, 2]]  # token 0 counted twice
    solver.add(z3.Sum([_min(z3.Sum([p[i] for i in b]), z3.Sum([q[i] for i in b])) for b in blocks]) > 1)
    assert solver.check() == z3.sat
