"""The run identity (gsd_lab.runs) never mixes runs: a re-run into the same folder with another configuration
or a changed prompt list is refused (naming what differs) before any work; rows record their
run; the summary is complete only when every row belongs to the run; weights fingerprints."""

from __future__ import annotations

import json

import pytest
import torch

from gsd_lab.runs.identity import RunIdentity, RunMismatch, folder_fingerprint, parameters_fingerprint, weights_fingerprint
from gsd_lab.runs.ranks import DistributedContext
from gsd_lab.runs.shards import evaluate
from gsd_lab.runs.store import RUN_FILE, check_run, load_result, merge_results, read_run, result_path

PROMPTS = ["astronaut", "flower", "lighthouse", "cat"]
SJD = {"model": "m", "weights": {"parameters_sha256": "abc"}, "decoding": {"method": "sjd", "group_size": 0},
       "seed": 0}
GSD = {"model": "m", "weights": {"parameters_sha256": "abc"}, "decoding": {"method": "gsd", "group_size": 50},
       "seed": 0}
SINGLE = DistributedContext(0, 1, 0, "cpu")


class Recorder:
    """A work function that records which prompts it ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def __call__(self, index: int, prompt: str) -> dict:
        self.calls.append((index, prompt))
        return {"nfe": 10 + index, "seed": index}


def _run(out, prompts=PROMPTS, identity=SJD) -> tuple[dict, Recorder]:
    work = Recorder()
    return evaluate(prompts, out, work, SINGLE, identity=identity, progress=False), work


def test_rows_record_the_run_and_their_prompt(tmp_path):
    summary, work = _run(tmp_path)
    assert summary["complete"] and work.calls == list(enumerate(PROMPTS))
    run = RunIdentity(SJD, PROMPTS)
    assert summary["run_id"] == run.run_id and summary["identity"] == SJD
    recorded = json.loads((tmp_path / RUN_FILE).read_text())
    assert recorded["prompts"] == PROMPTS and recorded["identity"] == SJD and recorded["run_id"] == run.run_id
    for index, prompt in enumerate(PROMPTS):
        row = json.loads(result_path(tmp_path, index).read_text())
        assert row["prompt"] == prompt and row["index"] == index and row["run_id"] == run.run_id
        assert row["run"] == SJD  # model, weights fingerprint, decoding spec, seed


def test_another_configuration_is_refused_before_any_work(tmp_path):
    first, _ = _run(tmp_path)
    before = {p.name: p.read_text() for p in tmp_path.rglob("*.json")}
    with pytest.raises(RunMismatch) as caught:
        _run(tmp_path, identity=GSD)
    message = str(caught.value)
    assert "decoding.method" in message and '"sjd"' in message and '"gsd"' in message
    assert "decoding.group_size" in message and "new --out" in message
    assert "seed" not in message.split("What differs:")[1]  # only what differs is named
    assert {p.name: p.read_text() for p in tmp_path.rglob("*.json")} == before  # nothing written
    with pytest.raises(RunMismatch, match="seed: 0 in the existing run, 1 now"):
        _run(tmp_path, identity={**SJD, "seed": 1})
    with pytest.raises(RunMismatch, match="weights.parameters_sha256"):
        _run(tmp_path, identity={**SJD, "weights": {"parameters_sha256": "def"}})


def test_the_same_configuration_resumes_only_unfinished_prompts(tmp_path):
    _run(tmp_path)
    result_path(tmp_path, 2).unlink()
    summary, work = _run(tmp_path)
    assert work.calls == [(2, "lighthouse")] and summary["complete"] and summary["finished"] == 4


@pytest.mark.parametrize("change, expected", [
    (lambda p: [p[1], p[0], *p[2:]], "reordered: 2 of 4 prompts differ; prompt 0 is 'flower' now, 'astronaut'"),
    (lambda p: [*p[:3], "dog"], "edited: 1 of 4 prompts differ; prompt 3 is 'dog' now, 'cat'"),
    (lambda p: p[:3], "3 prompts now, 4 in the existing run"),
    (lambda p: [*p, "dog"], "5 prompts now, 4 in the existing run"),
])
def test_a_changed_prompt_list_is_detected(tmp_path, change, expected):
    _run(tmp_path)
    with pytest.raises(RunMismatch, match="the prompt list") as caught:
        _run(tmp_path, prompts=change(list(PROMPTS)))
    assert expected in str(caught.value)
    with pytest.raises(RunMismatch):
        merge_results(tmp_path, change(list(PROMPTS)))


def test_a_row_of_another_run_is_never_counted(tmp_path):
    """A row copied in from another run (same index, other configuration): the merge does not
    count it (complete false, listed as foreign) and a resume refuses to run over it."""
    other = tmp_path / "other"
    _run(other, identity=GSD)
    _run(tmp_path)
    result_path(tmp_path, 1).write_text(result_path(other, 1).read_text())
    run = read_run(tmp_path)
    assert not run.row_matches(load_result(tmp_path, 1), 1)
    assert run.row_matches(load_result(tmp_path, 0), 0)
    summary = merge_results(tmp_path)
    assert not summary["complete"] and summary["foreign"] == [1] and summary["finished"] == 3
    assert summary["mean"]["nfe"] == pytest.approx((10 + 12 + 13) / 3)
    with pytest.raises(RunMismatch, match="000001.json is not prompt 1 of this run"):
        _run(tmp_path)


def test_results_without_a_run_file_are_refused(tmp_path):
    _run(tmp_path)
    (tmp_path / RUN_FILE).unlink()
    with pytest.raises(RunMismatch, match="no run.json"):
        _run(tmp_path)


def test_an_edited_run_file_is_refused(tmp_path):
    _run(tmp_path)
    record = json.loads((tmp_path / RUN_FILE).read_text())
    record["identity"]["seed"] = 7
    (tmp_path / RUN_FILE).write_text(json.dumps(record))
    with pytest.raises(RunMismatch, match="edited"):
        _run(tmp_path)


def test_partial_check_compares_only_the_fields_known_before_loading(tmp_path):
    _run(tmp_path)
    check_run(tmp_path, {"model": "m", "decoding": {"method": "sjd"}}, PROMPTS, partial=True)
    with pytest.raises(RunMismatch, match="decoding.method"):
        check_run(tmp_path, {"model": "m", "decoding": {"method": "gsd"}}, PROMPTS, partial=True)
    with pytest.raises(RunMismatch, match="weights"):  # a full check needs every field
        check_run(tmp_path, {"model": "m", "decoding": SJD["decoding"], "seed": 0}, PROMPTS)
    check_run(tmp_path / "fresh", GSD, PROMPTS)  # an empty folder holds no run


def test_folder_fingerprint_follows_content_not_place(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        (folder / "sub").mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(bytes(range(256)) * 10)
        (folder / "sub" / "config.json").write_text('{"x": 1}')
        (folder / "README.md").write_text("notes")  # not a weights file
        (folder / ".cache").mkdir()
        (folder / ".cache" / "lock.json").write_text("{}")  # hidden: skipped
    (b / "README.md").write_text("other notes")
    (b / ".cache" / "lock.json").write_text('{"other": 1}')
    assert folder_fingerprint(a) == folder_fingerprint(b)
    (b / "sub" / "config.json").write_text('{"x": 2}')
    assert folder_fingerprint(a) != folder_fingerprint(b)
    assert weights_fingerprint({"weights_dir": str(a)}) == {"weights_dir_fingerprint": folder_fingerprint(a)}


def test_large_files_are_fingerprinted_by_size_and_ends(tmp_path, monkeypatch):
    import gsd_lab.runs.identity as evaluate_module

    monkeypatch.setattr(evaluate_module, "_FULL_HASH_LIMIT", 1024)
    monkeypatch.setattr(evaluate_module, "_EDGE_BYTES", 100)
    path = tmp_path / "w.safetensors"
    path.write_bytes(bytes(5000))
    base = folder_fingerprint(tmp_path)
    path.write_bytes(bytes(4999) + b"\x01")  # last byte changed
    assert folder_fingerprint(tmp_path) != base
    path.write_bytes(bytes(5001))  # size changed
    assert folder_fingerprint(tmp_path) != base


def test_parameters_fingerprint_tells_models_apart():
    def linear(seed: int, dtype=torch.float32) -> torch.nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return torch.nn.Linear(3, 2).to(dtype)

    assert parameters_fingerprint(linear(0)) == parameters_fingerprint(linear(0))
    assert parameters_fingerprint(linear(0)) != parameters_fingerprint(linear(1))
    assert parameters_fingerprint(linear(0)) != parameters_fingerprint(linear(0, torch.bfloat16))
    assert parameters_fingerprint(linear(0, torch.bfloat16))  # no numpy dtype needed
    assert set(weights_fingerprint({}, linear(0))) == {"parameters_sha256"}
    with pytest.raises(ValueError, match="no weights folder"):
        weights_fingerprint({"weights": "/nonexistent/folder"})
