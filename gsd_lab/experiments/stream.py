"""The decoding runs of ``figures --paper`` on disk: one result file per (configuration, seed,
prompt) as soon as it is decoded, resumable, sharded over processes, bounded host memory (the
layout, the order and sharding, batching and memory: docs/paper-run.md).

- each (configuration, seed) is one run of the run store (``gsd_lab.runs.store``) under
  ``decoding/<configuration>/seed-<s>/``: the same identity, atomic result files and refusal
  of another run's folder (``RunMismatch``) as ``evaluate``; a re-run skips what is on disk;
- ``FolderRuns``: a ``runs.RunStore``'s storage in those files (``StreamedRunCache``), its
  table rows read back one per (configuration, seed, prompt); process r of N decodes items
  r, r + N, ... of the prompt-major list, in chunks of ``CHUNK_BATCHES`` x B through
  ``runs.decode_items``; rank 0 writes the tables;
- ``record_row`` / ``row_record``: a ``GenerationRecord`` as its result row and back;
- ``Configuration``, ``gpu_hours``, ``measure_forward_seconds``.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from ..runs.identity import RunIdentity
from ..runs.ranks import DistributedContext, context_from_environment, shard_indices
from ..runs.store import (
    check_run,
    finished_row,
    result_path,
    rows,
    start_run,
    write_result,
)
from ..io.figure_io import save_image_atomic
from ..io.progress import ProgressLog, duration
from .image_model import ImageModel, guidance_scale
from .records import FIELDS
from ..decode.methods import DecodingMethod, ClusterAcceptance
from .runs import (
    FilterSettings,
    GenerationRecord,
    MethodSpec,
    Recording,
    RunItem,
    RunStore,
    decode_items,
    decoding_identity,
    generator_seed,
    resolve_for,
    quality_of,
)

STREAM_DIR = "decoding"
CHUNK_BATCHES = 16  # batched runs: the items given to one generate_batch call, in batches


W1_FIELDS = ("w1", "w1_sem", "w1_seconds", "substitution", "substitution_sem")
SCALARS = tuple(name for name in FIELDS if name not in W1_FIELDS)  # records.npz's columns


def record_row(
    record: GenerationRecord, model: ImageModel | None = None, image_file: Path | None = None
) -> dict[str, Any]:
    """The JSON row of a decoded image: its label, generator seed, ``SCALARS``, the W1 fields
    where recorded, tokens and (when recorded) top-1 vectors; with ``model`` its device and the
    condition score of the record's pixels; ``image_file``: the pixels saved there (PNG)."""
    row: dict[str, Any] = {"label": record.label, "generator_seed": record.seed}
    row.update({name: getattr(record, name) for name in SCALARS})
    if record.w1 is not None:
        row.update({name: getattr(record, name) for name in W1_FIELDS})
    row["tokens"] = record.tokens.tolist()
    if record.top1 is not None:
        row["top1"] = record.top1.tolist()
    image = record.image
    if model is not None:
        row["device"] = str(model.adapter.device)
        if image is not None and model.condition_scores is not None:
            row["condition_score"] = float(model.condition_scores([image], [record.prompt])[0])
    if image is not None and image_file is not None:
        row["image"] = save_image_atomic(image, image_file)
    return row


def row_record(row: dict[str, Any], *, full: bool) -> GenerationRecord:
    """The ``GenerationRecord`` of a ``record_row`` row (with its prompt), without pixels;
    ``full``: with its tokens and top-1 vectors (else scalars only: host memory)."""
    return GenerationRecord(
        label=row["label"],
        prompt=row["prompt"],
        seed=row["generator_seed"],
        tokens=torch.tensor(row["tokens"]) if full else None,
        image=None,
        top1=torch.tensor(row["top1"], dtype=torch.float64) if full and "top1" in row else None,
        **{name: row[name] for name in SCALARS},
        **{name: row.get(name) for name in W1_FIELDS if name != "w1_seconds"},
        w1_seconds=row.get("w1_seconds", 0.0),
    )


