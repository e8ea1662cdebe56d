"""Export stage of the digits model: data manifest, reference outputs of the stored weights (for
the tests), generation statistics (flatness, classifier accuracy, log-probability of the
prompted digit, KID against held-out digits, with real-data baselines) and a sample grid.
Everything is computed from the files in ``out``; the AR model runs in float64.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from gsd_lab.digits import data
from gsd_lab.digits.adapter import DEFAULT_CFG_SCALE, DEFAULT_TOP_K
from gsd_lab.digits.quality import features, kid, prompted_scores
from gsd_lab.standin.data import to_uint8
from gsd_lab.standin.loading import load_ar_model, load_classifier, load_tokenizer
from gsd_lab.standin.sampling import logits_checksum, sample_tokens
from gsd_lab.standin.weights_io import read_json, write_json

from ..standin.export import distance_quantiles, flatness, save_grid

REFERENCE_CLASS = 7
REFERENCE_SEED = 0


@torch.no_grad()
def reference_outputs(directory: Path) -> dict:
    """Fixed-seed generation (digit 7, the adapter's defaults, seed 0) through the reference
    sampler and through ``gsd_lab.decode.loop.generate`` (AR, eager runner, the float64
    ``LlamaForward``), with checksums of logits, decoded pixels and classifier logits."""
    from gsd_lab.decode.loop import generate
    from gsd_lab.decode.methods import DecodingMethod
    from gsd_lab.digits.adapter import load_digits

    model, layout, _ = load_ar_model(directory, dtype=torch.float64)
    tokenizer, classifier = load_tokenizer(directory), load_classifier(directory)
    tokens, top1 = sample_tokens(
        model, layout, torch.tensor([REFERENCE_CLASS]), cfg_scale=DEFAULT_CFG_SCALE,
        top_k=DEFAULT_TOP_K, generator=torch.Generator().manual_seed(REFERENCE_SEED),
    )
    image = tokenizer.decode(tokens.view(1, layout.grid, layout.grid))
    adapter = load_digits(weights_dir=directory, fast_forward=True)
    result = generate(
        adapter, adapter.prompt_ids(REFERENCE_CLASS), DecodingMethod("ar"),
        num_tokens=layout.num_image_tokens,
        generator=torch.Generator().manual_seed(REFERENCE_SEED),
        uncond_prompt_ids=adapter.uncond_prompt_ids(),
    )
    return {
        "class_index": REFERENCE_CLASS,
        "seed": REFERENCE_SEED,
        "cfg_scale": DEFAULT_CFG_SCALE,
        "top_k": DEFAULT_TOP_K,
        "temperature": 1.0,
        "model_dtype": "float64",
        "sampler": "gsd_lab.standin.sampling.sample_tokens",
        "tokens": tokens[0].tolist(),
        "top1_mean": float(top1.mean()),
        "generate_ar_tokens": result.tokens.tolist(),
        "logits_checksum": logits_checksum(model, layout, REFERENCE_CLASS, tokens[0, :-1]),
        "decoded_pixel_sum": float(image.double().sum()),
        "classifier_logits": [float(v) for v in classifier(image)[0].double()],
    }


def scored(classifier, images: torch.Tensor, prompted: torch.Tensor, real_features) -> dict:
    """Accuracy, mean log p(prompted digit), KID vs ``real_features``, for one image set."""
    logp, correct = prompted_scores(classifier, images, prompted)
    return {
        "images": int(images.shape[0]),
        "accuracy": float(correct.double().mean()),
        "logp_prompted_mean": float(logp.mean()),
        "kid_vs_heldout": kid(features(classifier, images), real_features),
    }


@torch.no_grad()
def generation_statistics(
    directory: Path,
    per_class: int,
    seeds: tuple[int, ...],
    cfg_scale: float | None,
    top_k: int | None = DEFAULT_TOP_K,
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """``per_class`` samples per digit for every seed (one batch per seed, one generator seeded
    with the seed): flatness and the quality measure. Returns (stats, images, prompted)."""
    model, layout, _ = load_ar_model(directory, dtype=torch.float64)
    tokenizer, classifier = load_tokenizer(directory), load_classifier(directory)
    real_features = features(classifier, data.digits("heldout")[0])
    start = time.time()
    all_tokens, all_top1, all_classes = [], [], []
    for seed in seeds:
        classes = torch.arange(layout.num_classes).repeat_interleave(per_class)
        tokens, top1 = sample_tokens(
            model, layout, classes, cfg_scale=cfg_scale, top_k=top_k,
            generator=torch.Generator().manual_seed(seed),
        )
        all_tokens.append(tokens), all_top1.append(top1), all_classes.append(classes)
    tokens, top1, classes = torch.cat(all_tokens), torch.cat(all_top1), torch.cat(all_classes)
    images = tokenizer.decode(tokens.view(-1, layout.grid, layout.grid))
    _, correct = prompted_scores(classifier, images, classes)
    stats = {
        "cfg_scale": cfg_scale,
        "top_k": top_k,
        "temperature": 1.0,
        "seeds": list(seeds),
        "per_class_per_seed": per_class,
        **flatness(top1),
        **scored(classifier, images, classes, real_features),
        "accuracy_per_digit": {
            name: float(correct[classes == c].double().mean())
            for c, name in enumerate(data.CLASS_NAMES)
        },
        "distinct_codes_generated": int(torch.unique(tokens).numel()),
        "sampling_seconds": round(time.time() - start, 1),
    }
    return stats, images, classes


def export(
    out: Path, *, seed: int = 0, num_samples: int = 10, num_seeds: int = 3, log=print
) -> dict:
    """Write the manifest, reference outputs, statistics and sample grid for the files in
    ``out``; generation: ``num_samples`` images per digit for each of ``num_seeds`` seeds."""
    out = Path(out)
    tok_cfg = read_json(out / "tokenizer_config.json")
    cls_cfg = read_json(out / "classifier_config.json")
    ar_cfg = read_json(out / "ar_config.json")
    manifest = data.manifest(
        tokenizer_training={k: tok_cfg["metrics"][k] for k in
                            ("iterations", "training_patches", "max_shift", "seed")},
        classifier_training={k: cls_cfg["metrics"][k] for k in
                             ("steps", "batch", "lr", "max_shift", "seed")},
        ar_training={k: v for k, v in ar_cfg["training"].items()
                     if k not in ("curve", "final_eval")},
        heldout_eval_sets={
            "tokenizer": "all held-out digits",
            "classifier": "all held-out digits",
            "ar": "teacher-forced NLL of all held-out digits (unshifted, conditional)",
        },
        seeds={"global": seed},
    )
    write_json(out / "manifest.json", manifest)
    write_json(out / "manifest.json", {**manifest, "distance_quantiles": distance_quantiles(out)})
    reference = reference_outputs(out)
    write_json(out / "reference_outputs.json", reference)
    log({"stage": "export", "reference_tokens_head": reference["tokens"][:8]})

    classifier, tokenizer = load_classifier(out), load_tokenizer(out)
    real, real_labels = data.digits("heldout")
    train_real, train_labels = data.digits("train")
    real_features = features(classifier, real)
    recon = tokenizer.decode(tokenizer.encode(real))
    pick = torch.randperm(train_real.shape[0], generator=torch.Generator().manual_seed(seed + 300))
    pick = pick[: real.shape[0]]
    baselines = {
        "heldout_real": scored(classifier, real, real_labels, real_features),
        "heldout_reconstructed": scored(classifier, recon, real_labels, real_features),
        "train_real_sample": scored(classifier, train_real[pick], train_labels[pick],
                                    real_features),
    }
    baselines["heldout_real"]["kid_vs_heldout"] = None  # the reference itself
    log({"stage": "export", "baselines": baselines})
    stats = {"baselines": baselines, "generation": []}
    for cfg_scale in (DEFAULT_CFG_SCALE, None):
        seeds = tuple(seed + 400 + i for i in range(num_seeds))
        s, images, classes = generation_statistics(out, num_samples, seeds, cfg_scale)
        stats["generation"].append(s)
        log({"stage": "export", "generation": s})
        if cfg_scale == DEFAULT_CFG_SCALE:
            grid_images, grid_classes = images, classes
    rows = []
    for c in range(data.NUM_CLASSES):
        rows.append(real[real_labels == c][:1])
        rows.append(grid_images[grid_classes == c][:9])
    save_grid(to_uint8(torch.cat(rows)), data.NUM_CLASSES, out / "samples.png", scale=3)
    write_json(out / "generation_stats.json", stats)
    return stats
