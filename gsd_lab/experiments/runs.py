"""Decoding runs over prompts x seeds and their summaries: the rows of the speed/quality tables.

A ``MethodSpec`` names one decoding configuration (AR, SJD, GSD with a cluster rule, or the naive
lossy "Amplify" relaxation: SJD whose acceptance test is min(1, k p(x)/q(x)), k > 1; this
definition is ours, the paper's was not found). ``run_method`` generates one image per
(prompt, seed) with ``gsd_lab.decoding.generate`` and the same generator seed for every method;
``summarize`` turns the records into a table row: mean NFE, NFE speed-up over AR, mean wall time
and its speed-up (CPU wall time is noise-dominated: quote NFE), the two acceptance measures,
the exact distortion, quality proxies.

Exact distortion (``distortion``): per image the mean over its tokens of TV(one-step output law,
p) (``gsd_lab.distortion``; 0 for AR and SJD), then the mean over images with its standard error
(``distortion_sem``). Noise-free given the tokens: what a lossy rule trades for speed.
Similarity-aware distortion (``w1``, where the model knows its codes' content): per image the
mean over its tokens of W1(one-step output law, p) with the content distance as ground cost
(``gsd_lab.transport``: the RMS difference per coordinate of the decoded content; on the
stand-in pixel values in [-1, 1]), estimated from ``w1_draws`` rows per image drawn in proportion
to their TV (exact when ``w1_draws`` is None); ``w1_sem`` its standard error over images (the
estimator's sampling noise included), ``w1_sampling_sem`` the sampling part alone.
``substitution`` (rank bins with the cluster-exact residual, SD): the content change under the
rule's own coupling, the same way. The time the accounting takes is kept out of
``wall_seconds`` (``DecodeResult.accounting_seconds``).

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

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import torch
from torch import Tensor

from gsd_core import DynamicClusters, Lantern, LatentNeighbourhoods, RankBinnedClusters, latent_neighbourhoods

from ..clustering import embedding_partition
from ..decoding import DecodeResult, generate
from ..transport import DEFAULT_DRAWS
from ..metrics import paired_bootstrap
from ..presets import ReleaseDistanceClusters, preset, release_distance_table
from .image_model import ImageModel

CLUSTER_KINDS = ("dynamic", "dynamic-gap", "dynamic-distance", "dynamic-nofilter", "dynamic-q", "rank-binned",
                 "static")


@dataclass(frozen=True)
class MethodSpec:
    """One decoding configuration.

    method: "ar", "sjd" or "gsd". clusters (gsd only): "dynamic" (the paper: rank window of G
    tokens by p, with the distance and probability-gap filters), "dynamic-nofilter" (rank window
    by p, no filters), "dynamic-q" (rank window by the draft q, no filters), "rank-binned" (our
    partition), "static" (k-means on input embeddings, a fixed partition). residual: "token" or
    "cluster" (partitions only). acceptance_scale k: min(1, k p(C)/q(C)), k = 1 exact.
    lantern_k > 0 (method "sjd" only): LANTERN's relaxed acceptance with neighbourhoods of
    lantern_k tokens (the token itself included, ``gsd_core.lantern``) in the model's input
    embeddings and budget lantern_delta in [0, 1]. seed_offset: added to every generation seed
    (the same method on another seed set: AR against AR is the seed noise)."""

    label: str
    method: str
    clusters: str | None = None
    group_size: int = 0
    residual: str = "token"
    acceptance_scale: float = 1.0
    window: int = 16
    lantern_k: int = 0
    lantern_delta: float = 0.0
    seed_offset: int = 0
    preset: str = "default"

    def __post_init__(self) -> None:
        if self.method not in ("ar", "sjd", "gsd"):
            raise ValueError(f"unknown method {self.method!r}")
        if isinstance(self.lantern_k, bool) or not isinstance(self.lantern_k, int) or self.lantern_k < 0:
            raise ValueError(f"lantern_k must be an int >= 0 (0: no LANTERN), got {self.lantern_k!r}")
        if self.lantern_k and (self.method != "sjd" or self.acceptance_scale != 1.0 or self.residual != "token"):
            raise ValueError("LANTERN (lantern_k > 0) replaces SJD's test: method 'sjd', acceptance_scale 1, "
                             "residual 'token'")
        if not 0 <= self.lantern_delta <= 1 or (self.lantern_delta and not self.lantern_k):
            raise ValueError(f"lantern_delta must lie in [0, 1] and needs lantern_k > 0, got {self.lantern_delta!r}")
        if isinstance(self.seed_offset, bool) or not isinstance(self.seed_offset, int):
            raise ValueError(f"seed_offset must be an int, got {self.seed_offset!r}")
        if (self.method == "gsd") != (self.clusters is not None):
            raise ValueError("clusters must be given exactly for method 'gsd'")
        if self.clusters is not None and self.clusters not in CLUSTER_KINDS:
            raise ValueError(f"unknown clusters {self.clusters!r}; expected one of {CLUSTER_KINDS}")
        fixed = preset(self.preset).window  # raises for an unknown preset
        if fixed is not None and self.method != "ar" and self.window != fixed:
            raise ValueError(f"preset {self.preset!r} fixes the window at {fixed} drafts, got window={self.window}")

    @property
    def key(self) -> tuple:
        """Identity of the computation (the label is only a name)."""
        return (self.method, self.clusters, self.group_size, self.residual, self.acceptance_scale, self.window,
                self.lantern_k, self.lantern_delta, self.seed_offset, self.preset)


@dataclass(frozen=True)
class FilterSettings:
    """GSD's cluster filters (paper Algorithm 3): keep y in C(x) only if |p(y) - p(x)| <=
    max_prob_gap and ||e_y - e_x||^2 <= max_embedding_distance (input embeddings e).

    The released code uses 0.15 and 0.5 on Lumina-mGPT's embeddings. The squared-distance scale
    depends on the model, so for other models the threshold is the ``distance_quantile`` of the
    squared distances between image-token embedding pairs (``resolve``), unless given."""

    max_prob_gap: float = 0.15
    max_embedding_distance: float | None = None
    distance_quantile: float = 0.9

    @classmethod
    def for_model(cls, name: str) -> "FilterSettings":
        """The released code's d = 0.5 for Lumina-mGPT; the quantile rule for other models."""
        return cls(max_embedding_distance=0.5) if name.startswith("lumina-mgpt") else cls()

    def resolve(self, embeddings: Tensor, image_tokens: Tensor, *, seed: int = 0) -> float:
        """The squared-distance threshold: given, or the quantile over pairs of distinct image
        tokens (all pairs up to 4096 tokens, else 10^6 random pairs)."""
        if self.max_embedding_distance is not None:
            return float(self.max_embedding_distance)
        emb = embeddings[image_tokens.to(embeddings.device)].detach().to(torch.float64).cpu()
        n = emb.shape[0]
        if n <= 4096:
            distance = torch.cdist(emb, emb).square()
            distance = distance[torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)]
        else:
            generator = torch.Generator().manual_seed(seed)
            a, b = torch.randint(n, (2, 1_000_000), generator=generator)
            distance = (emb[a[a != b]] - emb[b[a != b]]).square().sum(-1)
        return float(torch.quantile(distance.float(), self.distance_quantile))


