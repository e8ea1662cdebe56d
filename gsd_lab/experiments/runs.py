"""Decoding runs over prompts x seeds and their summaries: the rows of the speed/quality tables.

- ``MethodSpec``: one table row's ``decode.methods.DecodingMethod`` with a label and a seed offset;
  ``decoding_identity``: what a decoded image depends on besides weights, prompt and seed;
- the one run path: ``decode_items`` turns ``RunItem`` (label, method, prompt, generator seed)
  into ``GenerationRecord`` as one frozen ``Recording`` says (what to record, batch size), for
  ``run_method``, ``RunStore`` (here or over ``workers``: ``decode_jobs``), the streamed runs and
  ``evaluate``; a (prompt, seed)'s ``generator_seed`` is the same for every method;
- ``summarize``: a table row (mean NFE and speed-up over AR, wall time, the two acceptance
  measures, TV and W1 distortions with standard errors, quality proxies, ``per_image`` values);
- ``RunStore``: records per configuration, read once from its storage (``MemoryRuns``, decoded
  here: ``RunCache``; or the run store's files: ``stream.StreamedRunCache``); ``table``: rows
  with paired error bars against AR (``verdicts.interval``); ``real_image_baseline``.

The measures (acceptance_rate against accepted_per_tested, the distortions, the error bars)
and how the run paths share one store: docs/run-store.md.
"""
from __future__ import annotations

import math
from dataclasses import astuple, dataclass, replace
from typing import Any, Callable, Iterable, NamedTuple, Protocol

import numpy as np
import torch
from torch import Tensor

from ..accounting.distortion import embedding_adjacency
from ..decode.loop import DecodeResult, WindowHook, generate
from ..accounting.transport import DEFAULT_DRAWS
from ..decode.methods import DecodingMethod, FilterSettings, ResolvedMethod
from ..engine.capabilities import embedding_filter
from ..rules.clusters import packed_adjacency
from .image_model import ImageModel
from .verdicts import interval, paired_values
from ..workers import check_workers, default_workers, plan_units, run_units


@dataclass(frozen=True)
class MethodSpec:
    """One row of a table: a ``DecodingMethod`` with a ``label`` (only a name) and a
    ``seed_offset`` added to every generation seed (the same method on another seed set: AR
    against AR is the seed noise)."""

    label: str
    method: DecodingMethod
    seed_offset: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.method, DecodingMethod):
            raise ValueError(
                f"{self.label}: method must be a gsd_lab.decode.methods.DecodingMethod, "
                f"got {self.method!r}"
            )
        if isinstance(self.seed_offset, bool) or not isinstance(self.seed_offset, int):
            raise ValueError(f"seed_offset must be an int, got {self.seed_offset!r}")

    @property
    def key(self) -> tuple[str, int]:
        """Identity of the computation (the label is only a name)."""
        return self.method.key, self.seed_offset

    def to_record(self) -> dict[str, Any]:
        """JSON-ready: the label, every field of the method (``DecodingMethod.to_dict``) and
        the seed offset (the figures' sidecars)."""
        return {
            "label": self.label,
            "method": self.method.to_dict(),
            "seed_offset": self.seed_offset,
        }

    def with_method(self, **changes: Any) -> "MethodSpec":
        """This spec with some of its method's fields changed (e.g. ``window=8``)."""
        return replace(self, method=replace(self.method, **changes))


def decoding_identity(model: ImageModel, spec: MethodSpec) -> dict[str, Any]:
    """What a decoded image depends on besides the weights, prompt and seed: the method
    (``DecodingMethod.to_dict`` with the model's filters filled in), the seed offset, and the
    adapter's CFG scale, top-k and temperature as they are now (part of the run identity of
    ``evaluate`` and ``figures --paper``)."""
    adapter = model.adapter
    return {
        "method": spec.method.for_model(model.name).to_dict(),
        "seed_offset": spec.seed_offset,
        "cfg_scale": adapter.cfg_scale,
        "top_k": adapter.top_k,
        "temperature": getattr(adapter, "temperature", None),
    }


