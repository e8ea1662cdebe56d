"""Training data for the stand-in model: multi-scale crops of images bundled inside PyPI packages.

Sources: every natural photograph that ships in scikit-image's wheel (``skimage.data`` without
the pooch-fetched ones), scikit-learn's two sample images and matplotlib's Grace Hopper photo
(no download). ``CLASS_SOURCES`` are the ten classes of the AR model; ``EXTRA_SOURCES`` widen the
tokenizer's training set and the AR model's unconditional (null-class) data.

Every image is resized so that its shorter side is ``BASE_SHORT_SIDE`` pixels, quantised to 8
bits, and split on a grid of cells (``CELLS_PER_SHORT_SIDE`` along the short side):
``HELDOUT_CELLS`` cells, pairwise not touching (not even at a corner), drawn per image from a
fixed seed, are held out; the rest is training data. Held-out cells lie anywhere (interior,
edges, corners), so held-out data is spread over the image like its training data.
A *view* rescales an image by one of ``SCALES`` (and may mirror it); a training crop touches no
held-out pixel, a held-out crop lies wholly inside a held-out cell, so the two never share a
pixel. A 256-pixel window is larger than a cell: held-out *token* statistics of the AR model
are taken on windows that overlap held-out cells, counting only the tokens wholly inside them
(``gsd_train.standin.ar.TokenMapDataset``). Images are float tensors in [-1, 1], shape [3, H, W]
(gray sources repeated to RGB).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch.nn import functional as F

# (class name, package, loader). Order defines the class index.
CLASS_SOURCES: tuple[tuple[str, str, str], ...] = (
    ("astronaut", "scikit-image", "astronaut"),
    ("coffee", "scikit-image", "coffee"),
    ("rocket", "scikit-image", "rocket"),
    ("hubble_deep_field", "scikit-image", "hubble_deep_field"),
    ("immunohistochemistry", "scikit-image", "immunohistochemistry"),
    ("brick", "scikit-image", "brick"),
    ("gravel", "scikit-image", "gravel"),
    ("retina", "scikit-image", "retina"),
    ("china", "scikit-learn", "china.jpg"),
    ("flower", "scikit-learn", "flower.jpg"),
)
# Unconditional sources: more natural image statistics for the codebook and the null class.
# Left out of the wheel's images: horse (a binary silhouette), logo, page and text (documents),
# microaneurysms (102 x 102 pixels), the synthetic test patterns and lfw_subset (25 x 25 faces).
EXTRA_SOURCES: tuple[tuple[str, str, str], ...] = (
    ("chelsea", "scikit-image", "chelsea"),
    ("camera", "scikit-image", "camera"),
    ("coins", "scikit-image", "coins"),
    ("grass", "scikit-image", "grass"),
    ("moon", "scikit-image", "moon"),
    ("motorcycle", "scikit-image", "stereo_motorcycle"),
    ("cell", "scikit-image", "cell"),
    ("clock", "scikit-image", "clock"),
    ("grace_hopper", "matplotlib", "grace_hopper.jpg"),
)
CLASS_NAMES: tuple[str, ...] = tuple(name for name, _, _ in CLASS_SOURCES)
BASE_SHORT_SIDE = 512
IMAGE_SIZE = 256  # pixels per side of a stand-in image (16 x 16 tokens of 16 x 16 pixels)
HELDOUT_CROP = 128  # side of the held-out crops of the classifier (a held-out cell holds one)
SCALES: tuple[float, ...] = (0.8, 0.9, 1.0, 1.1, 1.2)
CELLS_PER_SHORT_SIDE = 4
HELDOUT_CELLS = 2
SPLIT_SEED = 7
# Central crops (fraction of each side kept) of sources with large blank borders: the retina
# photograph is a disc on black, whose corners would otherwise be the held-out data.
CENTRAL_FRACTION: dict[str, float] = {"retina": 0.7}


def _load_raw(package: str, loader: str) -> np.ndarray:
    if package == "scikit-image":
        import skimage.data

        raw = getattr(skimage.data, loader)()
        return raw[0] if isinstance(raw, tuple) else raw  # stereo_motorcycle: (left, right, disp)
    if package == "scikit-learn":
        from sklearn.datasets import load_sample_image

        return load_sample_image(loader)
    if package == "matplotlib":
        from matplotlib import cbook

        with cbook.get_sample_data(loader) as fh:
            from PIL import Image

            return np.asarray(Image.open(fh).convert("RGB"))
    raise ValueError(f"unknown package {package!r}")


def licence_note(package: str, loader: str) -> str:
    """The licence statement the package ships with the image (docstring or README line)."""
    if package == "scikit-image":
        import skimage.data

        doc = getattr(skimage.data, loader).__doc__ or ""
        lines = [
            ln.strip()
            for ln in doc.splitlines()
            if re.search(r"licen|public domain|copyright|CC0|CC-BY|creative commons", ln, re.I)
        ]
        return " ".join(lines) or "see skimage.data docstring"
    if package == "scikit-learn":
        return "CC BY 2.0 (sklearn/datasets/images/README.txt)"
    return "public domain (US Navy photograph, matplotlib sample data)"


@dataclass(frozen=True)
class SourceImage:
    """One resized source image; ``heldout_mask`` [H, W] marks its held-out cells."""

    name: str
    package: str
    loader: str
    pixels: torch.Tensor  # float32 [3, H, W] in [-1, 1]
    heldout_mask: torch.Tensor  # bool [H, W]
    raw_shape: tuple[int, ...]
    raw_sha256: str
    heldout_cells: tuple[tuple[int, int], ...]  # (row, column) on the grid ``cell_grid``
    cell_grid: tuple[int, int]


def cell_edges(h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column boundaries of the split grid: ``CELLS_PER_SHORT_SIDE`` cells along the
    short side, about square cells along the long one."""
    cell = min(h, w) / CELLS_PER_SHORT_SIDE
    rows, cols = max(1, round(h / cell)), max(1, round(w / cell))
    return (
        torch.linspace(0, h, rows + 1).round().long(),
        torch.linspace(0, w, cols + 1).round().long(),
    )