@dataclass(frozen=True)
class Configuration:
    """One decoding configuration of the paper run: ``spec``, with classifier-free guidance as
    the model has it (``guided``) or off, on every prompt or the first ``max_prompts``."""

    spec: MethodSpec
    guided: bool = True
    max_prompts: int | None = None

    @property
    def name(self) -> str:
        """A folder name: the label in lower case and dashes, then a hash of what decides it."""
        slug = re.sub(r"[^a-z0-9.]+", "-", self.spec.label.lower()).strip("-")[:48]
        key = repr((self.spec.key, self.guided, self.max_prompts)).encode()
        return (
            f"{slug}{'' if self.guided else '-no-guidance'}-{hashlib.sha256(key).hexdigest()[:8]}"
        )


class FolderRuns:
    """A ``RunStore``'s records in the run store's files (docs/paper-run.md): ``plan`` the
    configurations, ``run`` this process's items, ``wait`` (rank 0) for the others' items; the
    store's tables then read the rows back."""

    def __init__(
        self,
        store: RunStore,
        out_dir: str | Path,
        *,
        weights: dict[str, str],
        context: DistributedContext | None = None,
        save_images: bool = False,
        progress: bool = True,
    ) -> None:
        self.store, self.model = store, store.model
        self.prompts, self.seeds, self.recording = store.prompts, store.seeds, store.recording
        self.root = Path(out_dir) / STREAM_DIR
        self.weights, self.save_images, self.show_progress = weights, save_images, progress
        self.context = context or context_from_environment()
        self._left = 0.0
        self.configurations: list[Configuration] = []
        self.items: list[tuple[int, Configuration, int]] = []
        self._runs: dict[tuple[Configuration, int], RunIdentity] = {}
        self._nfe: dict[Configuration, list[int]] = {}
        self._done: set[tuple[int, Configuration, int]] = set()

    # ---- the plan ----

    def folder(self, config: Configuration, seed: int) -> Path:
        return self.root / config.name / f"seed-{seed}"

    def identity(self, config: Configuration, seed: int) -> dict[str, Any]:
        """What every row of (config, seed) depends on besides its prompt (``RunIdentity``)."""
        with self._guidance(config):
            decoding = decoding_identity(self.model, config.spec)
        return {
            "command": "figures --paper",
            "model": self.model.name,
            "weights": self.weights,
            "decoding": decoding,
            "seed": seed,
            "generator_seed": "1000003 * (seed + seed_offset) + prompt index",
            "records": {
                "top1": self._records_top1(config),
                "distortion": self.recording.distortion,
                "w1_draws": self.recording.w1_draws if self.recording.w1 else "none",
                "quality": sorted(self.model.quality_names) if self.model.condition_scores else [],
                "quality_config": self.model.quality_config,
            },
        }

    def plan(self, configurations: list[Configuration], *, dry: bool = False) -> None:
        """Record the runs (run.json, checked against what is on disk; ``dry``: only checked,
        nothing written) and the work items, and read which are done."""
        self.configurations = list(dict.fromkeys(configurations))
        for config in self.configurations:
            prompts = self.prompts[: config.max_prompts]
            for seed in self.seeds:
                run = RunIdentity(self.identity(config, seed), prompts)
                if dry:
                    check_run(self.folder(config, seed), run.identity, run.prompts)
                else:
                    start_run(self.folder(config, seed), run, self.context, write=True)
                self._runs[(config, seed)] = run
        self.items = [
            (index, config, seed)
            for index in range(len(self.prompts))
            for config in self.configurations
            if config.max_prompts is None or index < config.max_prompts
            for seed in self.seeds
        ]
        self._done, self._nfe = set(), {config: [] for config in self.configurations}
        for index, config, seed in self.items:  # one read of what is on disk (foreign rows raise)
            row = finished_row(self._runs[(config, seed)], self.folder(config, seed), index)
            if row is not None:
                self._done.add((index, config, seed))
                self._nfe[config].append(row["nfe"])

    def prefetch(self, specs: list[MethodSpec]) -> dict[tuple, list[GenerationRecord]]:
        """Nothing for the planned configurations: ``plan`` and ``run`` decode them into result
        files, which ``records`` reads (``MemoryRuns.prefetch`` would decode them again in memory,
        beside the files). A spec that is no guided configuration of the plan is refused."""
        for spec in specs:
            self._config(spec)
        return {}

    def done(self, item: tuple[int, Configuration, int]) -> bool:
        return item in self._done

    def estimated_forwards(self, config: Configuration) -> float:
        """Forwards per image of ``config``: the mean of its rows so far, else the
        token count (AR's)."""
        nfe = self._nfe.get(config)
        return float(np.mean(nfe)) if nfe else float(self.model.num_tokens)

    def remaining(
        self, items: list[tuple[int, Configuration, int]] | None = None
    ) -> list[tuple[int, Configuration, int]]:
        return [item for item in (self.items if items is None else items) if not self.done(item)]

    # ---- decoding ----

    def run(self) -> int:
        """Decode this rank's unfinished items, writing each result as it is done;
        returns how many (``_run``)."""
        mine = [
            self.items[i]
            for i in shard_indices(len(self.items), self.context.rank, self.context.world_size)
        ]
        todo = self.remaining(mine)
        progress = ProgressLog(
            len(mine),
            done=len(mine) - len(todo),
            enabled=self.show_progress,
            desc=f"figures --paper, rank {self.context.rank} of {self.context.world_size} "
            "(decoded images)",
        )
        self._left = sum(self.estimated_forwards(config) for _, config, _ in todo)
        batch = self.recording.batch_size
        if self.show_progress:
            print(
                progress.line(
                    f"{len(self.configurations)} configurations x {len(self.prompts)} prompts; "
                    f"about {self._left:,.0f} forwards to go"
                    + (f"; {batch} images per forward" if batch > 1 else "")
                ),
                flush=True,
            )
        self._run(todo, progress)
        return len(todo)

    def _finish(
        self, item: tuple[int, Configuration, int], record: GenerationRecord, progress: ProgressLog
    ) -> None:
        """Write ``item``'s result file (its ``record_row``, the pixels saved beside it with
        ``save_images``) and count it as done."""
        index, config, seed = item
        folder = self.folder(config, seed)
        image_file = folder / "images" / f"{index:06d}.png" if self.save_images else None
        row = record_row(record, self.model, image_file)
        write_result(self._runs[(config, seed)], folder, index, row, self.context)
        self._done.add(item)
        self._left -= self.estimated_forwards(config)
        self._nfe[config].append(row["nfe"])
        progress.advance(
            work=row["nfe"],
            remaining_work=max(self._left, 0.0),
            note=f"{config.spec.label}{'' if config.guided else ' (no guidance)'}, prompt {index}",
        )

    def _run(self, todo: list[tuple[int, Configuration, int]], progress: ProgressLog) -> None:
        """Decode ``todo`` in its order through the run path (``runs.decode_items``,
        ``batch_size`` images per forward), each result file written as its image finishes.

        The items go in chunks of ``CHUNK_BATCHES * batch_size`` (bounded host memory: one
        chunk's records; a crash loses at most one chunk's unwritten images). Within a chunk
        the items are split by guidance (the adapter's CFG setting is one for every image of a
        forward) and decoded as one stream each. top-1 vectors are recorded for a whole group
        when any of its configurations wants them (AR) and kept in those rows only: recording
        them draws nothing, so every image's tokens and NFE are the same either way."""
        chunk = CHUNK_BATCHES * self.recording.batch_size
        for start in range(0, len(todo), chunk):
            part = todo[start : start + chunk]
            for guided in (True, False):
                group = [item for item in part if item[1].guided == guided]
                if not group:
                    continue
                items = [
                    RunItem(
                        config.spec.label,
                        self.store._rule(config.spec),
                        self.prompts[index],
                        generator_seed(seed + config.spec.seed_offset, index),
                    )
                    for index, config, seed in group
                ]
                top1 = any(self._records_top1(c) for _, c, _ in group)

                def write(position: int, record: GenerationRecord, group=group) -> None:
                    if not self._records_top1(group[position][1]):
                        record.top1 = None
                    self._finish(group[position], record, progress)
                    record.image = None  # host memory: pixels only until the row is written

                with self._guidance(group[0][1]):
                    recording = replace(self.recording, top1=top1)
                    decode_items(self.model, items, recording, on_record=write)

    def wait(self, *, poll_seconds: float = 10.0, timeout: float | None = None) -> None:
        """Rank 0: return when every item has its result file (the other ranks' included)."""
        started, last = time.perf_counter(), 0.0
        while True:
            missing = [(i, c, s) for i, c, s in self.items
                       if not result_path(self.folder(c, s), i).is_file()]
            if not missing:
                return
            waited = time.perf_counter() - started
            if timeout is not None and waited > timeout:
                raise TimeoutError(f"{len(missing)} results still missing after {duration(waited)}")
            if self.show_progress and waited - last >= 60:
                last = waited
                print(
                    f"figures --paper, rank 0: waiting for {len(missing)} "
                    f"results of the other ranks ({duration(waited)})",
                    flush=True,
                )
            time.sleep(poll_seconds)

    @contextlib.contextmanager
    def _guidance(self, config: Configuration) -> Iterator[None]:
        if config.guided or not self.model.adapter.uses_cfg:
            yield
        else:
            with guidance_scale(self.model, None):
                yield

    def _records_top1(self, config: Configuration) -> bool:
        return config.spec.method.kind == "ar"  # top-1 statistics are read from AR tokens only

    # ---- reading back ----

    def _rows(self, config: Configuration) -> Iterator[dict[str, Any]]:
        """The result rows of ``config``, seed by seed, prompt by prompt
        (``run_method``'s order)."""
        for seed in self.seeds:
            run, folder = self._runs[(config, seed)], self.folder(config, seed)
            yield from rows(run, folder, resume="run figures --paper")

    def _config(self, spec: MethodSpec, guided: bool = True) -> Configuration:
        key = self.store._concrete(spec).key
        found = [
            c
            for c in self.configurations
            if self.store._concrete(c.spec).key == key and c.guided == guided
        ]
        if not found:
            raise ValueError(
                f"{spec.label} (guided={guided}) is not a configuration of this paper run"
            )
        return found[0]

    def records(self, spec: MethodSpec) -> list[GenerationRecord]:
        """Scalar records of ``spec`` read from its result files (no tokens, images or top-1
        vectors: host memory)."""
        return [row_record(row, full=False) for row in self._rows(self._config(spec))]

    def detail_records(
        self, spec: MethodSpec, limit: int | None, *, guided: bool
    ) -> list[GenerationRecord]:
        """The first ``limit`` records with tokens, top-1 vectors (AR) and images decoded
        from the tokens."""
        records = []
        for row in self._rows(self._config(spec, guided)):
            if limit is not None and len(records) >= limit:
                break
            record = row_record(row, full=True)
            record.label = spec.label
            if self.model.decode is not None:
                record.image = self.model.decode(record.tokens)
            records.append(record)
        return records

    def timed(self) -> Iterator[GenerationRecord]:
        """Scalar records of every planned configuration (guided or not), not only those the
        tables have read so far."""
        for config in self.configurations:
            yield from (row_record(row, full=False) for row in self._rows(config))

    def quality(self, spec: MethodSpec) -> tuple[dict[str, Any], np.ndarray | None]:
        """``quality_of`` the per-image scores in the rows and (the Frechet distance, a set
        statistic of the stand-in) the images decoded again from the tokens."""
        config = self._config(spec)
        # One score per row kept, not the rows (their tokens are large in Python).
        per_row = [row.get("condition_score") for row in self._rows(config)]
        scores = None
        if per_row and all(score is not None for score in per_row):
            scores = np.array(per_row, dtype=np.float64)

        def images() -> list[np.ndarray]:
            return [self.model.decode(torch.tensor(row["tokens"])) for row in self._rows(config)]

        decodable = per_row and self.model.decode is not None
        return quality_of(self.model, scores, images if decodable else None)


