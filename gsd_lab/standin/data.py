"""Training data for the stand-in model: crops of images bundled inside PyPI packages.

Sources are scikit-image's ``skimage.data`` images that ship in its wheel (no download) and
scikit-learn's ``load_sample_images()``. Each source image is one class. Every image is resized
so that its shorter side is ``SHORT_SIDE`` pixels; its rightmost ``heldout_width(W)`` columns are
the held-out region, the rest is the training region, so train and held-out crops never overlap
in pixels. Images are float tensors in [-1, 1], shape [3, H, W] (gray sources are repeated to RGB).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

# (class name, package, loader name). Order defines the class index.
SOURCES: tuple[tuple[str, str, str], ...] = (
    ("astronaut", "scikit-image", "astronaut"),
    ("chelsea", "scikit-image", "chelsea"),
    ("coffee", "scikit-image", "coffee"),
    ("rocket", "scikit-image", "rocket"),
    ("hubble_deep_field", "scikit-image", "hubble_deep_field"),
    ("immunohistochemistry", "scikit-image", "immunohistochemistry"),
    ("brick", "scikit-image", "brick"),
    ("camera", "scikit-image", "camera"),
    ("china", "scikit-learn", "china.jpg"),
    ("flower", "scikit-learn", "flower.jpg"),
)
CLASS_NAMES: tuple[str, ...] = tuple(name for name, _, _ in SOURCES)
SHORT_SIDE = 192
CROP_SIZE = 64


def heldout_width(width: int) -> int:
    """Width of the held-out strip: a quarter of the image, at least a crop plus 16 pixels."""
    return max(CROP_SIZE + 16, round(0.25 * width))


def _load_raw(package: str, loader: str) -> np.ndarray:
    if package == "scikit-image":
        import skimage.data

        return getattr(skimage.data, loader)()
    if package == "scikit-learn":
        from sklearn.datasets import load_sample_image

        return load_sample_image(loader)
    raise ValueError(f"unknown package {package!r}")


@dataclass(frozen=True)
class SourceImage:
    """One resized source image and its split: columns [0, split_col) train, the rest held out."""

    name: str
    package: str
    loader: str
    pixels: torch.Tensor  # float32 [3, H, W] in [-1, 1]
    split_col: int
    raw_shape: tuple[int, ...]
    raw_sha256: str

    @property
    def train(self) -> torch.Tensor:
        return self.pixels[:, :, : self.split_col]

    @property
    def heldout(self) -> torch.Tensor:
        return self.pixels[:, :, self.split_col :]


@lru_cache(maxsize=1)
def load_sources() -> tuple[SourceImage, ...]:
    """Load, resize (anti-aliased, shorter side ``SHORT_SIDE``) and split every source image."""
    from skimage.transform import resize

    images = []
    for name, package, loader in SOURCES:
        raw = np.asarray(_load_raw(package, loader))
        digest = hashlib.sha256(np.ascontiguousarray(raw).tobytes()).hexdigest()
        x = raw.astype(np.float64) / 255.0
        if x.ndim == 2:
            x = np.repeat(x[:, :, None], 3, axis=2)
        x = x[:, :, :3]
        h, w = x.shape[:2]
        scale = SHORT_SIDE / min(h, w)
        new_h, new_w = round(h * scale), round(w * scale)
        x = resize(x, (new_h, new_w), order=1, anti_aliasing=True, preserve_range=True)
        x = np.round(np.clip(x, 0.0, 1.0) * 255.0) / 255.0  # quantise to 8 bits like a stored image
        pixels = torch.from_numpy(x).permute(2, 0, 1).float().mul(2.0).sub(1.0).contiguous()
        split_col = new_w - heldout_width(new_w)
        images.append(SourceImage(name, package, loader, pixels, split_col, tuple(raw.shape), digest))
    return tuple(images)


def random_crops(region: torch.Tensor, count: int, size: int, generator: torch.Generator,
                 flip: bool = True) -> torch.Tensor:
    """``count`` uniformly placed ``size`` x ``size`` crops of ``region`` [3, H, W] -> [count, 3, size, size].

    With ``flip``, each crop is mirrored left-right with probability 1/2.
    """
    _, h, w = region.shape
    if h < size or w < size:
        raise ValueError(f"region {h}x{w} smaller than crop {size}")
    top = torch.randint(0, h - size + 1, (count,), generator=generator)
    left = torch.randint(0, w - size + 1, (count,), generator=generator)
    rows = top[:, None] + torch.arange(size)[None, :]  # [count, size]
    cols = left[:, None] + torch.arange(size)[None, :]
    crops = region[:, rows[:, :, None], cols[:, None, :]].permute(1, 0, 2, 3)  # [count, 3, size, size]
    if flip:
        mirror = torch.rand(count, generator=generator) < 0.5
        crops = torch.where(mirror[:, None, None, None], crops.flip(-1), crops)
    return crops.contiguous()


def class_crops(split: str, per_class: int, size: int, seed: int,
                flip: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Crops from every class's ``split`` region ("train" or "heldout").

    Returns (images [C * per_class, 3, size, size] in [-1, 1], labels [C * per_class] int64).
    """
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    generator = torch.Generator().manual_seed(seed)
    images, labels = [], []
    for index, source in enumerate(load_sources()):
        region = source.train if split == "train" else source.heldout
        images.append(random_crops(region, per_class, size, generator, flip=flip))
        labels.append(torch.full((per_class,), index, dtype=torch.int64))
    return torch.cat(images), torch.cat(labels)


def package_versions() -> dict[str, str]:
    return {pkg: importlib.metadata.version(pkg) for pkg in ("scikit-image", "scikit-learn")}


def manifest(**extra: object) -> dict:
    """Description of the data: sources with hashes and sizes, split columns, versions."""
    sources = []
    for index, s in enumerate(load_sources()):
        sources.append({
            "class_index": index, "name": s.name, "package": s.package, "loader": s.loader,
            "raw_shape": list(s.raw_shape), "raw_sha256": s.raw_sha256,
            "resized_hw": [int(s.pixels.shape[1]), int(s.pixels.shape[2])],
            "train_columns": [0, s.split_col],
            "heldout_columns": [s.split_col, int(s.pixels.shape[2])],
        })
    return {
        "package_versions": package_versions(), "short_side": SHORT_SIDE, "crop_size": CROP_SIZE,
        "split": "per image: rightmost max(80, 0.25 W) columns held out, crops never straddle",
        "sources": sources, **extra,
    }


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """[..., 3, H, W] in [-1, 1] -> uint8 [..., H, W, 3]."""
    x = ((images.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return x.movedim(-3, -1)
