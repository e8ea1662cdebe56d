"""The pieces every family's ``check-weights`` items share, on their own: ``run_items`` (order,
skips naming the failed prerequisite, a raised error as its item's FAIL), ``shape_mismatch``
against a module built on the meta device, and ``load_timed``'s CPU-limit skip."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gsd_lab.checks.checkpoint import on_meta, shape_mismatch
from gsd_lab.checks.generation import load_timed
from gsd_lab.checks.items import FAIL, OK, SKIP, WARN, Verdict, run_items
from gsd_lab.models.loading import TooLargeForCPU


def _raise(error: BaseException):
    def check():
        raise error

    return check


def test_run_items_orders_skips_and_fails():
    """Each item's outcome in order; a FAIL or SKIP blocks what needs it (named), a WARN does
    not; an item error is a FAIL naming its type."""
    verdicts = run_items([
        ("a", (), lambda: (OK, "fine")),
        ("b", ("a",), _raise(ValueError("bad shard"))),
        ("c", ("a",), lambda: (WARN, "odd")),
        ("d", ("b", "c"), lambda: (OK, "never run")),
        ("e", ("d",), lambda: (OK, "never run")),
        ("f", ("c",), lambda: (OK, "runs")),
    ])
    assert verdicts == [
        Verdict("a", OK, "fine"),
        Verdict("b", FAIL, "ValueError: bad shard"),
        Verdict("c", WARN, "odd"),
        Verdict("d", SKIP, "needs b"),
        Verdict("e", SKIP, "needs d"),
        Verdict("f", OK, "runs"),
    ]


def test_run_items_lets_a_programming_error_through():
    """Only the item errors (OSError, ValueError, ...) are verdicts; a TypeError is a bug."""
    with pytest.raises(TypeError):
        run_items([("a", (), _raise(TypeError("bug")))])


class _Tiny(torch.nn.Module):
    """proj.weight [3, width], proj.bias [3], head.weight [2, 3]."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(width, 3)
        self.head = torch.nn.Linear(3, 2, bias=False)


STORED = {"proj.weight": (3, 4), "proj.bias": (3,), "head.weight": (2, 3)}


def test_shape_mismatch_names_what_differs():
    """None when the stored names and shapes are the meta model's (an optional name may be
    absent, and only that one); else the missing, unexpected and mis-shaped names."""
    meta = on_meta(_Tiny, 4)
    assert next(meta.parameters()).is_meta
    assert shape_mismatch(meta, STORED) is None
    tied = {k: v for k, v in STORED.items() if k != "head.weight"}
    assert shape_mismatch(meta, tied, optional=("head.weight",)) is None
    assert "missing 1 ['head.weight']" in shape_mismatch(meta, tied)
    assert "missing 1 ['proj.bias']" in shape_mismatch(
        meta, {k: v for k, v in STORED.items() if k != "proj.bias"}, optional=("head.weight",)
    )
    extra = shape_mismatch(meta, {**STORED, "vqmodel.w": (1,)})
    assert "unexpected 1 ['vqmodel.w']" in extra
    wrong = shape_mismatch(meta, {**STORED, "proj.weight": (3, 5)})
    assert "wrong shape 1 ['proj.weight (3, 5) (expected (3, 4))']" in wrong


def test_load_timed_skips_only_the_cpu_refusal():
    """``TooLargeForCPU`` is (None, the reason naming --force-cpu); any other ValueError, one
    that mentions force_cpu included, goes to the item (its FAIL)."""
    adapter, why = load_timed(_raise(TooLargeForCPU(Path("/weights"), 7_000_000_000)))
    assert adapter is None
    assert why == (
        "a 7.0B-parameter model on the CPU takes minutes per token "
        "(--device cuda, or --force-cpu to insist)"
    )
    with pytest.raises(ValueError, match="force_cpu_run"):
        load_timed(_raise(ValueError("cannot read /data/force_cpu_run/vqgan.ckpt")))


def test_too_large_for_cpu_carries_its_numbers():
    import pickle

    error = TooLargeForCPU(Path("/weights"), 7_000_000_000)
    assert isinstance(error, ValueError)
    assert (error.folder, error.parameters) == (Path("/weights"), 7_000_000_000)
    assert "7.0B-parameter model" in str(error) and "force_cpu=True" in str(error)
    again = pickle.loads(pickle.dumps(error))
    assert (again.folder, again.parameters, str(again)) == (error.folder, error.parameters,
                                                             str(error))
