"""The transport relaxation's optimality gaps on the stand-in's rows (gsd_lab.decode.relaxation_w1):
greedy against the LP on the same neighbour support, and a k-neighbour support against a wider
one, as moved mass M (acceptance is 1 - T + M) at a few W1 budgets eps.

Rows: the verified (p, q) rows of one SJD decode (class 0, generator seed 0, the figures'
adapter), ``--rows`` of them drawn with a fixed seed. Prints per eps the mean M of each solver and
support, the mean T, and the seconds per row. A measurement script, not a test.

    python benchmarks/transport_relaxation_gap.py --rows 16
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from gsd_lab.decode import loop as decoding
from gsd_lab.decode.methods import DecodingMethod
from gsd_lab.decode.relaxation_w1 import content_neighbours, transport_plan


class RowLog(decoding.DistortionLog):
    rows: list[tuple[torch.Tensor, torch.Tensor]] = []

    def add(self, start, p, q, num_accepted):
        for i in range(min(num_accepted + 1, q.shape[0])):
            RowLog.rows.append((p[i].double().cpu(), q[i].double().cpu()))
        return super().add(start, p, q, num_accepted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--eps", type=float, nargs="+", default=[0.01, 0.04, 0.1])
    parser.add_argument("--k", type=int, nargs="+", default=[16, 128])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    decoding.DistortionLog = RowLog

    from gsd_lab.experiments.image_model import load_image_model
    from gsd_lab.experiments.runs import Recording, generate_one, resolve_for

    model = load_image_model("standin")
    generate_one(
        model,
        resolve_for(model, DecodingMethod("sjd")),
        model.default_prompts[0],
        0,
        Recording(distortion=True),
    )
    pick = np.random.default_rng(0).choice(
        len(RowLog.rows), size=min(args.rows, len(RowLog.rows)), replace=False
    )
    rows = [RowLog.rows[i] for i in sorted(pick)]
    adapter = model.adapter
    content, tokens = adapter.code_content(), adapter.allowed_tokens
    hoods = {k: content_neighbours(content, tokens, adapter.vocab_size, k) for k in args.k}
    totals = [0.5 * float((p / p.sum() - q).abs().sum()) for p, q in rows]
    print(
        f"{len(rows)} rows of {len(RowLog.rows)} verified; mean T = TV(p, q) = {np.mean(totals):.4f}; "
        f"fresh one-hot drafts among them: {sum(int(q.max() == 1) for _, q in rows)}"
    )
    print(
        f"{'eps':>6s} "
        + " ".join(f"{'M ' + s + ' k=' + str(k):>16s}" for k in args.k for s in ("greedy", "lp"))
        + "   s/row (greedy, lp) per k"
    )
    for eps in args.eps:
        cells, times = [], []
        for k in args.k:
            for solver in ("greedy", "lp"):
                started = time.perf_counter()
                moved = [transport_plan(p / p.sum(), q, hoods[k], eps, solver)[1] for p, q in rows]
                times.append((time.perf_counter() - started) / len(rows))
                cells.append(np.mean(moved))
        print(
            f"{eps:6.3f} "
            + " ".join(f"{c:16.4f}" for c in cells)
            + "   "
            + " ".join(f"{t:.2f}" for t in times),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
