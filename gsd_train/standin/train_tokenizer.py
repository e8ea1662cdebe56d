"""Train the patch-VQ tokenizer: Lloyd's k-means over P x P patches of the training regions.

Data: patches of every source's training region (classes and extras) at every scale of
``data.SCALES``, mirrored or not, on the P-aligned grid of each view and on that grid shifted
by P/2 in both directions; patches touching held-out pixels are dropped; ``max_patches`` are
drawn uniformly (seeded).
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

from gsd_lab.standin import data
from gsd_lab.standin.tokenizer import (
    PatchVQTokenizer,
    SeamDecoder,
    TokenizerConfig,
    image_to_patches,
    nearest_code,
)
from gsd_lab.standin.weights_io import read_json, save_module, write_json


def cosine_lr(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up to ``peak`` then cosine decay to peak / 20."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def step_and_log(
    opt: torch.optim.Optimizer,
    loss: torch.Tensor,
    *,
    stage: str,
    step: int,
    steps: int,
    every: int,
    start: float,
    log,
    digits: int = 5,
) -> None:
    """One optimiser step on ``loss``; a log record every ``every`` steps and at the last."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % every == 0 or step == steps - 1:
        log(
            {
                "stage": stage,
                "step": step,
                "loss": round(loss.item(), digits),
                "elapsed_s": round(time.time() - start, 1),
            }
        )


