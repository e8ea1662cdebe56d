"""Decoding runs over prompts x seeds and their summaries: the rows of the speed/quality tables.

A ``MethodSpec`` labels one ``gsd_lab.decode.methods.DecodingMethod`` (AR, SJD, GSD with a cluster
rule, the naive lossy "Amplify" relaxation: SJD whose acceptance test is min(1, k p(x)/q(x)), k > 1;
this definition is ours, the paper's was not found; LANTERN). ``run_method`` generates one image per
(prompt, seed) with ``gsd_lab.decode.loop.generate`` and the same generator seed for every method;
``summarize`` turns the records into a table row: mean NFE, NFE speed-up over AR, mean wall time
and its speed-up (CPU wall time is noise-dominated: quote NFE), the two acceptance measures,
the exact distortion, quality proxies.

Exact distortion (``distortion``): per image the mean over its tokens of TV(one-step output law,
p) (``accounting.distortion``; 0 for AR and SJD), then the mean over images with its standard error
(``distortion_sem``). Noise-free given the tokens: what a lossy rule trades for speed.
Similarity-aware distortion (``w1``, where the model knows its codes' content): per image the
mean over its tokens of W1(one-step output law, p) with the content distance as ground cost
(``gsd_lab.accounting.transport``: the RMS difference per coordinate of the decoded content; on the
stand-in pixel values in [-1, 1]), estimated from ``w1_draws`` rows per image drawn in proportion
to their TV (exact when ``w1_draws`` is None); ``w1_sem`` its standard error over images (the
estimator's sampling noise included), ``w1_sampling_sem`` the sampling part alone.
The records keep ``substitution`` (``gsd_lab.accounting.transport.substitution_cost``: defined only
for SD, where it is 0, and partitions with the cluster-exact residual), but the tables do not report
it: it is undefined for GSD's dynamic rule, Amplify and LANTERN, the rows it was meant to compare.
The time the accounting takes is kept out of ``wall_seconds`` (``DecodeResult.accounting_seconds``).

Per-image values (``per_image`` of each row: prompt, seed, nfe, distortion, w1, condition score):
what paired comparisons (``verdicts``, ``matched``) need, image by image.

Error bars against AR (``RunCache.table``): for a per-image proxy (the condition score) the
difference of means to AR on the same prompts and seeds, ``{metric}_diff_ar``, with a 95% paired
bootstrap interval over images (``{metric}_diff_ar_low`` / ``_high``; ``metrics.paired_bootstrap``).
The AR-against-AR seed noise is the same difference for AR decoded with another seed set
(``MethodSpec.seed_offset``), and ``real_image_baseline`` scores real held-out crops.

Two acceptance measures (per image, then averaged over images):
- ``acceptance_rate`` = accepted / drafted: drafts accepted over all draft positions of all
  windows, counting the positions after a window's first rejection that were never tested
  (``DecodeResult.acceptance_rate``). It is a throughput measure, not 1 - TV.
- ``accepted_per_tested`` = accepted / tested, tested = accepted + the rejected position (one per
  window that rejected): the empirical probability that a *tested* draft is accepted, the
  quantity E[min(1, p(C)/q(C))] (= 1 - TV for singletons) that notebooks 01 and 05 compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterable

import numpy as np
import torch
from torch import Tensor

from ..decode.loop import DecodeResult, generate
from ..accounting.transport import DEFAULT_DRAWS
from ..decode.methods import DecodingMethod, FilterSettings, ResolvedMethod
from ..quality.metrics import paired_bootstrap
from .image_model import ImageModel


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
        """JSON-ready: the label, every field of the method (``DecodingMethod.all_fields``) and
        the seed offset (the figures' sidecars)."""
        return {
            "label": self.label,
            "method": self.method.all_fields(),
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
    """accepted / tested over the windows of one generation (module docstring); None for AR."""
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


def generate_one(
    model: ImageModel,
    method: DecodingMethod | ResolvedMethod,
    prompt: str,
    seed: int,
    *,
    record_top1: bool = False,
    progress: bool = False,
    record_distortion: bool = False,
    runner: str = "eager",
    record_w1: bool = False,
    w1_draws: int | None = DEFAULT_DRAWS,
    decode_image: bool = True,
) -> tuple[DecodeResult, np.ndarray | None]:
    """Decode one image for ``prompt`` with a generator seeded by ``seed``; returns the decoding
    result and the decoded uint8 image (None when the model cannot decode to pixels, or
    ``decode_image`` is False: tokens only, e.g. a command-line generate without --out). A
    ``DecodingMethod`` is resolved here (``resolve_for``): pass the resolved one when decoding
    many images. runner: ``generate``'s execution option ("eager" or "static"); record_w1 /
    w1_draws: the similarity-aware distortion (``gsd_lab.decode.loop.generate``)."""
    resolved = resolve_for(model, method) if isinstance(method, DecodingMethod) else method
    prompt_ids, uncond_ids = model.encode(prompt)
    generator = torch.Generator(device=model.adapter.device).manual_seed(seed)
    result = generate(
        model.adapter,
        prompt_ids,
        resolved,
        num_tokens=model.num_tokens,
        generator=generator,
        uncond_prompt_ids=uncond_ids,
        record_top1=record_top1,
        progress=progress,
        record_distortion=record_distortion,
        runner=runner,
        record_w1=record_w1,
        w1_draws=w1_draws,
    )
    pixels = decode_image and model.decode is not None
    return result, (model.decode(result.tokens) if pixels else None)


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


def run_method(
    model: ImageModel,
    spec: MethodSpec,
    prompts: list[str],
    seeds: Iterable[int],
    *,
    resolved: ResolvedMethod | None = None,
    record_top1: bool = False,
    progress: Any = None,
    record_distortion: bool = False,
    record_w1: bool = False,
    w1_draws: int | None = DEFAULT_DRAWS,
    batch_size: int = 1,
) -> list[GenerationRecord]:
    """One image per (seed + spec.seed_offset, prompt) with ``spec``; ``progress``: a tqdm bar to
    advance (or None); ``resolved``: ``spec.method`` already resolved on ``model`` (else
    resolved here); record_w1 / w1_draws: the similarity-aware distortion (``generate``).
    batch_size > 1: the images decoded together, ``batch_size`` per forward
    (``gsd_lab.decode.batch.generate_batch``: each image's tokens and NFE as alone; its
    wall_seconds and model_seconds its share of the batch's), records in the same order."""
    if resolved is None:
        resolved = resolve_for(model, spec.method)
    elif resolved.method != spec.method.for_model(model.name):
        raise ValueError(
            f"{spec.label}: resolved is another method than the spec's ({resolved.method.key} "
            f"is not {spec.method.for_model(model.name).key})"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if batch_size > 1:
        return run_batched(
            model,
            [(spec, resolved)],
            prompts,
            seeds,
            batch_size,
            progress=progress,
            record_top1=record_top1,
            record_distortion=record_distortion,
            record_w1=record_w1,
            w1_draws=w1_draws,
        )[0]
    records = []
    for seed in seeds:
        for index, prompt in enumerate(prompts):
            gseed = generator_seed(seed + spec.seed_offset, index)
            result, image = generate_one(
                model,
                resolved,
                prompt,
                gseed,
                record_top1=record_top1,
                record_distortion=record_distortion,
                record_w1=record_w1,
                w1_draws=w1_draws,
            )
            records.append(record_of(spec.label, prompt, gseed, result, image))
            if progress is not None:
                progress.update(1)
    return records


BatchItem = tuple[int, str, int]  # (job index, prompt, generator seed)


def batch_items(
    jobs: list[tuple[MethodSpec, ResolvedMethod]], prompts: list[str], seeds: Iterable[int]
) -> list[BatchItem]:
    """The images of ``run_batched``'s jobs in its order: job, then seed, then prompt, each as
    (job index, prompt, generator seed ``generator_seed(seed + offset, prompt index)``)."""
    seeds = list(seeds)
    return [
        (job, prompt, generator_seed(seed + spec.seed_offset, index))
        for job, (spec, _) in enumerate(jobs)
        for seed in seeds
        for index, prompt in enumerate(prompts)
    ]


def decode_items(
    model: ImageModel,
    jobs: list[tuple[MethodSpec, ResolvedMethod]],
    items: list[BatchItem],
    batch_size: int,
    *,
    progress: Any = None,
    **options: Any,
) -> list[GenerationRecord]:
    """The records of ``items`` (``batch_items``), in their order, decoded as one stream through
    ``generate_batch`` (``batch_size`` images per forward, images of different jobs side by
    side). options: ``generate_batch``'s record_* and w1_draws."""
    from ..decode.batch import DecodeRequest, generate_batch

    requests = []
    for job, prompt, gseed in items:
        prompt_ids, uncond_ids = model.encode(prompt)
        generator = torch.Generator(device=model.adapter.device).manual_seed(gseed)
        requests.append(
            DecodeRequest(prompt_ids, jobs[job][1], model.num_tokens, generator, uncond_ids)
        )
    results = generate_batch(
        model.adapter, requests, batch_size=batch_size, progress=progress, **options
    )
    decode = model.decode
    return [
        record_of(
            jobs[job][0].label, prompt, gseed, result, decode(result.tokens) if decode else None
        )
        for (job, prompt, gseed), result in zip(items, results)
    ]


def run_batched(
    model: ImageModel,
    jobs: list[tuple[MethodSpec, ResolvedMethod]],
    prompts: list[str],
    seeds: Iterable[int],
    batch_size: int,
    *,
    progress: Any = None,
    **options: Any,
) -> list[list[GenerationRecord]]:
    """``run_method``'s images of every (spec, resolved) job, decoded as one stream through
    ``generate_batch`` (``batch_size`` images per forward, images of different jobs side by
    side, so batches stay full across jobs); per job its records in ``run_method``'s order
    (seed, then prompt). options: ``generate_batch``'s record_* and w1_draws."""
    items = batch_items(jobs, prompts, seeds)
    decoded = decode_items(model, jobs, items, batch_size, progress=progress, **options)
    records: list[list[GenerationRecord]] = [[] for _ in jobs]
    for (job, _, _), record in zip(items, decoded):
        records[job].append(record)
    return records


def quality(model: ImageModel, images: list[np.ndarray], prompts: list[str]) -> dict[str, float]:
    """The model's quality proxies over a set of images (empty when the model has none):
    condition_score (mean over images) with its standard error, frechet_distance (set level)."""
    return quality_and_scores(model, images, prompts)[0]


def quality_and_scores(
    model: ImageModel, images: list[np.ndarray], prompts: list[str]
) -> tuple[dict[str, float], np.ndarray | None]:
    """``quality`` and the per-image condition scores [N] it averaged (None without them)."""
    out: dict[str, float] = {}
    scores = None
    if not images or any(image is None for image in images):
        return out, scores
    if model.condition_scores is not None:
        scores = np.asarray(model.condition_scores(images, prompts), dtype=np.float64)
        out.update(score_summary(scores))
    if model.frechet_distance is not None:
        out["frechet_distance"] = float(model.frechet_distance(images))
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
        "condition_score": float(scores.mean()),
        "condition_score_sem": float(scores.std(ddof=1) / np.sqrt(len(scores))),
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
    rates = [r.acceptance_rate for r in records if r.acceptance_rate is not None]
    per_tested = [r.accepted_per_tested for r in records if r.accepted_per_tested is not None]
    row: dict[str, Any] = {
        "method": records[0].label,
        "images": len(records),
        "nfe": nfe,
        "wall_seconds": wall,
        "acceptance_rate": float(np.mean(rates)) if rates else None,
        "accepted_per_tested": float(np.mean(per_tested)) if per_tested else None,
        "nfe_sem": _sem([r.nfe for r in records]),
    }
    for key in ("distortion", "w1"):  # not "substitution": undefined for most lossy rules
        values = [getattr(r, key) for r in records]
        if any(v is None for v in values):
            continue
        row[key], row[f"{key}_sem"] = float(np.mean(values)), _sem(values)
        if (
            key != "distortion"
        ):  # the estimator's share of that error: its within-image sampling noise
            sampling = [getattr(r, f"{key}_sem") for r in records]
            row[f"{key}_sampling_sem"] = (
                None
                if any(v is None for v in sampling)
                else float(np.sqrt(np.sum(np.square(sampling)))) / len(sampling)
            )
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
        quality_row = quality(model, [r.image for r in records], [r.prompt for r in records])
    row.update(quality_row)
    return row


class RunCache:
    """Records per ``MethodSpec.key`` so that tables sharing a configuration decode it once.
    ``filters``: GSD's filters for the specs that name none (default: the model's,
    ``FilterSettings.for_model``).

    ``progress``: a tqdm bar to advance per image (or None). ``progress_lines`` (default: on for
    Lumina-mGPT, whose images take minutes): a line per configuration at most every 30 s on
    stderr with its images done / to do and ETA, and how many configurations are done.
    record_w1: None (default) records the similarity-aware distortion whenever TV is recorded
    and the model's adapter knows its codes' content (``code_content()``); w1_draws: rows solved
    per image (None: exact for every token; module docstring). batch_size: images per forward
    (``run_method``; 1: one image at a time). mix_configurations: False (default) decodes each
    configuration's images in a batch stream of their own in ``prefetch``, so an image shares its
    forwards only with images of its configuration and its ``wall_seconds`` (its share of them)
    is that configuration's decoding time per image at this batch size; True streams every
    configuration together (batches stay full, but an AR image then shares, and pays for, the
    16-draft windows of its neighbours, and the wall columns mix methods). workers: processes
    that ``prefetch`` splits the configurations' images over, one intra-op thread each
    (``gsd_lab.experiments.workers``: the same records for any number; None: the usable cores on
    a CPU); 1 (default) decodes in this process."""

    def __init__(
        self,
        model: ImageModel,
        prompts: list[str],
        seeds: list[int],
        filters: FilterSettings | None = None,
        *,
        progress: Any = None,
        record_top1: bool = True,
        record_distortion: bool = True,
        bootstrap_resamples: int = 2000,
        progress_lines: bool | None = None,
        record_w1: bool | None = None,
        w1_draws: int | None = DEFAULT_DRAWS,
        batch_size: int = 1,
        mix_configurations: bool = False,
        workers: int | None = 1,
    ) -> None:
        from .workers import check_workers, default_workers

        self.model, self.prompts, self.seeds = model, prompts, seeds
        check_workers(workers)
        self.workers = default_workers(model.adapter.device) if workers is None else workers
        self.batch_size, self.mix_configurations = batch_size, mix_configurations
        self.filters = FilterSettings.for_model(model.name) if filters is None else filters
        self.progress, self.record_top1, self.record_distortion = (
            progress,
            record_top1,
            record_distortion,
        )
        if record_w1 is None:
            record_w1 = record_distortion and model.adapter.code_content() is not None
        self.record_w1, self.w1_draws = record_w1, w1_draws
        self.progress_lines = (
            model.name.startswith("lumina-mgpt") if progress_lines is None else progress_lines
        )
        self.bootstrap_resamples = bootstrap_resamples
        self._records: dict[tuple, list[GenerationRecord]] = {}
        self._stored: dict[str, list[GenerationRecord]] = {}  # preloaded, by repr(key)
        self._quality: dict[
            tuple, tuple[dict[str, Any], np.ndarray | None]
        ] = {}  # scored once per configuration
        self._resolved: dict = {}  # rule objects built once (LANTERN's tables, one per k)

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

    def prefetch(self, specs: list[MethodSpec]) -> None:
        """Decode every configuration of ``specs`` not decoded (or preloaded) yet, batched: its
        images in units over ``workers`` processes (``workers.run_jobs``: one stream per
        configuration of at most ``UNIT_BATCHES`` x batch_size images), or all in one stream
        with ``mix_configurations`` (class docstring); then ``records`` serves them. Nothing to
        do at batch_size 1 with one worker (``records`` decodes as asked)."""
        from .workers import run_jobs

        if self.batch_size == 1 and self.workers == 1:
            return
        todo: dict[tuple, MethodSpec] = {}
        for spec in map(self._concrete, specs):
            self._check_offset(spec)
            if spec.key not in self._records and repr(spec.key) not in self._stored:
                todo.setdefault(spec.key, spec)
        if not todo:
            return
        jobs = [
            (spec, resolve_for(self.model, spec.method, self._resolved)) for spec in todo.values()
        ]
        options = {
            "progress": self.progress,
            "record_top1": self.record_top1,
            "record_distortion": self.record_distortion,
            "record_w1": self.record_w1,
            "w1_draws": self.w1_draws,
        }
        if self.mix_configurations:
            decoded = run_batched(
                self.model, jobs, self.prompts, self.seeds, self.batch_size, **options
            )
        else:
            decoded = run_jobs(
                self.model,
                jobs,
                self.prompts,
                self.seeds,
                self.batch_size,
                workers=self.workers,
                **options,
            )
        for key, records in zip(todo, decoded):
            self._records[key] = records

    def records(self, spec: MethodSpec) -> list[GenerationRecord]:
        spec = self._concrete(spec)
        self._check_offset(spec)
        if spec.key not in self._records and repr(spec.key) in self._stored:
            self._records[spec.key] = self._stored[repr(spec.key)]
        if spec.key not in self._records:
            resolved = resolve_for(self.model, spec.method, self._resolved)
            self._records[spec.key] = run_method(
                self.model,
                spec,
                self.prompts,
                self.seeds,
                resolved=resolved,
                record_top1=self.record_top1,
                progress=self._progress(spec.label),
                record_distortion=self.record_distortion,
                record_w1=self.record_w1,
                w1_draws=self.w1_draws,
                batch_size=self.batch_size,
            )
        return [
            GenerationRecord(**{**r.__dict__, "label": spec.label}) for r in self._records[spec.key]
        ]

    def decoded(self) -> dict[tuple, list[GenerationRecord]]:
        """Every configuration decoded (or preloaded) so far: key -> its records."""
        return dict(self._records)

    def preload(self, key: str, records: list[GenerationRecord]) -> None:
        """Records of the configuration whose ``repr(spec.key)`` is ``key``, decoded elsewhere
        (``gsd_lab.experiments.records``): ``records(spec)`` returns them instead of decoding."""
        self._stored[key] = records

    def detail_records(
        self, spec: MethodSpec, limit: int | None = None, *, guided: bool = True
    ) -> list[GenerationRecord]:
        """Records with tokens, top-1 vectors and images for the detail analyses (top-1
        statistics, the replacement study, sample grids): the first ``limit`` of ``records(spec)``;
        ``guided=False``: ``spec`` decoded again with classifier-free guidance off, on the first
        ``limit`` prompts (every seed)."""
        if guided:
            return self.records(spec)[:limit]
        from .image_model import guidance_scale

        spec = self._concrete(spec)
        with guidance_scale(self.model, None):
            resolved = resolve_for(self.model, spec.method, self._resolved)
            return run_method(
                self.model,
                spec,
                self.prompts[:limit],
                self.seeds,
                resolved=resolved,
                record_top1=True,
                progress=self._progress(f"{spec.label} without guidance", self.prompts[:limit]),
                batch_size=self.batch_size,
            )

    def _progress(self, label: str, prompts: list[str] | None = None) -> Any:
        """The bar and, with ``progress_lines``, a ``ProgressLog`` for one configuration."""
        from ..io.progress import ProgressLog, ProgressTee

        images = len(self.prompts if prompts is None else prompts) * len(self.seeds)
        log = ProgressLog(
            images,
            desc=f"{self.model.name}, {label} ({len(self._records)} configurations decoded "
            "before it)",
            enabled=self.progress_lines,
        )
        return ProgressTee(self.progress, log)

    def accounting_seconds(self) -> list[float]:
        """Time spent on distortion accounting (TV and W1), per decoded image (all
        configurations)."""
        return [r.accounting_seconds for records in self._records.values() for r in records]

    def w1_seconds(self) -> list[float]:
        """The W1 part of ``accounting_seconds``, per decoded image."""
        return [r.w1_seconds for records in self._records.values() for r in records]

    def _scored(self, spec: MethodSpec) -> tuple[dict[str, Any], np.ndarray | None]:
        spec = self._concrete(spec)
        if spec.key not in self._quality:
            records = self.records(spec)
            self._quality[spec.key] = quality_and_scores(
                self.model, [r.image for r in records], [r.prompt for r in records]
            )
        return self._quality[spec.key]

    def table(self, specs: list[MethodSpec], baseline: MethodSpec) -> list[dict[str, Any]]:
        """One ``summarize`` row per spec, with speed-ups against ``baseline`` and, where the model
        has per-image condition scores, ``condition_score_diff_ar`` (mean difference to the
        baseline, image by image: same prompts and seed indices) and its 95% paired bootstrap
        interval ``condition_score_diff_ar_low`` / ``_high`` (seeded: the same on every run); the
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
                interval = paired_bootstrap(
                    scores,
                    base_scores,
                    num_resamples=self.bootstrap_resamples,
                    generator=torch.Generator().manual_seed(0),
                )
                row.update(
                    {
                        f"condition_score_diff_ar{k}": v
                        for k, v in (
                            ("", interval.difference),
                            ("_low", interval.low),
                            ("_high", interval.high),
                        )
                    }
                )
            rows.append(row)
        return rows
