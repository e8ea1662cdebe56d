"""The stand-in's autoregressive model, trained: a ``transformers`` LlamaForCausalLM over
[class token] + h*w image tokens (``gsd_lab.standin.ar.TokenLayout``).

Training: next-token cross-entropy on the image positions; the class token is replaced by the
null class with probability ``class_dropout`` so that the same model gives the unconditional
distribution for CFG. ``encode_maps`` / ``TokenMapDataset`` (token windows of the training and
held-out pixels), ``teacher_forced_statistics``, ``train_ar`` (early stopping on the held-out
NLL, ``selection_key``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn import functional as F

from gsd_lab.standin import data
from gsd_lab.standin.ar import TokenLayout
from gsd_lab.standin.tokenizer import PatchVQTokenizer
from gsd_lab.standin.weights_io import save_module, write_json


def llama_config(
    layout: TokenLayout, hidden: int = 256, layers: int = 4, heads: int = 4, intermediate: int = 704
):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=layout.vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=layout.num_image_tokens + 1,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        attention_dropout=0.0,
        initializer_range=0.02,
    )


def build_model(config):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM(config)


@torch.no_grad()
def init_code_embeddings(model, codebook: torch.Tensor, std: float) -> None:
    """Start the image codes' input and output embeddings at the codebook's principal components.

    codebook [K, D] (each code's decoded patch): rows centred, projected on the top ``hidden``
    right singular vectors, scaled by one factor to entry standard deviation ``std`` over the
    whole [K, hidden] block, copied into ``embed_tokens.weight[:K]`` and ``lm_head.weight[:K]``.
    Codes whose patches are close start with close embeddings and logits (distances kept up to
    that factor in the top components), so what the model learns of one code carries to its
    neighbours (the interchangeable tokens GSD groups) instead of each code's row being learned
    from its own rare occurrences. The coordinates keep the components' uneven scales (on the
    stand-in's codebook the first holds 71 % of the variance: std 0.27 against 0.002 for the
    101st). Signs are LAPACK's. Both stay trainable; the model stays a stock Llama.
    """
    hidden = model.config.hidden_size
    centred = codebook.double() - codebook.double().mean(0)
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    if vh.shape[0] < hidden:
        raise ValueError(
            f"a codebook [K={codebook.shape[0]}, D={codebook.shape[1]}] has min(K, D) = "
            f"{vh.shape[0]} principal components, fewer than the hidden size {hidden}"
        )
    projected = centred @ vh[:hidden].T
    projected = (projected * (std / projected.std())).float()
    k = codebook.shape[0]
    model.model.embed_tokens.weight[:k] = projected
    model.lm_head.weight[:k] = projected


@dataclass(frozen=True)
class TokenMap:
    """One encoded view: codes [h, w] (int16) and, per token, whether its patch touches a
    held-out pixel (``touches``) or lies wholly inside held-out pixels (``inside``)."""

    codes: torch.Tensor
    touches: torch.Tensor
    inside: torch.Tensor


CLASS_SHIFTS: tuple[tuple[int, int], ...] = ((0, 0), (8, 8), (0, 8), (8, 0))
EXTRA_SHIFTS: tuple[tuple[int, int], ...] = ((0, 0),)


def encode_maps(
    tokenizer: PatchVQTokenizer,
    which: str = "classes",
    shifts: tuple[tuple[int, int], ...] | None = None,
) -> list[list[TokenMap]]:
    """Token maps of every source of ``data.load_sources(which)``: ``data.SCALES`` x (mirrored or
    not) x pixel shifts (dy, dx) in ``shifts`` (so token grids start at sub-token offsets too;
    default ``CLASS_SHIFTS`` for the classes, ``EXTRA_SHIFTS`` for the extras), each view
    encoded whole; one list per source."""
    if shifts is None:
        shifts = CLASS_SHIFTS if which == "classes" else EXTRA_SHIFTS
    p = tokenizer.patch
    out = []
    for source in data.load_sources(which):
        maps = []
        for scale in data.SCALES:
            for flip in (False, True):
                view = data.make_view(source, scale, flip)
                for dy, dx in shifts:
                    h = (view.pixels.shape[1] - dy) // p * p
                    w = (view.pixels.shape[2] - dx) // p * p
                    if h < p or w < p:
                        continue
                    touches = view.touches[dy : dy + h, dx : dx + w].float()[None, None]
                    inside = view.inside[dy : dy + h, dx : dx + w].float()[None, None]
                    codes = tokenizer.encode(view.pixels[None, :, dy : dy + h, dx : dx + w])[0]
                    maps.append(
                        TokenMap(
                            codes.to(torch.int16),
                            F.max_pool2d(touches, p)[0, 0] > 0,
                            -F.max_pool2d(-inside, p)[0, 0] > 0,
                        )
                    )
        out.append(maps)
    return out


class TokenMapDataset:
    """``grid`` x ``grid`` token windows of encoded maps (``encode_maps``), one group per source.

    "train": windows none of whose tokens touches a held-out pixel (every token is scored).
    "heldout": windows with at least ``min_scored`` tokens wholly inside held-out pixels; only
    those tokens are scored (``sample``'s mask): a 256-pixel window is larger than a held-out
    cell, so the context of a held-out token may hold training pixels, but no training window
    ever held a held-out pixel (``gsd_lab.standin.data``).
    Pass ``tokenizer`` (maps encoded here) or ``maps`` (already encoded, shared by both splits).
    ``like``: a dataset over the same maps whose mix of maps (scale, mirror, shift) the sampler
    follows: a map is drawn with probability proportional to its window count in ``like``
    (among the maps that have windows here), then a window uniformly in it. Held-out windows
    then come from the views the model trains on in the same proportions (without it, views
    with no training window, e.g. the smallest scales of some images, would count too).
    """

    def __init__(
        self,
        tokenizer: PatchVQTokenizer | None = None,
        grid: int = 16,
        split: str = "train",
        shifts: tuple[tuple[int, int], ...] | None = None,
        *,
        maps: list[list[TokenMap]] | None = None,
        min_scored: int = 32,
        like: "TokenMapDataset | None" = None,
    ):
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
        if maps is None:
            if tokenizer is None:
                raise ValueError("TokenMapDataset needs a tokenizer or encoded maps")
            maps = encode_maps(tokenizer, "classes", shifts)
        self.grid = grid
        self.split = split
        self.groups: list[list[tuple[TokenMap, torch.Tensor]]] = []
        self.counts: list[torch.Tensor] = []  # per group: cumulative window counts of its maps
        self.map_counts: list[dict[int, int]] = []  # per group: map index -> window count
        self.weights: list[torch.Tensor] | None = [] if like is not None else None
        for index, group in enumerate(maps):
            entries, counts = [], {}
            for number, m in enumerate(group):
                if m.codes.shape[0] < grid or m.codes.shape[1] < grid:
                    continue
                if split == "train":
                    ok = data.window_counts(m.touches, grid) == 0
                else:
                    ok = data.window_counts(m.inside, grid) >= min_scored
                corners = ok.nonzero()
                if corners.shape[0]:
                    entries.append((m, corners))
                    counts[number] = int(corners.shape[0])
            if like is not None:
                weights = torch.tensor([float(like.map_counts[index].get(n, 0)) for n in counts])
                keep = weights > 0
                entries = [e for e, k in zip(entries, keep.tolist()) if k]
                counts = {n: c for (n, c), k in zip(counts.items(), keep.tolist()) if k}
                self.weights.append(weights[keep])
            if not entries:
                raise ValueError(f"source {index}: no {grid}x{grid} {split} window")
            self.groups.append(entries)
            self.map_counts.append(counts)
            self.counts.append(torch.tensor([c.shape[0] for _, c in entries]).cumsum(0))
        self.num_classes = len(self.groups)

    @property
    def num_windows(self) -> int:
        return sum(int(c[-1]) for c in self.counts)

    def sample_with_mask(
        self, batch: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(tokens [batch, grid*grid] int64, group indices [batch], scored [batch, grid*grid]
        bool); groups uniform, then a window uniform among all the group's windows (or a map
        by the ``like`` weights, then a window uniform in it)."""
        groups = torch.randint(0, self.num_classes, (batch,), generator=generator)
        out = torch.empty(batch, self.grid * self.grid, dtype=torch.int64)
        scored = torch.ones(batch, self.grid * self.grid, dtype=torch.bool)
        g = self.grid
        for i, c in enumerate(groups.tolist()):
            if self.weights is not None:
                j = int(torch.multinomial(self.weights[c], 1, generator=generator))
                m, corners = self.groups[c][j]
                top, left = corners[
                    int(torch.randint(0, corners.shape[0], (1,), generator=generator))
                ].tolist()
            else:
                counts = self.counts[c]
                pick = int(torch.randint(0, int(counts[-1]), (1,), generator=generator))
                j = int(torch.searchsorted(counts, torch.tensor(pick), right=True))
                m, corners = self.groups[c][j]
                top, left = corners[pick - (int(counts[j - 1]) if j else 0)].tolist()
            out[i] = m.codes[top : top + g, left : left + g].reshape(-1).long()
            if self.split == "heldout":
                scored[i] = m.inside[top : top + g, left : left + g].reshape(-1)
        return out, groups, scored

    def sample(self, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens [batch, grid*grid] int64, group (class) indices [batch]); see
        ``sample_with_mask``."""
        tokens, groups, _ = self.sample_with_mask(batch, generator)
        return tokens, groups


def make_batch(
    tokens: torch.Tensor,
    classes: torch.Tensor,
    layout: TokenLayout,
    class_dropout: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """[batch, 1 + grid*grid] input ids: class (or null with prob. class_dropout) + codes."""
    drop = torch.rand(classes.shape[0], generator=generator) < class_dropout
    cls = torch.where(drop, layout.null_class_id, classes + layout.codebook_size)
    return torch.cat([cls[:, None], tokens], dim=1)


def image_token_loss(model, ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) of the image tokens ids[:, 1:] given their prefix."""
    logits = model(input_ids=ids[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))


@torch.no_grad()
def teacher_forced_statistics(
    model, ids: torch.Tensor, layout: TokenLayout, scored: torch.Tensor | None = None
) -> dict:
    """On real windows ids [B, 1 + N]: NLL of the image tokens under the conditional model
    restricted to image codes (nats), and the top-1 probability of every position's
    distribution: its median and the share below 0.05; over the positions ``scored`` [B, N]
    (default: all)."""
    logits = model(input_ids=ids[:, :-1]).logits[..., : layout.codebook_size].double()
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp.gather(-1, ids[:, 1:, None])[..., 0]
    top1 = logp.max(-1).values.exp()
    if scored is not None:
        nll, top1 = nll[scored], top1[scored]
    return {
        "nll": float(nll.mean()),
        "top1_median": float(top1.median()),
        "share_top1_below_5pct": float((top1 < 0.05).double().mean()),
        "tokens": int(nll.numel()),
    }


def unigram_entropy(
    dataset: TokenMapDataset, generator: torch.Generator, windows: int = 2000
) -> float:
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


def selection_key(
    step: int, train_nll: float, heldout_nll: float, max_gap: float | None, warmup: int
) -> tuple[int, float] | None:
    """The early-stopping rank of one evaluation (smaller is better), None for one not ranked.

    Evaluations before the end of warm-up (step < ``warmup``) are not ranked: an untrained
    model's gap is about 0. Within the gap (held-out - training NLL <= ``max_gap``; None: any)
    the rank is (0, held-out NLL); outside it, (1, gap): the smallest gap when none is within."""
    if step < warmup:
        return None
    gap = heldout_nll - train_nll
    return (0, heldout_nll) if max_gap is None or gap <= max_gap else (1, gap)


@dataclass(frozen=True)
class _Probe:
    """The fixed windows every evaluation scores: training windows ``train_ids`` and held-out
    windows ``heldout_ids`` (scored where ``heldout_scored``), drawn once by their own
    generator (seed + 202), which then measures the codes' unigram ``entropy``."""

    train_ids: torch.Tensor
    heldout_ids: torch.Tensor
    heldout_scored: torch.Tensor
    entropy: float

    @classmethod
    def draw(
        cls, dataset: TokenMapDataset, heldout: TokenMapDataset, layout: TokenLayout,
        windows: int, seed: int,
    ) -> "_Probe":
        gen = torch.Generator().manual_seed(seed + 202)
        train_ids = make_batch(*dataset.sample(windows, gen), layout, 0.0, gen)
        tokens, classes, scored = heldout.sample_with_mask(windows, gen)
        heldout_ids = make_batch(tokens, classes, layout, 0.0, gen)
        return cls(train_ids, heldout_ids, scored, unigram_entropy(dataset, gen))

    def evaluate(self, model, layout: TokenLayout) -> dict:
        model.eval()
        parts = {
            "train_windows": teacher_forced_statistics(model, self.train_ids, layout),
            "heldout_windows": teacher_forced_statistics(
                model, self.heldout_ids, layout, self.heldout_scored
            ),
        }
        model.train()
        return parts


def _initial_model(config, tokenizer: PatchVQTokenizer, seed: int, codebook_init: bool):
    """The untrained model: parameters from seed + 200 (the global RNG restored after)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed + 200)  # parameter init only
        model = build_model(config)
    if codebook_init:
        init_code_embeddings(model, tokenizer.codebook, config.initializer_range)
    return model


def _optimizer(model, lr: float) -> torch.optim.AdamW:
    """AdamW, weight decay 0.05 on the matrices, none on the vectors."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.9, 0.95),
    )


