"""gsd_lab.engine.profiling.op_times: where a call's CPU time goes, op by op."""

from __future__ import annotations

import pytest
import torch

from gsd_lab.engine.profiling import op_times


def test_op_times_names_each_op_with_its_calls_largest_first():
    x = torch.rand(64, 4096, dtype=torch.float64)
    rows = op_times(lambda: (torch.topk(x, 100, dim=-1), x.sum(-1), x.sum(-1), x.amin(-1)), repeats=3)
    calls = {row.name: row.calls for row in rows}
    assert calls["aten::topk"] == 1 and calls["aten::sum"] == 2 and calls["aten::amin"] == 1
    assert all(row.name.startswith("aten::") and row.seconds >= 0 for row in rows)
    assert [row.seconds for row in rows] == sorted((row.seconds for row in rows), reverse=True)


def test_op_times_needs_a_repeat():
    with pytest.raises(ValueError, match="repeats"):
        op_times(lambda: None, repeats=0)