def heldout_cells(
    rows: int, cols: int, count: int, generator: torch.Generator
) -> list[tuple[int, int]]:
    """``count`` grid cells, pairwise at Chebyshev distance >= 2 (no shared edge or corner):
    the first random permutation of the cells (from ``generator``) whose first ``count`` cells
    qualify."""
    for _ in range(10_000):
        pick = [
            divmod(int(c), cols) for c in torch.randperm(rows * cols, generator=generator)[:count]
        ]
        if all(
            max(abs(a[0] - b[0]), abs(a[1] - b[1])) >= 2
            for i, a in enumerate(pick)
            for b in pick[i + 1 :]
        ):
            return sorted(pick)
    raise ValueError(f"no {count} pairwise separated cells on a {rows} x {cols} grid")


def _heldout_mask(
    h: int, w: int, generator: torch.Generator
) -> tuple[torch.Tensor, tuple[tuple[int, int], ...], tuple[int, int]]:
    ys, xs = cell_edges(h, w)
    cells = heldout_cells(len(ys) - 1, len(xs) - 1, HELDOUT_CELLS, generator)
    mask = torch.zeros(h, w, dtype=torch.bool)
    for r, c in cells:
        mask[ys[r] : ys[r + 1], xs[c] : xs[c + 1]] = True
    return mask, tuple(cells), (len(ys) - 1, len(xs) - 1)


def _prepare(name: str, package: str, loader: str, split_seed: int) -> SourceImage:
    raw = np.asarray(_load_raw(package, loader))
    digest = hashlib.sha256(np.ascontiguousarray(raw).tobytes()).hexdigest()
    x = torch.from_numpy(raw.astype(np.float64) / (65535.0 if raw.dtype == np.uint16 else 255.0))
    x = x[:, :, None].expand(-1, -1, 3) if x.dim() == 2 else x[:, :, :3]
    keep = CENTRAL_FRACTION.get(name, 1.0)
    h, w = x.shape[:2]
    top, left = round(h * (1 - keep) / 2), round(w * (1 - keep) / 2)
    x = x[top : h - top, left : w - left]
    h, w = x.shape[:2]
    scale = BASE_SHORT_SIDE / min(h, w)
    size = (round(h * scale), round(w * scale))
    x = F.interpolate(
        x.permute(2, 0, 1)[None], size=size, mode="bilinear", antialias=True, align_corners=False
    )[0]
    x = torch.round(x.clamp(0.0, 1.0) * 255.0) / 255.0  # 8 bits, like a stored image
    mask, cells, grid = _heldout_mask(size[0], size[1], torch.Generator().manual_seed(split_seed))
    pixels = x.float().mul(2.0).sub(1.0).contiguous()
    return SourceImage(name, package, loader, pixels, mask, tuple(raw.shape), digest, cells, grid)


