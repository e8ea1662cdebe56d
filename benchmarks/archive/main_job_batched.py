"""The main job's decoding (``python -m gsd_lab figures``) at the old CPU default against the new,
side by side: (batch 1, 1 thread) against (batch B, all cores), and the two mixed cells.

Workload: a figures-like ``RunCache`` on the embedded stand-in (float64, CPU): the figures run's
configurations (``gsd_lab.paper.decoding_configurations(FigureSizes.default())``, the guided
ones; ``--configs`` picks them by label, default AR, SJD, GSD (G=25), Amplify (k=2): the main
kinds of window, the 30 configurations of the full run are mostly SJD / GSD variants) on the
first ``--prompts`` prompts (the figures run: 10), seed 0, the exact TV and W1 recorded as in
figures (``record_top1=False``: the tables' images). Each cell builds a fresh ``RunCache``,
``prefetch``es every configuration (batch > 1: one batch stream per configuration, as figures
does) and reads their ``records``.

Printed per cell: total seconds (prefetch + records), decode = the sum of the images'
``wall_seconds`` (accounting excluded), acct = the sum of their ``accounting_seconds`` (exact TV
and W1, per image, not batched), the rest (image decode from tokens, method resolution, Python);
then the ratios of the new default over the old, and whether every image's tokens and NFE are
those of the first cell. Per configuration: the wall speed-up over AR in each cell, the column the
figures' Table 1 reports (at batch B each image's wall is its share of its configuration's
batched forwards). ``--mixed`` adds a cell with every configuration in one stream
(``RunCache(mix_configurations=True)``). Cells run in one process, one after another, so load
from other jobs on shared cores moves the numbers: note the load average, and set
``OMP_WAIT_POLICY`` to compare thread pools: with OpenMP's default (threads spin while waiting,
as the CLI leaves it) the 2-thread cells ran 4.5x slower than one thread on cores shared with
other jobs; ``PASSIVE`` (idle threads sleep) avoids that but costs ~15% on quiet cores.

Measured 2026-12-01 (40 images, batch 8, 2 shared cores, load 1.1-3; saved in
``benchmarks/results/main_job_batched_standin.txt``): total 143.8 s -> 75.9 s (1.90x; target
1.4x), decode (sum of wall_seconds) 103.5 s -> 41.1 s (2.52x; target 1.8x), accounting 38.5 s ->
33.8 s; every image's tokens and NFE identical in all five cells. Batch 8 on one thread did as
well (77.4 s): on these loaded cores the gain is the batching of each configuration on its own
(AR's 1-token forwards; no image padded to a neighbour's 17-token window), the second thread
adds little; batch 1 on 2 threads: 124.3 s; the mixed stream: 85.2 s (decode 47.1 s). With
threads spinning (the default OMP_WAIT_POLICY) and load 3-5, the new default took 701 s
against the old's 155 s. A second run (old and new only, load 1.6-2.6): total 124.8 s -> 77.7 s
(1.60x), decode 84.2 s -> 42.0 s (2.01x), tokens and NFE identical. The wall speed-up over AR at batch 8 is a throughput ratio: SJD 0.90x,
GSD (G=25) 0.74x, Amplify 1.05x (batch 1: 2.50x, 2.75x, 3.20x).

    PYTHONPATH=. python benchmarks/archive/main_job_batched.py [--prompts 10] [--batch 8] [--threads N]
        [--configs "AR,SJD,GSD (G=25),Amplify (k=2)"] [--mixed] [--cells old,new,b1-all,bB-1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

import torch

from gsd_lab.experiments.image_model import load_image_model
from gsd_lab.experiments.runs import Recording, RunCache
from gsd_lab.paper import FigureSizes, decoding_configurations

DEFAULT_CONFIGS = "AR,SJD,GSD (G=25),Amplify (k=2)"


def figure_specs(model, configs: str) -> tuple[list[str], list]:
    """(labels, specs) of the figures' guided configurations named in ``configs`` (comma-separated
    labels, as ``decoding_configurations(FigureSizes.default())`` names them)."""
    by_label = {
        c.spec.label: c.spec
        for c in decoding_configurations(FigureSizes.default(), model)
        if c.guided
    }
    labels = [label.strip() for label in configs.split(",")]
    unknown = [label for label in labels if label not in by_label]
    if unknown:
        raise SystemExit(f"unknown configurations {unknown}; known: {sorted(by_label)}")
    return labels, [by_label[label] for label in labels]


def short_commit() -> str:
    """This checkout's commit, short."""
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        check=False,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent,
    ).stdout.strip()


