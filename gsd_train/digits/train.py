"""Training stages of the digits model, on the stand-in's modules (``gsd_lab.standin``).

tokenizer: the stand-in's patch VQ (``PatchVQTokenizer``, no seam decoder) with P = 2 (28 x 28
    digits -> 14 x 14 = 196 codes), its codebook by the stand-in's Lloyd's k-means
    (``train_tokenizer.kmeans``) over 2 x 2 patches of shifted training digits.
classifier: the stand-in's ``CropClassifier`` trained on shifted training digits (cross-entropy,
    Adam); its softmax and penultimate features are the quality measure (``quality``).
ar: a stock ``LlamaForCausalLM`` over [class] + 196 codes (the stand-in's ``TokenLayout`` and
    ``llama_config``), class dropped to null with prob. ``class_dropout`` (CFG). An epoch is
    ``TRAIN_PER_CLASS * 10 / batch`` steps on digits drawn uniformly, each shifted by (dy, dx)
    uniform in [-``max_shift``, ``max_shift``]^2 pixels and encoded then. After every epoch the
    teacher-forced NLL of all held-out digits (unshifted, conditional) is measured; training stops
    when it has not improved for ``patience`` evaluations, at ``max_epochs``, or at the wall-clock
    ``deadline`` (recorded), and the best evaluation's parameters are saved.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from gsd_lab.digits import data
from gsd_lab.standin.ar import TokenLayout
from gsd_lab.standin.classifier import CropClassifier, accuracy
from gsd_lab.standin.tokenizer import PatchVQTokenizer, TokenizerConfig, image_to_patches
from gsd_lab.standin.weights_io import save_module, write_json

from ..standin.ar import (
    _initial_model,
    _optimizer,
    _step,
    llama_config,
    lr_at,
    make_batch,
    teacher_forced_statistics,
    write_ar_config,
)
from ..standin.train_tokenizer import kmeans

TOKENIZER = TokenizerConfig(patch=2, codebook_size=1024)


def random_shifts(n: int, max_shift: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(-max_shift, max_shift + 1, (n, 2), generator=generator)


@torch.no_grad()
def evaluate_tokenizer(tokenizer: PatchVQTokenizer, images: torch.Tensor) -> dict:
    """Round trip of ``images`` (held-out digits): MSE ([-1, 1] units), PSNR (dB, [0, 1]
    scale), codes used; and how near the codebook's neighbours are: per code the distance to its
    nearest other code as a PSNR over one patch, median over codes."""
    recon = tokenizer.decode(tokenizer.encode(images))
    mse = float(F.mse_loss(recon, images))
    book = tokenizer.codebook.double()
    dist = torch.cdist(book, book).fill_diagonal_(float("inf"))
    nearest_mse = dist.min(1).values ** 2 / book.shape[1] / 4.0
    used = torch.unique(tokenizer.encode(images)).numel()
    return {
        "heldout_mse": mse,
        "heldout_psnr_db": 10 * math.log10(4.0 / mse),
        "heldout_images": int(images.shape[0]),
        "heldout_codes_used": int(used),
        "codebook_size": tokenizer.codebook_size,
        "nearest_code_patch_psnr_db_median": float(10 * torch.log10(1 / nearest_mse.median())),
    }


def train_tokenizer(
    out: Path,
    *,
    config: TokenizerConfig = TOKENIZER,
    iterations: int = 20,
    max_patches: int = 200_000,
    max_shift: int = 2,
    seed: int = 0,
    log=print,
) -> PatchVQTokenizer:
    """k-means codebook over ``max_patches`` patches (drawn uniformly, seeded) of the training
    digits, each digit shifted once; held-out reconstruction metrics in the config."""
    start = time.time()
    images, _ = data.digits("train")
    gen = torch.Generator().manual_seed(seed + 1)
    moved = data.shifted(images, random_shifts(images.shape[0], max_shift, gen))
    patches = image_to_patches(moved, config.patch).reshape(-1, config.code_dim)
    x = patches[torch.randperm(patches.shape[0], generator=gen)[:max_patches]].contiguous()
    codebook, history = kmeans(
        x, config.codebook_size, iterations, torch.Generator().manual_seed(seed + 2), log=log
    )
    tokenizer = PatchVQTokenizer(config)
    tokenizer.codebook.copy_(codebook)
    save_module(tokenizer, Path(out) / "tokenizer.safetensors")  # float16, as loaded
    heldout, _ = data.digits("heldout")
    metrics = {
        **evaluate_tokenizer(tokenizer, heldout),
        "iterations": iterations,
        "training_patches": int(x.shape[0]),
        "max_shift": max_shift,
        "seed": seed,
        "final_train_mse": history[-1]["mse"] if history else None,
        "wall_seconds": round(time.time() - start, 1),
    }
    log({"stage": "tokenizer", "eval": metrics})
    write_json(Path(out) / "tokenizer_config.json", {**config.to_dict(), "metrics": metrics})
    return tokenizer


def train_classifier(
    out: Path,
    *,
    width: int = 16,
    steps: int = 1500,
    batch: int = 64,
    lr: float = 2e-3,
    max_shift: int = 2,
    seed: int = 0,
    log=print,
) -> CropClassifier:
    """The stand-in's ``CropClassifier`` on shifted training digits; held-out accuracy."""
    start = time.time()
    images, labels = data.digits("train")
    gen = torch.Generator().manual_seed(seed + 20)
    with torch.random.fork_rng():
        torch.manual_seed(seed + 21)  # parameter init only
        model = CropClassifier(data.NUM_CLASSES, width=width)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, steps // 20 + 1)
        pick = torch.randint(0, images.shape[0], (batch,), generator=gen)
        x = data.shifted(images[pick], random_shifts(batch, max_shift, gen))
        model.train()
        loss = F.cross_entropy(model(x), labels[pick])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 250 == 0 or step == steps - 1:
            log({"stage": "classifier", "step": step, "loss": round(loss.item(), 4)})
    model.eval()
    save_module(model, Path(out) / "classifier.safetensors")
    heldout, heldout_labels = data.digits("heldout")
    metrics = {
        "heldout_accuracy": accuracy(model, heldout, heldout_labels),
        "train_accuracy": accuracy(model, images, labels),
        "heldout_images": int(heldout.shape[0]),
        "steps": steps,
        "batch": batch,
        "lr": lr,
        "max_shift": max_shift,
        "seed": seed,
        "wall_seconds": round(time.time() - start, 1),
    }
    log({"stage": "classifier", "eval": metrics})
    write_json(
        Path(out) / "classifier_config.json",
        {
            "num_classes": data.NUM_CLASSES,
            "width": width,
            "feature_dim": model.head.in_features,
            "class_names": list(data.CLASS_NAMES),
            "metrics": metrics,
        },
    )
    return model


