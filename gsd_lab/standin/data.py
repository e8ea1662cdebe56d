"""Training data for the stand-in model: multi-scale crops of images bundled inside PyPI packages.

Sources: scikit-image's ``skimage.data`` images that ship in its wheel, scikit-learn's sample
images and matplotlib's sample data (no download). ``CLASS_SOURCES`` are the ten classes of the
AR model; ``EXTRA_SOURCES`` only widen the tokenizer's training set.

Every image is resized so that its shorter side is ``BASE_SHORT_SIDE`` pixels, quantised to 8
bits, and split: two diagonally opposite corner squares of side ``HELDOUT_CORNER`` x the short
side (the diagonal drawn per image from a fixed seed) are held out, the rest is training data.
A *view* rescales an image by one of ``SCALES`` (and may mirror it); a training crop touches no
held-out pixel, a held-out crop lies wholly inside a held-out corner, so the two never share a
pixel. Images are float tensors in [-1, 1], shape [3, H, W] (gray sources repeated to RGB).
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
# Tokenizer-only sources: more natural image statistics for the codebook.
EXTRA_SOURCES: tuple[tuple[str, str, str], ...] = (
    ("chelsea", "scikit-image", "chelsea"),
    ("camera", "scikit-image", "camera"),
    ("coins", "scikit-image", "coins"),
    ("grass", "scikit-image", "grass"),
    ("moon", "scikit-image", "moon"),
    ("motorcycle", "scikit-image", "stereo_motorcycle"),
    ("grace_hopper", "matplotlib", "grace_hopper.jpg"),
)
CLASS_NAMES: tuple[str, ...] = tuple(name for name, _, _ in CLASS_SOURCES)
BASE_SHORT_SIDE = 384
IMAGE_SIZE = 128  # pixels per side of a stand-in image (16 x 16 tokens of 8 x 8 pixels)
SCALES: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
HELDOUT_CORNER = 0.4
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
        lines = [ln.strip() for ln in doc.splitlines()
                 if re.search(r"licen|public domain|copyright|CC0|CC-BY|creative commons", ln, re.I)]
        return " ".join(lines) or "see skimage.data docstring"
    if package == "scikit-learn":
        return "CC BY 2.0 (sklearn/datasets/images/README.txt)"
    return "public domain (US Navy photograph, matplotlib sample data)"


@dataclass(frozen=True)
class SourceImage:
    """One resized source image; ``heldout_mask`` [H, W] marks its two held-out corners."""

    name: str
    package: str
    loader: str
    pixels: torch.Tensor  # float32 [3, H, W] in [-1, 1]
    heldout_mask: torch.Tensor  # bool [H, W]
    raw_shape: tuple[int, ...]
    raw_sha256: str
    heldout_corners: tuple[str, str]


def _heldout_mask(h: int, w: int, diagonal: int) -> tuple[torch.Tensor, tuple[str, str]]:
    side = round(HELDOUT_CORNER * min(h, w))
    mask = torch.zeros(h, w, dtype=torch.bool)
    if diagonal == 0:
        mask[:side, :side] = True
        mask[h - side:, w - side:] = True
        return mask, ("top-left", "bottom-right")
    mask[:side, w - side:] = True
    mask[h - side:, :side] = True
    return mask, ("top-right", "bottom-left")


def _prepare(name: str, package: str, loader: str, diagonal: int) -> SourceImage:
    raw = np.asarray(_load_raw(package, loader))
    digest = hashlib.sha256(np.ascontiguousarray(raw).tobytes()).hexdigest()
    x = torch.from_numpy(raw.astype(np.float64) / (65535.0 if raw.dtype == np.uint16 else 255.0))
    x = x[:, :, None].expand(-1, -1, 3) if x.dim() == 2 else x[:, :, :3]
    keep = CENTRAL_FRACTION.get(name, 1.0)
    h, w = x.shape[:2]
    top, left = round(h * (1 - keep) / 2), round(w * (1 - keep) / 2)
    x = x[top: h - top, left: w - left]
    h, w = x.shape[:2]
    scale = BASE_SHORT_SIDE / min(h, w)
    size = (round(h * scale), round(w * scale))
    x = F.interpolate(x.permute(2, 0, 1)[None], size=size, mode="bilinear", antialias=True,
                      align_corners=False)[0]
    x = torch.round(x.clamp(0.0, 1.0) * 255.0) / 255.0  # 8 bits, like a stored image
    mask, corners = _heldout_mask(size[0], size[1], diagonal)
    pixels = x.float().mul(2.0).sub(1.0).contiguous()
    return SourceImage(name, package, loader, pixels, mask, tuple(raw.shape), digest, corners)


@lru_cache(maxsize=2)
def load_sources(which: str = "classes") -> tuple[SourceImage, ...]:
    """``"classes"`` (the AR classes, in class order), ``"extra"`` or ``"all"`` (classes + extra)."""
    table = {"classes": CLASS_SOURCES, "extra": EXTRA_SOURCES,
             "all": CLASS_SOURCES + EXTRA_SOURCES}
    if which not in table:
        raise ValueError(f"which must be one of {sorted(table)}, got {which!r}")
    diagonals = torch.randint(0, 2, (len(CLASS_SOURCES + EXTRA_SOURCES),),
                              generator=torch.Generator().manual_seed(SPLIT_SEED)).tolist()
    index = {name: i for i, (name, _, _) in enumerate(CLASS_SOURCES + EXTRA_SOURCES)}
    return tuple(_prepare(n, p, l, diagonals[index[n]]) for n, p, l in table[which])


@dataclass(frozen=True)
class View:
    """A rescaled (and possibly mirrored) source: pixels [3, h, w]; per pixel, ``touches`` = some
    held-out pixel contributes to it, ``inside`` = only held-out pixels contribute."""

    pixels: torch.Tensor
    touches: torch.Tensor
    inside: torch.Tensor


def make_view(source: SourceImage, scale: float, flip: bool) -> View:
    _, h, w = source.pixels.shape
    size = (max(1, round(h * scale)), max(1, round(w * scale)))
    if size == (h, w):
        pixels, frac = source.pixels, source.heldout_mask.double()
    else:
        pixels = F.interpolate(source.pixels[None].double(), size=size, mode="bilinear",
                               antialias=True, align_corners=False)[0].float().clamp(-1, 1)
        # the antialiased kernel's support is at least as wide as the mask's: conservative flags
        frac = F.interpolate(source.heldout_mask[None, None].double(), size=size, mode="bilinear",
                             antialias=True, align_corners=False)[0, 0]
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
    return (integral[size:, size:] - integral[:-size, size:] - integral[size:, :-size]
            + integral[:-size, :-size])


def valid_corners(view: View, size: int, split: str) -> torch.Tensor:
    """Top-left corners [N, 2] of ``size`` crops of ``view`` wholly in ``split``."""
    if split == "train":
        ok = window_counts(view.touches, size) == 0
    elif split == "heldout":
        ok = window_counts(view.inside, size) == size * size
    else:
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    return ok.nonzero()


def random_crops(source: SourceImage, count: int, split: str, generator: torch.Generator,
                 size: int = IMAGE_SIZE, scales: tuple[float, ...] = SCALES,
                 flip: bool = True) -> torch.Tensor:
    """``count`` crops [count, 3, size, size] of ``source``'s ``split``: a scale uniform over the
    scales that have such crops, a mirror with probability 1/2 (``flip``), a uniform position."""
    views = {}
    for scale in scales:
        for mirror in ((False, True) if flip else (False,)):
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
        top, left = corners[int(torch.randint(corners.shape[0], (1,), generator=generator))].tolist()
        crops.append(view.pixels[:, top: top + size, left: left + size])
    return torch.stack(crops)


def class_crops(split: str, per_class: int, seed: int, size: int = IMAGE_SIZE,
                flip: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Crops of every class's ``split``: (images [C * per_class, 3, size, size] in [-1, 1],
    labels [C * per_class] int64)."""
    generator = torch.Generator().manual_seed(seed)
    images, labels = [], []
    for index, source in enumerate(load_sources("classes")):
        images.append(random_crops(source, per_class, split, generator, size=size, flip=flip))
        labels.append(torch.full((per_class,), index, dtype=torch.int64))
    return torch.cat(images), torch.cat(labels)


