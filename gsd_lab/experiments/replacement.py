"""The paper's Fig. 4 study: replace a random share of a generated image's tokens, decode, and
ask how much the image changed, against the unmodified AR images (the variants and measures in
full: docs/replacement-study.md).

- ``VARIANTS``: round(fraction x free positions) random positions redrawn uniformly among the
  top-k tokens of the original row ("top-k", the paper's top-100), among the members of GSD's
  dynamic cluster C(x_i) ("same-cluster", ours), or over the image vocabulary ("uniform");
  forced positions are kept;
- measures per image and variant x' of x (N tokens): ell(x') = (1/N) sum_i log p_full(x'_i |
  prompt, x'_<i) teacher-forced on x' itself (no top-k, so p_full > 0); the content distance
  D(x, x') = sqrt((1/N) sum_i d(x_i, x'_i)^2), d the per-code cost of
  ``gsd_lab.accounting.transport``; the model's quality proxy;
- ``replacement_study``: each change against the original as a paired difference over images
  (``verdicts.paired_values``: image i of every variant comes from AR image i).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import torch
from torch import Tensor

from ..decode.methods import DecodingMethod, ClusterAcceptance
from .image_model import ImageModel
from .runs import GenerationRecord, quality_and_scores, resolve_for
from .verdicts import NOISE_Z, NOT_RUN, PairedDifference, paired_values, verdict

VARIANTS = ("original", "top-k", "same-cluster", "uniform")
MODES = VARIANTS[1:]


def target_distributions(model: ImageModel, prompt: str, tokens: Tensor) -> Tensor:
    """p(. | prompt, x_<i) for every generated position i of ``tokens`` [N]: [N, V] float64,
    after the adapter's processing (CFG, top-k, temperature), in one forward pass."""
    adapter = model.adapter
    prompt_ids, uncond_ids = model.encode(prompt)
    adapter.start(prompt_ids, uncond_ids)
    tokens = tokens.to(adapter.device)
    ids = torch.cat([prompt_ids.to(adapter.device), tokens[:-1]])
    return adapter.forward(ids, num_rows=tokens.numel())


@contextmanager
def full_softmax(model: ImageModel) -> Iterator[ImageModel]:
    """``model`` without its top-k truncation inside the block (restored after): every allowed
    image code gets p > 0; guidance and temperature are kept."""
    adapter = model.adapter
    previous = adapter.top_k
    adapter.top_k = None
    try:
        yield model
    finally:
        adapter.top_k = previous


def token_log_likelihoods(model: ImageModel, prompt: str, tokens: Tensor) -> Tensor:
    """log p_full(x_i | prompt, x_<i) for every position of ``tokens`` [N]
    (docs/replacement-study.md): float64 [N], teacher-forced on ``tokens`` itself, one forward
    pass. Forced positions score 0 (their row is one-hot). Raises ValueError for a token the
    model cannot emit (p = 0)."""
    with full_softmax(model):
        p = target_distributions(model, prompt, tokens).cpu()
    chosen = p.gather(-1, tokens.cpu().long().unsqueeze(-1)).squeeze(-1)
    if bool((chosen <= 0).any()):
        where = torch.nonzero(chosen <= 0).flatten().tolist()[:5]
        raise ValueError(
            f"tokens at positions {where} have probability 0 under the model "
            "(not image codes, or against a forced token)"
        )
    return torch.log(chosen)


def content_distance(model: ImageModel, a: Tensor, b: Tensor) -> float | None:
    """D(a, b) = sqrt(mean_i d(a_i, b_i)^2) for two token sequences [N]
    (docs/replacement-study.md); None when the adapter has no code content. Positions whose
    tokens are not image codes (forced end-of-row tokens) must agree and count 0."""
    content = model.adapter.code_content()
    if content is None:
        return None
    codes = model.image_vocabulary.cpu().long()
    index = torch.full((int(model.adapter.vocab_size),), -1, dtype=torch.long)
    index[codes] = torch.arange(codes.numel())
    a, b = a.cpu().long(), b.cpu().long()
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(
            f"a and b must be token sequences of one length, got {tuple(a.shape)}, {tuple(b.shape)}"
        )
    same = a == b
    if bool(((index[a] < 0) | (index[b] < 0))[~same].any()):
        raise ValueError("a position with a non-image token differs between the sequences")
    content = content.detach().to("cpu", torch.float64)
    ia, ib = index[a[~same]], index[b[~same]]
    squared = (content[ia] - content[ib]).square().mean(-1)  # d(a_i, b_i)^2 per changed position
    return math.sqrt(float(squared.sum()) / a.numel())


