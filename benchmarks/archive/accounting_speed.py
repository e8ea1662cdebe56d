"""The exact accounting, old against new, on the same rows side by side in one run.

Decodes ``--images`` stand-in images of each configuration in ``--configs`` (labels of the
figures' configurations, separated by ";") ONCE, with the exact TV and W1 recorded as the
figures run records them, and keeps what the logs were given: every forward pass's rows
(``DistortionLog.add``) and the rows the W1 reservoirs held at the end (``W1Log.finish``). Then
times, on those rows, the accounting of this checkout ("new") against the accounting at
``--base`` ("old": gsd_lab/accounting/{distortion,transport}.py and the engine modules they
dispatch through, ``ENGINE``, read from git into private modules), interleaved ``--repeats`` times (old then new, new then
old, ...: the fastest of each is kept, so that other jobs' load and the first run's allocations
fall on both alike):

- TV: ``emitted_distortion`` of every forward pass (what ``DistortionLog.add`` computes);
- W1: ``w1_distortion`` of every held row (what ``W1Log.finish`` computes, a row once).

Printed per configuration: rows, old s, new s, old / new, and the largest |old - new| of the TV
(must be 0: the laws are the same bits) and of the W1 (must be <= 1e-12); the one-off embedding
table of the distance filter is built before the clocks start (once per process in a run).
Times are wall seconds on a shared machine: the load average is printed with them. LANTERN's TV
is computed by the same code on both sides (``lantern_distortion``), a control: its old / new
shows the noise of the clocks.

    PYTHONPATH=. python benchmarks/archive/accounting_speed.py [--images 2] [--repeats 3] [--base main]
        [--configs "GSD (G=100);..."] [--out benchmarks/results/accounting_speed_standin.txt]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import torch

from gsd_lab.accounting import distortion as new_distortion
from gsd_lab.accounting import transport as new_transport
from gsd_lab.decode import loop as decoding
from gsd_lab.paper import FigureSizes, decoding_configurations

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIGS = (
    "GSD (G=100);(D2) dynamic, p + distance filter only (G=50);"
    "(B) dynamic, sorted by draft q (G=50);LANTERN k=1001 (delta=0.01)"
)


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], check=True, capture_output=True, text=True, cwd=ROOT
    ).stdout


def module_at(commit: str, path: str, name: str, replace: dict[str, str]) -> ModuleType:
    """The module ``path`` as of ``commit``, imported as ``name`` (inside its package, so that
    relative imports resolve), with the imports in ``replace`` pointed at other old modules."""
    source = git("show", f"{commit}:{path}")
    for old, new in replace.items():
        if old not in source:
            raise SystemExit(f"{path} at {commit} has no {old!r} to point at the old modules")
        source = source.replace(old, new)
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = f"{commit}:{path}"
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


OLD_ACCEPT = "from ..engine._old_accounting import support_accept"


ENGINE = ("ranking", "windows", "capabilities", "accounting")  # the old engine, in import order


def old_engine(commit: str) -> None:
    """That commit's engine modules the accounting reads (``ENGINE``, those it has) as
    ``gsd_lab.engine._old_<name>``, each importing the others' old copies: else an old
    ``accounting`` would dispatch through today's ``capabilities`` and time the new code."""
    present = [m for m in ENGINE if git("ls-tree", commit, f"gsd_lab/engine/{m}.py").strip()]
    for name in present:
        path = f"gsd_lab/engine/{name}.py"
        source = git("show", f"{commit}:{path}")
        imports = {
            f"from .{other} import": f"from ._old_{other} import"
            for other in present
            if f"from .{other} import" in source
        }
        module_at(commit, path, f"gsd_lab.engine._old_{name}", imports)


def old_modules(commit: str) -> tuple[ModuleType, ModuleType]:
    """(distortion, transport) as of ``commit``, on that commit's engine (``old_engine``)."""
    old_engine(commit)
    distortion = module_at(
        commit,
        "gsd_lab/accounting/distortion.py",
        "gsd_lab.accounting._old_distortion",
        {"from ..engine import support_accept": OLD_ACCEPT},
    )
    transport = module_at(
        commit,
        "gsd_lab/accounting/transport.py",
        "gsd_lab.accounting._old_transport",
        {"from .distortion import": "from ._old_distortion import"},
    )
    return distortion, transport


class CapturedLog(decoding.DistortionLog):
    """The decoder's distortion log, keeping each forward pass's rows (a measurement hook)."""

    passes: list = []

    def add(self, start, p, q, num_accepted):
        if q.shape[0] > 0:
            CapturedLog.passes.append((p.clone(), q.clone(), num_accepted, self.rule))
        return super().add(start, p, q, num_accepted)


class CapturedW1(new_transport.W1Log):
    """The decoder's W1 log, keeping the rows its reservoirs held at the end (each row once)."""

    held: list = []

    def finish(self, num_tokens):
        rows = {h[0]: h for h in self.held if h is not None}
        CapturedW1.held.extend(rows[t][2:] for t in sorted(rows))
        return super().finish(num_tokens)


def capture(model, spec, images: int) -> tuple[list, list]:
    from gsd_lab.experiments.runs import FilterSettings, Recording, generate_one, resolve_for

    resolved = resolve_for(model, spec.method.with_filters(FilterSettings.for_model(model.name)))
    CapturedLog.passes, CapturedW1.held = [], []
    for index, prompt in enumerate(model.default_prompts[:images]):
        generate_one(
            model, resolved, prompt, index, Recording(distortion=True, w1=None, images=False)
        )
    return CapturedLog.passes, CapturedW1.held


