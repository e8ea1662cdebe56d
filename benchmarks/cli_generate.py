"""Time of one ``python -m gsd_lab generate`` call on the stand-in, and where it goes.

    PYTHONPATH=. python benchmarks/cli_generate.py [--calls 5] [--threads N] [--out FILE]
        [--before TREE]

Three measurements, each ``--calls`` fresh processes (a process's imports are its own), reported
as min and median of wall time and of CPU time (user + system; on a machine shared with other
work the CPU time says more than the wall time, which includes waiting for a core):

1. the floor: ``python -c "import torch"``;
2. the measured command, ``python -m gsd_lab generate --method gsd --group-size 25 --class brick
   --json`` (target: <= 4 s per call); its tokens and NFE must be the same in every call. With
   ``--before TREE`` (a checkout of another commit, e.g. ``git archive`` of main) the same
   command from that tree too, each of its calls right after one of ours (the same load), and
   its tokens and NFE must equal ours;
3. the same work in stages, timed inside a fresh process (``--child``), as the command runs it:
   import torch, import the gsd_lab modules ``generate`` runs, load the stand-in
   (``load_image_model(quick=True)``: the float64 forward of ``gsd_lab.standin.llama_forward``,
   no ``transformers``), ``resolve_for`` (the distance-filter quantile read from the weights'
   manifest), the decode (tokens only, as without --out); the decode's tokens must equal the
   CLI's, and the process must not have imported ``transformers``.

Prints one table (the parts side by side with the total) and writes it to ``--out``
(default ``benchmarks/results/cli_generate.txt``). Numbers are not asserted (they depend on the
machine and its load).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [
    "-m",
    "gsd_lab",
    "generate",
    "--method",
    "gsd",
    "--group-size",
    "25",
    "--class",
    "brick",
    "--json",
]
STAGES = (
    "import torch",
    "import gsd_lab (generate's modules)",
    "load the stand-in (quick)",
    "resolve (stored quantile)",
    "decode",
)


def _env(threads: int, root: Path = ROOT) -> dict[str, str]:
    path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    return {
        **os.environ,
        "PYTHONPATH": path,
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed_process(args: list[str], threads: int, root: Path = ROOT) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout) of one fresh Python process run in ``root``."""
    cpu, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, *args],
        env=_env(threads, root),
        cwd=root,
        capture_output=True,
        check=False,
        text=True,
        timeout=900,
    )
    wall, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return wall, cpu, done.stdout


def child(threads: int) -> None:
    """The stages of one ``generate`` call, timed in this (fresh) process; one JSON line."""
    timings: dict[str, list[float]] = {}
    wall, cpu = time.perf_counter(), time.process_time()

    def mark(stage: str) -> None:
        nonlocal wall, cpu
        now_wall, now_cpu = time.perf_counter(), time.process_time()
        timings[stage] = [now_wall - wall, now_cpu - cpu]
        wall, cpu = now_wall, now_cpu

    import torch

    mark(STAGES[0])
    import gsd_lab.cli  # noqa: F401
    from gsd_lab.decode.methods import DecodingMethod, ClusterAcceptance
    from gsd_lab.experiments.image_model import load_image_model
    from gsd_lab.experiments.runs import Recording, generate_one, resolve_for

    mark(STAGES[1])
    torch.set_num_threads(threads)
    model = load_image_model("standin", quick=True)
    mark(STAGES[2])
    resolved = resolve_for(
        model, DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=25)).for_model("standin")
    )
    mark(STAGES[3])
    result, _ = generate_one(model, resolved, "brick", 0, Recording(images=False))
    mark(STAGES[4])
    if "transformers" in sys.modules:
        raise SystemExit("the quick generate path imported transformers")
    print(json.dumps({"timings": timings, "tokens": result.tokens.tolist(), "nfe": result.nfe}))


def _row(label: str, walls: list[float], cpus: list[float] | None = None) -> str:
    cpu = f"{min(cpus):8.2f} {statistics.median(cpus):8.2f}" if cpus else ""
    return f"{label:42s} {min(walls):8.2f} {statistics.median(walls):8.2f} {cpu}".rstrip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="default: every usable CPU (torch's default, the CLI's, counts "
                        "physical cores: the same on a machine without SMT, as here)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/cli_generate.txt")
    parser.add_argument(
        "--before", type=Path, help="another tree: time its CLI call too, interleaved with ours"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.threads)
        return
    floor = [_timed_process(["-c", "import torch"], args.threads)[:2] for _ in range(args.calls)]
    calls, reports, before, before_reports = [], [], [], []
    command = COMMAND + ["--threads", str(args.threads)]
    for _ in range(args.calls):
        wall, cpu, out = _timed_process(command, args.threads)
        calls.append((wall, cpu))
        reports.append(json.loads(out.strip().splitlines()[-1]))
        if args.before is not None:
            wall, cpu, out = _timed_process(command, args.threads, args.before.resolve())
            before.append((wall, cpu))
            before_reports.append(json.loads(out.strip().splitlines()[-1]))
    staged = []
    for _ in range(args.calls):
        wall, cpu, out = _timed_process(
            [__file__, "--child", "--threads", str(args.threads)], args.threads
        )
        staged.append({**json.loads(out.strip().splitlines()[-1]), "total": [wall, cpu]})
    same = all(
        (r["tokens"], r["nfe"]) == (reports[0]["tokens"], reports[0]["nfe"])
        for r in reports + staged + before_reports
    )
    header = (
        f"{' '.join(['python', *COMMAND])} --threads {args.threads}: {args.calls} fresh processes "
        f"per row; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{len(os.sched_getaffinity(0))} of {os.cpu_count()} CPUs usable, "
        f"load average {os.getloadavg()[0]:.1f} at the end"
    )
    lines = [
        header,
        f"{'seconds':42s} {'wall min':>8s} {'wall med':>8s} {'cpu min':>8s} {'cpu med':>8s}",
        _row('floor: python -c "import torch"', *zip(*floor)),
        _row("the CLI call (total)", *zip(*calls)),
        _row("  its decode (the report's wall_seconds)", [r["wall_seconds"] for r in reports]),
        *(
            [
                _row(f"before ({args.before.name}), interleaved", *zip(*before)),
                _row(
                    "  its decode (the report's wall_seconds)",
                    [r["wall_seconds"] for r in before_reports],
                ),
            ]
            if before
            else []
        ),
        "in stages (fresh process each):",
        *(_row("  " + stage, *zip(*[s["timings"][stage] for s in staged])) for stage in STAGES),
        _row("  process total (incl. interpreter start)", *zip(*[s["total"] for s in staged])),
        f"nfe {reports[0]['nfe']}; the same tokens and NFE in every call and staged run"
        + (" and every call before" if before else "")
        + f": {same}",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
