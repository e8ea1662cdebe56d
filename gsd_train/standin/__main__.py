"""``python -m gsd_train.standin train --out DIR [--steps N] ...``: reproducible training
of the stand-in."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gsd_train.standin")
    sub = parser.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="train tokenizer, classifier and AR model into --out")
    tr.add_argument("--out", type=Path, required=True)
    tr.add_argument(
        "--stages",
        default="tokenizer,decoder,classifier,ar,export",
        help="comma list of tokenizer,decoder,classifier,ar,export "
        "(later stages read earlier outputs)",
    )
    tr.add_argument("--tokenizer-iterations", type=int, default=10, help="k-means iterations")
    tr.add_argument(
        "--tokenizer-patches", type=int, default=120_000, help="k-means training patches"
    )
    tr.add_argument("--decoder-steps", type=int, default=1200, help="seam decoder training steps")
    tr.add_argument("--classifier-steps", type=int, default=500)
    tr.add_argument("--steps", type=int, default=120, help="AR training steps")
    tr.add_argument("--batch", type=int, default=16, help="AR batch size")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--threads", type=int, default=2, help="torch threads")
    tr.add_argument(
        "--eval-every", type=int, default=20, help="AR held-out evaluation interval (steps)"
    )
    tr.add_argument("--tiny", action="store_true", help="tiny model sizes (for tests)")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / "train_log.jsonl"

    def log(record: dict) -> None:
        record = {"time": time.strftime("%H:%M:%S"), **record}
        line = json.dumps(record)
        print(line, flush=True)
        with log_path.open("a") as fh:
            fh.write(line + "\n")

    from .pipeline import run_stages

    run_stages(args, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
