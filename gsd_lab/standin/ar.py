"""The stand-in's autoregressive model: a ``transformers`` LlamaForCausalLM over
[class token] + h*w image tokens (raster order), LlamaGen-style class-conditional generation.

Token-id layout (vocabulary V = K + C + 1, K = tokenizer codebook size, C = classes):
    0 .. K-1        image codes (the only tokens generation may emit)
    K + c           class token of class c, 0 <= c < C
    K + C           the null class (unconditional branch of classifier-free guidance)
Training: next-token cross-entropy on the image positions; the class token is replaced by the
null class with probability ``class_dropout`` so that the same model gives the unconditional
distribution for CFG.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn import functional as F

from . import data
from .augment import AugmentConfig, augment_region
from .tokenizer import FSQTokenizer
from .weights_io import save_module, write_json


@dataclass(frozen=True)
class TokenLayout:
    codebook_size: int
    num_classes: int
    grid: int = 16  # image tokens per side

    @property
    def vocab_size(self) -> int:
        return self.codebook_size + self.num_classes + 1

    @property
    def null_class_id(self) -> int:
        return self.codebook_size + self.num_classes

    @property
    def num_image_tokens(self) -> int:
        return self.grid * self.grid

    def class_id(self, class_index: int) -> int:
        if not 0 <= class_index < self.num_classes:
            raise ValueError(f"class index must lie in [0, {self.num_classes}), got {class_index}")
        return self.codebook_size + class_index

    def to_dict(self) -> dict:
        return {"codebook_size": self.codebook_size, "num_classes": self.num_classes,
                "grid": self.grid, "vocab_size": self.vocab_size,
                "image_token_ids": [0, self.codebook_size - 1],
                "class_token_ids": [self.codebook_size, self.codebook_size + self.num_classes - 1],
                "null_class_id": self.null_class_id,
                "sequence": "[class or null] + grid*grid image codes in raster order"}


def llama_config(layout: TokenLayout, hidden: int = 256, layers: int = 4, heads: int = 4,
                 intermediate: int = 704):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=layout.vocab_size, hidden_size=hidden, intermediate_size=intermediate,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=layout.num_image_tokens + 1, rope_theta=10000.0,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        attention_dropout=0.0, initializer_range=0.02,
    )


def build_model(config):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM(config)


class TokenMapDataset:
    """Token maps of every class's region: 16 pixel shifts x 2 flips of the unchanged region, or
    (``augment``, training split only) ``augment.variants_per_class`` augmented variants per class
    (gsd_lab.standin.augment: rescaling, flips, optional 90-degree rotations, colour jitter).

    A sample is a ``grid`` x ``grid`` window of one map: the tokens of a 64x64 crop at any
    pixel offset (encoded with the surrounding region as context).
    """

    def __init__(self, tokenizer: FSQTokenizer, grid: int = 16, shifts: int = 4, split: str = "train",
                 augment: AugmentConfig | None = None, seed: int = 0):
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
        if augment is not None and split != "train":
            raise ValueError("augmentation applies to the training split only")
        self.grid = grid
        self.maps: list[list[torch.Tensor]] = []
        sources = data.load_sources()
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for source in sources:
                variants = []
                region = source.train if split == "train" else source.heldout
                if augment is not None:
                    for _ in range(augment.variants_per_class):
                        x = augment_region(region, augment, generator)
                        variants.append(tokenizer.encode(x[None])[0].to(torch.int16))
                    self.maps.append(variants)
                    continue
                for flip in (False, True):
                    flipped = region.flip(-1) if flip else region
                    for dy in range(shifts):
                        for dx in range(shifts):
                            x = flipped[:, dy:, dx:]
                            h, w = (x.shape[1] // 4) * 4, (x.shape[2] // 4) * 4
                            variants.append(tokenizer.encode(x[None, :, :h, :w])[0].to(torch.int16))
                self.maps.append(variants)
        self.num_classes = len(self.maps)

    def sample(self, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens [batch, grid*grid] int64, class indices [batch]); classes uniform."""
        classes = torch.randint(0, self.num_classes, (batch,), generator=generator)
        out = torch.empty(batch, self.grid * self.grid, dtype=torch.int64)
        for i, c in enumerate(classes.tolist()):
            variants = self.maps[c]
            m = variants[int(torch.randint(0, len(variants), (1,), generator=generator))]
            top = int(torch.randint(0, m.shape[0] - self.grid + 1, (1,), generator=generator))
            left = int(torch.randint(0, m.shape[1] - self.grid + 1, (1,), generator=generator))
            out[i] = m[top: top + self.grid, left: left + self.grid].reshape(-1).long()
        return out, classes


