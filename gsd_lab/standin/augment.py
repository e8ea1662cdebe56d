"""Augmented training regions for the stand-in AR model (more data than the model can memorise).

One augmented variant of a training region x [3, H, W] in [-1, 1]:
    s ~ U(max(scale_min, (CROP + 4) / min(H, W)), scale_max); x <- resize(x, s)  (bilinear, anti-aliased)
    x <- rot90(x, k) with probability rot90_prob (k uniform in {1, 2, 3}); x <- flip_lr(x) w.p. 1/2
    x <- clamp(m + contrast * (x - m) * gain_c + brightness, -1, 1)  (m = mean of x; per-channel
         gain_c ~ U(1 - colour, 1 + colour), contrast ~ U(1 - contrast, 1 + contrast),
         brightness ~ U(-brightness, brightness))
    x <- x[:, dy:, dx:] with dy, dx uniform in {0, .., 3} (sub-token shift), cut to multiples of 4.
All draws come from the given generator, so a seed fixes the variants.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch.nn import functional as F

from .data import CROP_SIZE


@dataclass(frozen=True)
class AugmentConfig:
    variants_per_class: int = 40
    scale_min: float = 0.5
    scale_max: float = 1.5
    rot90_prob: float = 0.0
    brightness: float = 0.1
    contrast: float = 0.15
    colour: float = 0.08

    def __post_init__(self) -> None:
        if self.variants_per_class < 1:
            raise ValueError(f"variants_per_class must be >= 1, got {self.variants_per_class}")
        if not 0 < self.scale_min <= self.scale_max:
            raise ValueError(f"need 0 < scale_min <= scale_max, got {self.scale_min}, {self.scale_max}")
        if not 0.0 <= self.rot90_prob <= 1.0:
            raise ValueError(f"rot90_prob must lie in [0, 1], got {self.rot90_prob}")

    def to_dict(self) -> dict:
        return asdict(self)


def _uniform(generator: torch.Generator, low: float, high: float, size: tuple[int, ...] = ()) -> torch.Tensor:
    return low + (high - low) * torch.rand(size, generator=generator, dtype=torch.float64)


def augment_region(region: torch.Tensor, config: AugmentConfig, generator: torch.Generator) -> torch.Tensor:
    """One augmented variant of ``region`` [3, H, W] -> [3, H', W'] (H', W' multiples of 4, >= CROP_SIZE)."""
    _, h, w = region.shape
    low = max(config.scale_min, (CROP_SIZE + 4) / min(h, w))
    scale = float(_uniform(generator, low, max(low, config.scale_max)))
    size = (max(CROP_SIZE + 4, round(h * scale)), max(CROP_SIZE + 4, round(w * scale)))
    x = F.interpolate(region[None], size=size, mode="bilinear", align_corners=False, antialias=True)[0]
    if float(torch.rand((), generator=generator)) < config.rot90_prob:
        x = torch.rot90(x, int(torch.randint(1, 4, (), generator=generator)), dims=(1, 2))
    if float(torch.rand((), generator=generator)) < 0.5:
        x = x.flip(-1)
    gain = _uniform(generator, 1 - config.colour, 1 + config.colour, (3, 1, 1)).float()
    contrast = float(_uniform(generator, 1 - config.contrast, 1 + config.contrast))
    brightness = float(_uniform(generator, -config.brightness, config.brightness))
    mean = x.mean()
    x = (mean + contrast * (x - mean) * gain + brightness).clamp(-1.0, 1.0)
    dy, dx = (int(v) for v in torch.randint(0, 4, (2,), generator=generator))
    x = x[:, dy:, dx:]
    hh, ww = (x.shape[1] // 4) * 4, (x.shape[2] // 4) * 4
    return x[:, :hh, :ww].contiguous()