@torch.no_grad()
def encode(tokenizer: PatchVQTokenizer, images: torch.Tensor) -> torch.Tensor:
    """images [N, 3, 28, 28] -> codes [N, 196] (raster order)."""
    return torch.cat([tokenizer.encode(c).flatten(1) for c in images.split(500)])


@torch.no_grad()
def heldout_nll(model, ids: torch.Tensor, layout: TokenLayout, chunk: int = 100) -> dict:
    """Teacher-forced statistics of ``ids`` [N, 197] (``teacher_forced_statistics``), pooled
    over chunks of ``chunk`` sequences, weighted by tokens."""
    model.eval()
    parts = [teacher_forced_statistics(model, part, layout) for part in ids.split(chunk)]
    total = sum(p["tokens"] for p in parts)
    pooled = {
        k: sum(p[k] * p["tokens"] for p in parts) / total
        for k in ("nll", "share_top1_below_5pct")
    }
    return {**pooled, "tokens": total}


def _curve(history: list[dict]) -> list[dict]:
    """The held-out and training-probe NLL and the held-out flat share per evaluated epoch."""
    return [
        {"epoch": r["epoch"], "heldout_nll": r["heldout"]["nll"],
         "train_nll": r["train_probe"]["nll"],
         "heldout_share_top1_below_5pct": r["heldout"]["share_top1_below_5pct"]}
        for r in history
    ]