def spec_fields(spec: MethodSpec) -> dict[str, Any]:
    """The fields of ``spec`` that decide the computation (its label is only a name); LANTERN's
    and the seed offset only when set, so that the plain methods' records keep one form."""
    fields: dict[str, Any] = {"method": spec.method, "clusters": spec.clusters, "group_size": spec.group_size,
                              "residual": spec.residual, "acceptance_scale": spec.acceptance_scale,
                              "window": spec.window}
    fields.update({k: getattr(spec, k) for k in ("lantern_k", "lantern_delta", "seed_offset") if getattr(spec, k)})
    if spec.preset != "default":
        fields["preset"] = spec.preset
    return fields


def decoding_identity(model: ImageModel, spec: MethodSpec) -> dict[str, Any]:
    """What a decoded image depends on besides the weights, prompt and seed: ``spec_fields``, the
    adapter's CFG scale, top-k and temperature as they are now, and GSD's filter settings for
    the dynamic rules (part of the run identity of ``evaluate`` and ``figures --paper``)."""
    from dataclasses import asdict

    adapter = model.adapter
    decoding = {**spec_fields(spec), "cfg_scale": adapter.cfg_scale, "top_k": adapter.top_k,
                "temperature": getattr(adapter, "temperature", None)}
    if spec.clusters is not None and spec.clusters.startswith("dynamic"):
        decoding["filters"] = asdict(FilterSettings.for_model(model.name))
    return decoding