def package_versions() -> dict[str, str]:
    return {pkg: importlib.metadata.version(pkg)
            for pkg in ("scikit-image", "scikit-learn", "matplotlib")}


def manifest(**extra: object) -> dict:
    """Description of the data: sources with hashes, licences, sizes and held-out corners."""
    sources = []
    for role, which in (("class", "classes"), ("tokenizer only", "extra")):
        for s in load_sources(which):
            sources.append({
                "role": role, "name": s.name, "package": s.package, "loader": s.loader,
                "licence": licence_note(s.package, s.loader),
                "raw_shape": list(s.raw_shape), "raw_sha256": s.raw_sha256,
                "central_fraction_kept": CENTRAL_FRACTION.get(s.name, 1.0),
                "resized_hw": [int(s.pixels.shape[1]), int(s.pixels.shape[2])],
                "heldout_corners": list(s.heldout_corners),
                "heldout_pixels": int(s.heldout_mask.sum()),
            })
    return {
        "package_versions": package_versions(), "base_short_side": BASE_SHORT_SIDE,
        "image_size": IMAGE_SIZE, "scales": list(SCALES),
        "split": (f"per image: two diagonally opposite corner squares of side {HELDOUT_CORNER} x "
                  f"short side held out (diagonal drawn with seed {SPLIT_SEED}); training crops "
                  "touch no held-out pixel after rescaling, held-out crops lie inside a corner"),
        "sources": sources, **extra,
    }


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """[..., 3, H, W] in [-1, 1] -> uint8 [..., H, W, 3]."""
    x = ((images.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return x.movedim(-3, -1)
