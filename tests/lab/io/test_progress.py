"""Progress lines: done / to do, what came from disk, an ETA weighted by work; and the lines
``RunCache`` prints per configuration on Lumina-mGPT (the notebooks' path)."""

from __future__ import annotations

import io

import pytest

from gsd_lab.io.progress import ProgressLog, duration


def test_lines_say_done_to_do_resumed_and_a_weighted_eta(monkeypatch):
    clock = iter([0.0, 0.0, 10.0, 10.0, 10.0, 20.0, 20.0, 20.0])
    monkeypatch.setattr("gsd_lab.io.progress.time.perf_counter", lambda: next(clock))
    out = io.StringIO()
    log = ProgressLog(10, desc="run", done=4, interval=0.0, stream=out)
    log.advance(work=100.0, remaining_work=500.0)  # 10 s for 100 forwards: 500 left are 50 s
    assert log.eta_seconds() == pytest.approx(50.0)
    log.advance(work=100.0)  # no remaining given: the mean per item so far (10 s) times the 4 left
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("run: 5/10 (5 to do) done, 4 from disk; 10 s elapsed, ETA 50 s")
    assert lines[1].startswith("run: 6/10 (4 to do) done, 4 from disk; 20 s elapsed, ETA 40 s")
    assert [duration(s) for s in (42, 300, 7200, 259200)] == ["42 s", "5.0 min", "2.0 h", "3.0 days"]


def test_run_cache_prints_a_line_per_configuration_when_asked(capsys):
    from gsd_lab.experiments import tables
    from gsd_lab.experiments.image_model import tiny_random_model
    from gsd_lab.experiments.runs import FilterSettings, RunCache

    model = tiny_random_model()
    quiet = RunCache(model, ["0", "1"], [0], FilterSettings())
    assert not quiet.progress_lines  # only Lumina-mGPT prints by default
    cache = RunCache(model, ["0", "1"], [0], FilterSettings(), progress_lines=True)
    cache.records(tables.AR)
    err = capsys.readouterr().err
    assert "tiny-random, AR (0 configurations decoded before it): 1/2 (1 to do) done" in err
    assert "2/2 (0 to do) done" in err
