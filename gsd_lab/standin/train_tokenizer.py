"""Train the patch-VQ tokenizer: Lloyd's k-means over P x P patches of the training regions.

Data: patches of every source's training region (classes and tokenizer-only extras) at every
scale of ``data.SCALES``, mirrored or not, on the P-aligned grid of each view; patches touching
held-out pixels are dropped; ``max_patches`` are drawn uniformly (seeded).
Lloyd's iteration: assign every patch to its nearest code, move each code to the mean of its
patches; a code that receives no patch (a dead code) restarts at the patch with the largest
current error (one patch per dead code, largest first).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from . import data
from .tokenizer import PatchVQTokenizer, TokenizerConfig, image_to_patches, nearest_code
from .weights_io import save_module, write_json


def cosine_lr(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up to ``peak`` then cosine decay to peak / 20."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def training_patches(patch: int, max_patches: int, seed: int) -> torch.Tensor:
    """[N, 3 P P] float32 patches of the training regions of all sources (see module doc)."""
    chunks = []
    for source in data.load_sources("all"):
        for scale in data.SCALES:
            for flip in (False, True):
                view = data.make_view(source, scale, flip)
                h, w = (view.pixels.shape[1] // patch) * patch, (view.pixels.shape[2] // patch) * patch
                patches = image_to_patches(view.pixels[None, :, :h, :w], patch)[0]
                held = F.max_pool2d(view.touches[None, None, :h, :w].float(), patch)[0, 0]
                chunks.append(patches[held.flatten() == 0])
    everything = torch.cat(chunks)
    generator = torch.Generator().manual_seed(seed)
    pick = torch.randperm(everything.shape[0], generator=generator)[:max_patches]
    return everything[pick].contiguous()


def kmeans(x: torch.Tensor, k: int, iterations: int, generator: torch.Generator,
           log=print) -> tuple[torch.Tensor, list[dict]]:
    """Lloyd's k-means with dead-code restarts; x [N, D] -> (codebook [k, D] float32, history)."""
    if x.shape[0] < k:
        raise ValueError(f"k-means needs at least k = {k} points, got {x.shape[0]}")
    centres = x[torch.randperm(x.shape[0], generator=generator)[:k]].double()
    history = []
    for it in range(iterations):
        assign = nearest_code(x, centres)
        error = ((x.double() - centres[assign]) ** 2).sum(1)
        counts = torch.bincount(assign, minlength=k)
        sums = torch.zeros_like(centres).index_add_(0, assign, x.double())
        alive = counts > 0
        centres[alive] = sums[alive] / counts[alive, None]
        dead = (~alive).nonzero().flatten()
        if dead.numel():
            worst = torch.argsort(error, descending=True)[: dead.numel()]
            centres[dead] = x[worst].double()
        record = {"stage": "tokenizer", "iteration": it, "mse": float(error.mean() / x.shape[1]),
                  "dead_codes_restarted": int(dead.numel())}
        history.append(record)
        log(record)
    return centres.float(), history


@torch.no_grad()
def evaluate_tokenizer(tokenizer: PatchVQTokenizer, per_class: int = 10, seed: int = 1234) -> dict:
    """Held-out crops: MSE ([-1, 1] units), PSNR (dB, [0, 1] scale), code usage, and how close
    the decoded patches of codebook neighbours are."""
    images, _ = data.class_crops("heldout", per_class, seed, flip=False)
    codes = tokenizer.encode(images)
    recon = tokenizer.decode(codes)
    mse = F.mse_loss(recon, images).item()
    counts = torch.bincount(codes.flatten(), minlength=tokenizer.codebook_size).double()
    probs = counts[counts > 0] / counts.sum()
    book = tokenizer.codebook.double()
    dist = torch.cdist(book, book)
    dist.fill_diagonal_(math.inf)
    nn_mse = (dist.min(1).values ** 2 / book.shape[1]) / 4.0  # [0, 1] pixel scale
    return {"heldout_mse": mse, "heldout_psnr_db": 10 * math.log10(4.0 / mse),
            "heldout_codes_used": int((counts > 0).sum()), "codebook_size": tokenizer.codebook_size,
            "heldout_code_perplexity": float(torch.exp(-(probs * probs.log()).sum())),
            "heldout_images": int(images.shape[0]),
            "nearest_code_patch_psnr_db_median": float(10 * torch.log10(1.0 / nn_mse.median())),
            "nearest_code_patch_psnr_db_p10": float(10 * torch.log10(1.0 / nn_mse.quantile(0.9)))}


def train_tokenizer(out: Path, *, iterations: int = 12, max_patches: int = 150_000, seed: int = 0,
                    config: TokenizerConfig = TokenizerConfig(), log=print) -> tuple[PatchVQTokenizer, dict]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    x = training_patches(config.patch, max_patches, seed + 1)
    log({"stage": "tokenizer", "patches": int(x.shape[0]), "prep_s": round(time.time() - start, 1)})
    codebook, history = kmeans(x, config.codebook_size, iterations,
                               torch.Generator().manual_seed(seed + 2), log=log)
    tokenizer = PatchVQTokenizer(config)
    tokenizer.codebook.copy_(codebook)
    metrics = evaluate_tokenizer(tokenizer)
    metrics.update({"iterations": iterations, "training_patches": int(x.shape[0]), "seed": seed,
                    "final_train_mse": history[-1]["mse"] if history else None,
                    "wall_seconds": round(time.time() - start, 1)})
    log({"stage": "tokenizer", "eval": metrics})
    save_module(tokenizer, out / "tokenizer.safetensors")
    write_json(out / "tokenizer_config.json", {**config.to_dict(), "metrics": metrics})
    return tokenizer, metrics