@dataclass
class GenerationRecord:
    """One generated image: prompt, seed, decoding statistics, tokens and pixels."""

    label: str
    prompt: str
    seed: int
    nfe: int
    acceptance_rate: float | None
    accepted_per_tested: float | None
    wall_seconds: float
    model_seconds: float
    tokens: Tensor
    image: np.ndarray | None
    top1: Tensor | None = None
    distortion: float | None = None  # mean over the image's tokens of the exact TV(out, p)
    accounting_seconds: float = 0.0
    w1: float | None = None  # mean over the image's tokens of W1(out, p) (estimated or exact)
    w1_sem: float | None = None  # its sampling standard error (0 when exact)
    substitution: float | None = None  # the rule's own coupling's content change, where defined
    substitution_sem: float | None = None
    w1_seconds: float = 0.0  # the part of accounting_seconds spent on W1


def accepted_per_tested(result: DecodeResult) -> float | None:
    """accepted / tested over the windows of one generation (module docstring); None for AR, and
    for block verification, which accepts a prefix jointly and tests no draft on its own."""
    if result.verifier == "block":
        return None
    tested = sum(a + (1 if a < d else 0) for a, d in zip(result.accepted, result.drafted) if d > 0)
    return sum(result.accepted) / tested if tested else None


def generator_seed(seed: int, prompt_index: int) -> int:
    """The generator seed of (seed, prompt index): shared by every method."""
    return 1_000_003 * seed + prompt_index


def resolve_for(
    model: ImageModel, method: DecodingMethod, cache: dict | None = None
) -> ResolvedMethod:
    """``method``'s runtime objects on ``model`` (its default filters by name; ``cache``: one
    dict per model, see ``DecodingMethod.resolve``)."""
    return method.resolve(model.adapter, model_name=model.name, cache=cache)


@dataclass(frozen=True)
class Recording:
    """What a run records per image besides its tokens and NFE, and how it decodes them: one
    frozen settings object for every run path (``decode_items``, ``RunCache``, the streamed
    runs, ``evaluate``).

    top1 / distortion / w1 / w1_draws: ``generate``'s record_top1, record_distortion (exact TV),
    record_w1 (the similarity-aware distortion; None: whenever distortion is recorded and the
    adapter knows its codes' content, ``for_model``) and w1_draws (None: exact for every token).
    images: decode the tokens to pixels (when the model can). batch_size: images per forward (1:
    one at a time through ``generate``; else ``generate_batch``: each image's tokens and NFE as
    alone, its wall_seconds and model_seconds its share of the batch's). runner: "eager" or
    "static" (``generate``'s execution option)."""

    top1: bool = False
    distortion: bool = False
    w1: bool | None = False
    w1_draws: int | None = DEFAULT_DRAWS
    images: bool = True
    batch_size: int = 1
    runner: str = "eager"

    def __post_init__(self) -> None:
        size = self.batch_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {size!r}")

    def for_model(self, model: ImageModel) -> "Recording":
        """This recording with ``w1`` None decided for ``model`` (class docstring)."""
        if self.w1 is not None:
            return self
        return replace(self, w1=self.distortion and model.adapter.code_content() is not None)

    def options(self) -> dict[str, Any]:
        """The keyword arguments ``generate`` and ``generate_batch`` take for it."""
        return {
            "record_top1": self.top1,
            "record_distortion": self.distortion,
            "record_w1": bool(self.w1),
            "w1_draws": self.w1_draws,
            "runner": self.runner,
        }


class RunItem(NamedTuple):
    """One image to decode: its label, resolved method, prompt and generator seed."""

    label: str
    method: ResolvedMethod
    prompt: str
    seed: int


def generate_one(
    model: ImageModel,
    method: DecodingMethod | ResolvedMethod,
    prompt: str,
    seed: int,
    recording: Recording = Recording(),
    *,
    progress: bool = False,
    on_window: WindowHook | None = None,
) -> tuple[DecodeResult, np.ndarray | None]:
    """Decode one image for ``prompt`` with a generator seeded by ``seed``; returns the decoding
    result and the decoded uint8 image (None when the model cannot decode to pixels, or
    ``recording.images`` is False: tokens only, e.g. a command-line generate without --out). A
    ``DecodingMethod`` is resolved here (``resolve_for``): pass the resolved one when decoding
    many images. progress, on_window: ``generate``'s token bar and per-window hook."""
    resolved = resolve_for(model, method) if isinstance(method, DecodingMethod) else method
    prompt_ids, uncond_ids = model.encode(prompt)
    result = generate(
        model.adapter,
        prompt_ids,
        resolved,
        num_tokens=model.num_tokens,
        generator=torch.Generator(device=model.adapter.device).manual_seed(seed),
        uncond_prompt_ids=uncond_ids,
        progress=progress,
        on_window=on_window,
        **recording.for_model(model).options(),
    )
    return result, _pixels(model, result, recording)


