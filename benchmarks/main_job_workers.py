"""The main job's decoding at the old CPU default against the new, alone and beside a competing
CPU-bound process, side by side in one run.

Cells (each a fresh ``RunCache`` that ``prefetch``es every configuration, then reads its records):

- ``old``: the previous default, one process, batch B, torch's intra-op threads on every usable
  core (``--threads``), ``workers=1``;
- ``new``: the new default, ``--workers`` processes (default: the usable cores) with one intra-op
  thread each, batch B (``gsd_lab.workers``);

each run ``alone`` and ``loaded``: beside a competing process this script starts (a float64
matmul loop on ``--load-threads`` threads, default 2, stopped when the cell ends), on the same
cores. Workload: the figures' guided configurations named by ``--configs`` (default AR, SJD,
GSD (G=25), Amplify (k=2)) on the first ``--prompts`` prompts of the stand-in, seed 0, the
exact TV and W1 recorded as in figures. Cells are interleaved ``--repeats`` times (old alone,
new alone, old loaded, new loaded, ...) so that other jobs' load falls on both alike; the load
average is printed per cell.

Printed per cell: total seconds, decode (sum of the images' ``wall_seconds``; with workers the
sum over processes), acct (sum of ``accounting_seconds``), images per second, whether every
image's tokens, NFE, TV and W1 are those of the first cell (bit for bit); then per repeat the
ratios new / old and loaded / alone.

Accounting, old against new: ``--w1-rows`` W1 rows of one stand-in image's decode solved with the
content check per row (before) and with it cached (``transport._check_content``), interleaved.

    PYTHONPATH=. python benchmarks/main_job_workers.py [--prompts 4] [--batch 8] [--repeats 1]
        [--workers N] [--threads N] [--load-threads 2] [--configs ...] [--w1-rows 8]
        [--json benchmarks/results/main_job_workers_standin.json]

``--json PATH`` also writes what it printed as JSON (``sidecar``), the file docs/benchmarks.md's
section "The main job on quiet cores" renders its numbers from.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

from gsd_lab.accounting import transport
from gsd_lab.experiments.image_model import load_image_model
from gsd_lab.experiments.runs import Recording, RunCache
from gsd_lab.workers import usable_cores
from gsd_lab.paper import guided_specs
from gsd_lab.io.provenance import git_commit

DEFAULT_CONFIGS = "AR,SJD,GSD (G=25),Amplify (k=2)"
LOAD = (
    "import time, torch\n"
    "torch.set_num_threads({threads})\n"
    "a = torch.randn(384, 384, dtype=torch.float64)\n"
    "end = time.time() + {seconds}\n"
    "while time.time() < end:\n"
    "    a = torch.tanh(a @ a)\n"
)


def start_load(threads: int, seconds: float) -> subprocess.Popen:
    """The competing process: a float64 matmul loop on ``threads`` threads, ``seconds`` at most."""
    return subprocess.Popen(
        [sys.executable, "-c", LOAD.format(threads=threads, seconds=seconds)],
        env={**os.environ, "OMP_NUM_THREADS": str(threads)},
    )


def run_cell(model, specs, prompts, batch: int, threads: int, workers: int) -> dict:
    torch.set_num_threads(threads)
    cache = RunCache(model, prompts, [0], recording=Recording(distortion=True, w1=None, batch_size=batch),
                     workers=workers)
    began = time.perf_counter()
    cache.prefetch(specs)
    flat = [r for spec in specs for r in cache.records(spec)]
    total = time.perf_counter() - began
    return {
        "total": total,
        "decode": sum(r.wall_seconds for r in flat),
        "acct": sum(r.accounting_seconds for r in flat),
        "images": len(flat),
        "identity": [(r.tokens.tolist(), r.nfe, r.distortion, r.w1) for r in flat],
    }


def w1_rows(model, rows: int) -> tuple[float, float, bool]:
    """Seconds to solve ``rows`` W1 rows (random laws on 2000 codes, the stand-in's top-k, under
    Amplify k = 2) with the content check per row (as before) and cached, interleaved row by
    row; and whether the values agree bit for bit."""
    from gsd_lab.accounting.transport import w1_distortion
    from gsd_lab.decode.methods import DecodingMethod, AmplifyAcceptance

    adapter = model.adapter
    content, tokens = adapter.code_content(), adapter.allowed_tokens
    rule = DecodingMethod("sjd", acceptance=AmplifyAcceptance(scale=2.0)).resolve(adapter, model_name=model.name).rule
    g = torch.Generator().manual_seed(0)
    before = after = 0.0
    same = True
    for _ in range(rows):
        codes = tokens[torch.randperm(tokens.numel(), generator=g)[:2000]]
        p = torch.zeros(1, adapter.vocab_size, dtype=torch.float64)
        q = torch.zeros(1, adapter.vocab_size, dtype=torch.float64)
        for row in (p, q):
            row[0, codes] = torch.softmax(
                2 * torch.randn(2000, generator=g, dtype=torch.float64), -1
            )
        transport._CONTENT_CACHE.clear()  # before: checked and converted for this row
        t = time.perf_counter()
        a = w1_distortion(p, q, content, tokens, rule)
        before += time.perf_counter() - t
        t = time.perf_counter()
        b = w1_distortion(p, q, content, tokens, rule)  # the content cached by the first call
        after += time.perf_counter() - t
        same = same and torch.equal(a, b)
    return before, after, same


def difference(identity: list, first: list) -> str:
    """What differs from the first cell: tokens or NFE (count of images), else the largest
    |difference| of TV and of W1 per image."""
    moved = sum(a[:2] != b[:2] for a, b in zip(identity, first))
    if moved:
        return f"tokens or NFE differ on {moved} images"
    tv = max(abs((a[2] or 0.0) - (b[2] or 0.0)) for a, b in zip(identity, first))
    w1 = max(abs((a[3] or 0.0) - (b[3] or 0.0)) for a, b in zip(identity, first))
    return f"tokens, NFE same; max |d TV| {tv:.1e}, max |d W1| {w1:.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--workers", type=int, default=usable_cores())
    parser.add_argument("--threads", type=int, default=usable_cores(), help="the old cells'")
    parser.add_argument("--load-threads", type=int, default=2)
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="comma-separated labels")
    parser.add_argument("--w1-rows", type=int, default=8, help="0: skip the accounting part")
    parser.add_argument("--cells", default="new,old", help="new, old or both, in this order")
    parser.add_argument("--no-load", action="store_true", help="the alone cells only")
    parser.add_argument("--json", default=None, help="also write the results as JSON here")
    args = parser.parse_args()
    if min(args.prompts, args.batch, args.repeats, args.workers, args.threads) < 1:
        raise SystemExit("--prompts, --batch, --repeats, --workers and --threads must be >= 1")
    model = load_image_model("standin")
    prompts = list(model.default_prompts[: args.prompts])
    labels = [label.strip() for label in args.configs.split(",")]
    specs, commit = guided_specs(model, labels), (git_commit()["commit"] or "")[:7]
    header = {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "usable_cores": usable_cores(), "load_average": os.getloadavg()[0],
              "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}
    print(
        f"# commit {commit}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{usable_cores()} usable cores, load average {os.getloadavg()[0]:.2f}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}",
        flush=True,
    )
    print(
        f"stand-in workload: {len(specs)} configurations {labels} x {len(prompts)} prompts x "
        f"seed 0 = {len(specs) * len(prompts)} images, batch {args.batch}, exact TV and W1; "
        f"old = 1 process x {args.threads} threads, new = {args.workers} workers x 1 thread; "
        f"loaded = beside a {args.load_threads}-thread float64 matmul loop",
        flush=True,
    )
    accounting = None
    if args.w1_rows:
        torch.set_num_threads(1)
        before, after, same = w1_rows(model, args.w1_rows)
        accounting = {"rows": args.w1_rows, "checked_s": before, "cached_s": after,
                      "speedup": before / after, "same": same}
        print(
            f"W1 accounting, {args.w1_rows} rows of top-2000 laws (Amplify k=2), one thread: "
            f"content checked per row {before:.2f} s, cached {after:.2f} s "
            f"({before / after:.2f}x), same values {same}",
            flush=True,
        )

    kinds = [c.strip() for c in args.cells.split(",")]
    settings = {"old": (args.threads, 1), "new": (1, args.workers)}
    loads = [False] if args.no_load else [False, True]
    print(
        f"{'rep':>3} {'cell':<4} {'load':<6} {'total s':>8} {'decode s':>9} {'acct s':>7} "
        f"{'img/s':>6} {'same':>5}  load avg",
        flush=True,
    )
    results: dict[tuple[int, str, bool], dict] = {}
    first = None
    cells = []
    for rep in range(args.repeats):
        for loaded in loads:
            for kind in kinds:
                threads, workers = settings[kind]
                load = start_load(args.load_threads, 3600) if loaded else None
                try:
                    out = run_cell(model, specs, prompts, args.batch, threads, workers)
                finally:
                    if load is not None:
                        load.terminate()
                        load.wait()
                results[rep, kind, loaded] = out
                first = first or out["identity"]
                cells.append({"repeat": rep, "cell": kind, "loaded": loaded,
                              "total_s": out["total"], "decode_s": out["decode"],
                              "acct_s": out["acct"], "images": out["images"],
                              "images_per_s": out["images"] / out["total"],
                              "same": out["identity"] == first,
                              "load_average": os.getloadavg()[0],
                              "difference": difference(out["identity"], first)})
                print(
                    f"{rep:>3} {kind:<4} {'loaded' if loaded else 'alone':<6} "
                    f"{out['total']:>8.1f} {out['decode']:>9.1f} {out['acct']:>7.1f} "
                    f"{out['images'] / out['total']:>6.3f} {out['identity'] == first!s:>5}  "
                    f"{os.getloadavg()[0]:.2f}  {difference(out['identity'], first)}",
                    flush=True,
                )
    for rep in range(args.repeats):
        r = {key[1:]: value["total"] for key, value in results.items() if key[0] == rep}
        line = []
        if ("old", False) in r and ("new", False) in r:
            line.append(f"new / old time alone {r['new', False] / r['old', False]:.2f}")
        if ("old", True) in r and ("new", True) in r:
            line.append(f"new / old time loaded {r['new', True] / r['old', True]:.2f}")
        for kind in kinds:
            if (kind, True) in r:
                line.append(f"{kind} loaded / alone {r[kind, True] / r[kind, False]:.2f}")
        print(f"repeat {rep}: " + ", ".join(line), flush=True)
    if args.json:
        workload = {"configs": labels, "prompts": len(prompts), "seeds": [0],
                    "images": len(specs) * len(prompts), "batch": args.batch,
                    "old_threads": args.threads, "new_workers": args.workers,
                    "load_threads": args.load_threads}
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(json.dumps(sidecar(header, workload, accounting, cells), indent=1) + "\n")


def sidecar(header: dict, workload: dict, accounting: dict | None, cells: list[dict]) -> dict:
    """The run as JSON: ``header`` (commit, date, cores, load), the workload, the accounting
    part, every cell, and per repeat the ratios of total seconds the text prints
    (``new_over_old_alone``, ``new_over_old_loaded``, ``<cell>_loaded_over_alone``)."""
    ratios = []
    for rep in sorted({c["repeat"] for c in cells}):
        total = {(c["cell"], c["loaded"]): c["total_s"] for c in cells if c["repeat"] == rep}
        ratio = {"repeat": rep}
        for loaded, name in ((False, "alone"), (True, "loaded")):
            if ("old", loaded) in total and ("new", loaded) in total:
                ratio[f"new_over_old_{name}"] = total["new", loaded] / total["old", loaded]
        for kind in dict.fromkeys(c["cell"] for c in cells):
            if (kind, True) in total and (kind, False) in total:
                ratio[f"{kind}_loaded_over_alone"] = total[kind, True] / total[kind, False]
        ratios.append(ratio)
    return {**header, "workload": workload, "w1_accounting": accounting, "cells": cells,
            "ratios": ratios}


if __name__ == "__main__":
    main()
