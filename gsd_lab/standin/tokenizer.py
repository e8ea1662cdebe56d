"""Patch vector-quantisation tokenizer: one code per P x P pixel patch, K codes learned by k-means.

encode: image [B, 3, H, W] in [-1, 1] -> patches x_i in R^(3 P P) (raster order) ->
    code(x) = argmin_k ||x - c_k||^2 (float64) -> codes [B, H/P, W/P].
decode: codes -> the code's patch c_k, tiled -> image [B, 3, H, W].

The codebook {c_k} is trained by Lloyd's k-means with dead-code restarts
(``gsd_lab.standin.train_tokenizer``), i.e. the fixed point of an EMA-updated VQ codebook with
an identity encoder and decoder. We choose this over a convolutional VQ/FSQ because the latent
space *is* pixel space: two codes whose vectors are close decode to patches that are close by
exactly that distance. That is the property GSD's clusters rely on (interchangeable tokens), and
with K = 8192 codes for 8 x 8 patches the codebook has many such near-duplicates. The price is
visible seams between tiles (the decoder has no context).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class TokenizerConfig:
    patch: int = 8
    codebook_size: int = 8192

    @property
    def downsample(self) -> int:
        return self.patch

    @property
    def code_dim(self) -> int:
        return 3 * self.patch * self.patch

    def to_dict(self) -> dict:
        return {"kind": "patch_vq", "patch": self.patch, "codebook_size": self.codebook_size,
                "downsample": self.downsample, "code_dim": self.code_dim}

    @classmethod
    def from_dict(cls, d: dict) -> "TokenizerConfig":
        if d.get("kind") != "patch_vq":
            raise ValueError(f"tokenizer config kind must be 'patch_vq', got {d.get('kind')!r}")
        return cls(patch=int(d["patch"]), codebook_size=int(d["codebook_size"]))


def image_to_patches(images: torch.Tensor, patch: int) -> torch.Tensor:
    """[B, 3, H, W] -> [B, (H/P) (W/P), 3 P P] (raster order of patches)."""
    return F.unfold(images, patch, stride=patch).transpose(1, 2)


def patches_to_image(patches: torch.Tensor, h: int, w: int, patch: int) -> torch.Tensor:
    """[B, h w, 3 P P] -> [B, 3, h P, w P]."""
    return F.fold(patches.transpose(1, 2), (h * patch, w * patch), patch, stride=patch)


def nearest_code(x: torch.Tensor, codebook: torch.Tensor, chunk: int = 2048) -> torch.Tensor:
    """argmin_k ||x_n - c_k||^2 for x [N, D] and codebook [K, D] (float64), -> [N] int64.
    Ties go to the smallest k (``argmin``)."""
    x, codebook = x.double(), codebook.double()
    norms = (codebook * codebook).sum(1)
    out = [torch.argmin(norms - 2.0 * part @ codebook.T, dim=1) for part in x.split(chunk)]
    return torch.cat(out) if out else torch.empty(0, dtype=torch.int64)


class PatchVQTokenizer(nn.Module):
    """Image <-> code grid. Images: float [B, 3, H, W] in [-1, 1], H and W multiples of P."""

    def __init__(self, config: TokenizerConfig = TokenizerConfig()):
        super().__init__()
        self.config = config
        self.register_buffer("codebook", torch.zeros(config.codebook_size, config.code_dim))

    @property
    def codebook_size(self) -> int:
        return self.config.codebook_size

    @property
    def patch(self) -> int:
        return self.config.patch

    def _check_images(self, images: torch.Tensor) -> None:
        p = self.patch
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be [B, 3, H, W], got {tuple(images.shape)}")
        if images.shape[2] % p or images.shape[3] % p:
            raise ValueError(f"image height and width must be multiples of {p}, got {tuple(images.shape)}")

    @torch.no_grad()
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """images [B, 3, H, W] -> codes [B, H/P, W/P] (int64): the nearest code of each patch."""
        self._check_images(images)
        b, _, h, w = images.shape
        patches = image_to_patches(images.double(), self.patch)
        codes = nearest_code(patches.reshape(-1, self.config.code_dim), self.codebook)
        return codes.view(b, h // self.patch, w // self.patch)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, h, w] -> images [B, 3, P h, P w] in [-1, 1] (each code's patch, tiled)."""
        if codes.dim() != 3:
            raise ValueError(f"codes must be [B, h, w], got {tuple(codes.shape)}")
        if codes.numel() and (codes.min() < 0 or codes.max() >= self.codebook_size):
            raise ValueError(f"codes must lie in [0, {self.codebook_size})")
        b, h, w = codes.shape
        patches = self.codebook[codes.reshape(b, h * w)]
        return patches_to_image(patches, h, w, self.patch).clamp(-1, 1)