def _pixels(model: ImageModel, result: DecodeResult, recording: Recording) -> np.ndarray | None:
    return model.decode(result.tokens) if recording.images and model.decode is not None else None


def record_of(
    label: str, prompt: str, seed: int, result: DecodeResult, image: np.ndarray | None
) -> GenerationRecord:
    """The ``GenerationRecord`` of one decoded image (per-image means of the distortions)."""
    w1 = result.w1
    return GenerationRecord(
        label,
        prompt,
        seed,
        result.nfe,
        result.acceptance_rate,
        accepted_per_tested(result),
        result.wall_seconds,
        result.model_seconds,
        result.tokens,
        image,
        result.top1,
        float(result.distortion.mean()) if result.distortion is not None else None,
        result.accounting_seconds,
        w1=None if w1 is None else w1.mean,
        w1_sem=None if w1 is None else w1.sem,
        substitution=None if w1 is None else w1.substitution,
        substitution_sem=None if w1 is None else w1.substitution_sem,
        w1_seconds=0.0 if w1 is None else w1.seconds,
    )


def decode_items(
    model: ImageModel,
    items: list[RunItem],
    recording: Recording,
    *,
    progress: Any = None,
    on_record: Callable[[int, GenerationRecord], None] | None = None,
) -> list[GenerationRecord]:
    """The one run path: the records of ``items``, in their order, as ``recording`` says (at
    batch size 1 each image alone through ``generate``; else one stream through
    ``generate_batch``, ``recording.batch_size`` images per forward, images of different
    methods side by side). progress: advanced by one per image; on_record: called as
    ``on_record(position, record)`` as each image finishes (e.g. to write it to disk at once)."""
    recording = recording.for_model(model)
    records: list[GenerationRecord | None] = [None] * len(items)

    def finish(position: int, result: DecodeResult) -> None:
        item = items[position]
        record = record_of(
            item.label, item.prompt, item.seed, result, _pixels(model, result, recording)
        )
        records[position] = record
        if on_record is not None:
            on_record(position, record)
        if progress is not None:
            progress.update(1)

    if recording.batch_size == 1:
        alone = replace(recording, images=False)  # pixels in ``finish``
        for position, item in enumerate(items):
            finish(position, generate_one(model, item.method, item.prompt, item.seed, alone)[0])
        return records
    from ..decode.batch import DecodeRequest, generate_batch

    requests = []
    for item in items:
        prompt_ids, uncond_ids = model.encode(item.prompt)
        generator = torch.Generator(device=model.adapter.device).manual_seed(item.seed)
        requests.append(
            DecodeRequest(prompt_ids, item.method, model.num_tokens, generator, uncond_ids)
        )
    generate_batch(
        model.adapter,
        requests,
        batch_size=recording.batch_size,
        on_result=finish,
        **recording.options(),
    )
    return records


def run_items(
    model: ImageModel,
    spec: MethodSpec,
    resolved: ResolvedMethod,
    prompts: list[str],
    seeds: Iterable[int],
) -> list[RunItem]:
    """``spec``'s images in a run's order: seed, then prompt, each with the generator seed
    ``generator_seed(seed + spec.seed_offset, prompt index)`` shared by every method."""
    if resolved.method != spec.method.for_model(model.name):
        raise ValueError(
            f"{spec.label}: resolved is another method than the spec's ({resolved.method.key} "
            f"is not {spec.method.for_model(model.name).key})"
        )
    return [
        RunItem(spec.label, resolved, prompt, generator_seed(seed + spec.seed_offset, index))
        for seed in seeds
        for index, prompt in enumerate(prompts)
    ]