@lru_cache(maxsize=2)
def load_sources(which: str = "classes") -> tuple[SourceImage, ...]:
    """``"classes"`` (the AR classes, in class order), ``"extra"`` or ``"all"``
    (classes + extra)."""
    table = {"classes": CLASS_SOURCES, "extra": EXTRA_SOURCES, "all": CLASS_SOURCES + EXTRA_SOURCES}
    if which not in table:
        raise ValueError(f"which must be one of {sorted(table)}, got {which!r}")
    index = {name: i for i, (name, _, _) in enumerate(CLASS_SOURCES + EXTRA_SOURCES)}
    return tuple(_prepare(n, p, l, SPLIT_SEED * 1000 + index[n]) for n, p, l in table[which])


@dataclass(frozen=True)
class View:
    """A rescaled (and possibly mirrored) source: pixels [3, h, w]; per pixel, ``touches`` = some
    held-out pixel contributes to it, ``inside`` = only held-out pixels contribute."""

    pixels: torch.Tensor
    touches: torch.Tensor
    inside: torch.Tensor


_VIEWS: dict[tuple[str, str, float, bool], View] = {}
_VIEW_CACHE_SIZE = 256


def make_view(source: SourceImage, scale: float, flip: bool) -> View:
    """``source`` rescaled by ``scale`` (antialiased bilinear) and mirrored when ``flip``, with
    its held-out flags; views are cached (every training stage walks the same ones)."""
    key = (source.name, source.raw_sha256, float(scale), bool(flip))
    if key not in _VIEWS:
        if len(_VIEWS) >= _VIEW_CACHE_SIZE:
            _VIEWS.pop(next(iter(_VIEWS)))
        _VIEWS[key] = _make_view(source, scale, flip)
    return _VIEWS[key]


def _make_view(source: SourceImage, scale: float, flip: bool) -> View:
    _, h, w = source.pixels.shape
    size = (max(1, round(h * scale)), max(1, round(w * scale)))
    if size == (h, w):
        pixels, frac = source.pixels, source.heldout_mask.double()
    else:
        pixels = (
            F.interpolate(
                source.pixels[None].double(),
                size=size,
                mode="bilinear",
                antialias=True,
                align_corners=False,
            )[0]
            .float()
            .clamp(-1, 1)
        )
        # the antialiased kernel's support is at least as wide as the mask's: conservative flags
        frac = F.interpolate(
            source.heldout_mask[None, None].double(),
            size=size,
            mode="bilinear",
            antialias=True,
            align_corners=False,
        )[0, 0]
        frac = F.max_pool2d(frac[None, None], 3, stride=1, padding=1)[0, 0]
    touches, inside = frac > 1e-9, frac > 1 - 1e-9
    if size != (h, w):
        inside = -F.max_pool2d(-inside[None, None].double(), 3, stride=1, padding=1)[0, 0] > 0.5
    if flip:
        pixels, touches, inside = pixels.flip(-1), touches.flip(-1), inside.flip(-1)
    return View(pixels.contiguous(), touches.contiguous(), inside.contiguous())


def window_counts(mask: torch.Tensor, size: int) -> torch.Tensor:
    """Number of True entries of ``mask`` [H, W] in every ``size`` x ``size`` window,
    [H - size + 1, W - size + 1] (entry [i, j]: the window with top-left corner (i, j))."""
    integral = F.pad(mask.to(torch.int64).cumsum(0).cumsum(1), (1, 0, 1, 0))
    return (
        integral[size:, size:]
        - integral[:-size, size:]
        - integral[size:, :-size]
        + integral[:-size, :-size]
    )


def valid_corners(view: View, size: int, split: str) -> torch.Tensor:
    """Top-left corners [N, 2] of ``size`` crops of ``view`` wholly in ``split``."""
    if split == "train":
        ok = window_counts(view.touches, size) == 0
    elif split == "heldout":
        ok = window_counts(view.inside, size) == size * size
    else:
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    return ok.nonzero()


