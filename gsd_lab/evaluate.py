"""Sharded, resumable evaluation over a prompt list with torch.distributed.

Launch with ``torchrun --nproc_per_node N -m gsd_lab evaluate ...`` (or ``accelerate launch``;
plain ``python -m gsd_lab evaluate`` is a single process). Prompt i goes to rank i mod N and is
generated with seed ``seed + i`` (so results do not depend on N). Each finished prompt is one
JSON file ``results/{i:06d}.json`` (and its image), written atomically (temporary file, then
os.replace): a crash loses at most the prompts in flight. Work is one prompt at a time (a
callable ``work(index, prompt) -> row``) or several together (``BatchedWork``: e.g. batched
decoding, each row written as soon as its prompt is done). After a barrier, rank 0 merges all
results into ``results.jsonl`` and ``summary.json`` (NCCL when each rank has a GPU, else gloo).

A run never mixes configurations. Its identity is a JSON dict from the caller (for the CLI: model
name, a fingerprint of the weights, the full decoding spec, the base seed) plus the prompt list;
``run_id`` is the SHA-256 of both. The out folder holds ``run.json`` (identity, prompts, run_id);
every result row records ``run_id``, the identity, its index and its prompt text. A re-run into
the same folder resumes only when identity and prompt list are equal; otherwise it is refused
with ``RunMismatch`` naming what differs (reordered, edited, added or removed prompts included):
use another folder for another configuration (the number of processes is not part of it). A
row counts as finished only when it matches the run; ``complete: true`` when every prompt has one.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from .io.provenance import atomic_write_json, atomic_write_text

RESULTS_DIR = "results"
RUN_FILE = "run.json"


@dataclass(frozen=True)
class DistributedContext:
    """This process's place in the job: rank, world size, local rank, device."""

    rank: int
    world_size: int
    local_rank: int
    device: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str | None = None) -> DistributedContext:
    """Join the process group that torchrun / accelerate describe in RANK, WORLD_SIZE,
    LOCAL_RANK (and MASTER_ADDR/PORT); a single process without them. Each rank uses
    cuda:LOCAL_RANK when CUDA is available and ``device`` is None or "cuda"."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device is None:
        device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and world > 1:
        device = f"cuda:{local_rank}"  # one GPU per rank, not every rank on cuda:0
    if world > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
        torch.distributed.init_process_group(backend=backend)
    return DistributedContext(rank, world, local_rank, device)


def barrier(context: DistributedContext) -> None:
    if context.world_size > 1 and torch.distributed.is_initialized():
        torch.distributed.barrier()


def result_path(out_dir: str | Path, index: int) -> Path:
    """Where prompt ``index``'s result lives: ``out_dir/results/{index:06d}.json``."""
    return Path(out_dir) / RESULTS_DIR / f"{index:06d}.json"


