"""Stages of ``python -m gsd_train.standin train``; each reads the previous stages' files from
--out.

tokenizer -> tokenizer.safetensors, tokenizer_config.json (k-means patch VQ, 16 x 16 pixels)
decoder -> the same files with the seam decoder added (needs the tokenizer)
classifier -> classifier.safetensors, classifier_config.json (needs the tokenizer)
ar -> ar_model.safetensors, ar_config.json (needs the tokenizer)
export -> manifest.json, reference_outputs.json (fixed-seed generation tokens and a logits
          checksum of the stored weights, for the tests), generation_stats.json, samples.png
"""

from __future__ import annotations

from pathlib import Path

from gsd_lab.standin.tokenizer import TokenizerConfig

TINY_TOKENIZER = TokenizerConfig(patch=16, codebook_size=64)
# Unshifted class views only: encoding the shifted views was most of a tiny run's AR stage.
TINY_AR = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "shifts": ((0, 0),)}
# Encoding crops (float64 nearest codes) dominates a tiny run: few crops per class in the
# classifier's pool and in the held-out evaluations of the tokenizer and the classifier.
TINY_EVAL = {"eval_per_class": 2}
TINY_CLASSIFIER = {"width": 8, "pool": 4, **TINY_EVAL}


def run_stages(args, log) -> None:
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    known = {"tokenizer", "decoder", "classifier", "ar", "export"}
    if not set(stages) <= known:
        raise ValueError(f"unknown stages {sorted(set(stages) - known)}; known: {sorted(known)}")
    out = Path(args.out)
    if "tokenizer" in stages:
        from .train_tokenizer import train_tokenizer

        config = TINY_TOKENIZER if args.tiny else TokenizerConfig()
        train_tokenizer(
            out,
            iterations=args.tokenizer_iterations,
            max_patches=args.tokenizer_patches,
            seed=args.seed,
            config=config,
            log=log,
            **(TINY_EVAL if args.tiny else {}),
        )
    if "decoder" in stages:
        from gsd_lab.standin.loading import load_tokenizer
        from .train_tokenizer import train_decoder

        sizes = (
            {"width": 4, "steps": args.decoder_steps, "pool": 2, **TINY_EVAL}
            if args.tiny
            else {"steps": args.decoder_steps}
        )
        train_decoder(out, load_tokenizer(out), seed=args.seed, log=log, **sizes)
    if "classifier" in stages:
        from .classifier import train_classifier
        from gsd_lab.standin.loading import load_tokenizer

        train_classifier(
            out,
            load_tokenizer(out),
            steps=args.classifier_steps,
            seed=args.seed,
            log=log,
            **(TINY_CLASSIFIER if args.tiny else {"width": 32}),
        )
    if "ar" in stages:
        from .ar import train_ar
        from gsd_lab.standin.loading import load_tokenizer

        sizes = TINY_AR if args.tiny else {}
        train_ar(
            out,
            load_tokenizer(out),
            steps=args.steps,
            batch=args.batch,
            seed=args.seed,
            eval_every=args.eval_every,
            log=log,
            **sizes,
        )
    if "export" in stages:
        from .export import export

        sizes = {"num_samples": 1, "num_seeds": 1, "teacher_windows": 10} if args.tiny else {}
        export(out, seed=args.seed, log=log, **sizes)