def random_crops(
    source: SourceImage,
    count: int,
    split: str,
    generator: torch.Generator,
    size: int = IMAGE_SIZE,
    scales: tuple[float, ...] = SCALES,
    flip: bool = True,
) -> torch.Tensor:
    """``count`` crops [count, 3, size, size] of ``source``'s ``split``: a scale uniform over the
    scales that have such crops, a mirror with probability 1/2 (``flip``), a uniform position."""
    if split == "heldout":
        scales = tuple(s for s in scales if s >= 1.0)  # a held-out cell holds a crop from scale 1.0
    views = {}
    for scale in scales:
        for mirror in (False, True) if flip else (False,):
            view = make_view(source, scale, mirror)
            corners = valid_corners(view, size, split)
            if corners.shape[0]:
                views.setdefault(scale, []).append((view, corners))
    if not views:
        raise ValueError(f"{source.name}: no {size}x{size} {split} crop at scales {scales}")
    usable = sorted(views)
    crops = []
    for _ in range(count):
        scale = usable[int(torch.randint(len(usable), (1,), generator=generator))]
        options = views[scale]
        view, corners = options[int(torch.randint(len(options), (1,), generator=generator))]
        top, left = corners[
            int(torch.randint(corners.shape[0], (1,), generator=generator))
        ].tolist()
        crops.append(view.pixels[:, top : top + size, left : left + size])
    return torch.stack(crops)


def class_crops(
    split: str, per_class: int, seed: int, size: int | None = None, flip: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Crops of every class's ``split``: (images [C * per_class, 3, size, size] in [-1, 1],
    labels [C * per_class] int64). Default size: ``IMAGE_SIZE`` for training crops,
    ``HELDOUT_CROP`` for held-out crops (a held-out cell is smaller than an image)."""
    if size is None:
        size = IMAGE_SIZE if split == "train" else HELDOUT_CROP
    generator = torch.Generator().manual_seed(seed)
    images, labels = [], []
    for index, source in enumerate(load_sources("classes")):
        images.append(random_crops(source, per_class, split, generator, size=size, flip=flip))
        labels.append(torch.full((per_class,), index, dtype=torch.int64))
    return torch.cat(images), torch.cat(labels)


def package_versions() -> dict[str, str]:
    return {
        pkg: importlib.metadata.version(pkg)
        for pkg in ("scikit-image", "scikit-learn", "matplotlib")
    }


def manifest(**extra: object) -> dict:
    """Description of the data: sources with hashes, licences, sizes and held-out corners."""
    sources = []
    for role, which in (("class", "classes"), ("tokenizer and null class", "extra")):
        for s in load_sources(which):
            sources.append(
                {
                    "role": role,
                    "name": s.name,
                    "package": s.package,
                    "loader": s.loader,
                    "licence": licence_note(s.package, s.loader),
                    "raw_shape": list(s.raw_shape),
                    "raw_sha256": s.raw_sha256,
                    "central_fraction_kept": CENTRAL_FRACTION.get(s.name, 1.0),
                    "resized_hw": [int(s.pixels.shape[1]), int(s.pixels.shape[2])],
                    "cell_grid": list(s.cell_grid),
                    "heldout_cells": [list(c) for c in s.heldout_cells],
                    "heldout_pixels": int(s.heldout_mask.sum()),
                }
            )
    return {
        "package_versions": package_versions(),
        "base_short_side": BASE_SHORT_SIDE,
        "image_size": IMAGE_SIZE,
        "heldout_crop": HELDOUT_CROP,
        "scales": list(SCALES),
        "split": (
            f"per image: a grid of {CELLS_PER_SHORT_SIDE} cells along the short side; "
            f"{HELDOUT_CELLS} cells, pairwise not touching, held out (drawn with seed "
            f"{SPLIT_SEED} * 1000 + source index); training crops touch no held-out pixel "
            "after rescaling; held-out crops lie inside a held-out cell; held-out AR "
            "statistics count only tokens wholly inside held-out cells"
        ),
        "sources": sources,
        **extra,
    }


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """[..., 3, H, W] in [-1, 1] -> uint8 [..., H, W, 3]."""
    x = ((images.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return x.movedim(-3, -1)