def shard_indices(num_prompts: int, rank: int, world_size: int) -> list[int]:
    """Prompt indices of one rank: i with i mod world_size == rank."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank {rank}, world_size {world_size}")
    return list(range(rank, num_prompts, world_size))


class RunMismatch(ValueError):
    """The out folder holds (part of) another run: another configuration or prompt list."""


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Run:
    """What a run is: ``identity`` (a JSON-ready dict: model, weights fingerprint, decoding spec,
    seed, ...) and the prompt list. run_id = SHA-256 of the canonical JSON of both."""

    identity: dict[str, Any]
    prompts: list[str]
    run_id: str = field(init=False)

    def __post_init__(self) -> None:
        # JSON round trip: tuples become lists, keys strings, so that a run read back from
        # run.json compares equal to the one that wrote it.
        object.__setattr__(self, "identity", json.loads(_canonical(self.identity)))
        object.__setattr__(self, "prompts", [str(p) for p in self.prompts])
        object.__setattr__(
            self,
            "run_id",
            _sha256(_canonical({"identity": self.identity, "prompts": self.prompts})),
        )

    @property
    def prompts_sha256(self) -> str:
        return _sha256(_canonical(self.prompts))

    def row_fields(self, index: int) -> dict[str, Any]:
        """What every result row records about its run and prompt."""
        return {
            "run_id": self.run_id,
            "run": self.identity,
            "prompts_sha256": self.prompts_sha256,
            "index": index,
            "prompt": self.prompts[index],
        }

    def row_matches(self, row: dict[str, Any], index: int) -> bool:
        """True when ``row`` is prompt ``index`` of this run (same run_id, index and prompt)."""
        return (
            row.get("run_id") == self.run_id
            and row.get("index") == index
            and row.get("prompt") == self.prompts[index]
        )


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1} (leaves: anything but a non-empty dict)."""
    if not isinstance(data, dict) or not data:
        return {prefix: data}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def identity_differences(
    stored: dict[str, Any], current: dict[str, Any], *, partial: bool = False
) -> list[str]:
    """One line per differing field ("decoding.method.window: 16 in the existing run, 8 now").
    partial: compare only the fields ``current`` has (a check before the model is loaded)."""
    old, new = _flatten(json.loads(_canonical(stored))), _flatten(json.loads(_canonical(current)))
    keys = sorted(new) if partial else sorted(set(old) | set(new))
    missing = "(absent)"
    return [
        f"{key}: {json.dumps(old.get(key, missing))} in the existing "
        f"run, {json.dumps(new.get(key, missing))} now"
        for key in keys
        if old.get(key, missing) != new.get(key, missing)
    ]


def prompt_differences(stored: list[str], current: list[str]) -> str | None:
    """None when equal, else what changed: the count, or the first changed position and how
    many differ (reordered or edited lines)."""
    if stored == current:
        return None
    if len(stored) != len(current):
        return f"the prompt list has {len(current)} prompts now, {len(stored)} in the existing run"
    changed = [i for i, (a, b) in enumerate(zip(stored, current)) if a != b]
    first = changed[0]
    kind = "reordered" if sorted(stored) == sorted(current) else "edited"
    return (
        f"the prompt list was {kind}: {len(changed)} of {len(current)} prompts differ; prompt "
        f"{first} is {current[first]!r} now, {stored[first]!r} in the existing run"
    )