def build_clusters(spec: MethodSpec, model: ImageModel, filters: FilterSettings, *, seed: int = 0) -> object:
    """The gsd_core cluster rule (or None) for ``spec`` on ``model``."""
    if spec.clusters is None:
        return None
    size = spec.group_size
    if spec.clusters in ("dynamic", "dynamic-distance") and preset(spec.preset).release_distance:
        distance = filters.resolve(model.embeddings, model.image_vocabulary.cpu(), seed=seed)
        table = release_distance_table(model.embeddings, distance).to(model.adapter.device)
        return ReleaseDistanceClusters(size, table, filters.max_prob_gap if spec.clusters == "dynamic" else None)
    if spec.clusters in ("dynamic", "dynamic-distance"):
        embeddings = model.embeddings
        distance = filters.resolve(embeddings, model.image_vocabulary.cpu(), seed=seed)
        gap = filters.max_prob_gap if spec.clusters == "dynamic" else None
        return DynamicClusters(size, max_embedding_distance=distance, max_prob_gap=gap, embeddings=embeddings)
    if spec.clusters == "dynamic-gap":
        return DynamicClusters(size, max_prob_gap=filters.max_prob_gap)
    if spec.clusters == "dynamic-nofilter":
        return DynamicClusters(size)
    if spec.clusters == "dynamic-q":
        return DynamicClusters(size, rank_by="q")
    if spec.clusters == "rank-binned":
        return RankBinnedClusters(size)
    partition = embedding_partition(model.embeddings.cpu(), size, seed=seed,
                                    tokens=model.image_vocabulary.cpu(), vocab_size=model.adapter.vocab_size)
    return type(partition)(partition.labels.to(model.adapter.device))


def build_lantern(spec: MethodSpec, model: ImageModel,
                  neighbourhoods: dict[int, LatentNeighbourhoods] | None = None) -> Lantern | None:
    """The ``gsd_core.Lantern`` rule of ``spec`` (None without LANTERN): neighbourhoods of
    ``spec.lantern_k`` tokens by Euclidean distance between the model's input-embedding rows
    (the paper uses VQ codebook latents; the input embeddings are what every model here exposes,
    and what GSD's distance filter uses). The table costs O(V^2 log V) (about 12 s at V = 8192):
    pass a dict to reuse it across budgets delta (keyed by k)."""
    if not spec.lantern_k:
        return None
    cache = {} if neighbourhoods is None else neighbourhoods
    if spec.lantern_k not in cache:
        embeddings = model.embeddings.detach().to(torch.float64)
        cache[spec.lantern_k] = latent_neighbourhoods(embeddings, spec.lantern_k)
    return Lantern(cache[spec.lantern_k], spec.lantern_delta)


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


