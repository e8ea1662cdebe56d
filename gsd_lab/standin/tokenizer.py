"""Patch vector-quantisation tokenizer: one code per P x P pixel patch, K codes learned by k-means.

encode: image [B, 3, H, W] in [-1, 1] -> patches x_i in R^(3 P P) (raster order) ->
    code(x) = argmin_k ||x - c_k||^2 -> codes [B, H/P, W/P] (``nearest_code``: a float32
    search for ``CANDIDATES`` candidates, the exact float64 distance among them).
decode: codes -> the code's patch c_k, tiled (``decode_tiles``) -> optionally a small
    convolutional ``SeamDecoder`` that blends the tiles across their seams -> image [B, 3, H, W].

The codebook {c_k} is trained by Lloyd's k-means with dead-code restarts
(``gsd_train.standin.train_tokenizer``), i.e. the fixed point of an EMA-updated VQ codebook with
an identity encoder and decoder. We choose this over a convolutional VQ/FSQ because the latent
space *is* pixel space: two codes whose vectors are close decode to patches that are close by
exactly that distance. That is the property GSD's clusters rely on (interchangeable tokens), and
with K = 8192 codes for 16 x 16 patches (Lumina-mGPT's granularity: one token per 16 x 16
pixels from 8192 codes) the codebook has many such near-duplicates. The price is visible seams
between tiles, which the optional ``SeamDecoder`` (a residual 3-layer convolution trained on
(tiles, image) pairs, ``gsd_train.standin.train_tokenizer.train_decoder``) removes; it never
changes ``codebook``, so ``codebook`` stays each code's decoded patch in pixel space.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class TokenizerConfig:
    patch: int = 16
    codebook_size: int = 8192
    decoder_width: int = 0  # channels of the SeamDecoder; 0: tiles only

    @property
    def downsample(self) -> int:
        return self.patch

    @property
    def code_dim(self) -> int:
        return 3 * self.patch * self.patch

    def to_dict(self) -> dict:
        return {
            "kind": "patch_vq",
            "patch": self.patch,
            "codebook_size": self.codebook_size,
            "downsample": self.downsample,
            "code_dim": self.code_dim,
            "decoder_width": self.decoder_width,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "TokenizerConfig":
        if d.get("kind") != "patch_vq":
            raise ValueError(f"tokenizer config kind must be 'patch_vq', got {d.get('kind')!r}")
        return cls(
            patch=int(d["patch"]),
            codebook_size=int(d["codebook_size"]),
            decoder_width=int(d.get("decoder_width", 0)),
        )


def image_to_patches(images: torch.Tensor, patch: int) -> torch.Tensor:
    """[B, 3, H, W] -> [B, (H/P) (W/P), 3 P P] (raster order of patches)."""
    return F.unfold(images, patch, stride=patch).transpose(1, 2)


def patches_to_image(patches: torch.Tensor, h: int, w: int, patch: int) -> torch.Tensor:
    """[B, h w, 3 P P] -> [B, 3, h P, w P]."""
    return F.fold(patches.transpose(1, 2), (h * patch, w * patch), patch, stride=patch)


CANDIDATES = 8


def nearest_code(
    x: torch.Tensor, codebook: torch.Tensor, chunk: int = 128, candidates: int = CANDIDATES
) -> torch.Tensor:
    """argmin_k ||x_n - c_k||^2 for x [N, D] and codebook [K, D], -> [N] int64.

    ||x - c_k||^2 - ||x||^2 = ||c_k||^2 - 2 x.c_k is ranked in float32 (rounding ~1e-6 of the
    norms); the ``candidates`` best codes are then compared in float64 (exact differences).
    A code outside the float32 top ``candidates`` would have to beat them by less than float32
    rounding to be the true minimum. Ties go to the smallest k. Rows go ``chunk`` at a time: a
    small chunk keeps the [chunk, candidates, D] float64 differences in cache (2048 made them
    100 MB, three times slower with a 64-code book); the codes do not depend on it."""
    book32, book64 = codebook.float(), codebook.double()
    norms32 = (book32 * book32).sum(1)
    candidates = min(candidates, codebook.shape[0])
    out = []
    for part in x.split(chunk):
        score = norms32 - 2.0 * part.float() @ book32.T
        cand = torch.topk(score, candidates, dim=1, largest=False).indices.sort(dim=1).values
        exact = ((part.double()[:, None, :] - book64[cand]) ** 2).sum(-1)
        out.append(cand.gather(1, exact.argmin(1, keepdim=True)).squeeze(1))
    return torch.cat(out) if out else torch.empty(0, dtype=torch.int64)


class SeamDecoder(nn.Module):
    """tiles [B, 3, H, W] -> tiles + f([tiles, u, v]), with u, v in [-1, 1] each pixel's column
    and row inside its P x P patch (so f knows where the seams are) and f three 3 x 3
    convolutions (replicate padding, SiLU). The last one starts at zero: the identity."""

    def __init__(self, patch: int, width: int):
        super().__init__()
        self.patch = patch
        self.net = nn.Sequential(
            nn.Conv2d(5, width, 3, padding=1, padding_mode="replicate"),
            nn.SiLU(),
            nn.Conv2d(width, width, 3, padding=1, padding_mode="replicate"),
            nn.SiLU(),
            nn.Conv2d(width, 3, 3, padding=1, padding_mode="replicate"),
        )
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def forward(self, tiles: torch.Tensor) -> torch.Tensor:
        b, _, h, w = tiles.shape
        ramp = torch.linspace(-1.0, 1.0, self.patch, dtype=tiles.dtype, device=tiles.device)
        u = ramp.repeat(w // self.patch)[None, None, None, :].expand(b, 1, h, w)
        v = ramp.repeat(h // self.patch)[None, None, :, None].expand(b, 1, h, w)
        return tiles + self.net(torch.cat([tiles, u, v], dim=1))


class PatchVQTokenizer(nn.Module):
    """Image <-> code grid. Images: float [B, 3, H, W] in [-1, 1], H and W multiples of P."""

    def __init__(self, config: TokenizerConfig = TokenizerConfig()):
        super().__init__()
        self.config = config
        self.register_buffer("codebook", torch.zeros(config.codebook_size, config.code_dim))
        self.decoder = (
            SeamDecoder(config.patch, config.decoder_width) if config.decoder_width else None
        )

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
            raise ValueError(
                f"image height and width must be multiples of {p}, got {tuple(images.shape)}"
            )

    @torch.no_grad()
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """images [B, 3, H, W] -> codes [B, H/P, W/P] (int64): the nearest code of each patch."""
        self._check_images(images)
        b, _, h, w = images.shape
        patches = image_to_patches(images.double(), self.patch)
        codes = nearest_code(patches.reshape(-1, self.config.code_dim), self.codebook)
        return codes.view(b, h // self.patch, w // self.patch)

    @torch.no_grad()
    def decode_tiles(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, h, w] -> images [B, 3, P h, P w] in [-1, 1] (each code's patch, tiled)."""
        if codes.dim() != 3:
            raise ValueError(f"codes must be [B, h, w], got {tuple(codes.shape)}")
        if codes.numel() and (codes.min() < 0 or codes.max() >= self.codebook_size):
            raise ValueError(f"codes must lie in [0, {self.codebook_size})")
        b, h, w = codes.shape
        patches = self.codebook[codes.reshape(b, h * w)]
        return patches_to_image(patches, h, w, self.patch).clamp(-1, 1)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, h, w] -> images [B, 3, P h, P w] in [-1, 1]: the tiles, blended across
        their seams by the ``SeamDecoder`` when the tokenizer has one."""
        tiles = self.decode_tiles(codes)
        if self.decoder is None:
            return tiles
        return self.decoder(tiles.to(self.codebook.dtype)).clamp(-1, 1)