def training_patches(patch: int, max_patches: int, seed: int) -> torch.Tensor:
    """[N, 3 P P] float32 patches of the training regions of all sources (see module doc)."""
    chunks = []
    for source in data.load_sources("all"):
        for scale in data.SCALES:
            for flip in (False, True):
                view = data.make_view(source, scale, flip)
                for shift in (0, patch // 2):
                    pixels, touches = view.pixels[:, shift:, shift:], view.touches[shift:, shift:]
                    h, w = (pixels.shape[1] // patch) * patch, (pixels.shape[2] // patch) * patch
                    patches = image_to_patches(pixels[None, :, :h, :w], patch)[0]
                    held = F.max_pool2d(touches[None, None, :h, :w].float(), patch)[0, 0]
                    chunks.append(patches[held.flatten() == 0])
    everything = torch.cat(chunks)
    generator = torch.Generator().manual_seed(seed)
    pick = torch.randperm(everything.shape[0], generator=generator)[:max_patches]
    return everything[pick].contiguous()


def kmeans(
    x: torch.Tensor, k: int, iterations: int, generator: torch.Generator, log=print
) -> tuple[torch.Tensor, list[dict]]:
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
        record = {
            "stage": "tokenizer",
            "iteration": it,
            "mse": float(error.mean() / x.shape[1]),
            "dead_codes_restarted": int(dead.numel()),
        }
        history.append(record)
        log(record)
    return centres.float(), history


@torch.no_grad()
def evaluate_tokenizer(tokenizer: PatchVQTokenizer, per_class: int = 10, seed: int = 1234) -> dict:
    """Held-out crops: MSE ([-1, 1] units), PSNR (dB, [0, 1] scale), code usage, and how close
    the decoded patches of codebook neighbours are: the PSNR between a code's patch and its
    nearest (and its 10th nearest) other code's patch, median and 10th percentile over codes."""
    images, _ = data.class_crops("heldout", per_class, seed, flip=False)
    codes = tokenizer.encode(images)
    recon = tokenizer.decode(codes)
    mse = F.mse_loss(recon, images).item()
    tiles_mse = F.mse_loss(tokenizer.decode_tiles(codes), images).item()
    counts = torch.bincount(codes.flatten(), minlength=tokenizer.codebook_size).double()
    probs = counts[counts > 0] / counts.sum()
    book = tokenizer.codebook.double()
    dist = torch.cdist(book, book)
    dist.fill_diagonal_(math.inf)
    near = dist.topk(10, dim=1, largest=False).values
    nn_mse = (near[:, 0] ** 2 / book.shape[1]) / 4.0  # [0, 1] pixel scale
    tenth_mse = (near[:, 9] ** 2 / book.shape[1]) / 4.0
    return {
        "heldout_mse": mse,
        "heldout_psnr_db": 10 * math.log10(4.0 / mse),
        "heldout_tiles_psnr_db": 10 * math.log10(4.0 / tiles_mse),
        "seam_decoder": tokenizer.decoder is not None,
        "heldout_codes_used": int((counts > 0).sum()),
        "codebook_size": tokenizer.codebook_size,
        "heldout_code_perplexity": float(torch.exp(-(probs * probs.log()).sum())),
        "heldout_images": int(images.shape[0]),
        "nearest_code_patch_psnr_db_median": float(10 * torch.log10(1.0 / nn_mse.median())),
        "nearest_code_patch_psnr_db_p10": float(10 * torch.log10(1.0 / nn_mse.quantile(0.9))),
        "tenth_nearest_code_patch_psnr_db_median": float(
            10 * torch.log10(1.0 / tenth_mse.median())
        ),
        "heldout_crop": int(images.shape[-1]),
    }


def train_tokenizer(
    out: Path,
    *,
    iterations: int = 10,
    max_patches: int = 120_000,
    seed: int = 0,
    config: TokenizerConfig = TokenizerConfig(),
    eval_per_class: int = 10,
    log=print,
) -> tuple[PatchVQTokenizer, dict]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    x = training_patches(config.patch, max_patches, seed + 1)
    log({"stage": "tokenizer", "patches": int(x.shape[0]), "prep_s": round(time.time() - start, 1)})
    codebook, history = kmeans(
        x, config.codebook_size, iterations, torch.Generator().manual_seed(seed + 2), log=log
    )
    tokenizer = PatchVQTokenizer(config)
    tokenizer.codebook.copy_(codebook)
    metrics = evaluate_tokenizer(tokenizer, per_class=eval_per_class)
    metrics.update(
        {
            "iterations": iterations,
            "training_patches": int(x.shape[0]),
            "seed": seed,
            "final_train_mse": history[-1]["mse"] if history else None,
            "wall_seconds": round(time.time() - start, 1),
        }
    )
    log({"stage": "tokenizer", "eval": metrics})
    save_module(tokenizer, out / "tokenizer.safetensors")
    write_json(out / "tokenizer_config.json", {**config.to_dict(), "metrics": metrics})
    return tokenizer, metrics


def train_decoder(
    out: Path,
    tokenizer: PatchVQTokenizer,
    *,
    width: int = 24,
    steps: int = 1200,
    batch: int = 16,
    crop: int = 64,
    lr: float = 2e-3,
    pool: int = 24,
    seed: int = 0,
    eval_per_class: int = 10,
    log=print,
) -> tuple[PatchVQTokenizer, dict]:
    """Train the ``SeamDecoder`` on (tiles, image) pairs and save the tokenizer with it.

    Pairs: ``pool`` training-region crops (``data.IMAGE_SIZE``) of every source and their tiles
    decode_tiles(encode(crop)); a step takes ``batch`` random ``crop``-pixel windows at patch-
    aligned offsets and minimises the mean squared error (Adam, cosine learning rate). The
    codebook is unchanged. Evaluated on ``eval_per_class`` held-out crops per class."""
    out = Path(out)
    start = time.time()
    generator = torch.Generator().manual_seed(seed + 10)
    images = torch.cat(
        [data.random_crops(s, pool, "train", generator) for s in data.load_sources("all")]
    )
    tiles = torch.cat(
        [tokenizer.decode_tiles(tokenizer.encode(c)) for c in images.split(32)]
    ).float()
    config = TokenizerConfig(tokenizer.patch, tokenizer.codebook_size, decoder_width=width)
    refined = PatchVQTokenizer(config)
    refined.codebook.copy_(tokenizer.codebook)
    with torch.random.fork_rng():
        torch.manual_seed(seed + 11)  # parameter init only
        refined.decoder = SeamDecoder(tokenizer.patch, width)
    opt = torch.optim.Adam(refined.decoder.parameters(), lr=lr)
    log(
        {"stage": "decoder", "pairs": int(images.shape[0]), "prep_s": round(time.time() - start, 1)}
    )
    p, size = tokenizer.patch, images.shape[-1]
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, steps, lr, min(50, steps // 10 + 1))
        pick = torch.randint(0, images.shape[0], (batch,), generator=generator)
        offsets = torch.randint(0, (size - crop) // p + 1, (batch, 2), generator=generator) * p
        x = torch.stack(
            [
                tiles[i, :, t : t + crop, l : l + crop]
                for i, (t, l) in zip(pick.tolist(), offsets.tolist())
            ]
        )
        y = torch.stack(
            [
                images[i, :, t : t + crop, l : l + crop]
                for i, (t, l) in zip(pick.tolist(), offsets.tolist())
            ]
        )
        step_and_log(
            opt,
            F.mse_loss(refined.decoder(x), y),
            stage="decoder",
            step=step,
            steps=steps,
            every=100,
            start=start,
            log=log,
            digits=6,
        )
    refined.eval()
    metrics = {
        **read_json(out / "tokenizer_config.json")["metrics"],
        **evaluate_tokenizer(refined, per_class=eval_per_class),
    }
    metrics["decoder_training"] = {
        "width": width,
        "steps": steps,
        "batch": batch,
        "crop": crop,
        "lr": lr,
        "pool_per_source": pool,
        "seed": seed,
        "wall_seconds": round(time.time() - start, 1),
    }
    log({"stage": "decoder", "eval": metrics})
    save_module(refined, out / "tokenizer.safetensors")
    write_json(out / "tokenizer_config.json", {**config.to_dict(), "metrics": metrics})
    return refined, metrics