def generate_one(model: ImageModel, spec: MethodSpec, prompt: str, seed: int, *, clusters: object = None,
                 record_top1: bool = False, progress: bool = False, lantern: Lantern | None = None,
                 record_distortion: bool = False, engine: str = "eager", record_w1: bool = False,
                 w1_draws: int | None = DEFAULT_DRAWS) -> tuple[DecodeResult, np.ndarray | None]:
    """Decode one image for ``prompt`` with a generator seeded by ``seed``; returns the decoding
    result and the decoded uint8 image (None when the model cannot decode to pixels). engine:
    ``generate``'s execution option ("eager" or "static")."""
    prompt_ids, uncond_ids = model.encode(prompt)
    generator = torch.Generator(device=model.adapter.device).manual_seed(seed)
    settings = preset(spec.preset)
    result = generate(model.adapter, prompt_ids, num_tokens=model.num_tokens, method=spec.method,
                      window=spec.window, clusters=clusters, residual=spec.residual, generator=generator,
                      acceptance_scale=spec.acceptance_scale, record_top1=record_top1, progress=progress,
                      uncond_prompt_ids=uncond_ids, lantern=lantern, record_distortion=record_distortion,
                      jacobi_positions=settings.jacobi_positions(model.num_tokens),
                      forced_drafts=settings.forced_drafts,
                      engine=engine, record_w1=record_w1, w1_draws=w1_draws)
    return result, (model.decode(result.tokens) if model.decode is not None else None)


def run_method(
    model: ImageModel,
    spec: MethodSpec,
    prompts: list[str],
    seeds: Iterable[int],
    *,
    clusters: object = None,
    record_top1: bool = False,
    progress: Any = None,
    lantern: Lantern | None = None,
    record_distortion: bool = False,
    record_w1: bool = False,
    w1_draws: int | None = DEFAULT_DRAWS,
) -> list[GenerationRecord]:
    """One image per (seed + spec.seed_offset, prompt) with ``spec``; ``progress``: a tqdm bar to
    advance (or None); ``lantern``: the rule of a LANTERN spec (``build_lantern``); record_w1 /
    w1_draws: the similarity-aware distortion (``gsd_lab.decoding.generate``)."""
    if bool(spec.lantern_k) != (lantern is not None):
        raise ValueError(f"{spec.label}: pass lantern exactly for a LANTERN spec (lantern_k > 0)")
    records = []
    for seed in seeds:
        for index, prompt in enumerate(prompts):
            gseed = generator_seed(seed + spec.seed_offset, index)
            result, image = generate_one(model, spec, prompt, gseed, clusters=clusters, record_top1=record_top1,
                                         lantern=lantern, record_distortion=record_distortion, record_w1=record_w1,
                                         w1_draws=w1_draws)
            distortion = float(result.distortion.mean()) if result.distortion is not None else None
            w1 = result.w1
            records.append(GenerationRecord(
                spec.label, prompt, gseed, result.nfe, result.acceptance_rate, accepted_per_tested(result),
                result.wall_seconds, result.model_seconds, result.tokens, image, result.top1, distortion,
                result.accounting_seconds, w1=None if w1 is None else w1.mean, w1_sem=None if w1 is None else w1.sem,
                substitution=None if w1 is None else w1.substitution,
                substitution_sem=None if w1 is None else w1.substitution_sem,
                w1_seconds=0.0 if w1 is None else w1.seconds))
            if progress is not None:
                progress.update(1)
    return records


def quality(model: ImageModel, images: list[np.ndarray], prompts: list[str]) -> dict[str, float]:
    """The model's quality proxies over a set of images (empty when the model has none):
    condition_score (mean over images) with its standard error, frechet_distance (set level)."""
    return quality_and_scores(model, images, prompts)[0]


def quality_and_scores(model: ImageModel, images: list[np.ndarray],
                       prompts: list[str]) -> tuple[dict[str, float], np.ndarray | None]:
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
    return {"condition_score": float(scores.mean()),
            "condition_score_sem": float(scores.std(ddof=1) / np.sqrt(len(scores))) if len(scores) > 1 else None}