def _training_batch(
    dataset: TokenMapDataset, uncond: TokenMapDataset | None, batch: int, n_uncond: int,
    layout: TokenLayout, class_dropout: float, generator: torch.Generator,
) -> torch.Tensor:
    """One batch of input ids: batch - n_uncond class windows, then n_uncond extra windows with
    the null class."""
    ids = make_batch(*dataset.sample(batch - n_uncond, generator), layout, class_dropout, generator)
    if n_uncond:
        tokens, _ = uncond.sample(n_uncond, generator)
        null = torch.full((n_uncond, 1), layout.null_class_id, dtype=torch.int64)
        ids = torch.cat([ids, torch.cat([null, tokens], dim=1)])
    return ids


def _step(model, opt: torch.optim.Optimizer, ids: torch.Tensor, bf16: bool) -> torch.Tensor:
    """One optimiser step on ``ids`` (gradients clipped to norm 1); the loss before it."""
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = image_token_loss(model, ids)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


def _restore_best(model, history: list[dict], best: tuple | None, max_gap, log) -> dict | None:
    """Load the selected evaluation's parameters (``best``: (key, step, state)) into ``model``
    and return its record; the last record when none was selected."""
    if best is None:
        return history[-1] if history else None
    model.load_state_dict(best[2])
    if best[0][0] == 1:
        log(
            {
                "stage": "ar",
                "warning": f"no evaluation after warm-up had a gap <= {max_gap} nats; "
                f"saved step {best[1]}, the smallest gap",
            }
        )
    return next(r for r in history if r["step"] == best[1])


