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
from .tokenizer import PatchVQTokenizer
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
    """Token maps of every class's views: ``data.SCALES`` x (mirrored or not) x pixel shifts
    ``shifts`` x ``shifts`` (so windows start at sub-token offsets too), each encoded whole.

    A sample is a ``grid`` x ``grid`` window of one map that lies wholly in ``split``: for
    "train", no token touches a held-out pixel; for "heldout", every token lies inside a
    held-out corner (``gsd_lab.standin.data``).
    """

    def __init__(self, tokenizer: PatchVQTokenizer, grid: int = 16, split: str = "train",
                 shifts: tuple[int, ...] = (0, 4)):
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
        self.grid = grid
        p = tokenizer.patch
        self.maps: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
        for source in data.load_sources("classes"):
            entries = []
            for scale in data.SCALES:
                for flip in (False, True):
                    view = data.make_view(source, scale, flip)
                    for dy in shifts:
                        for dx in shifts:
                            h = (view.pixels.shape[1] - dy) // p * p
                            w = (view.pixels.shape[2] - dx) // p * p
                            if h < grid * p or w < grid * p:
                                continue
                            flags = view.touches if split == "train" else view.inside
                            flags = flags[dy: dy + h, dx: dx + w].float()[None, None]
                            if split == "train":
                                bad = F.max_pool2d(flags, p)[0, 0] > 0
                                ok = data.window_counts(bad, grid) == 0
                            else:
                                good = -F.max_pool2d(-flags, p)[0, 0] > 0
                                ok = data.window_counts(good, grid) == grid * grid
                            corners = ok.nonzero()
                            if corners.shape[0] == 0:
                                continue
                            codes = tokenizer.encode(view.pixels[None, :, dy: dy + h, dx: dx + w])[0]
                            entries.append((codes.to(torch.int16), corners))
            if not entries:
                raise ValueError(f"{source.name}: no {grid}x{grid} {split} window")
            self.maps.append(entries)
        self.num_classes = len(self.maps)

    @property
    def num_windows(self) -> int:
        return sum(int(c.shape[0]) for entries in self.maps for _, c in entries)

    def sample(self, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens [batch, grid*grid] int64, class indices [batch]); classes uniform, then a map
        uniform among the class's maps, then a window uniform among the map's windows."""
        classes = torch.randint(0, self.num_classes, (batch,), generator=generator)
        out = torch.empty(batch, self.grid * self.grid, dtype=torch.int64)
        for i, c in enumerate(classes.tolist()):
            entries = self.maps[c]
            codes, corners = entries[int(torch.randint(0, len(entries), (1,), generator=generator))]
            top, left = corners[int(torch.randint(0, corners.shape[0], (1,), generator=generator))].tolist()
            out[i] = codes[top: top + self.grid, left: left + self.grid].reshape(-1).long()
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


@torch.no_grad()
def teacher_forced_statistics(model, ids: torch.Tensor, layout: TokenLayout) -> dict:
    """On real windows ids [B, 1 + N]: NLL of the image tokens under the conditional model
    restricted to image codes (nats), and the top-1 probability of every position's
    distribution: its median and the share below 0.05."""
    logits = model(input_ids=ids[:, :-1]).logits[..., : layout.codebook_size].double()
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp.gather(-1, ids[:, 1:, None]).mean()
    top1 = logp.max(-1).values.exp()
    return {"nll": float(nll), "top1_median": float(top1.median()),
            "share_top1_below_5pct": float((top1 < 0.05).double().mean())}


def unigram_entropy(dataset: TokenMapDataset, generator: torch.Generator, windows: int = 2000) -> float:
    """Entropy (nats) of the code frequencies in ``windows`` sampled training windows."""
    tokens, _ = dataset.sample(windows, generator)
    counts = torch.bincount(tokens.flatten()).double()
    probs = counts[counts > 0] / counts.sum()
    return float(-(probs * probs.log()).sum())


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up to ``peak``, then cosine decay to peak / 20."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_ar(out: Path, tokenizer: PatchVQTokenizer, *, steps: int = 700, batch: int = 24,
             lr: float = 1.5e-3, seed: int = 0, class_dropout: float = 0.1,
             hidden: int = 256, layers: int = 4, heads: int = 4, intermediate: int = 704,
             bf16: bool = True, eval_every: int = 250, log=print):
    """Train and save the AR model; every ``eval_every`` steps log the loss on fixed training
    and held-out windows and the held-out teacher-forced flatness (to tell ambiguity in the
    data from ignorance of an undertrained model)."""
    out = Path(out)
    start = time.time()
    dataset = TokenMapDataset(tokenizer)
    heldout = TokenMapDataset(tokenizer, split="heldout")
    layout = TokenLayout(tokenizer.codebook_size, dataset.num_classes)
    config = llama_config(layout, hidden, layers, heads, intermediate)
    with torch.random.fork_rng():
        torch.manual_seed(seed + 200)  # parameter init only
        model = build_model(config)
    generator = torch.Generator().manual_seed(seed + 201)
    val_gen = torch.Generator().manual_seed(seed + 202)
    val_ids = make_batch(*dataset.sample(64, val_gen), layout, 0.0, val_gen)
    heldout_ids = make_batch(*heldout.sample(64, val_gen), layout, 0.0, val_gen)
    entropy = unigram_entropy(dataset, val_gen)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))
    warmup = min(100, steps // 10 + 1)
    log({"stage": "ar", "params": sum(p.numel() for p in model.parameters()),
         "train_windows": dataset.num_windows, "heldout_windows": heldout.num_windows,
         "code_unigram_entropy": round(entropy, 4), "prep_s": round(time.time() - start, 1)})
    history = []
    for step in range(steps):
        cur = lr_at(step, steps, lr, warmup)
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
        if step % 25 == 0 or step % eval_every == 0 or step == steps - 1:
            record = {"stage": "ar", "step": step, "loss": round(loss.item(), 4), "lr": round(cur, 6),
                      "elapsed_s": round(time.time() - start, 1)}
            if step % eval_every == 0 or step == steps - 1:
                model.eval()
                record["train_windows"] = teacher_forced_statistics(model, val_ids, layout)
                record["heldout_windows"] = teacher_forced_statistics(model, heldout_ids, layout)
                history.append(record)
            log(record)
    wall = round(time.time() - start, 1)
    model.eval()
    save_module(model, out / "ar_model.safetensors")
    write_json(out / "ar_config.json", {
        "llama": config.to_dict(), "layout": layout.to_dict(), "class_names": list(data.CLASS_NAMES),
        "training": {"steps": steps, "batch": batch, "lr": lr, "seed": seed,
                     "class_dropout": class_dropout, "bf16_autocast": bf16, "wall_seconds": wall,
                     "threads": torch.get_num_threads(), "eval_every": eval_every,
                     "train_windows": dataset.num_windows, "heldout_windows": heldout.num_windows,
                     "code_unigram_entropy": entropy, "final_eval": history[-1] if history else None}})
    log({"stage": "ar", "done": True, "wall_seconds": wall})
    return model, layout
