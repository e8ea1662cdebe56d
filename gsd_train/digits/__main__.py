"""``python -m gsd_train.digits train --out DIR [--stages ...]``: reproducible training of the
digits model (stages in order; each reads the previous stages' files from --out)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gsd_train.digits")
    sub = parser.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="train tokenizer, classifier and AR model into --out")
    tr.add_argument("--out", type=Path, required=True)
    tr.add_argument("--stages", default="tokenizer,classifier,ar,export")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--threads", type=int, default=1, help="torch threads")
    tr.add_argument("--hidden", type=int, default=128)
    tr.add_argument("--layers", type=int, default=3)
    tr.add_argument("--intermediate", type=int, default=320)
    tr.add_argument("--max-epochs", type=int, default=8, help="AR epoch cap")
    tr.add_argument("--patience", type=int, default=2, help="AR evaluations without improvement")
    tr.add_argument(
        "--deadline", default=None, help="AR wall-clock stop, UTC ISO time (e.g. 2026-12-07T02:03)"
    )
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / "train_log.jsonl"

    def log(record: dict) -> None:
        line = json.dumps({"time": time.strftime("%H:%M:%S"), **record})
        print(line, flush=True)
        with log_path.open("a") as fh:
            fh.write(line + "\n")

    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    known = ["tokenizer", "classifier", "ar", "export"]
    if not set(stages) <= set(known):
        raise ValueError(f"unknown stages {sorted(set(stages) - set(known))}; known: {known}")
    from . import train
    from gsd_lab.standin.loading import load_tokenizer

    if "tokenizer" in stages:
        train.train_tokenizer(args.out, seed=args.seed, log=log)
    if "classifier" in stages:
        train.train_classifier(args.out, seed=args.seed, log=log)
    if "ar" in stages:
        deadline = None
        if args.deadline:
            stamp = datetime.fromisoformat(args.deadline).replace(tzinfo=timezone.utc)
            deadline = stamp.timestamp()
        train.train_ar(
            args.out,
            load_tokenizer(args.out),
            hidden=args.hidden,
            layers=args.layers,
            intermediate=args.intermediate,
            max_epochs=args.max_epochs,
            patience=args.patience,
            deadline=deadline,
            seed=args.seed,
            log=log,
        )
    if "export" in stages:
        from .export import export

        export(args.out, seed=args.seed, log=log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
