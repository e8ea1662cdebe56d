"""Time of one ``python -m gsd_lab generate`` call on the stand-in, and where it goes.

    PYTHONPATH=. python benchmarks/cli_generate.py [--calls 3] [--threads 2]

1. ``--calls`` fresh processes of ``python -m gsd_lab generate --method gsd --group-size 25
   --class brick --json`` (the issue's command), wall time of each (the target: <= 4 s per call
   on 2 cores); their tokens must all be the same.
2. In one process, the stages timed with ``time.perf_counter``: imports, loading the stand-in,
   ``DecodingMethod.resolve`` with the distance-filter quantile stored in the weights' manifest
   (a digest check), the same resolve recomputing it (the path before it was stored), and the
   decode; the tokens of the decode with either resolve (must be equal).
Prints one line per measurement; numbers are not asserted (they depend on the machine's load).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ["-m", "gsd_lab", "generate", "--method", "gsd", "--group-size", "25", "--class", "brick",
           "--json"]


def cli_calls(calls: int, threads: int) -> list[list[int]]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": str(threads)}
    tokens = []
    for i in range(calls):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, *COMMAND], env=env, cwd=ROOT, capture_output=True,
                              check=False, text=True, timeout=600)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        report = json.loads(done.stdout.strip().splitlines()[-1])
        tokens.append(report["tokens"])
        print(f"call {i}: {wall:.2f} s wall (decode {report['wall_seconds']:.2f} s, "
              f"nfe {report['nfe']})", flush=True)
    print(f"same tokens in every call: {all(t == tokens[0] for t in tokens)}")
    return tokens


def stages(threads: int) -> None:
    start = time.perf_counter()
    import torch

    from gsd_lab.experiments.image_model import load_image_model
    from gsd_lab.experiments.runs import generate_one, resolve_for
    from gsd_lab.decode.methods import DecodingMethod

    torch.set_num_threads(threads)
    print(f"imports: {time.perf_counter() - start:.2f} s")
    start = time.perf_counter()
    model = load_image_model("standin")
    print(f"load the stand-in: {time.perf_counter() - start:.2f} s")
    method = DecodingMethod("gsd", clusters="dynamic", group_size=25)
    timed = {}
    for label in ("stored quantile", "recomputed quantile"):
        if label == "recomputed quantile":
            model.adapter.distance_quantiles = []
        start = time.perf_counter()
        resolved = resolve_for(model, method)
        timed[label] = time.perf_counter() - start
        start = time.perf_counter()
        result, _ = generate_one(model, resolved, "brick", 0)
        decode = time.perf_counter() - start
        print(f"resolve ({label}): {timed[label]:.2f} s; decode {decode:.2f} s, nfe {result.nfe}",
              flush=True)
        timed[label + " tokens"] = result.tokens.tolist()
    same = timed["stored quantile tokens"] == timed["recomputed quantile tokens"]
    print(f"same tokens with the stored and the recomputed quantile: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    cli_calls(args.calls, args.threads)
    stages(args.threads)


if __name__ == "__main__":
    main()
