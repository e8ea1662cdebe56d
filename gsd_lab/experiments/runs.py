"""Decoding runs over prompts x seeds and their summaries: the rows of the speed/quality tables.

A ``MethodSpec`` names one decoding configuration (AR, SJD, GSD with a cluster rule, or the naive
lossy "Amplify" relaxation: SJD whose acceptance test is min(1, k p(x)/q(x)), k > 1; this
definition is ours, the paper's was not found). ``run_method`` generates one image per
(prompt, seed) with ``gsd_lab.decoding.generate`` and the same generator seed for every method;
``summarize`` turns the records into a table row: mean NFE, NFE speed-up over AR, mean wall time
and its speed-up (CPU wall time is noise-dominated: quote NFE), the two acceptance measures,
quality proxies.

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

from gsd_core import DynamicClusters, RankBinnedClusters

from ..clustering import embedding_partition
from ..decoding import DecodeResult, generate
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
    "cluster" (partitions only). acceptance_scale k: min(1, k p(C)/q(C)), k = 1 exact."""

    label: str
    method: str
    clusters: str | None = None
    group_size: int = 0
    residual: str = "token"
    acceptance_scale: float = 1.0
    window: int = 16

    def __post_init__(self) -> None:
        if self.method not in ("ar", "sjd", "gsd"):
            raise ValueError(f"unknown method {self.method!r}")
        if (self.method == "gsd") != (self.clusters is not None):
            raise ValueError("clusters must be given exactly for method 'gsd'")
        if self.clusters is not None and self.clusters not in CLUSTER_KINDS:
            raise ValueError(f"unknown clusters {self.clusters!r}; expected one of {CLUSTER_KINDS}")

    @property
    def key(self) -> tuple:
        """Identity of the computation (the label is only a name)."""
        return (self.method, self.clusters, self.group_size, self.residual, self.acceptance_scale, self.window)


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


def build_clusters(spec: MethodSpec, model: ImageModel, filters: FilterSettings, *, seed: int = 0) -> object:
    """The gsd_core cluster rule (or None) for ``spec`` on ``model``."""
    if spec.clusters is None:
        return None
    size = spec.group_size
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


def accepted_per_tested(result: DecodeResult) -> float | None:
    """accepted / tested over the windows of one generation (module docstring); None for AR."""
    tested = sum(a + (1 if a < d else 0) for a, d in zip(result.accepted, result.drafted) if d > 0)
    return sum(result.accepted) / tested if tested else None


def generator_seed(seed: int, prompt_index: int) -> int:
    """The generator seed of (seed, prompt index): shared by every method."""
    return 1_000_003 * seed + prompt_index


def generate_one(model: ImageModel, spec: MethodSpec, prompt: str, seed: int, *, clusters: object = None,
                 record_top1: bool = False, progress: bool = False) -> tuple[DecodeResult, np.ndarray | None]:
    """Decode one image for ``prompt`` with a generator seeded by ``seed``; returns the decoding
    result and the decoded uint8 image (None when the model cannot decode to pixels)."""
    prompt_ids, uncond_ids = model.encode(prompt)
    generator = torch.Generator(device=model.adapter.device).manual_seed(seed)
    result = generate(model.adapter, prompt_ids, num_tokens=model.num_tokens, method=spec.method,
                      window=spec.window, clusters=clusters, residual=spec.residual, generator=generator,
                      acceptance_scale=spec.acceptance_scale, record_top1=record_top1, progress=progress,
                      uncond_prompt_ids=uncond_ids)
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
) -> list[GenerationRecord]:
    """One image per (seed, prompt) with ``spec``; ``progress``: a tqdm bar to advance (or None)."""
    records = []
    for seed in seeds:
        for index, prompt in enumerate(prompts):
            gseed = generator_seed(seed, index)
            result, image = generate_one(model, spec, prompt, gseed, clusters=clusters, record_top1=record_top1)
            records.append(GenerationRecord(spec.label, prompt, gseed, result.nfe, result.acceptance_rate,
                                            accepted_per_tested(result), result.wall_seconds, result.model_seconds, result.tokens, image,
                                            result.top1))
            if progress is not None:
                progress.update(1)
    return records


def quality(model: ImageModel, images: list[np.ndarray], prompts: list[str]) -> dict[str, float]:
    """The model's quality proxies over a set of images (empty when the model has none):
    condition_score (mean over images) with its standard error, frechet_distance (set level)."""
    out: dict[str, float] = {}
    if not images or any(image is None for image in images):
        return out
    if model.condition_scores is not None:
        scores = np.asarray(model.condition_scores(images, prompts), dtype=np.float64)
        out["condition_score"] = float(scores.mean())
        # Standard error of the mean over images: differences below ~2 of these are noise.
        out["condition_score_sem"] = float(scores.std(ddof=1) / np.sqrt(len(scores))) if len(scores) > 1 else None
    if model.frechet_distance is not None:
        out["frechet_distance"] = float(model.frechet_distance(images))
    return out


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
        "nfe_sem": float(np.std([r.nfe for r in records], ddof=1) / np.sqrt(len(records))) if len(records) > 1 else None,
    }
    if baseline:
        row["speedup_nfe"] = float(np.mean([r.nfe for r in baseline])) / nfe
        row["speedup_wall"] = float(np.mean([r.wall_seconds for r in baseline])) / wall
    if quality_row is None:
        quality_row = quality(model, [r.image for r in records], [r.prompt for r in records])
    row.update(quality_row)
    return row


class RunCache:
    """Records per ``MethodSpec.key`` so that tables sharing a configuration decode it once."""

    def __init__(self, model: ImageModel, prompts: list[str], seeds: list[int], filters: FilterSettings,
                 *, progress: Any = None, record_top1: bool = True) -> None:
        self.model, self.prompts, self.seeds, self.filters = model, prompts, seeds, filters
        self.progress, self.record_top1 = progress, record_top1
        self._records: dict[tuple, list[GenerationRecord]] = {}
        self._quality: dict[tuple, dict[str, Any]] = {}  # scored once per configuration

    def records(self, spec: MethodSpec) -> list[GenerationRecord]:
        if spec.key not in self._records:
            clusters = build_clusters(spec, self.model, self.filters)
            self._records[spec.key] = run_method(self.model, spec, self.prompts, self.seeds, clusters=clusters,
                                                 record_top1=self.record_top1, progress=self.progress)
        return [GenerationRecord(**{**r.__dict__, "label": spec.label}) for r in self._records[spec.key]]

    def table(self, specs: list[MethodSpec], baseline: MethodSpec) -> list[dict[str, Any]]:
        base = self.records(baseline)
        rows = []
        for spec in specs:
            records = self.records(spec)
            if spec.key not in self._quality:
                self._quality[spec.key] = quality(self.model, [r.image for r in records], [r.prompt for r in records])
            rows.append(summarize(self.model, records, base, quality_row=self._quality[spec.key]))
        return rows