def _train_loop(
    model, opt, probe: "_Probe", layout: TokenLayout, sources: tuple, *, steps: int, batch: int,
    lr: float, warmup: int, class_dropout: float, bf16: bool, eval_every: int, keep_best: bool,
    max_gap: float | None, generator: torch.Generator, start: float, log,
) -> tuple[list[dict], tuple | None]:
    """The optimiser steps of ``train_ar``: (the evaluation records, the selected evaluation
    (key, step, state) or None). ``sources``: (class windows, extra windows or None, how many
    extra windows a batch holds)."""
    dataset, uncond, n_uncond = sources
    history, best = [], None
    for step in range(steps):
        cur = lr_at(step, steps, lr, warmup)
        for group in opt.param_groups:
            group["lr"] = cur
        ids = _training_batch(dataset, uncond, batch, n_uncond, layout, class_dropout, generator)
        loss = _step(model, opt, ids, bf16)
        evaluates = step % eval_every == 0 or step == steps - 1
        if step % 25 == 0 or evaluates:
            record = {
                "stage": "ar",
                "step": step,
                "loss": round(loss.item(), 4),
                "lr": round(cur, 6),
                "elapsed_s": round(time.time() - start, 1),
            }
            if evaluates:
                record.update(probe.evaluate(model, layout))
                history.append(record)
                nll, train_nll = record["heldout_windows"]["nll"], record["train_windows"]["nll"]
                record["gap_nats"] = round(nll - train_nll, 4)
                key = selection_key(step, train_nll, nll, max_gap, warmup)
                if keep_best and key is not None and (best is None or key < best[0]):
                    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                    best = (key, step, state)
            log(record)
    return history, best