def replace_tokens(
    tokens: Tensor,
    p: Tensor,
    model: ImageModel,
    *,
    mode: str,
    fraction: float,
    top_k: int = 100,
    generator: torch.Generator,
    clusters: object = None,
) -> tuple[Tensor, Tensor]:
    """Replace round(fraction * free positions) random free positions of ``tokens`` [N].

    p [N, V]: the original's teacher-forced rows. mode "top-k": a uniform draw among the top_k
    tokens of p[i] with p > 0; "same-cluster": a uniform draw among the kept members with p > 0
    of ``clusters.members(p, p, x)`` (a GSD dynamic-cluster rule; x itself is always one);
    "uniform": a uniform draw over the model's image vocabulary. Returns the new tokens and the
    bool mask of replaced positions (a replacement may coincide with the original token)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must lie in [0, 1], got {fraction}")
    if mode == "same-cluster" and clusters is None:
        raise ValueError("mode 'same-cluster' needs clusters (a rule with members(p, q, x))")
    n = tokens.numel()
    tokens = tokens.cpu()
    positions = torch.arange(n)
    forced = model.adapter.forced_tokens(positions.to(model.adapter.device))
    free = torch.ones(n, dtype=torch.bool) if forced is None else (forced.cpu() < 0)
    free_positions = positions[free]
    count = round(fraction * free_positions.numel())
    chosen = free_positions[torch.randperm(free_positions.numel(), generator=generator)[:count]]
    mask = torch.zeros(n, dtype=torch.bool)
    mask[chosen] = True
    rows = p[chosen].cpu()
    if mode == "top-k":
        values, index = torch.topk(rows, min(top_k, p.shape[-1]), dim=-1)
        pick = torch.multinomial((values > 0).to(torch.float64), 1, generator=generator).squeeze(-1)
        new = index.gather(-1, pick.unsqueeze(-1)).squeeze(-1)
    elif mode == "same-cluster":
        index, keep = clusters.members(rows, rows, tokens[chosen].unsqueeze(-1))
        index, keep = index.squeeze(-2), keep.squeeze(-2)  # [count, M]
        keep = keep & (rows.gather(-1, index) > 0)  # a window at the ranking's end reaches p = 0
        pick = torch.multinomial(keep.to(torch.float64), 1, generator=generator).squeeze(-1)
        new = index.gather(-1, pick.unsqueeze(-1)).squeeze(-1)
    else:
        vocab = model.image_vocabulary.cpu()
        new = vocab[torch.randint(vocab.numel(), (count,), generator=generator)]
    out = tokens.clone()
    out[chosen] = new
    return out, mask


@dataclass
class ReplacementResult:
    """The study's outputs per variant (``VARIANTS``; item i of every list comes from AR image i):
    ``images``; ``quality`` (the model's proxies over the set) and ``scores`` (per-image
    condition scores, None without a scorer); ``log_likelihood`` (per image, own rows, full
    softmax, per token), ``content_distance`` (per image, from the original; None without code
    content), ``changed_share`` (per image). ``mean_log_prob`` and the means of the others per
    variant are kept for the figures run's table."""

    prompts: list[str]
    images: dict[str, list[np.ndarray]]
    quality: dict[str, dict[str, float]]
    mean_log_prob: dict[str, float]
    changed_share: dict[str, float]
    config: dict = field(default_factory=dict)
    scores: dict[str, list[float] | None] = field(default_factory=dict)
    log_likelihood: dict[str, list[float]] = field(default_factory=dict)
    content_distance: dict[str, list[float] | None] = field(default_factory=dict)

    def change(self, measure: str, variant: str) -> PairedDifference:
        """``variant`` minus the original on ``measure`` ("log_likelihood", "condition_score"),
        paired over images (``verdicts.paired_values``); ``NOT_RUN`` where it was not measured.
        "content_distance" is itself a distance from the original: its mean over images with
        its standard error (the paired difference against the original's zeros)."""
        values = {
            "log_likelihood": self.log_likelihood,
            "condition_score": self.scores,
            "content_distance": self.content_distance,
        }.get(measure)
        if values is None:
            raise ValueError(f"unknown measure {measure!r}")
        a, b = values.get(variant), values.get("original")
        if a is None or b is None:
            return NOT_RUN
        return paired_values(a, b)

    def rows(self) -> list[dict[str, object]]:
        """One row per altered variant: changed share, and each measure's paired change against
        the original as text ("+0.12 (paired SE 0.03, n = 10)")."""
        return [
            {
                "variant": v,
                "changed_share": f"{self.changed_share[v]:.3f}",
                "log_likelihood_change": self.change("log_likelihood", v).text(),
                "content_distance": self.change("content_distance", v).text(),
                "condition_score_change": self.change("condition_score", v).text(),
            }
            for v in VARIANTS[1:]
        ]

    def paired_changes(self) -> dict[str, dict[str, dict[str, float | int | None]]]:
        """``rows``' paired changes as numbers: variant -> measure -> {"difference", "se", "n"}
        (``PairedDifference.as_dict``; results.json keeps them, the ledger reads them)."""
        measures = ("log_likelihood", "content_distance", "condition_score")
        return {v: {m: self.change(m, v).as_dict() for m in measures} for v in VARIANTS[1:]}

    def summary_lines(self) -> list[str]:
        """What the study shows, one sentence per altered variant, each change judged by the one
        rule (``verdicts.verdict``: beyond ``NOISE_Z`` paired standard errors or noise)."""
        lines = []
        for v in VARIANTS[1:]:
            parts = []
            for measure, noun in (
                ("log_likelihood", "its own log-likelihood per token"),
                ("condition_score", "the condition score"),
            ):
                change = self.change(measure, v)
                if not math.isfinite(change.difference):
                    continue
                outcome = verdict(change.difference, change.se, -1)
                noise = (
                    f"within {NOISE_Z:g} SE (noise)" if change.se is not None else "noise (no SE)"
                )
                word = {"yes": "lower", "no": "higher"}.get(outcome, noise)
                parts.append(f"{noun} {word}: {change.text()}")
            distance = self.change("content_distance", v)
            if math.isfinite(distance.difference):
                se = "no SE" if distance.se is None else f"SE {distance.se:.3g}"
                parts.append(f"content distance from the original {distance.difference:.3g} ({se})")
            lines.append(
                f"Measured here, {v} ({self.changed_share[v]:.1%} of tokens changed): "
                + "; ".join(parts)
                + "."
            )
        return lines