def read_run(out_dir: str | Path) -> Run | None:
    """The run recorded in ``out_dir/run.json`` (None when there is none)."""
    path = Path(out_dir) / RUN_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        run = Run(data["identity"], data["prompts"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise RunMismatch(f"{path} is unreadable ({error}); use a new --out folder") from error
    if data.get("run_id") != run.run_id:
        raise RunMismatch(
            f"{path} was edited (its run_id does not match its content); use a new --out folder"
        )
    return run


def _result_files(out_dir: str | Path) -> list[Path]:
    folder = Path(out_dir) / RESULTS_DIR
    return sorted(folder.glob("[0-9]*.json")) if folder.is_dir() else []


def check_run(
    out_dir: str | Path, identity: dict[str, Any], prompts: list[str], *, partial: bool = False
) -> None:
    """Raise ``RunMismatch`` when ``out_dir`` holds another run than (identity, prompts): its
    run.json differs (every differing field and the prompt change are named), or it holds
    result files without a run.json. partial: compare only the fields ``identity`` has."""
    stored = read_run(out_dir)
    if stored is None:
        if _result_files(out_dir):
            raise RunMismatch(
                f"{Path(out_dir) / RESULTS_DIR} holds results but there is no {RUN_FILE} "
                "saying which run wrote them; use a new --out folder"
            )
        return
    problems = identity_differences(stored.identity, identity, partial=partial)
    prompt_change = prompt_differences(stored.prompts, [str(p) for p in prompts])
    if prompt_change:
        problems.append(prompt_change)
    if problems:
        raise RunMismatch(
            f"{out_dir} holds another run (see {Path(out_dir) / RUN_FILE}); "
            "resuming would mix runs. What differs: "
            + "; ".join(problems)
            + ". Use a new --out folder for this configuration "
            "(or restore the previous one to resume it)."
        )


def start_run(
    out_dir: str | Path,
    run: Run,
    context: DistributedContext,
    *,
    metadata: dict[str, Any] | None = None,
    write: bool | None = None,
) -> None:
    """Check ``out_dir`` against ``run`` on every rank, then write run.json if absent: on rank 0
    (``write`` None), or on every rank that passes ``write=True`` (for callers without a barrier:
    the write is atomic and the content the same). ``metadata`` (not compared): e.g. where the
    weights were read from, the code version."""
    check_run(out_dir, run.identity, run.prompts)
    barrier(context)
    path = Path(out_dir) / RUN_FILE
    if (context.is_main if write is None else write) and not path.is_file():
        atomic_write_json(
            path,
            {
                "run_id": run.run_id,
                "identity": run.identity,
                "prompts": run.prompts,
                "prompts_sha256": run.prompts_sha256,
                "metadata": metadata or {},
            },
        )
    Path(out_dir, RESULTS_DIR).mkdir(parents=True, exist_ok=True)
    barrier(context)


def load_result(out_dir: str | Path, index: int) -> dict[str, Any] | None:
    """The result file of prompt ``index`` as written (any run), or None when there is none.
    A present file is complete (atomic writes); one that does not parse counts as absent."""
    path = result_path(out_dir, index)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


@dataclass(frozen=True)
class BatchedWork:
    """Work on several prompts at once. ``decode(items, write)``: items [(index, prompt)], in
    order; it calls ``write(index, row)`` for each item as soon as that item is done (any
    order), and returns when all are. ``chunk``: the most items given to one call (host memory,
    and what a crash can lose: at most the unwritten items of one call)."""

    decode: Callable[[list[tuple[int, str]], Callable[[int, dict[str, Any]], None]], None]
    chunk: int

    def __post_init__(self) -> None:
        if isinstance(self.chunk, bool) or not isinstance(self.chunk, int) or self.chunk < 1:
            raise ValueError(f"BatchedWork.chunk must be an int >= 1, got {self.chunk!r}")


def run_shard(
    run: Run,
    out_dir: str | Path,
    work: Callable[[int, str], dict[str, Any]] | BatchedWork,
    context: DistributedContext,
    *,
    progress: bool = True,
    workers: int = 1,
) -> list[int]:
    """Run ``work(index, prompt) -> result dict`` (or a ``BatchedWork`` over chunks of them)
    for this rank's unfinished prompts and write each result atomically (with the run's fields,
    ``Run.row_fields``) as soon as it is done. Returns the indices run now, chunk by chunk,
    each chunk's in the order finished. The shard (``shard_indices``) and the skipping of
    finished prompts do not depend on the kind of work. A result file of another run raises
    ``RunMismatch`` (after ``start_run`` this means a file was copied in or edited by hand).

    workers > 1 (on a CPU): the chunks (a ``BatchedWork``'s ``chunk`` prompts, else one prompt)
    run on that many forked processes, one intra-op thread each; otherwise in this process, on
    one intra-op thread too on a CPU (``workers.run_units``: the chunks, and so every
    result file, are the same for any number of workers)."""
    from tqdm.auto import tqdm

    from .workers import run_units

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    todo = [
        index
        for index in shard_indices(len(run.prompts), context.rank, context.world_size)
        if not is_done(run, out_dir, index)
    ]
    size = work.chunk if isinstance(work, BatchedWork) else 1
    chunks = [todo[start : start + size] for start in range(0, len(todo), size)]
    bar = tqdm(
        total=len(todo),
        unit="img",
        desc=f"rank {context.rank}",
        disable=not progress,
        position=context.rank,
    )

    def run_chunk(position: int, bar: Any) -> list[int]:
        """Run and write the prompts of chunk ``position``; returns them in the order
        finished."""
        part, done = chunks[position], []

        def write(index: int, row: dict[str, Any]) -> None:
            write_result(run, out_dir, index, row, context)
            done.append(index)
            if bar is not None:
                bar.update(1)

        if isinstance(work, BatchedWork):
            work.decode([(index, run.prompts[index]) for index in part], write)
            missing = sorted(set(part) - set(done))
            if missing:
                raise RuntimeError(f"BatchedWork.decode returned without writing prompts {missing}")
        else:
            for index in part:
                write(index, work(index, run.prompts[index]))
        return done

    try:
        done = run_units(
            run_chunk, len(chunks), workers=workers, device=context.device or "cpu", progress=bar
        )
    finally:
        bar.close()
    return [index for part in done for index in part]


def finished_row(run: Run, out_dir: str | Path, index: int) -> dict[str, Any] | None:
    """Prompt ``index``'s result row of ``run`` in ``out_dir``, None when there is none; a result
    file of another run raises ``RunMismatch`` (after ``start_run`` this means a file was copied
    in or edited)."""
    row = load_result(out_dir, index)
    if row is None:
        return None
    if not run.row_matches(row, index):
        raise RunMismatch(
            f"{result_path(out_dir, index)} is not prompt {index} of this run "
            f"(run_id {row.get('run_id')!r}, prompt {row.get('prompt')!r}); remove it or use a new "
            "--out folder"
        )
    return row


def is_done(run: Run, out_dir: str | Path, index: int) -> bool:
    """Whether prompt ``index`` of ``run`` has its result in ``out_dir`` (``finished_row``)."""
    return finished_row(run, out_dir, index) is not None


def write_result(
    run: Run, out_dir: str | Path, index: int, result: dict[str, Any], context: DistributedContext
) -> dict[str, Any]:
    """Write prompt ``index``'s ``result`` atomically with the run's fields (``Run.row_fields``)
    and the rank; returns the row written."""
    row = dict(result)
    row.update(run.row_fields(index), rank=context.rank)
    atomic_write_json(result_path(out_dir, index), row)
    return row


def _means(rows: Iterable[dict[str, Any]]) -> dict[str, float]:
    rows = list(rows)
    numeric = sorted(
        {
            k
            for row in rows
            for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        - {"index", "rank", "seed"}
    )
    return {
        k: sum(row[k] for row in rows if k in row) / max(1, sum(k in row for row in rows))
        for k in numeric
    }


def merge_results(
    out_dir: str | Path, prompts: list[str] | None = None, *, config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Collect the rows of the run in ``out_dir/run.json`` into ``results.jsonl`` (prompt order)
    and ``summary.json``.

    prompts: when given, must be the run's prompt list (else ``RunMismatch``). summary: run_id
    and identity, the number finished, ``missing`` (no row), ``foreign`` (a row of another run
    or prompt: not counted), ``complete`` (every prompt has a row of this run) and the mean of
    every numeric field over the finished rows (e.g. nfe, acceptance_rate, a quality score)."""
    run = read_run(out_dir)
    if run is None:
        raise RunMismatch(f"no {RUN_FILE} in {out_dir}: nothing to merge")
    if prompts is not None and (
        change := prompt_differences(run.prompts, [str(p) for p in prompts])
    ):
        raise RunMismatch(f"cannot merge {out_dir}: {change}")
    rows, missing, foreign = [], [], []
    for index in range(len(run.prompts)):
        row = load_result(out_dir, index)
        if row is None:
            missing.append(index)
        elif not run.row_matches(row, index):
            foreign.append(index)
        else:
            rows.append(row)
    summary = {
        "run_id": run.run_id,
        "identity": run.identity,
        "num_prompts": len(run.prompts),
        "finished": len(rows),
        "missing": missing,
        "foreign": foreign,
        "complete": not missing and not foreign,
        "mean": _means(rows),
        "config": config or {},
    }
    atomic_write_text(
        Path(out_dir) / "results.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    )
    atomic_write_json(Path(out_dir) / "summary.json", summary)
    return summary


def evaluate(
    prompts: list[str],
    out_dir: str | Path,
    work: Callable[[int, str], dict[str, Any]] | BatchedWork,
    context: DistributedContext,
    *,
    identity: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    progress: bool = True,
    workers: int = 1,
) -> dict[str, Any] | None:
    """Check or record the run (``identity`` + ``prompts``, see the module docstring), run this
    rank's shard (``work``: ``run_shard``'s), wait for all ranks, merge on rank 0 (returns the
    summary there, None on other ranks). Raises ``RunMismatch`` when ``out_dir`` holds another run.

    ``identity`` must hold everything the results depend on besides the prompts (the CLI
    passes model, weights fingerprint, decoding spec and seed); ``config``: extra, uncompared
    fields for summary.json (e.g. world_size); ``metadata``: uncompared fields for run.json.
    workers: processes this rank's chunks run on (``run_shard``)."""
    if not prompts:
        raise ValueError("no prompts to evaluate")
    run = Run(identity or {}, prompts)
    start_run(out_dir, run, context, metadata=metadata)
    run_shard(run, out_dir, work, context, progress=progress, workers=workers)
    barrier(context)
    summary = merge_results(out_dir, config=config) if context.is_main else None
    barrier(context)
    return summary


WEIGHT_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".json",
    ".yaml",
    ".yml",
    ".model",
    ".tiktoken",
)
_FULL_HASH_LIMIT = 64 * 2**20
_EDGE_BYTES = 2**20


def _file_digest(path: Path) -> str:
    """SHA-256 of the file (files above 64 MiB: of its size, first and last MiB, which tells
    apart any two checkpoints met in practice without reading a whole multi-GB checkpoint)."""
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        if size <= _FULL_HASH_LIMIT:
            for block in iter(lambda: handle.read(2**20), b""):
                digest.update(block)
        else:
            digest.update(str(size).encode())
            digest.update(handle.read(_EDGE_BYTES))
            handle.seek(size - _EDGE_BYTES)
            digest.update(handle.read(_EDGE_BYTES))
    return digest.hexdigest()


def folder_fingerprint(folder: str | Path) -> str:
    """SHA-256 over (relative path, size, ``_file_digest``) of the weight-like files in
    ``folder`` (suffixes ``WEIGHT_SUFFIXES``, hidden entries skipped, symlinks followed): the
    same weights in another place give the same fingerprint."""
    root = Path(folder)
    entries = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if (
            any(part.startswith(".") for part in relative.parts)
            or path.suffix not in WEIGHT_SUFFIXES
        ):
            continue
        if path.is_file():
            entries.append([relative.as_posix(), path.stat().st_size, _file_digest(path)])
    return _sha256(_canonical(entries))


def parameters_fingerprint(module: torch.nn.Module) -> str:
    """SHA-256 of a module's state dict (names, dtypes, shapes and raw bytes)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


WEIGHT_FOLDER_KEYS = ("weights_dir", "weights", "vqgan", "clip", "tokenizer")


def weights_fingerprint(
    weights_info: dict[str, Any], module: torch.nn.Module | None = None
) -> dict[str, str]:
    """What identifies a model's weights: a ``folder_fingerprint`` of each existing folder named
    in ``weights_info`` (keys ``WEIGHT_FOLDER_KEYS``, as ``ImageModel.weights_info`` records
    them; the path itself is left out), else the ``parameters_fingerprint`` of ``module``
    (models built in code, e.g. tiny-random)."""
    fingerprint = {}
    for key in WEIGHT_FOLDER_KEYS:
        value = weights_info.get(key)
        if value and Path(str(value)).expanduser().is_dir():
            fingerprint[f"{key}_fingerprint"] = folder_fingerprint(Path(str(value)).expanduser())
    if not fingerprint:
        if module is None:
            raise ValueError("no weights folder in weights_info and no module to fingerprint")
        fingerprint["parameters_sha256"] = parameters_fingerprint(module)
    return fingerprint