def run_cell(model, specs, prompts, batch: int, threads: int, mixed: bool) -> dict:
    torch.set_num_threads(threads)
    cache = RunCache(
        model, prompts, [0], recording=Recording(distortion=True, w1=None, batch_size=batch),
        mix_configurations=mixed
    )
    began = time.perf_counter()
    cache.prefetch(specs)
    records = {spec.label: cache.records(spec) for spec in specs}
    total = time.perf_counter() - began
    flat = [r for label in records for r in records[label]]
    wall = {label: sum(r.wall_seconds for r in rs) / len(rs) for label, rs in records.items()}
    return {
        "total": total,
        "decode": sum(r.wall_seconds for r in flat),
        "acct": sum(r.accounting_seconds for r in flat),
        "model": sum(r.model_seconds for r in flat),
        "identity": [(r.tokens.tolist(), r.nfe) for r in flat],
        "distortion": [r.distortion for r in flat],
        "wall": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="the new cells' threads (default: every usable CPU)")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="comma-separated labels")
    parser.add_argument("--mixed", action="store_true", help="add a mixed-stream cell")
    parser.add_argument("--cells", default="old,new,b1-all,bB-1")
    args = parser.parse_args()
    model = load_image_model("standin")
    prompts = list(model.default_prompts[: args.prompts])
    labels, specs = figure_specs(model, args.configs)
    B, N = args.batch, args.threads
    table = {
        "old": (1, 1, False),
        "new": (B, N, False),
        "b1-all": (1, N, False),
        "bB-1": (B, 1, False),
    }
    cells = [c.strip() for c in args.cells.split(",")] + (["mixed"] if args.mixed else [])
    table["mixed"] = (B, N, True)
    if set(cells) - set(table) or "AR" not in labels:
        raise SystemExit(
            f"--cells must be among {sorted(table)} (got {cells}) and --configs must include AR, "
            "the wall speed-ups' baseline"
        )
    commit = short_commit()
    print(
        f"# commit {commit}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.2f}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}"
    )
    print(
        f"stand-in figures workload: {len(specs)} configurations {labels} x {len(prompts)} "
        f"prompts x seed 0 = {len(specs) * len(prompts)} images, exact TV and W1 recorded"
    )
    header = (
        f"{'cell':<8} {'batch':>5} {'threads':>7} {'total s':>8} {'decode s':>9} "
        f"{'model s':>8} {'acct s':>7} {'other s':>8} {'same':>5}  load"
    )
    print(header)
    results = {}
    for cell in cells:
        batch, threads, mixed = table[cell]
        out = results[cell] = run_cell(model, specs, prompts, batch, threads, mixed)
        same = out["identity"] == results[cells[0]]["identity"]
        dist = max(
            abs((a or 0.0) - (b or 0.0))
            for a, b in zip(out["distortion"], results[cells[0]]["distortion"])
        )
        other = out["total"] - out["decode"] - out["acct"]
        print(
            f"{cell:<8} {batch:>5} {threads:>7} {out['total']:>8.1f} {out['decode']:>9.1f} "
            f"{out['model']:>8.1f} {out['acct']:>7.1f} {other:>8.1f} {same!s:>5}  "
            f"{os.getloadavg()[0]:.2f}  (max |distortion diff| {dist:.1e})",
            flush=True,
        )
    if "old" in results and "new" in results:
        old, new = results["old"], results["new"]
        print(
            f"new default over old: total {old['total'] / new['total']:.2f}x (target 1.4x), "
            f"decode {old['decode'] / new['decode']:.2f}x (target 1.8x), "
            f"acct {old['acct'] / new['acct']:.2f}x"
        )
    print("wall speed-up over AR (the Table 1 column), per cell:")
    print(f"{'configuration':<20} " + " ".join(f"{c:>8}" for c in cells))
    for label in labels:
        row = [results[c]["wall"]["AR"] / results[c]["wall"][label] for c in cells]
        print(f"{label:<20} " + " ".join(f"{v:>7.2f}x" for v in row))


if __name__ == "__main__":
    main()