def replacement_study(
    model: ImageModel,
    records: list[GenerationRecord],
    *,
    fraction: float = 0.5,
    top_k: int = 100,
    cluster_size: int = 50,
    seed: int = 0,
) -> ReplacementResult:
    """Run the study on AR ``records`` (the unmodified images); ``cluster_size``: G of the
    same-cluster variant's GSD clusters (the paper's G = 50). One generator drives every draw."""
    generator = torch.Generator().manual_seed(seed)
    method = DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=cluster_size))
    clusters = resolve_for(model, method).clusters
    images: dict[str, list[np.ndarray]] = {v: [] for v in VARIANTS}
    log_likelihood: dict[str, list[float]] = {v: [] for v in VARIANTS}
    distance: dict[str, list[float] | None] = {v: [] for v in VARIANTS}
    changed: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for record in records:
        original = record.tokens.cpu()
        p = target_distributions(model, record.prompt, original).cpu()
        variants = {"original": original}
        for mode in MODES:
            variants[mode] = replace_tokens(
                original,
                p,
                model,
                mode=mode,
                fraction=fraction,
                top_k=top_k,
                generator=generator,
                clusters=clusters,
            )[0]
        for name, tokens in variants.items():
            images[name].append(record.image if name == "original" else model.decode(tokens))
            scored = token_log_likelihoods(model, record.prompt, tokens)
            log_likelihood[name].append(float(scored.mean()))
            d = content_distance(model, original, tokens)
            distance[name] = None if d is None or distance[name] is None else [*distance[name], d]
            changed[name].append(float((tokens != original).to(torch.float64).mean()))
    prompts = [r.prompt for r in records]
    quality = {name: quality_and_scores(model, images[name], prompts) for name in VARIANTS}
    return ReplacementResult(
        prompts=prompts,
        images=images,
        quality={name: quality[name][0] for name in VARIANTS},
        scores={
            name: None if quality[name][1] is None else quality[name][1].tolist()
            for name in VARIANTS
        },
        mean_log_prob={name: float(np.mean(v)) for name, v in log_likelihood.items()},
        changed_share={name: float(np.mean(v)) for name, v in changed.items()},
        config={
            "fraction": fraction,
            "top_k": top_k,
            "cluster_size": cluster_size,
            "seed": seed,
            "log_likelihood": "own rows, full softmax (no top-k), per token",
        },
        log_likelihood=log_likelihood,
        content_distance=distance,
    )
