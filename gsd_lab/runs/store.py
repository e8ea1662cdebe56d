"""One run's results on disk: a folder of per-index JSON files, written atomically, read on resume.

``run.json`` holds the ``RunIdentity`` (identity, prompts, run_id); ``results/{i:06d}.json`` is
item i's row with the run's fields, so a row of another run is never counted (``finished_row``,
``RunMismatch``). ``start_run`` checks a folder before writing into it (``check_run`` names every
difference); ``rows`` reads a run's rows back, ``merge_results`` collects them
(docs/run-store.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..io.provenance import atomic_write_json, atomic_write_text
from .identity import RunIdentity, RunMismatch, identity_differences, prompt_differences
from .ranks import DistributedContext, barrier

RESULTS_DIR = "results"
RUN_FILE = "run.json"


def result_path(out_dir: str | Path, index: int) -> Path:
    """Where prompt ``index``'s result lives: ``out_dir/results/{index:06d}.json``."""
    return Path(out_dir) / RESULTS_DIR / f"{index:06d}.json"


def read_run(out_dir: str | Path) -> RunIdentity | None:
    """The run recorded in ``out_dir/run.json`` (None when there is none)."""
    path = Path(out_dir) / RUN_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        run = RunIdentity(data["identity"], data["prompts"])
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
    run: RunIdentity,
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


def finished_row(run: RunIdentity, out_dir: str | Path, index: int) -> dict[str, Any] | None:
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


def is_done(run: RunIdentity, out_dir: str | Path, index: int) -> bool:
    """Whether prompt ``index`` of ``run`` has its result in ``out_dir`` (``finished_row``)."""
    return finished_row(run, out_dir, index) is not None


def write_result(
    run: RunIdentity,
    out_dir: str | Path,
    index: int,
    result: dict[str, Any],
    context: DistributedContext,
) -> dict[str, Any]:
    """Write prompt ``index``'s ``result`` atomically with the run's fields
    (``RunIdentity.row_fields``) and the rank; returns the row written."""
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
        - {"index", "rank", "seed", "generator_seed"}
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


def rows(
    run: RunIdentity, out_dir: str | Path, *, missing_ok: bool = False,
    resume: str = "run the same command",
) -> Iterator[dict[str, Any]]:
    """The result rows of ``run`` in ``out_dir``, in index order; a missing row or one of
    another run raises ``ValueError`` naming ``resume``, the command that resumes the run
    (``missing_ok``: skipped)."""
    for index in range(len(run.prompts)):
        row = load_result(out_dir, index)
        if row is None or not run.row_matches(row, index):
            if missing_ok:
                continue
            raise ValueError(
                f"{result_path(out_dir, index)} is missing or not of this run: the run is not "
                f"complete ({resume} again to resume it)"
            )
        yield row