def train_ar(
    out: Path,
    tokenizer: PatchVQTokenizer,
    *,
    steps: int = 120,
    batch: int = 16,
    lr: float = 1.5e-3,
    seed: int = 0,
    class_dropout: float = 0.1,
    uncond_fraction: float = 0.25,
    hidden: int = 256,
    layers: int = 4,
    heads: int = 4,
    intermediate: int = 704,
    bf16: bool = False,
    eval_every: int = 20,
    eval_windows: int = 128,
    keep_best: bool = True,
    max_gap: float | None = 0.9,
    codebook_init: bool = True,
    shifts: tuple[tuple[int, int], ...] = CLASS_SHIFTS,
    log=print,
):
    """Train and save the AR model; every ``eval_every`` steps log the loss on fixed training
    and held-out windows and the held-out teacher-forced flatness (to tell ambiguity in the
    data from ignorance of an undertrained model).

    A batch: ``uncond_fraction`` of its windows come from the extra (tokenizer) sources with the
    null class, the rest from the classes (class dropped to null with prob. ``class_dropout``).
    ``keep_best``: save the parameters of the evaluation with the lowest held-out NLL (early
    stopping on the held-out tokens, which no training window contains) among those after
    warm-up whose generalisation gap (held-out minus training NLL) is at most ``max_gap`` nats
    (None: any); when none is, the smallest gap (``selection_key``); when no evaluation comes
    after warm-up, the last. ``codebook_init``: see ``init_code_embeddings``. ``shifts``: the
    class views' pixel shifts (``encode_maps``)."""
    out = Path(out)
    start = time.time()
    maps = encode_maps(tokenizer, "classes", shifts)
    dataset = TokenMapDataset(maps=maps)
    heldout = TokenMapDataset(maps=maps, split="heldout", like=dataset)
    uncond = TokenMapDataset(maps=encode_maps(tokenizer, "extra")) if uncond_fraction > 0 else None
    n_uncond = round(batch * uncond_fraction) if uncond is not None else 0
    layout = TokenLayout(tokenizer.codebook_size, dataset.num_classes)
    config = llama_config(layout, hidden, layers, heads, intermediate)
    model = _initial_model(config, tokenizer, seed, codebook_init)
    generator = torch.Generator().manual_seed(seed + 201)
    probe = _Probe.draw(dataset, heldout, layout, eval_windows, seed)
    opt = _optimizer(model, lr)
    warmup = min(100, steps // 10 + 1)
    log(
        {
            "stage": "ar",
            "params": sum(p.numel() for p in model.parameters()),
            "train_windows": dataset.num_windows,
            "heldout_windows": heldout.num_windows,
            "uncond_windows": uncond.num_windows if uncond is not None else 0,
            "code_unigram_entropy": round(probe.entropy, 4),
            "prep_s": round(time.time() - start, 1),
        }
    )
    history, best = _train_loop(
        model, opt, probe, layout, (dataset, uncond, n_uncond), steps=steps, batch=batch,
        lr=lr, warmup=warmup, class_dropout=class_dropout, bf16=bf16, eval_every=eval_every,
        keep_best=keep_best, max_gap=max_gap, generator=generator, start=start, log=log,
    )
    wall = round(time.time() - start, 1)
    final = _restore_best(model, history, best if keep_best else None, max_gap, log)
    model.eval()
    save_module(model, out / "ar_model.safetensors")
    saved_step = final["step"] if final else None
    training = {
        "steps": steps, "batch": batch, "lr": lr, "seed": seed, "class_dropout": class_dropout,
        "uncond_fraction": uncond_fraction, "bf16_autocast": bf16, "wall_seconds": wall,
        "threads": torch.get_num_threads(), "eval_every": eval_every,
        "eval_windows": eval_windows, "keep_best": keep_best, "max_gap": max_gap,
        "codebook_init": codebook_init, "class_shifts": [list(x) for x in shifts],
        "saved_step": saved_step, "train_windows": dataset.num_windows,
        "heldout_windows": heldout.num_windows, "code_unigram_entropy": probe.entropy,
        "final_eval": final,
    }
    write_ar_config(out, config, layout, training, data.CLASS_NAMES)
    log({"stage": "ar", "done": True, "wall_seconds": wall, "saved_step": saved_step})
    return model, layout


def write_ar_config(
    out: Path, config, layout: TokenLayout, training: dict, class_names
) -> None:
    """``ar_config.json``: the Llama config, token layout, class names and training record."""
    write_json(
        out / "ar_config.json",
        {
            "llama": config.to_dict(),
            "layout": layout.to_dict(),
            "class_names": list(class_names),
            "training": training,
        },
    )
