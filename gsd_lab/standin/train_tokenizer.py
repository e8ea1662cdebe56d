"""Train the FSQ tokenizer on random crops of the training regions (pixel MSE loss).

Fully convolutional, so it is trained on small crops (default 32x32) and applied to 64x64.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from . import data
from .tokenizer import FSQTokenizer, TokenizerConfig
from .weights_io import save_module, write_json


def cosine_lr(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up to ``peak`` then cosine decay to peak / 10."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def evaluate_tokenizer(tokenizer: FSQTokenizer, per_class: int = 20, seed: int = 1234) -> dict:
    """Held-out 64x64 crops: MSE in [-1,1] units, PSNR (dB, [0,1] pixel scale), code usage."""
    tokenizer.eval()
    images, _ = data.class_crops("heldout", per_class, data.CROP_SIZE, seed, flip=False)
    recon = torch.cat([tokenizer.decode(tokenizer.encode(chunk)) for chunk in images.split(50)])
    mse = F.mse_loss(recon, images).item()
    mse01 = mse / 4.0  # [-1, 1] -> [0, 1] scale
    codes = torch.cat([tokenizer.encode(chunk) for chunk in images.split(50)])
    used = int(torch.unique(codes).numel())
    counts = torch.bincount(codes.flatten(), minlength=tokenizer.codebook_size).double()
    probs = counts / counts.sum()
    nz = probs[probs > 0]
    perplexity = float(torch.exp(-(nz * nz.log()).sum()))
    return {"heldout_mse": mse, "heldout_psnr_db": 10 * math.log10(1.0 / mse01),
            "heldout_codes_used": used, "codebook_size": tokenizer.codebook_size,
            "heldout_code_perplexity": perplexity, "heldout_images": int(images.shape[0])}


def train_tokenizer(out: Path, *, steps: int = 500, batch: int = 32, crop: int = 32,
                    lr: float = 2e-3, seed: int = 0, config: TokenizerConfig = TokenizerConfig(),
                    log=print) -> tuple[FSQTokenizer, dict]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)  # parameter init only; data randomness uses the explicit generator
    tokenizer = FSQTokenizer(config)
    generator = torch.Generator().manual_seed(seed + 1)
    sources = data.load_sources()
    opt = torch.optim.AdamW(tokenizer.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    per_class = -(-batch // len(sources))
    start = time.time()
    history = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, steps, lr, warmup=min(50, steps // 10 + 1))
        images = torch.cat([data.random_crops(s.train, per_class, crop, generator) for s in sources])
        images = images[torch.randperm(images.shape[0], generator=generator)[:batch]]
        tokenizer.train()
        loss = F.mse_loss(tokenizer(images), images)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(tokenizer.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == steps - 1:
            record = {"stage": "tokenizer", "step": step, "loss": round(loss.item(), 6),
                      "elapsed_s": round(time.time() - start, 1)}
            history.append(record)
            log(record)
    metrics = evaluate_tokenizer(tokenizer)
    metrics.update({"steps": steps, "batch": batch, "train_crop": crop, "seed": seed,
                    "wall_seconds": round(time.time() - start, 1)})
    log({"stage": "tokenizer", "eval": metrics})
    save_module(tokenizer, out / "tokenizer.safetensors")
    write_json(out / "tokenizer_config.json", {**config.to_dict(), "metrics": metrics})
    return tokenizer, metrics