def train_ar(
    out: Path,
    tokenizer: PatchVQTokenizer,
    *,
    hidden: int = 128,
    layers: int = 3,
    heads: int = 4,
    intermediate: int = 320,
    batch: int = 32,
    lr: float = 1.5e-3,
    class_dropout: float = 0.1,
    max_shift: int = 2,
    max_epochs: int = 8,
    patience: int = 2,
    deadline: float | None = None,
    seed: int = 0,
    log=print,
):
    """Train with early stopping on the held-out NLL (see module doc) and save the best."""
    out = Path(out)
    start = time.time()
    images, labels = data.digits("train")
    heldout, heldout_labels = data.digits("heldout")
    layout = TokenLayout(tokenizer.codebook_size, data.NUM_CLASSES, grid=data.IMAGE_SIZE // 2)
    gen = torch.Generator().manual_seed(seed + 201)
    probe_gen = torch.Generator().manual_seed(seed + 202)
    heldout_ids = make_batch(encode(tokenizer, heldout), heldout_labels, layout, 0.0, probe_gen)
    probe = torch.randperm(images.shape[0], generator=probe_gen)[: heldout.shape[0]]
    train_ids = make_batch(
        encode(tokenizer, images[probe]), labels[probe], layout, 0.0, probe_gen
    )
    config = llama_config(layout, hidden, layers, heads, intermediate)
    model = _initial_model(config, tokenizer, seed, codebook_init=False)
    opt = _optimizer(model, lr)
    steps_per_epoch = images.shape[0] // batch
    total = steps_per_epoch * max_epochs
    warmup = min(200, total // 20 + 1)
    log(
        {
            "stage": "ar",
            "params": sum(p.numel() for p in model.parameters()),
            "steps_per_epoch": steps_per_epoch,
            "prep_s": round(time.time() - start, 1),
        }
    )
    history, best, stale, stop = [], None, 0, "max_epochs"
    step = 0
    for epoch in range(max_epochs):
        for _ in range(steps_per_epoch):
            cur = lr_at(step, total, lr, warmup)
            for group in opt.param_groups:
                group["lr"] = cur
            pick = torch.randint(0, images.shape[0], (batch,), generator=gen)
            x = data.shifted(images[pick], random_shifts(batch, max_shift, gen))
            ids = make_batch(encode(tokenizer, x), labels[pick], layout, class_dropout, gen)
            loss = _step(model, opt, ids, False)
            if step % 50 == 0:
                log({"stage": "ar", "step": step, "loss": round(loss.item(), 4),
                     "lr": round(cur, 6), "elapsed_s": round(time.time() - start, 1)})
            step += 1
        record = {
            "stage": "ar",
            "epoch": epoch,
            "step": step,
            "heldout": heldout_nll(model, heldout_ids, layout),
            "train_probe": heldout_nll(model, train_ids, layout),
            "elapsed_s": round(time.time() - start, 1),
        }
        record["gap_nats"] = record["heldout"]["nll"] - record["train_probe"]["nll"]
        history.append(record)
        log(record)
        if best is None or record["heldout"]["nll"] < best[0]:
            best = (record["heldout"]["nll"], epoch,
                    {k: v.detach().clone() for k, v in model.state_dict().items()})
            stale = 0
        else:
            stale += 1
        if stale >= patience:
            stop = "patience"
            break
        per_epoch = (time.time() - start) / (epoch + 1)
        if deadline is not None and time.time() + per_epoch > deadline:
            stop = "deadline"
            break
    model.load_state_dict(best[2])
    model.eval()
    save_module(model, out / "ar_model.safetensors")
    wall = round(time.time() - start, 1)
    training = {
        "batch": batch, "lr": lr, "seed": seed, "class_dropout": class_dropout,
        "max_shift": max_shift, "max_epochs": max_epochs, "patience": patience,
        "steps_per_epoch": steps_per_epoch, "warmup": warmup, "schedule_steps": total,
        "threads": torch.get_num_threads(), "wall_seconds": wall, "stopped_by": stop,
        "epochs_run": len(history), "saved_epoch": best[1],
        "codebook_init": False, "curve": _curve(history), "final_eval": history[best[1]],
    }
    write_ar_config(out, config, layout, training, data.CLASS_NAMES)
    log({"stage": "ar", "done": True, "wall_seconds": wall, "saved_epoch": best[1],
         "stopped_by": stop})
    return model, layout
