"""The paper's Fig. 4 study: replace a random share of a generated image's tokens with
candidates from the top-k of the target distribution at that position, decode, and compare
quality with the unmodified images and with a control that replaces with uniformly random tokens.

Target distributions are teacher-forced on the unmodified sequence: position i's candidates come
from p(. | prompt, x_<i), the distribution x_i was sampled from (one forward pass per image).
Candidates are drawn uniformly among the top-k tokens that have positive probability (our
reading; the paper's exact draw was not found). Forced positions (e.g. end-of-row) are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .image_model import ImageModel
from .runs import GenerationRecord, quality_and_scores

VARIANTS = ("original", "top-k", "uniform")


def target_distributions(model: ImageModel, prompt: str, tokens: Tensor) -> Tensor:
    """p(. | prompt, x_<i) for every generated position i of ``tokens`` [N]: [N, V] float64,
    after the adapter's processing (CFG, top-k, temperature), in one forward pass."""
    adapter = model.adapter
    prompt_ids, uncond_ids = model.encode(prompt)
    adapter.start(prompt_ids, uncond_ids)
    tokens = tokens.to(adapter.device)
    ids = torch.cat([prompt_ids.to(adapter.device), tokens[:-1]])
    return adapter.forward(ids, num_rows=tokens.numel())


def replace_tokens(
    tokens: Tensor,
    p: Tensor,
    model: ImageModel,
    *,
    mode: str,
    fraction: float,
    top_k: int,
    generator: torch.Generator,
) -> tuple[Tensor, Tensor]:
    """Replace round(fraction * free positions) random free positions of ``tokens`` [N].

    mode "top-k": a uniform draw among the top_k tokens of p[i] with p > 0; "uniform": a uniform
    draw over the model's image vocabulary. Returns the new tokens and the bool mask of replaced
    positions (a replacement may coincide with the original token)."""
    if mode not in ("top-k", "uniform"):
        raise ValueError(f"unknown mode {mode!r}")
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must lie in [0, 1], got {fraction}")
    n = tokens.numel()
    positions = torch.arange(n)
    forced = model.adapter.forced_tokens(positions.to(model.adapter.device))
    free = torch.ones(n, dtype=torch.bool) if forced is None else (forced.cpu() < 0)
    free_positions = positions[free]
    count = round(fraction * free_positions.numel())
    chosen = free_positions[torch.randperm(free_positions.numel(), generator=generator)[:count]]
    mask = torch.zeros(n, dtype=torch.bool)
    mask[chosen] = True
    if mode == "top-k":
        values, index = torch.topk(p[chosen].cpu(), min(top_k, p.shape[-1]), dim=-1)
        pick = torch.multinomial((values > 0).to(torch.float64), 1, generator=generator).squeeze(-1)
        new = index.gather(-1, pick.unsqueeze(-1)).squeeze(-1)
    else:
        vocab = model.image_vocabulary.cpu()
        new = vocab[torch.randint(vocab.numel(), (count,), generator=generator)]
    out = tokens.clone().cpu()
    out[chosen] = new
    return out, mask


@dataclass
class ReplacementResult:
    """Images per variant ("original", "top-k", "uniform"), quality per variant, and the mean
    log-probability of the tokens under the teacher-forced p (a likelihood check). ``scores``:
    the per-image condition scores per variant (image i of every variant comes from AR image i:
    paired), None where the model has none."""

    prompts: list[str]
    images: dict[str, list[np.ndarray]]
    quality: dict[str, dict[str, float]]
    mean_log_prob: dict[str, float]
    changed_share: dict[str, float]
    config: dict = field(default_factory=dict)
    scores: dict[str, list[float] | None] = field(default_factory=dict)


def replacement_study(
    model: ImageModel,
    records: list[GenerationRecord],
    *,
    fraction: float = 0.5,
    top_k: int = 100,
    seed: int = 0,
) -> ReplacementResult:
    """Run the study on AR ``records`` (the unmodified images)."""
    generator = torch.Generator().manual_seed(seed)
    images: dict[str, list[np.ndarray]] = {v: [] for v in VARIANTS}
    log_probs: dict[str, list[float]] = {v: [] for v in VARIANTS}
    changed: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for record in records:
        p = target_distributions(model, record.prompt, record.tokens).cpu()
        variants = {"original": (record.tokens.cpu(), torch.zeros(record.tokens.numel(), dtype=torch.bool))}
        for mode in ("top-k", "uniform"):
            variants[mode] = replace_tokens(record.tokens, p, model, mode=mode, fraction=fraction, top_k=top_k,
                                            generator=generator)
        for name, (tokens, _) in variants.items():
            images[name].append(record.image if name == "original" else model.decode(tokens))
            chosen = p.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
            log_probs[name].append(float(torch.log(chosen.clamp(min=1e-300)).mean()))
            changed[name].append(float((tokens != record.tokens.cpu()).to(torch.float64).mean()))
    prompts = [r.prompt for r in records]
    scored = {name: quality_and_scores(model, images[name], prompts) for name in VARIANTS}
    return ReplacementResult(
        prompts=prompts,
        images=images,
        quality={name: scored[name][0] for name in VARIANTS},
        scores={name: None if scored[name][1] is None else scored[name][1].tolist() for name in VARIANTS},
        mean_log_prob={name: float(np.mean(v)) for name, v in log_probs.items()},
        changed_share={name: float(np.mean(v)) for name, v in changed.items()},
        config={"fraction": fraction, "top_k": top_k, "seed": seed},
    )
