"""Batched streamed runs: ``figures --paper`` (``gsd_lab.experiments.stream.StreamedRunCache``) and
``evaluate`` decode ``batch_size`` images per forward through ``generate_batch`` and write the same
result files as at batch size 1 (tokens, NFE, accepted counts, top-1 vectors where recorded, the
exact distortion within 1e-12); resuming skips finished items, sharding splits the same way, and
the default batch size is decided per device in one place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gsd_lab.decode.methods import DecodingMethod, ClusterAcceptance
from gsd_lab.runs.identity import RunIdentity
from gsd_lab.runs.ranks import DistributedContext
from gsd_lab.runs.shards import BatchedWork, run_shard
from gsd_lab.experiments import stream
from gsd_lab.experiments.image_model import tiny_random_model
from gsd_lab.experiments.runs import FilterSettings, MethodSpec, Recording
from gsd_lab.experiments.stream import Configuration, StreamedRunCache
from gsd_lab.models.batched import default_batch_size

PROMPTS = ["0", "1", "2", "3"]
SPECS = [
    MethodSpec("AR", DecodingMethod("ar")),
    MethodSpec("SJD", DecodingMethod("sjd", window=4)),
    MethodSpec("GSD", DecodingMethod("gsd", window=4, acceptance=ClusterAcceptance(group_size=3))),
]
# Guided configurations and one without guidance (its own group within a chunk).
CONFIGURATIONS = [Configuration(s) for s in SPECS] + [
    Configuration(SPECS[0], guided=False, max_prompts=2)
]
COMPARED = ("nfe", "tokens", "accepted_per_tested", "acceptance_rate", "generator_seed")


@pytest.fixture(scope="module")
def model():
    return tiny_random_model()


def _cache(model, out: Path, batch_size: int, rank: int = 0, world: int = 1) -> StreamedRunCache:
    cache = StreamedRunCache(
        model,
        PROMPTS,
        [0],
        FilterSettings.for_model(model.name),
        out,
        weights={"parameters_sha256": "test"},
        context=DistributedContext(rank, world, rank, "cpu"),
        progress=False,
        recording=Recording(distortion=True, w1=None, w1_draws=4, batch_size=batch_size),
    )
    cache.storage.plan(CONFIGURATIONS)
    return cache


def _rows(out: Path) -> dict[str, dict]:
    return {
        str(path.relative_to(out)): json.loads(path.read_text())
        for path in sorted((out / stream.STREAM_DIR).rglob("results/*.json"))
    }


def _assert_same_rows(rows: dict[str, dict], reference: dict[str, dict]) -> None:
    assert rows.keys() == reference.keys()
    for name, row in rows.items():
        ref = reference[name]
        for key in COMPARED:
            assert row.get(key) == ref.get(key), (name, key)
        # Probabilities: the batched forward may round the last bit (gsd_lab.models.batched).
        for key in ("distortion", "w1", "top1"):
            assert (row.get(key) is None) == (ref.get(key) is None), (name, key)
            if ref.get(key) is not None:
                got, want = torch.tensor(row[key]), torch.tensor(ref[key])
                assert got.shape == want.shape and (got - want).abs().max() <= 1e-12, (name, key)


def test_a_batched_paper_stream_writes_the_files_of_batch_1_and_resumes(model, tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "CHUNK_BATCHES", 2)  # several chunks, each split by guidance
    one, three = tmp_path / "one", tmp_path / "three"
    assert _cache(model, one, 1).storage.run() == 14
    reference = _rows(one)
    assert len(reference) == 14  # 3 configurations x 4 prompts + 2 without guidance
    assert sum("top1" in row for row in reference.values()) == 6  # AR rows only
    cache = _cache(model, three, 3)
    assert cache.storage.run() == 14
    _assert_same_rows(_rows(three), reference)
    # the batched rows' times are shares of their batches; the single rows' are their own
    assert all(row["wall_seconds"] > 0 for row in _rows(three).values())

    # Resume: remove a few results; a new batched run decodes exactly those, nothing else.
    removed = sorted(_rows(three))[::3]
    stamps = {name: (three / name).stat().st_mtime_ns for name in _rows(three)}
    for name in removed:
        (three / name).unlink()
    again = _cache(model, three, 3)
    assert len(again.storage.remaining()) == len(removed)
    assert again.storage.run() == len(removed)
    rows = _rows(three)
    _assert_same_rows(rows, reference)
    kept = [name for name in rows if name not in removed]
    assert all((three / name).stat().st_mtime_ns == stamps[name] for name in kept)
    assert _cache(model, three, 3).storage.run() == 0
    # The tables read the batched run as the single one.
    for spec in SPECS:
        assert [r.nfe for r in again.records(spec)] == [r.nfe for r in _cache(model, one, 1).records(spec)]


@pytest.mark.parametrize("batch_size", [1, 3])
def test_a_streamed_run_records_what_the_in_process_cache_records(model, tmp_path, batch_size):
    """One run path: a streamed run's rows, read back, are the records of an in-process
    ``RunCache`` with the same ``Recording``, bit for bit (every field but the clocks; tokens and
    top-1 through ``detail_records``), guided configurations and AR without guidance alike. At
    batch 3 the two stream the images in other batches (the stream mixes configurations within
    a chunk), so only tokens, NFE and acceptance are compared exactly there."""
    from gsd_lab.experiments.runs import RunCache

    streamed = _cache(model, tmp_path, batch_size)
    assert streamed.storage.run() == 14
    # every planned row's accounting time, before the tables read any configuration
    assert len(streamed.accounting_seconds()) == len(streamed.w1_seconds()) == 14
    cache = RunCache(model, PROMPTS, [0], streamed.filters, recording=streamed.recording)
    exact = ("label", "prompt", "seed", "nfe", "acceptance_rate", "accepted_per_tested")
    if batch_size == 1:
        exact += ("distortion", "w1", "w1_sem", "substitution", "substitution_sem")
    for spec in SPECS:
        mine, theirs = cache.records(spec), streamed.records(spec)
        assert len(mine) == len(theirs) == len(PROMPTS)
        assert [[getattr(r, f) for f in exact] for r in theirs] == [
            [getattr(r, f) for f in exact] for r in mine
        ], spec.label
        assert all(torch.equal(a.tokens, b.tokens) for a, b in
                   zip(streamed.detail_records(spec), mine))
    unguided = cache.detail_records(SPECS[0], 2, guided=False)
    assert [r.tokens.tolist() for r in streamed.detail_records(SPECS[0], 2, guided=False)] == [
        r.tokens.tolist() for r in unguided
    ]


def test_a_batched_shard_decodes_the_items_of_the_same_shard(model, tmp_path):
    single, batched = tmp_path / "single", tmp_path / "batched"
    for out, size in ((single, 1), (batched, 4)):
        assert _cache(model, out, size, rank=1, world=2).storage.run() == 7
    assert _rows(batched).keys() == _rows(single).keys()
    _assert_same_rows(_rows(batched), _rows(single))
    cache = _cache(model, batched, 4, rank=1, world=2)
    assert all(cache.storage.done(cache.storage.items[i]) == (i % 2 == 1)
               for i in range(len(cache.storage.items)))


def test_batched_work_writes_every_item_and_a_missing_one_raises(tmp_path):
    run = RunIdentity({"model": "test"}, [f"p{i}" for i in range(5)])
    context = DistributedContext(0, 1, 0, "cpu")
    from gsd_lab.runs.store import start_run

    start_run(tmp_path, run, context)
    calls = []

    def decode(items, write):
        calls.append([index for index, _ in items])
        for index, prompt in reversed(items):  # any order
            write(index, {"nfe": index, "text": prompt})

    done = run_shard(run, tmp_path, BatchedWork(decode, chunk=2), context, progress=False)
    assert calls == [[0, 1], [2, 3], [4]] and sorted(done) == [0, 1, 2, 3, 4]
    assert run_shard(run, tmp_path, BatchedWork(decode, chunk=2), context, progress=False) == []
    (tmp_path / "results" / "000003.json").unlink()
    calls.clear()
    assert run_shard(run, tmp_path, BatchedWork(decode, chunk=2), context, progress=False) == [3]
    assert calls == [[3]]
    (tmp_path / "results" / "000001.json").unlink()
    with pytest.raises(RuntimeError, match=r"without writing prompts \[1\]"):
        run_shard(run, tmp_path, BatchedWork(lambda items, write: None, 2), context, progress=False)
    with pytest.raises(ValueError, match="chunk"):
        BatchedWork(decode, chunk=0)


def _evaluate(out: Path, prompts: Path, *extra: str) -> dict[int, dict]:
    from gsd_lab.cli import main

    argv = ["evaluate", "--model", "tiny-random", "--method", "gsd", "--group-size", "3",
            "--prompts", str(prompts), "--out", str(out), "--no-progress", "--no-images", *extra]
    assert main(argv) == 0
    return {int(p.stem): json.loads(p.read_text()) for p in sorted((out / "results").glob("*.json"))}


def test_cli_evaluate_batched_gives_the_rows_of_batch_1_and_resumes(tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(["0", "1", "2", "3", "0", "2", "1"]) + "\n")
    single = _evaluate(tmp_path / "one", prompts, "--batch-size", "1")
    batched = _evaluate(tmp_path / "three", prompts, "--batch-size", "3")
    assert sorted(single) == sorted(batched) == list(range(7))
    for index in single:
        for key in ("nfe", "tokens", "acceptance_rate", "generator_seed", "prompt"):
            assert batched[index][key] == single[index][key], (index, key)
    summary = json.loads((tmp_path / "three" / "summary.json").read_text())
    assert summary["complete"] and summary["config"]["batch_size"] == 3
    # Resume with another batch size: the same run (the batch size is not part of its identity).
    (tmp_path / "three" / "results" / "000004.json").unlink()
    stamp = (tmp_path / "three" / "results" / "000000.json").stat().st_mtime_ns
    resumed = _evaluate(tmp_path / "three", prompts, "--batch-size", "2")
    assert resumed[4]["tokens"] == single[4]["tokens"]
    assert (tmp_path / "three" / "results" / "000000.json").stat().st_mtime_ns == stamp
    # The static runner batches too (StaticBatchRunner): the rows of the static path alone.
    static = _evaluate(tmp_path / "static1", prompts, "--batch-size", "1", "--runner", "static")
    static3 = _evaluate(tmp_path / "static3", prompts, "--batch-size", "3", "--runner", "static")
    assert [static3[i]["tokens"] for i in range(7)] == [static[i]["tokens"] for i in range(7)]
    assert [static3[i]["nfe"] for i in range(7)] == [static[i]["nfe"] for i in range(7)]
    # The default on the CPU is batched (default_batch_size), with the same rows.
    default = _evaluate(tmp_path / "default", prompts)
    assert [default[i]["tokens"] for i in range(7)] == [single[i]["tokens"] for i in range(7)]
    config = json.loads((tmp_path / "default" / "summary.json").read_text())["config"]
    assert config["batch_size"] == default_batch_size("cpu") > 1


def test_cli_batch_size_checks(capsys, tmp_path):
    from gsd_lab.cli import main

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("0\n")
    base = ["evaluate", "--model", "tiny-random", "--prompts", str(prompts), "--out", str(tmp_path / "r")]
    for argv, message in (
        ([*base, "--batch-size", "0"], "--batch-size must be >= 1"),
        (["figures", "--batch-size", "-1", "--out", str(tmp_path / "f")], "--batch-size must be >= 1"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_default_batch_size_per_device():
    """Batched by default on every device (a CPU gains with its cores: ``default_batch_size``)."""
    from gsd_lab.models.batched import CPU_BATCH_SIZE

    assert CPU_BATCH_SIZE > 1
    assert default_batch_size("cpu") == default_batch_size(torch.device("cpu")) == CPU_BATCH_SIZE
    assert default_batch_size("cuda:1") == default_batch_size("cuda") == 8
    assert default_batch_size("meta") == CPU_BATCH_SIZE


def test_prefetch_decodes_nothing_and_refuses_an_unplanned_configuration(model, tmp_path):
    """The plan decodes into result files: ``prefetch`` of planned configurations decodes nothing
    (no records in memory, no files), and one outside the plan is refused by name."""
    cache = _cache(model, tmp_path, batch_size=2)
    cache.prefetch(SPECS)
    assert cache.decoded() == {} and _rows(tmp_path) == {}
    unplanned = MethodSpec("SJD-8", DecodingMethod("sjd", window=8))
    with pytest.raises(ValueError, match="SJD-8 .* is not a configuration of this paper run"):
        cache.prefetch([unplanned])