def run_method(
    model: ImageModel,
    spec: MethodSpec,
    prompts: list[str],
    seeds: Iterable[int],
    recording: Recording = Recording(),
    *,
    resolved: ResolvedMethod | None = None,
    progress: Any = None,
) -> list[GenerationRecord]:
    """One image per (seed + spec.seed_offset, prompt) with ``spec`` (``run_items``' order),
    decoded as ``recording`` says (``decode_items``); ``progress``: a tqdm bar to advance (or
    None); ``resolved``: ``spec.method`` already resolved on ``model`` (else resolved here)."""
    resolved = resolve_for(model, spec.method) if resolved is None else resolved
    items = run_items(model, spec, resolved, prompts, seeds)
    return decode_items(model, items, recording, progress=progress)


def decode_jobs(
    model: ImageModel,
    jobs: list[list[RunItem]],
    recording: Recording,
    *,
    workers: int | None = 1,
    progress: Any = None,
) -> list[list[GenerationRecord]]:
    """Per job (a configuration's ``run_items``) its records, decoded unit by unit
    (``workers.plan_units``: each job's images in streams of at most ``UNIT_BATCHES`` batches)
    on ``workers`` processes (``workers.run_units``). The records are the same for any
    ``workers`` (tested), except ``wall_seconds`` / ``model_seconds`` / ``accounting_seconds``,
    which time them."""
    units = plan_units([len(job) for job in jobs], recording.batch_size)

    def unit(index: int, bar: Any) -> list[GenerationRecord]:
        job, start, stop = astuple(units[index])
        return decode_items(model, jobs[job][start:stop], recording, progress=bar)

    methods = list({id(job[0].method): job[0].method for job in jobs if job}.values())
    done = run_units(
        unit,
        len(units),
        workers=workers,
        device=model.adapter.device,
        progress=progress,
        prepare=lambda: warm_caches(getattr(model.adapter, "vocab_size", None), methods),
    )
    out: list[list[GenerationRecord]] = [[] for _ in jobs]
    for part, records in zip(units, done):
        out[part.job].extend(records)
    return out


def quality_and_scores(
    model: ImageModel, images: list[np.ndarray], prompts: list[str]
) -> tuple[dict[str, float], np.ndarray | None]:
    """The model's quality proxies over a set of images (empty when the model has none or an
    image is missing): ``quality_of`` their condition scores and the images."""
    if not images or any(image is None for image in images):
        return {}, None
    scores = None
    if model.condition_scores is not None:
        scores = np.asarray(model.condition_scores(images, prompts), dtype=np.float64)
    return quality_of(model, scores, lambda: images)


def quality_of(
    model: ImageModel,
    scores: np.ndarray | None,
    images: Callable[[], list[np.ndarray]] | None,
) -> tuple[dict[str, Any], np.ndarray | None]:
    """condition_score (mean of the per-image ``scores`` [N]) with its standard error, and
    frechet_distance (set level) of ``images()`` where the model has one; and ``scores``."""
    out: dict[str, Any] = {} if scores is None else score_summary(scores)
    if images is not None and model.frechet_distance is not None:
        out["frechet_distance"] = float(model.frechet_distance(images()))
    return out, scores


def score_summary(scores: np.ndarray) -> dict[str, float | None]:
    """condition_score: the mean of per-image scores [N]; condition_score_sem: its standard error
    (differences below about two of these are noise; None for one image)."""
    return {
        "condition_score": float(scores.mean()),
        "condition_score_sem": float(scores.std(ddof=1) / np.sqrt(len(scores)))
        if len(scores) > 1
        else None,
    }