def tv_all(module: ModuleType, passes: list) -> tuple[float, torch.Tensor]:
    began = time.perf_counter()
    values = [module.emitted_distortion(p, q, a, rule) for p, q, a, rule in passes]
    return time.perf_counter() - began, torch.cat(values)


def w1_all(module: ModuleType, held: list, content, tokens) -> tuple[float, torch.Tensor]:
    began = time.perf_counter()
    values = [module.w1_distortion(p[None], q[None], content, tokens, rule) for p, q, rule in held]
    return time.perf_counter() - began, torch.cat(values) if values else torch.zeros(0)


def warm(module: ModuleType, passes: list) -> None:
    """Build the one-off tables (the distance filter's [V, V] table) outside the clocks."""
    if passes:
        p, q, a, rule = passes[0]
        module.emitted_distortion(p[:1], q[:1], 0, rule)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=DEFAULT_CONFIGS)
    parser.add_argument("--images", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--base", default="main", help="the old code's commit")
    parser.add_argument("--out", help="also write the printed lines here (and .json beside it)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    decoding.DistortionLog, decoding.W1Log = CapturedLog, CapturedW1

    from gsd_lab.experiments.image_model import load_image_model

    base = git("rev-parse", args.base).strip()
    old_distortion, old_transport = old_modules(base)
    model = load_image_model("standin")
    content, tokens = model.adapter.code_content(), model.adapter.allowed_tokens
    specs = {c.spec.label: c.spec for c in decoding_configurations(FigureSizes.default(), model)}
    labels = [label.strip() for label in args.configs.split(";")]
    unknown = [label for label in labels if label not in specs]
    if unknown:
        raise SystemExit(f"unknown configurations {unknown}; known: {sorted(specs)}")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no").strip())
    commit = git("rev-parse", "HEAD").strip()  # the code measured, read once
    lines, cells = [], []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    say(
        f"# commit {commit[:7]}{' (dirty)' if dirty else ''} "
        f"against base {base[:7]} ({args.base}); stand-in, {args.images} images per "
        f"configuration (prompts 0..{args.images - 1}, seeds 0..{args.images - 1}), one thread, "
        f"fastest of {args.repeats} interleaved runs; load average "
        f"{os.getloadavg()[0]:.2f} at start on {os.cpu_count()} cores"
    )
    say(
        f"{'configuration':48s} {'what':4s} {'rows':>6s} {'old s':>8s} {'new s':>8s} "
        f"{'old/new':>8s} {'max|diff|':>10s}"
    )
    for label in labels:
        passes, held = capture(model, specs[label], args.images)
        warm(old_distortion, passes)
        warm(new_distortion, passes)
        rows = sum(min(a + 1, q.shape[0]) for _, q, a, _ in passes)
        for what, count, run in (
            ("TV", rows, lambda m: tv_all(m, passes)),
            ("W1", len(held), lambda m: w1_all(m, held, content, tokens)),
        ):
            old_module = old_distortion if what == "TV" else old_transport
            new_module = new_distortion if what == "TV" else new_transport
            times: dict[str, list[float]] = {"old": [], "new": []}
            values = {}
            for repeat in range(args.repeats):  # old first, then new first, ...
                for side in ("old", "new") if repeat % 2 == 0 else ("new", "old"):
                    seconds, values[side] = run(old_module if side == "old" else new_module)
                    times[side].append(seconds)
            old_times, new_times, old_values, new_values = (
                times["old"], times["new"], values["old"], values["new"]
            )
            diff = float((old_values - new_values).abs().max()) if old_values.numel() else 0.0
            cell = {
                "configuration": label,
                "what": what,
                "rows": count,
                "old_seconds": min(old_times),
                "new_seconds": min(new_times),
                "ratio": min(old_times) / min(new_times) if min(new_times) > 0 else None,
                "max_abs_difference": diff,
                "identical": bool(torch.equal(old_values, new_values)),
            }
            cells.append(cell)
            say(
                f"{label[:48]:48s} {what:4s} {count:6d} {cell['old_seconds']:8.2f} "
                f"{cell['new_seconds']:8.2f} {cell['ratio'] or 0:8.2f} {diff:10.3g}"
            )
    for what in ("TV", "W1"):
        old = sum(c["old_seconds"] for c in cells if c["what"] == what)
        new = sum(c["new_seconds"] for c in cells if c["what"] == what)
        say(f"{'all configurations':48s} {what:4s} {'':6s} {old:8.2f} {new:8.2f} {old / new:8.2f}")
    tv_ok = all(c["max_abs_difference"] == 0 for c in cells if c["what"] == "TV")
    w1_ok = all(c["max_abs_difference"] <= 1e-12 for c in cells if c["what"] == "W1")
    say(f"TV identical: {tv_ok}; W1 within 1e-12: {w1_ok}; load average "
        f"{os.getloadavg()[0]:.2f} at the end")
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps({
            "commit": commit,
            "dirty": dirty,
            "base": base,
            "images": args.images,
            "repeats": args.repeats,
            "cells": cells,
            "tv_identical": tv_ok,
            "w1_within_1e-12": w1_ok,
            "lines": lines,
        }, indent=1) + "\n")
    return 0 if tv_ok and w1_ok else 1


if __name__ == "__main__":
    sys.exit(main())