def real_image_baseline(model: ImageModel, num_images: int, *, seed: int = 0) -> dict[str, Any] | None:
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
    scores = np.asarray(model.condition_scores(as_uint8(crops), [names[i] for i in labels.tolist()]), np.float64)
    per_class = max(1, -(-num_images // len(names)))
    train, _ = data.class_crops("train", per_class, seed, flip=False)
    train = train.view(len(names), per_class, *train.shape[1:]).transpose(0, 1).reshape(-1, *train.shape[1:])
    return {"method": "real crops (held-out score; train-split Frechet)", "images": len(scores),
            "condition_score": float(scores.mean()),
            "condition_score_sem": float(scores.std(ddof=1) / np.sqrt(len(scores))),
            "frechet_distance": float(model.frechet_distance(as_uint8(train[:num_images]))),
            "frechet_images": min(num_images, train.shape[0])}


def _sem(values: list[float]) -> float | None:
    """Standard error of the mean over images (ddof 1); None for fewer than two."""
    return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else None


def summarize(model: ImageModel, records: list[GenerationRecord], baseline: list[GenerationRecord] | None = None,
              *, quality_row: dict[str, Any] | None = None) -> dict[str, Any]:
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
    for key in ("distortion", "w1", "substitution"):
        values = [getattr(r, key) for r in records]
        if any(v is None for v in values):
            continue
        row[key], row[f"{key}_sem"] = float(np.mean(values)), _sem(values)
        if key != "distortion":  # the estimator's share of that error: its within-image sampling noise
            sampling = [getattr(r, f"{key}_sem") for r in records]
            row[f"{key}_sampling_sem"] = (None if any(v is None for v in sampling)
                                         else float(np.sqrt(np.sum(np.square(sampling)))) / len(sampling))
    row["per_image"] = {"prompt": [r.prompt for r in records], "seed": [r.seed for r in records],
                        "nfe": [r.nfe for r in records], "distortion": [r.distortion for r in records],
                        "w1": [r.w1 for r in records]}
    if baseline:
        row["speedup_nfe"] = float(np.mean([r.nfe for r in baseline])) / nfe
        row["speedup_wall"] = float(np.mean([r.wall_seconds for r in baseline])) / wall
    if quality_row is None:
        quality_row = quality(model, [r.image for r in records], [r.prompt for r in records])
    row.update(quality_row)
    return row


class RunCache:
    """Records per ``MethodSpec.key`` so that tables sharing a configuration decode it once.

    ``progress``: a tqdm bar to advance per image (or None). ``progress_lines`` (default: on for
    Lumina-mGPT, whose images take minutes): a line per configuration at most every 30 s on
    stderr with its images done / to do and ETA, and how many configurations are done.
    record_w1: None (default) records the similarity-aware distortion whenever TV is recorded
    and the model's adapter knows its codes' content (``code_content()``); w1_draws: rows solved
    per image (None: exact for every token; module docstring)."""

    def __init__(self, model: ImageModel, prompts: list[str], seeds: list[int], filters: FilterSettings,
                 *, progress: Any = None, record_top1: bool = True, record_distortion: bool = True,
                 bootstrap_resamples: int = 2000, progress_lines: bool | None = None,
                 record_w1: bool | None = None, w1_draws: int | None = DEFAULT_DRAWS) -> None:
        self.model, self.prompts, self.seeds, self.filters = model, prompts, seeds, filters
        self.progress, self.record_top1, self.record_distortion = progress, record_top1, record_distortion
        self.progress_lines = model.name.startswith("lumina-mgpt") if progress_lines is None else progress_lines
        if record_w1 is None:
            record_w1 = record_distortion and model.adapter.code_content() is not None
        self.record_w1, self.w1_draws = record_w1, w1_draws
        self.bootstrap_resamples = bootstrap_resamples
        self._records: dict[tuple, list[GenerationRecord]] = {}
        self._quality: dict[tuple, tuple[dict[str, Any], np.ndarray | None]] = {}  # scored once per configuration
        self._neighbourhoods: dict[int, LatentNeighbourhoods] = {}  # LANTERN's tables, one per k

    def records(self, spec: MethodSpec) -> list[GenerationRecord]:
        shifted = {s + spec.seed_offset for s in self.seeds}
        if spec.seed_offset and shifted & set(self.seeds):
            raise ValueError(
                f"{spec.label}: seed_offset {spec.seed_offset} maps seeds {sorted(shifted & set(self.seeds))} onto "
                "seeds this cache already decodes, so its 'other seeds' would repeat images; use a larger offset")
        if spec.key not in self._records:
            clusters = build_clusters(spec, self.model, self.filters)
            lantern = build_lantern(spec, self.model, self._neighbourhoods)
            self._records[spec.key] = run_method(self.model, spec, self.prompts, self.seeds, clusters=clusters,
                                                 record_top1=self.record_top1, progress=self._progress(spec.label),
                                                 lantern=lantern, record_distortion=self.record_distortion,
                                                 record_w1=self.record_w1, w1_draws=self.w1_draws)
        return [GenerationRecord(**{**r.__dict__, "label": spec.label}) for r in self._records[spec.key]]

    def detail_records(self, spec: MethodSpec, limit: int | None = None, *,
                       guided: bool = True) -> list[GenerationRecord]:
        """Records with tokens, top-1 vectors and images for the detail analyses (top-1
        statistics, the replacement study, sample grids): the first ``limit`` of ``records(spec)``;
        ``guided=False``: ``spec`` decoded again with classifier-free guidance off, on the first
        ``limit`` prompts (every seed)."""
        if guided:
            return self.records(spec)[:limit]
        from .image_model import guidance_scale

        with guidance_scale(self.model, None):
            return run_method(self.model, spec, self.prompts[:limit], self.seeds, record_top1=True,
                              progress=self._progress(f"{spec.label} without guidance", self.prompts[:limit]))

    def _progress(self, label: str, prompts: list[str] | None = None) -> Any:
        """The bar and, with ``progress_lines``, a ``ProgressLog`` for one configuration."""
        from ..progress import ProgressLog, ProgressTee

        images = len(self.prompts if prompts is None else prompts) * len(self.seeds)
        log = ProgressLog(images, desc=f"{self.model.name}, {label} ({len(self._records)} configurations decoded "
                                       "before it)", enabled=self.progress_lines)
        return ProgressTee(self.progress, log)

    def accounting_seconds(self) -> list[float]:
        """Time spent on distortion accounting (TV and W1), per decoded image (all configurations)."""
        return [r.accounting_seconds for records in self._records.values() for r in records]

    def w1_seconds(self) -> list[float]:
        """The W1 part of ``accounting_seconds``, per decoded image."""
        return [r.w1_seconds for records in self._records.values() for r in records]

    def _scored(self, spec: MethodSpec) -> tuple[dict[str, Any], np.ndarray | None]:
        if spec.key not in self._quality:
            records = self.records(spec)
            self._quality[spec.key] = quality_and_scores(self.model, [r.image for r in records],
                                                         [r.prompt for r in records])
        return self._quality[spec.key]

    def table(self, specs: list[MethodSpec], baseline: MethodSpec) -> list[dict[str, Any]]:
        """One ``summarize`` row per spec, with speed-ups against ``baseline`` and, where the model
        has per-image condition scores, ``condition_score_diff_ar`` (mean difference to the
        baseline, image by image: same prompts and seed indices) and its 95% paired bootstrap
        interval ``condition_score_diff_ar_low`` / ``_high`` (seeded: the same on every run); the
        per-image scores go to the row's ``per_image`` for paired comparisons between any two rows."""
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
                    raise ValueError(f"{spec.label} and {baseline.label} are not paired image by image")
                interval = paired_bootstrap(scores, base_scores, num_resamples=self.bootstrap_resamples,
                                            generator=torch.Generator().manual_seed(0))
                row.update({f"condition_score_diff_ar{k}": v for k, v in
                            (("", interval.difference), ("_low", interval.low), ("_high", interval.high))})
            rows.append(row)
        return rows