def real_image_baseline(
    model: ImageModel, num_images: int, *, seed: int = 0
) -> dict[str, Any] | None:
    """The quality proxies of real images, for the stand-in (None for other models): the
    condition score of the fixed held-out real crops (the classifier never saw them; mean and
    standard error over crops), and the Frechet distance to the held-out reference of
    ``num_images`` real *training-split* crops, one class after another as the prompts are (the
    Frechet distance is biased by the set size: compare it with methods of that many images)."""
    if model.name != "standin" or model.condition_scores is None or model.frechet_distance is None:
        return None
    from ..standin import data
    from ..standin.classifier import heldout_set

    names = list(model.adapter.class_names)

    def as_uint8(crops: Tensor) -> list[np.ndarray]:
        pixels = ((crops.to(torch.float64) + 1) * 127.5).round().clamp(0, 255).to(torch.uint8)
        return list(pixels.permute(0, 2, 3, 1).numpy())

    crops, labels = heldout_set()
    scores = np.asarray(
        model.condition_scores(as_uint8(crops), [names[i] for i in labels.tolist()]), np.float64
    )
    per_class = max(1, -(-num_images // len(names)))
    train, _ = data.class_crops("train", per_class, seed, flip=False)
    train = (
        train.view(len(names), per_class, *train.shape[1:])
        .transpose(0, 1)
        .reshape(-1, *train.shape[1:])
    )
    return {
        "method": "real crops (held-out score; train-split Frechet)",
        "images": len(scores),
        **score_summary(scores),
        # The Frechet distance needs two images for a covariance (tiny sizes decode one).
        "frechet_distance": float(model.frechet_distance(as_uint8(train[:num_images])))
        if num_images >= 2
        else None,
        "frechet_images": min(num_images, train.shape[0]),
    }


def _sem(values: list[float]) -> float | None:
    """Standard error of the mean over images (ddof 1); None for fewer than two."""
    return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else None


def mean_sem(values: Iterable[float]) -> tuple[float, float]:
    """(mean, its standard error ``_sem``; NaN for fewer than two values): for printing."""
    values = [float(v) for v in values]
    sem = _sem(values)
    return float(np.mean(values)), math.nan if sem is None else sem


def summarize(
    model: ImageModel,
    records: list[GenerationRecord],
    baseline: list[GenerationRecord] | None = None,
    *,
    quality_row: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A table row: means over records, speed-ups against ``baseline`` (the AR records).
    ``quality_row``: the records' ``quality`` if already computed (else computed here)."""
    if not records:
        raise ValueError("no records to summarize")
    nfe = float(np.mean([r.nfe for r in records]))
    wall = float(np.mean([r.wall_seconds for r in records]))
    row: dict[str, Any] = {
        "method": records[0].label,
        "images": len(records),
        "nfe": nfe,
        "wall_seconds": wall,
        "acceptance_rate": _mean_of_known([r.acceptance_rate for r in records]),
        "accepted_per_tested": _mean_of_known([r.accepted_per_tested for r in records]),
        "nfe_sem": _sem([r.nfe for r in records]),
    }
    row.update(_distance_columns(records))
    row["per_image"] = {
        "prompt": [r.prompt for r in records],
        "seed": [r.seed for r in records],
        "nfe": [r.nfe for r in records],
        "distortion": [r.distortion for r in records],
        "w1": [r.w1 for r in records],
    }
    if baseline:
        row["speedup_nfe"] = float(np.mean([r.nfe for r in baseline])) / nfe
        row["speedup_wall"] = float(np.mean([r.wall_seconds for r in baseline])) / wall
    if quality_row is None:
        images, prompts = [r.image for r in records], [r.prompt for r in records]
        quality_row = quality_and_scores(model, images, prompts)[0]
    row.update(quality_row)
    return row


def _mean_of_known(values: list[float | None]) -> float | None:
    """The mean of the values that are not None (None when none is)."""
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def _distance_columns(records: list[GenerationRecord]) -> dict[str, Any]:
    """Mean and standard error over images of TV and W1 where every record has it (not
    "substitution": undefined for most lossy rules); for W1 also the estimator's share of that
    error, its within-image sampling noise (``w1_sampling_sem``)."""
    columns: dict[str, Any] = {}
    for key in ("distortion", "w1"):
        values = [getattr(r, key) for r in records]
        if any(v is None for v in values):
            continue
        columns[key], columns[f"{key}_sem"] = float(np.mean(values)), _sem(values)
        if key != "distortion":
            sampling = [getattr(r, f"{key}_sem") for r in records]
            columns[f"{key}_sampling_sem"] = (
                None
                if any(v is None for v in sampling)
                else float(np.sqrt(np.sum(np.square(sampling)))) / len(sampling)
            )
    return columns


class Storage(Protocol):
    """Where a ``RunStore``'s records are: ``MemoryRuns`` or ``stream.FolderRuns`` (each given
    concrete specs: the store's filters filled in)."""

    def prefetch(self, specs: list[MethodSpec]) -> dict[tuple, list[GenerationRecord]]: ...

    def records(self, spec: MethodSpec) -> list[GenerationRecord]: ...

    def detail_records(
        self, spec: MethodSpec, limit: int | None, *, guided: bool
    ) -> list[GenerationRecord]: ...

    def timed(self) -> Iterable[GenerationRecord]: ...

    def quality(self, spec: MethodSpec) -> tuple[dict[str, Any], np.ndarray | None]: ...


class RunStore:
    """Records per ``MethodSpec.key``, decoded once, and the tables on them, over one storage:
    ``MemoryRuns`` (``RunCache``: decoded in this process or over ``workers``, kept in memory)
    or a folder of the run store's per-item files (``stream.FolderRuns``, ``StreamedRunCache``).
    ``filters``: GSD's filters for the specs that name none (default: the model's,
    ``FilterSettings.for_model``).

    ``recording``: what each image records and its batch size (``Recording``; default: top-1,
    TV, and W1 where the model knows its codes' content, one image at a time). ``progress``: a
    tqdm bar to advance per image (or None). ``progress_lines`` (default: on for Lumina-mGPT):
    a line per configuration on stderr, at most every ``ProgressLog`` interval, with its images
    done / to do and ETA, and how many configurations are done. mix_configurations: False
    (default) decodes each configuration's images in a batch stream of their own in
    ``prefetch``, so an image shares its forwards only with images of its configuration and its
    ``wall_seconds`` (its share of them) is that configuration's decoding time per image at this
    batch size; True streams every configuration together (batches stay full, but an AR image
    then shares, and pays for, the 16-draft windows of its neighbours, and the wall columns mix
    methods). workers: processes that ``prefetch`` splits the configurations' images over, one
    intra-op thread each (``decode_jobs``: the same records for any number; None: the usable
    cores on a CPU); 1 (default) decodes in this process."""

    storage: Storage  # set by the constructors (RunCache, stream.StreamedRunCache)

    def __init__(
        self,
        model: ImageModel,
        prompts: list[str],
        seeds: list[int],
        filters: FilterSettings | None = None,
        *,
        recording: Recording = Recording(top1=True, distortion=True, w1=None),
        progress: Any = None,
        progress_lines: bool | None = None,
        mix_configurations: bool = False,
        workers: int | None = 1,
    ) -> None:
        self.model, self.prompts, self.seeds = model, prompts, seeds
        check_workers(workers)
        self.workers = default_workers(model.adapter.device) if workers is None else workers
        self.recording = recording.for_model(model)
        self.mix_configurations = mix_configurations
        self.filters = FilterSettings.for_model(model.name) if filters is None else filters
        self.progress = progress
        self.progress_lines = (
            model.name.startswith("lumina-mgpt") if progress_lines is None else progress_lines
        )
        self._records: dict[tuple, list[GenerationRecord]] = {}
        self._stored: dict[str, list[GenerationRecord]] = {}  # preloaded, by repr(key)
        # scored once per configuration
        self._quality: dict[tuple, tuple[dict[str, Any], np.ndarray | None]] = {}
        self._resolved: dict = {}  # rule objects built once (LANTERN's tables, one per k)
        self._rules: dict[str, ResolvedMethod] = {}  # per concrete method key

    def _concrete(self, spec: MethodSpec) -> MethodSpec:
        return replace(spec, method=spec.method.with_filters(self.filters))

    def _check_offset(self, spec: MethodSpec) -> None:
        shifted = {s + spec.seed_offset for s in self.seeds}
        if spec.seed_offset and shifted & set(self.seeds):
            raise ValueError(
                f"{spec.label}: seed_offset {spec.seed_offset} maps seeds "
                f"{sorted(shifted & set(self.seeds))} onto seeds this cache already decodes, "
                "so its 'other seeds' would repeat images; use a larger offset"
            )

    def _rule(self, spec: MethodSpec) -> ResolvedMethod:
        """``spec``'s method with this store's filters, resolved once."""
        method = self._concrete(spec).method
        if method.key not in self._rules:
            self._rules[method.key] = resolve_for(self.model, method, self._resolved)
        return self._rules[method.key]

    def _items(self, spec: MethodSpec, prompts: list[str] | None = None) -> list[RunItem]:
        """The images of (concrete) ``spec`` on this store's seeds and ``prompts`` (default:
        all)."""
        prompts = self.prompts if prompts is None else prompts
        return run_items(self.model, spec, self._rule(spec), prompts, self.seeds)

    def prefetch(self, specs: list[MethodSpec]) -> None:
        """Get every configuration of ``specs`` not read (or preloaded) yet ready for
        ``records``: the storage's ``prefetch`` decodes them in batches (and returns their
        records), or checks them against the folder's plan."""
        todo: dict[tuple, MethodSpec] = {}
        for spec in map(self._concrete, specs):
            self._check_offset(spec)
            if spec.key not in self._records and repr(spec.key) not in self._stored:
                todo.setdefault(spec.key, spec)
        self._records.update(self.storage.prefetch(list(todo.values())))

    def records(self, spec: MethodSpec) -> list[GenerationRecord]:
        """``spec``'s records (from the storage once per key, or preloaded), labelled as
        ``spec``."""
        spec = self._concrete(spec)
        self._check_offset(spec)
        if spec.key not in self._records:
            stored = self._stored.get(repr(spec.key))
            self._records[spec.key] = self.storage.records(spec) if stored is None else stored
        return [
            GenerationRecord(**{**r.__dict__, "label": spec.label}) for r in self._records[spec.key]
        ]

    def decoded(self) -> dict[tuple, list[GenerationRecord]]:
        """Every configuration read (decoded, or preloaded) so far: key -> its records."""
        return dict(self._records)

    def preload(self, key: str, records: list[GenerationRecord]) -> None:
        """Records of the configuration whose ``repr(spec.key)`` is ``key``, decoded elsewhere
        (``gsd_lab.experiments.records``): ``records(spec)`` returns them instead of decoding."""
        self._stored[key] = records

    def detail_records(
        self, spec: MethodSpec, limit: int | None = None, *, guided: bool = True
    ) -> list[GenerationRecord]:
        """The first ``limit`` records of ``spec`` with tokens, top-1 vectors (where recorded)
        and images, for the detail analyses (top-1 statistics, the replacement study, sample
        grids); ``guided=False``: ``spec`` with classifier-free guidance off, on the first
        ``limit`` prompts (every seed)."""
        return self.storage.detail_records(self._concrete(spec), limit, guided=guided)

    def accounting_seconds(self) -> list[float]:
        """Time spent on distortion accounting (TV and W1), per image the storage holds."""
        return [r.accounting_seconds for r in self.storage.timed()]

    def w1_seconds(self) -> list[float]:
        """The W1 part of ``accounting_seconds``, per image."""
        return [r.w1_seconds for r in self.storage.timed()]

    def _scored(self, spec: MethodSpec) -> tuple[dict[str, Any], np.ndarray | None]:
        spec = self._concrete(spec)
        if spec.key not in self._quality:
            self._quality[spec.key] = self.storage.quality(spec)
        return self._quality[spec.key]

    def table(self, specs: list[MethodSpec], baseline: MethodSpec) -> list[dict[str, Any]]:
        """One ``summarize`` row per spec, with speed-ups against ``baseline`` and, where the model
        has per-image condition scores, ``condition_score_diff_ar`` (mean difference to the
        baseline, image by image: same prompts and seed indices) and its interval d +- 2 paired
        SE ``condition_score_diff_ar_low`` / ``_high`` (None for one image); the
        per-image scores go to the row's ``per_image`` for paired comparisons
        between any two rows."""
        base = self.records(baseline)
        _, base_scores = self._scored(baseline)
        rows = []
        for spec in specs:
            records = self.records(spec)
            quality_row, scores = self._scored(spec)
            row = summarize(self.model, records, base, quality_row=quality_row)
            if scores is not None:
                row["per_image"]["condition_score"] = scores.tolist()
            if scores is not None and base_scores is not None:
                if [r.prompt for r in records] != [r.prompt for r in base]:
                    raise ValueError(
                        f"{spec.label} and {baseline.label} are not paired image by image"
                    )
                diff = paired_values(scores.tolist(), base_scores.tolist())
                low, high = interval(diff) or (None, None)
                row.update(
                    {
                        "condition_score_diff_ar": diff.difference,
                        "condition_score_diff_ar_low": low,
                        "condition_score_diff_ar_high": high,
                    }
                )
            rows.append(row)
        return rows


class MemoryRuns:
    """A ``RunStore``'s records decoded in this process (or over its ``workers``) and kept in
    memory with their pixels."""

    def __init__(self, store: RunStore) -> None:
        self.store = store

    def prefetch(self, specs: list[MethodSpec]) -> dict[tuple, list[GenerationRecord]]:
        """Every configuration of ``specs`` decoded, batched: its images in units over
        ``workers`` processes (``decode_jobs``), or all in one stream with
        ``mix_configurations`` (``RunStore``). Nothing at batch size 1 with one worker
        (``records`` decodes as asked)."""
        store = self.store
        if not specs or (store.recording.batch_size == 1 and store.workers == 1):
            return {}
        jobs = [store._items(spec) for spec in specs]
        if store.mix_configurations:
            mixed = [item for job in jobs for item in job]
            progress = store.progress
            records = iter(decode_items(store.model, mixed, store.recording, progress=progress))
            decoded = [[next(records) for _ in job] for job in jobs]
        else:
            decoded = decode_jobs(
                store.model, jobs, store.recording, workers=store.workers, progress=store.progress
            )
        return {spec.key: records for spec, records in zip(specs, decoded)}

    def records(self, spec: MethodSpec) -> list[GenerationRecord]:
        """The records of (concrete) ``spec``, decoded now."""
        store = self.store
        progress = self._progress(spec.label)
        return decode_items(store.model, store._items(spec), store.recording, progress=progress)

    def detail_records(
        self, spec: MethodSpec, limit: int | None, *, guided: bool
    ) -> list[GenerationRecord]:
        """Guided: the first ``limit`` of ``records(spec)``; else (concrete) ``spec`` decoded
        again with guidance off, top-1 vectors only."""
        store = self.store
        if guided:
            return store.records(spec)[:limit]
        from .image_model import guidance_scale

        prompts = store.prompts[:limit]
        recording = Recording(top1=True, batch_size=store.recording.batch_size)
        with guidance_scale(store.model, None):
            progress = self._progress(f"{spec.label} without guidance", prompts)
            items = store._items(spec, prompts)
            return decode_items(store.model, items, recording, progress=progress)

    def _progress(self, label: str, prompts: list[str] | None = None) -> Any:
        """The bar and, with ``progress_lines``, a ``ProgressLog`` for one configuration."""
        from ..io.progress import ProgressLog, ProgressTee

        store = self.store
        images = len(store.prompts if prompts is None else prompts) * len(store.seeds)
        log = ProgressLog(
            images,
            desc=f"{store.model.name}, {label} ({len(store._records)} configurations decoded "
            "before it)",
            enabled=store.progress_lines,
        )
        return ProgressTee(store.progress, log)

    def timed(self) -> list[GenerationRecord]:
        """Every record decoded (or preloaded) so far."""
        return [r for records in self.store._records.values() for r in records]

    def quality(self, spec: MethodSpec) -> tuple[dict[str, Any], np.ndarray | None]:
        """``quality_and_scores`` of ``spec``'s images."""
        records = self.store.records(spec)
        model = self.store.model
        return quality_and_scores(model, [r.image for r in records], [r.prompt for r in records])


class RunCache(RunStore):
    """A ``RunStore`` in memory (``MemoryRuns``); the arguments are ``RunStore``'s."""

    def __init__(self, model: ImageModel, prompts: list[str], seeds: list[int],
                 filters: FilterSettings | None = None, **settings: Any) -> None:
        super().__init__(model, prompts, seeds, filters, **settings)
        self.storage = MemoryRuns(self)


def warm_caches(vocab: int | None, methods: list[ResolvedMethod]) -> None:
    """Build, in this process, the embedding filter's [V, V] table that each method's accounting
    reads, and its packed bits (``rules.clusters.packed_adjacency``, cached by the table's
    identity), so that forked workers inherit both instead of building them each."""
    for resolved in methods:
        found = embedding_filter(resolved.rule)
        if (
            found is not None
            and isinstance(vocab, int)
            and vocab * vocab <= 1 << 27  # the CPU table's bound (support_output_laws)
            and found[0].shape[0] >= vocab
        ):
            packed_adjacency(embedding_adjacency(*found, vocab))
