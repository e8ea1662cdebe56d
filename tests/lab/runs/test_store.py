"""The run store reads a run's rows back in index order, refusing a missing or foreign row with
the command that resumes the run, and a decoded image's record survives its row
(``stream.record_row`` / ``row_record``)."""

from __future__ import annotations

import pytest
import torch

from gsd_lab.experiments.runs import GenerationRecord
from gsd_lab.experiments.stream import record_row, row_record
from gsd_lab.runs.identity import RunIdentity
from gsd_lab.runs.ranks import DistributedContext
from gsd_lab.runs.store import rows, start_run, write_result

CONTEXT = DistributedContext(0, 1, 0, "cpu")


def test_rows_come_back_in_index_order_and_a_gap_is_refused(tmp_path):
    run = RunIdentity({"model": "m"}, ["a", "b", "c"])
    start_run(tmp_path, run, CONTEXT)
    for index in (2, 0):
        write_result(run, tmp_path, index, {"nfe": index}, CONTEXT)
    with pytest.raises(ValueError, match="000001.json is missing or not of this run") as refused:
        list(rows(run, tmp_path))
    assert "(run the same command again to resume it)" in str(refused.value)  # the default
    with pytest.raises(ValueError, match=r"\(run figures --paper again to resume it\)$"):
        list(rows(run, tmp_path, resume="run figures --paper"))  # the streamed run's command
    assert [row["nfe"] for row in rows(run, tmp_path, missing_ok=True)] == [0, 2]
    other = RunIdentity({"model": "other"}, ["a", "b", "c"])
    write_result(other, tmp_path, 1, {"nfe": 1}, CONTEXT)  # a foreign row is never counted
    assert [row["index"] for row in rows(run, tmp_path, missing_ok=True)] == [0, 2]


def test_a_record_survives_its_row(tmp_path):
    record = GenerationRecord(
        "sjd", "a", 7, 12, 0.5, 0.75, 1.5, 1.25, torch.tensor([3, 1, 4]), None,
        torch.tensor([0.9, 0.8], dtype=torch.float64), 0.125, 0.25,
        w1=0.5, w1_sem=0.0625, substitution=None, substitution_sem=None, w1_seconds=0.1,
    )
    run = RunIdentity({"model": "m"}, ["a"])
    start_run(tmp_path, run, CONTEXT)
    write_result(run, tmp_path, 0, record_row(record), CONTEXT)
    (row,) = rows(run, tmp_path)
    back = row_record(row, full=True)
    for name, value in record.__dict__.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(getattr(back, name), value), name
        else:
            assert getattr(back, name) == value, name
    scalars = row_record(row, full=False)
    assert scalars.tokens is None and scalars.top1 is None and scalars.nfe == 12
