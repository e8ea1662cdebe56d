"""Convolutional image tokenizer with finite scalar quantisation (FSQ, Mentzer et al. 2023).

encode: image [B, 3, H, W] in [-1, 1] -> latent z [B, D, H/4, W/4] -> per channel d,
    z_d -> round(bound_d(z_d)) in {-floor(L_d/2), ..., ceil(L_d/2) - 1} (straight-through in
    training) -> code index = sum_d (q_d + floor(L_d/2)) * prod_{e<d} L_e, in [0, prod_d L_d).
decode: codes [B, h, w] -> code vectors [B, D, h, w] (q_d / floor(L_d/2) in [-1, 1]) -> conv
    decoder -> image. The decoder is convolutional, so a code renders differently next to
    different neighbours (contextual decoding, as in VQGAN tokenizers).
FSQ has no learned codebook, so no code can collapse or die; usage is measured, not forced.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class TokenizerConfig:
    levels: tuple[int, ...] = (4, 4, 4, 4, 4)
    channels: tuple[int, int, int] = (32, 64, 128)  # at full, 1/2 and 1/4 resolution

    @property
    def codebook_size(self) -> int:
        size = 1
        for level in self.levels:
            size *= level
        return size

    @property
    def downsample(self) -> int:
        return 4

    def to_dict(self) -> dict:
        return {"levels": list(self.levels), "channels": list(self.channels),
                "codebook_size": self.codebook_size, "downsample": self.downsample}

    @classmethod
    def from_dict(cls, d: dict) -> "TokenizerConfig":
        return cls(levels=tuple(d["levels"]), channels=tuple(d["channels"]))


class FiniteScalarQuantizer(nn.Module):
    """FSQ with per-channel levels L_d; bound(z) = tanh(z + shift) * h - offset, h = (L-1)/2 * (1-eps)."""

    def __init__(self, levels: tuple[int, ...]):
        super().__init__()
        lv = torch.tensor(levels, dtype=torch.float32)
        self.register_buffer("levels", lv, persistent=False)
        basis = torch.cumprod(torch.tensor((1,) + tuple(levels[:-1])), 0)
        self.register_buffer("basis", basis, persistent=False)
        self.register_buffer("half_width", torch.floor(lv / 2), persistent=False)

    def bound(self, z: torch.Tensor) -> torch.Tensor:
        """z [B, D, ...] -> values in (-floor(L/2) - 0.5, ceil(L/2) - 0.5)."""
        shape = (1, -1) + (1,) * (z.dim() - 2)
        lv = self.levels.view(shape)
        half_l = (lv - 1) * (1 - 1e-3) / 2
        offset = torch.where(lv % 2 == 0, 0.5, 0.0)
        shift = torch.atanh(offset / half_l)
        return torch.tanh(z + shift) * half_l - offset

    def quantize(self, z: torch.Tensor) -> torch.Tensor:
        """Rounded, normalised code vectors [B, D, ...] in [-1, 1] with straight-through gradient."""
        bounded = self.bound(z)
        rounded = bounded + (torch.round(bounded) - bounded).detach()
        shape = (1, -1) + (1,) * (z.dim() - 2)
        return rounded / self.half_width.view(shape)

    def vectors_to_codes(self, vectors: torch.Tensor) -> torch.Tensor:
        """Normalised code vectors [B, D, ...] -> code indices [B, ...] (int64)."""
        shape = (1, -1) + (1,) * (vectors.dim() - 2)
        digits = torch.round(vectors * self.half_width.view(shape)) + self.half_width.view(shape)
        return (digits.long() * self.basis.view(shape)).sum(1)

    def codes_to_vectors(self, codes: torch.Tensor) -> torch.Tensor:
        """Code indices [B, ...] -> normalised code vectors [B, D, ...]."""
        if codes.min() < 0 or codes.max() >= int(torch.prod(self.levels)):
            raise ValueError(f"codes must lie in [0, {int(torch.prod(self.levels))})")
        digits = (codes.unsqueeze(1) // self.basis.view((1, -1) + (1,) * (codes.dim() - 1))) % \
            self.levels.long().view((1, -1) + (1,) * (codes.dim() - 1))
        shape = (1, -1) + (1,) * (codes.dim() - 1)
        return (digits.float() - self.half_width.view(shape)) / self.half_width.view(shape)

    def all_vectors(self) -> torch.Tensor:
        """Every code's normalised vector, [prod L, D] (row i = code i)."""
        codes = torch.arange(int(torch.prod(self.levels)))
        return self.codes_to_vectors(codes.view(1, -1)).squeeze(0).T.contiguous()


class ResBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.GroupNorm(8, channels), nn.SiLU(), nn.Conv2d(channels, channels, 3, padding=1),
            nn.GroupNorm(8, channels), nn.SiLU(), nn.Conv2d(channels, channels, 3, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class Encoder(nn.Module):
    def __init__(self, c: tuple[int, int, int], dim: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, c[0], 3, padding=1), nn.SiLU(),
            nn.Conv2d(c[0], c[1], 4, stride=2, padding=1), ResBlock(c[1]),
            nn.Conv2d(c[1], c[2], 4, stride=2, padding=1), ResBlock(c[2]), ResBlock(c[2]),
            nn.GroupNorm(8, c[2]), nn.SiLU(), nn.Conv2d(c[2], dim, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Decoder(nn.Module):
    def __init__(self, c: tuple[int, int, int], dim: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(dim, c[2], 3, padding=1), ResBlock(c[2]), ResBlock(c[2]),
            nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(c[2], c[1], 3, padding=1),
            ResBlock(c[1]),
            nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(c[1], c[0], 3, padding=1),
            nn.GroupNorm(8, c[0]), nn.SiLU(), nn.Conv2d(c[0], c[0], 3, padding=1),
            nn.GroupNorm(8, c[0]), nn.SiLU(), nn.Conv2d(c[0], 3, 3, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class FSQTokenizer(nn.Module):
    """Image <-> code grid. Images: float [B, 3, H, W] in [-1, 1], H and W multiples of 4."""

    def __init__(self, config: TokenizerConfig = TokenizerConfig()):
        super().__init__()
        self.config = config
        dim = len(config.levels)
        self.encoder = Encoder(config.channels, dim)
        self.decoder = Decoder(config.channels, dim)
        self.quantizer = FiniteScalarQuantizer(config.levels)

    @property
    def codebook_size(self) -> int:
        return self.config.codebook_size

    def _check_images(self, images: torch.Tensor) -> None:
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be [B, 3, H, W], got {tuple(images.shape)}")
        if images.shape[2] % 4 or images.shape[3] % 4:
            raise ValueError(f"image height and width must be multiples of 4, got {tuple(images.shape)}")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Reconstruction through the quantiser (straight-through), for training."""
        self._check_images(images)
        return self.decoder(self.quantizer.quantize(self.encoder(images)))

    @torch.no_grad()
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """images [B, 3, H, W] -> codes [B, H/4, W/4] (int64)."""
        self._check_images(images)
        return self.quantizer.vectors_to_codes(self.quantizer.quantize(self.encoder(images)))

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, h, w] -> images [B, 3, 4h, 4w] in [-1, 1]."""
        if codes.dim() != 3:
            raise ValueError(f"codes must be [B, h, w], got {tuple(codes.shape)}")
        return self.decoder(self.quantizer.codes_to_vectors(codes)).clamp(-1, 1)