class StreamedRunCache(RunStore):
    """A ``RunStore`` over the run store's files (``FolderRuns``, reached as ``storage``):
    ``RunStore``'s ``recording`` and ``FolderRuns``' other arguments."""

    def __init__(
        self,
        model: ImageModel,
        prompts: list[str],
        seeds: list[int],
        filters: FilterSettings,
        out_dir: str | Path,
        *,
        recording: Recording = Recording(distortion=True, w1=None),
        **folder: Any,
    ) -> None:
        super().__init__(model, prompts, seeds, filters, recording=recording)
        self.storage = FolderRuns(self, out_dir, **folder)


def measure_forward_seconds(
    model: ImageModel, *, tokens: int = 48, window: int = 16, group_size: int = 50
) -> dict[str, float]:
    """Seconds per forward pass on the model's device, measured now on a short generation from
    the first default prompt (a CFG pair counts once): "ar", "sjd" (window drafts), "gsd"
    (dynamic clusters of ``group_size``), each including the exact-distortion accounting the
    paper run records. Short contexts: on a GPU the 7B forward is host-bound, about the same at
    2.3k tokens (docs/lumina-mgpt.md section 6)."""
    from ..decode.loop import generate

    methods = {
        "ar": DecodingMethod("ar"),
        "sjd": DecodingMethod("sjd", window=window),
        "gsd": DecodingMethod(
            "gsd", window=window, acceptance=ClusterAcceptance(group_size=group_size)
        ),
    }
    prompt_ids, uncond_ids = model.encode(model.default_prompts[0])
    count = min(tokens, model.num_tokens)
    out = {}
    for name, method in methods.items():
        resolved = resolve_for(model, method)
        for seed in (0, 1):  # the first call warms up
            result = generate(
                model.adapter,
                prompt_ids,
                resolved,
                num_tokens=count,
                uncond_prompt_ids=uncond_ids,
                record_distortion=True,
                generator=torch.Generator(device=model.adapter.device).manual_seed(seed),
            )
        out[name] = (result.wall_seconds + result.accounting_seconds) / result.nfe
    return out


def gpu_hours(cache: FolderRuns, seconds_per_forward: dict[str, float]) -> dict[str, Any]:
    """The remaining work of ``cache``'s plan in forwards and device hours: per item the
    configuration's forwards (measured rows, else the token count) times the per-forward time of
    its method (``seconds_per_forward`` keys "ar", "sjd", "gsd")."""
    todo = cache.remaining()
    by_method = {kind: 0.0 for kind in seconds_per_forward}
    for _, config, _ in todo:
        by_method[config.spec.method.kind] += cache.estimated_forwards(config)
    seconds = sum(forwards * seconds_per_forward[kind] for kind, forwards in by_method.items())
    measured = sum(1 for config in cache.configurations if cache._nfe.get(config))
    return {
        "items": len(cache.items),
        "done": len(cache.items) - len(todo),
        "to_do": len(todo),
        "forwards": sum(by_method.values()),
        "forwards_by_method": by_method,
        "device_hours": seconds / 3600,
        "configurations_with_measured_nfe": measured,
        "seconds_per_forward": seconds_per_forward,
    }
