"""Top-1 probability of the target distribution at every generated image token (the paper's
diversity statistic: for 50-95% of Lumina-mGPT's tokens the top-1 probability is below 5%)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .runs import GenerationRecord

THRESHOLD = 0.05


@dataclass(frozen=True)
class Top1Stats:
    """Top-1 probabilities per image (rows of ``per_image``: [images, tokens]) and summaries.

    share_below: per image, the share of tokens with top-1 < threshold; pooled_share_below:
    the same over all tokens together."""

    per_image: np.ndarray
    threshold: float
    prompts: tuple[str, ...] = ()  # the prompt (class) of each row, when known

    @property
    def pooled(self) -> np.ndarray:
        return self.per_image.reshape(-1)

    @property
    def share_below(self) -> np.ndarray:
        return (self.per_image < self.threshold).mean(axis=1)

    @property
    def pooled_share_below(self) -> float:
        return float((self.pooled < self.threshold).mean())

    def summary(self) -> dict[str, float]:
        shares = self.share_below
        return {
            "images": int(self.per_image.shape[0]),
            "tokens_per_image": int(self.per_image.shape[1]),
            "threshold": self.threshold,
            "pooled_share_below": self.pooled_share_below,
            "median_share_below": float(np.median(shares)),
            "min_share_below": float(shares.min()),
            "max_share_below": float(shares.max()),
            "median_top1": float(np.median(self.pooled)),
        }

    def per_prompt(self) -> list[dict[str, float | str | int]]:
        """One row per prompt (class): its images, pooled and median per-image share below."""
        if len(self.prompts) != self.per_image.shape[0]:
            raise ValueError("per_prompt needs the prompt of every row (top1_stats from records)")
        rows = []
        for prompt in dict.fromkeys(self.prompts):
            mine = np.array([p == prompt for p in self.prompts])
            part = Top1Stats(self.per_image[mine], self.threshold)
            rows.append(
                {
                    "prompt": prompt,
                    "images": int(mine.sum()),
                    "pooled_share_below": part.pooled_share_below,
                    "median_share_below": float(np.median(part.share_below)),
                }
            )
        return rows


def top1_stats(records: list[GenerationRecord], threshold: float = THRESHOLD) -> Top1Stats:
    """Collect the recorded top-1 probabilities (``generate(..., record_top1=True)``).

    Use AR records: there each token's row is exactly its target distribution p(. | prefix)."""
    if not records or any(r.top1 is None for r in records):
        raise ValueError(
            "records must be non-empty and carry top1 (generate with record_top1=True)"
        )
    return Top1Stats(
        np.stack([r.top1.numpy() for r in records]), threshold, tuple(r.prompt for r in records)
    )