def make_batch(tokens: torch.Tensor, classes: torch.Tensor, layout: TokenLayout,
               class_dropout: float, generator: torch.Generator) -> torch.Tensor:
    """[batch, 1 + grid*grid] input ids: class (or null with prob. class_dropout) + codes."""
    drop = torch.rand(classes.shape[0], generator=generator) < class_dropout
    cls = torch.where(drop, layout.null_class_id, classes + layout.codebook_size)
    return torch.cat([cls[:, None], tokens], dim=1)


def image_token_loss(model, ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) of the image tokens ids[:, 1:] given their prefix."""
    logits = model(input_ids=ids[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))


def train_ar(out: Path, tokenizer: FSQTokenizer, *, steps: int = 700, batch: int = 24,
             lr: float = 1.5e-3, seed: int = 0, class_dropout: float = 0.1,
             hidden: int = 256, layers: int = 4, heads: int = 4, intermediate: int = 704,
             bf16: bool = True, augment: AugmentConfig | None = None, eval_every: int = 250,
             select_best_heldout: bool = False, log=print):
    """Train and save the AR model. With ``select_best_heldout`` the saved weights are those
    of the evaluation (every ``eval_every`` steps and the last step) with the lowest held-out loss."""
    out = Path(out)
    start = time.time()
    dataset = TokenMapDataset(tokenizer, augment=augment, seed=seed + 203)
    layout = TokenLayout(tokenizer.codebook_size, dataset.num_classes)
    config = llama_config(layout, hidden, layers, heads, intermediate)
    torch.manual_seed(seed + 200)
    model = build_model(config)
    generator = torch.Generator().manual_seed(seed + 201)
    # fixed validation batches: training-region windows and held-out-region windows
    val_gen = torch.Generator().manual_seed(seed + 202)
    val_ids = make_batch(*dataset.sample(64, val_gen), layout, 0.0, val_gen)
    heldout = TokenMapDataset(tokenizer, split="heldout")
    heldout_ids = make_batch(*heldout.sample(64, val_gen), layout, 0.0, val_gen)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))
    warmup = min(100, steps // 10 + 1)
    log({"stage": "ar", "params": sum(p.numel() for p in model.parameters()),
         "data_windows_maps": sum(len(v) for v in dataset.maps),
         "prep_s": round(time.time() - start, 1)})
    best = {"heldout_loss": math.inf, "step": None, "state": None}
    for step in range(steps):
        if step < warmup:
            cur = lr * (step + 1) / warmup
        else:
            cur = lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup))))
        for group in opt.param_groups:
            group["lr"] = cur
        ids = make_batch(*dataset.sample(batch, generator), layout, class_dropout, generator)
        model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = image_token_loss(model, ids)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step % eval_every == 0 or step == steps - 1:
            record = {"stage": "ar", "step": step, "loss": round(loss.item(), 4), "lr": round(cur, 6),
                      "elapsed_s": round(time.time() - start, 1)}
            if step % eval_every == 0 or step == steps - 1:
                model.eval()
                with torch.no_grad():
                    record["train_windows_loss"] = round(image_token_loss(model, val_ids).item(), 4)
                    heldout_loss = image_token_loss(model, heldout_ids).item()
                    record["heldout_loss"] = round(heldout_loss, 4)
                if select_best_heldout and heldout_loss < best["heldout_loss"]:
                    best = {"heldout_loss": heldout_loss, "step": step,
                            "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
            log(record)
    wall = round(time.time() - start, 1)
    model.eval()
    if select_best_heldout and best["state"] is not None:
        model.load_state_dict(best["state"])
    save_module(model, out / "ar_model.safetensors")
    write_json(out / "ar_config.json", {"llama": config.to_dict(), "layout": layout.to_dict(),
                                         "class_names": list(data.CLASS_NAMES),
                                         "training": {"steps": steps, "batch": batch, "lr": lr,
                                                      "seed": seed, "class_dropout": class_dropout,
                                                      "bf16_autocast": bf16, "wall_seconds": wall,
                                                      "augment": augment.to_dict() if augment else None,
                                                      "eval_every": eval_every,
                                                      "select_best_heldout": select_best_heldout,
                                                      "saved_step": best["step"] if select_best_heldout else steps - 1}})
    log({"stage": "ar", "done": True, "wall_seconds": wall})
    return model, layout
