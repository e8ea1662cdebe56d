"""gsd_lab.workers: a run's images split over worker processes give the records of
the in-process run, bit for bit, for any number of workers."""

from __future__ import annotations

import pytest
import torch

from gsd_lab.decode.methods import DecodingMethod, AmplifyAcceptance, ClusterAcceptance
from gsd_lab import workers
from gsd_lab.experiments import runs
from gsd_lab.experiments.image_model import tiny_random_model
from gsd_lab.experiments.runs import MethodSpec, Recording, RunCache, resolve_for, run_items

PROMPTS = ["0", "1", "2", "3"]
SPECS = [
    MethodSpec("AR", DecodingMethod("ar")),
    MethodSpec("SJD", DecodingMethod("sjd", window=4)),
    MethodSpec("GSD", DecodingMethod("gsd", window=4, acceptance=ClusterAcceptance(group_size=3))),
    MethodSpec("Amplify", DecodingMethod("sjd", window=4, acceptance=AmplifyAcceptance(scale=2.0))),
]
# Everything a record holds that does not time the run: compared bit for bit.
EXACT = (
    "label",
    "prompt",
    "seed",
    "nfe",
    "acceptance_rate",
    "accepted_per_tested",
    "distortion",
    "w1",
    "w1_sem",
    "substitution",
    "substitution_sem",
)


@pytest.fixture(scope="module")
def model():
    return tiny_random_model()


def _records(model, workers_count: int, seeds=(0,)) -> dict[str, list]:
    recording = Recording(top1=True, distortion=True, w1=None, batch_size=2)
    cache = RunCache(model, PROMPTS, list(seeds), recording=recording, workers=workers_count)
    cache.prefetch(SPECS)
    return {spec.label: cache.records(spec) for spec in SPECS}


def _assert_same(records, reference) -> None:
    assert list(records) == list(reference)
    for label in reference:
        assert len(records[label]) == len(reference[label])
        for a, b in zip(records[label], reference[label]):
            for field in EXACT:
                assert getattr(a, field) == getattr(b, field), (label, field)
            assert torch.equal(a.tokens, b.tokens)
            assert torch.equal(a.top1, b.top1)
            assert (a.image == b.image).all()


def test_plan_units_depends_on_the_jobs_and_the_batch_only():
    size = workers.UNIT_BATCHES * 2
    units = workers.plan_units([10, 3, 0], 2)
    assert units == [
        workers.Unit(0, 0, size),
        workers.Unit(0, size, 10),
        workers.Unit(1, 0, 3),
    ]


def test_one_two_and_three_workers_give_the_same_records(model, one_thread, monkeypatch):
    # Units of one batch: 4 images per configuration at batch 2 are two units each, eight in
    # all, handed to the workers in an order that depends on how fast each finishes.
    monkeypatch.setattr(workers, "UNIT_BATCHES", 1)
    one = _records(model, 1)
    assert len(workers.plan_units([len(PROMPTS)] * len(SPECS), 2)) == 8
    assert any(r.distortion for r in one["GSD"]) and any(r.w1 for r in one["GSD"])
    _assert_same(_records(model, 2), one)
    _assert_same(_records(model, 3), one)


def test_one_worker_decodes_on_one_thread_as_the_workers_do(model, monkeypatch):
    # No one_thread fixture: this process starts at 2 intra-op threads (the default on a
    # many-core machine), and workers=1 must still decode as each worker does, on one thread,
    # then restore the count; its records equal two workers' bit for bit.
    monkeypatch.setattr(workers, "UNIT_BATCHES", 1)
    threads = torch.get_num_threads()
    seen: list[int] = []
    decode_items = runs.decode_items

    def counting(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return decode_items(*args, **kwargs)

    torch.set_num_threads(2)
    try:
        monkeypatch.setattr(runs, "decode_items", counting)
        one = _records(model, 1)
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2  # restored
        monkeypatch.setattr(runs, "decode_items", decode_items)
        two = _records(model, 2)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert any(r.distortion for r in one["GSD"]) and any(r.w1 for r in one["GSD"])
    _assert_same(two, one)


def test_a_configuration_in_one_unit_is_one_stream_of_decode_items(model, one_thread):
    # 4 images per configuration (one unit each): the stream of the one-process path before
    # the workers, so a run within one unit per configuration records what it recorded.
    split = _records(model, 2)
    recording = Recording(top1=True, distortion=True, w1=True, batch_size=2)
    for spec in SPECS:
        items = run_items(model, spec, resolve_for(model, spec.method), PROMPTS, [0])
        stream = runs.decode_items(model, items, recording)
        _assert_same({spec.label: split[spec.label]}, {spec.label: stream})


def test_workers_argument_is_checked_and_defaults_per_device(model):
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="workers"):
            RunCache(model, PROMPTS, [0], workers=bad)
    assert workers.default_workers("cpu") == workers.usable_cores() >= 1
    assert workers.default_workers("cuda") == 1
    assert RunCache(model, PROMPTS, [0], workers=None).workers == workers.usable_cores()


def _shard_rows(out, workers_count: int) -> tuple[dict[int, dict], set[int]]:
    """run_shard over 7 prompts in chunks of 2 on ``workers_count`` processes: the rows written
    (without the writer's pid) and the pids that wrote them."""
    import json
    import os

    from gsd_lab.runs.identity import RunIdentity
    from gsd_lab.runs.ranks import DistributedContext
    from gsd_lab.runs.shards import BatchedWork, run_shard
    from gsd_lab.runs.store import start_run

    run = RunIdentity({"model": "test"}, [f"p{i}" for i in range(7)])
    context = DistributedContext(0, 1, 0, "cpu")
    start_run(out, run, context)

    def decode(items, write):
        for index, prompt in items:
            write(index, {"nfe": index, "chunk": [i for i, _ in items], "pid": os.getpid()})

    done = run_shard(
        run, out, BatchedWork(decode, chunk=2), context, progress=False, workers=workers_count
    )
    assert sorted(done) == list(range(7))
    rows = {i: json.loads((out / "results" / f"{i:06d}.json").read_text()) for i in range(7)}
    pids = {row.pop("pid") for row in rows.values()}
    return rows, pids


def test_evaluate_shard_on_workers_writes_the_rows_of_one_process(tmp_path):
    one, one_pids = _shard_rows(tmp_path / "one", 1)
    two, two_pids = _shard_rows(tmp_path / "two", 2)
    assert one == two and one[6]["chunk"] == [6] and one[3]["chunk"] == [2, 3]
    import os

    assert one_pids == {os.getpid()} and os.getpid() not in two_pids
    with pytest.raises(ValueError, match="workers"):
        _shard_rows(tmp_path / "bad", 0)


def test_evaluate_shard_in_process_runs_on_one_thread(tmp_path):
    # workers=1 on a CPU: the chunks run in this process on one thread, as a forked worker
    # does, and the thread count is restored afterwards.
    from gsd_lab.runs.identity import RunIdentity
    from gsd_lab.runs.ranks import DistributedContext
    from gsd_lab.runs.shards import run_shard
    from gsd_lab.runs.store import start_run

    run = RunIdentity({"model": "test"}, ["p0", "p1"])
    context = DistributedContext(0, 1, 0, "cpu")
    start_run(tmp_path, run, context)
    seen: list[int] = []

    def work(index, prompt):
        seen.append(torch.get_num_threads())
        return {"nfe": index}

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert sorted(run_shard(run, tmp_path, work, context, progress=False, workers=1)) == [0, 1]
        assert seen == [1, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
