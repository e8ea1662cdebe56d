"""One-shot GPU check of the static engine: random-weight Lumina-mGPT 7B (bf16, CFG pair, 768 px
layout, top-k 2000), correctness first, then speed against the measured weight-read limit.

    PYTHONPATH=. timeout 480 python3 benchmarks/gpu_static_check.py     # one GPU (H200: ~5 min)
    PYTHONPATH=. python3 benchmarks/gpu_static_check.py --tiny          # CPU dry run (the tests')

Needs only the repository and torch + transformers (no install, nothing downloaded). Each step
appends one JSON line to ``$OUT/static_check.jsonl`` (``--out``; default /tmp) and prints it, so
a crash or a timeout loses only the step in flight; a failing step is recorded (``error``) and the
next runs. Steps, in order:

- ``build``: versions, commit, attention kernel, weight bytes (all but the input embeddings);
- ``limit``: the read bandwidth, measured (best ``torch.sum`` over a 2 GiB bf16 buffer), and
  ``limit_ms`` = weight bytes / bandwidth: what one forward cannot beat;
- ``correctness`` (one line per cache position, 300 / 1200 / 2300 cached tokens): the same calls
  on the eager adapter, static-eager (``capture="none"``) and the graphs (``"graph"``): a full
  16-token window, a rollback of 11 tokens, a padded 11-token window, 1 token, a rollback to the
  start and the full window again. ``graph_equals_static``: bit for bit (the graphs replay
  static-eager's kernels; the claim); static-eager against eager within ``TV_TOLERANCE`` in total
  variation per row (bf16 forwards with other attention lengths and matmul shapes round
  differently; 0.02 is a stated bound, not derived: a TV that large would mean more than
  rounding) and the argmax agreement;
- ``speed``: per-forward ms at widths 1 and 16 at the first and last position: ``replay_ms``
  (back-to-back replays: device time), ``forward_ms`` (the engine's forward with its host path),
  graphs of model + processing and of the model alone, static-eager and eager; the window replay
  over ``limit_ms`` (target: <= 2);
- ``batch``: images decoded together, on both runners of ``gsd_lab.decode.batch.generate_batch``:
  "eager" (``gsd_lab.models.batched.BatchRunner``, dynamic cache) and "static"
  (``gsd_lab.models.static_batched.StaticBatchRunner``, the graphs per (rows, width, length)):
  per-forward ms for 1 and ``BATCH`` (8) images (CFG pairs: 2 and 16 model rows) at widths 1
  and 16, at the first and last position, each image's share (``per_image_ms``) and
  ``per_image_ratio`` = the batch's per-image ms over batch 1's (target on a GPU: <= 0.3 for the
  window at the last position, each runner its pass flag; the weight reads are shared, the
  cache reads are not); ``tv_max_vs_eager_batch1``: the last image's window rows on each
  runner and batch against the eager runner at batch 1 (bf16: rounding only); tiny: batch 3,
  only that it runs;
- ``kernels``: a profile of one window forward of the eager adapter and of static-eager (the
  kernels each launches) and of one replay: counts, device time, the top kernels;
- ``decode_equality``: AR / SJD / GSD (G = 14, the released filters) through ``generate`` over
  128 tokens with the eager adapter, static-eager and the graphs: graph tokens equal to
  static-eager's (the claim), eager's first mismatch recorded (bf16: expected to differ);
- ``decode_image``: AR and GSD over one whole image with the graphs (skipped when the budget
  leaves too little), and ``gsd_wall_over_nfe``: AR's wall time per forward over GSD's (GSD's
  wall-clock speed-up over its NFE speed-up; target >= 0.85);
- ``compile`` (skipped with ``--no-compile`` or under 4 minutes left): ``capture="compile"``
  (inductor, ``reduce-overhead``) for the 16-token window at the last position, its compile seconds,
  its difference from static-eager and its forward time; ``--compile-cache FILE`` loads
  inductor's artifacts from FILE first and saves them there after (a warm start next time);
- ``done``: the pass flags and the total seconds.

``--budget-s`` (default 360: an 8-minute cap with a 2-minute margin) skips the later steps when
they would not fit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import gpu_lumina_shapes as shapes
import torch

from gsd_lab.decode.loop import generate
from gsd_lab.decode.methods import DecodingMethod
from gsd_lab.models.lumina_checkpoint import build_lumina_model
from gsd_lab.models.lumina_mgpt import LuminaImageLayout, LuminaMGPTAdapter
from gsd_lab.models.static import StaticEngine

TV_TOLERANCE = 0.02  # static-eager against eager, bf16 (module docstring)
BATCH = 8  # the batch of the ``batch`` step (tiny: 3)
BATCH_TARGET = 0.3  # per-image time per forward at BATCH over batch 1's, on a GPU
W = 16  # the window forward's width (15 drafts + 1)
SDP_FLAGS = ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "cudnn_sdp_enabled",
             "math_sdp_enabled")
STEPS = (  # (step, seconds of the budget it needs on a GPU), after build
    ("limit", 0), ("correctness", 60), ("speed", 50), ("batch", 45), ("kernels", 15),
    ("decode_equality", 60), ("decode_image", 70),
)


def tv_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Total variation 0.5 sum_v |a_v - b_v| per row."""
    return 0.5 * (a - b).abs().sum(-1)


class Check:
    """The run's state: the JSON-lines log, the clock, the model and the engines."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.tiny = args.tiny
        self.args = args
        self.device, self.dtype = shapes.device_and_dtype(self.tiny)
        self.cuda = self.device.type == "cuda"
        if self.tiny:
            torch.set_num_threads(1)  # a tiny model on shared cores: threads only contend
        self.t0 = time.perf_counter()
        out = Path(args.out or os.environ.get("OUT") or "/tmp")
        out.mkdir(parents=True, exist_ok=True)
        self.log_path = out / "static_check.jsonl"
        self.log = open(self.log_path, "a")  # noqa: SIM115 (open for the run)
        self.passes: dict[str, bool] = {}
        self.repeats = 2 if self.tiny else 30  # timed calls per measure (tiny: only that it runs)

    # ---- plumbing ----------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def emit(self, step: str, **fields: Any) -> None:
        line = json.dumps({"step": step, "t": round(self.elapsed(), 1), **fields}, default=str)
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def guarded(self, step: str, fn: Callable[[], None], needs_s: float = 0.0) -> None:
        left = self.args.budget_s - self.elapsed()
        if left < needs_s:
            return self.emit(
                step, skipped=f"{left:.0f} s of the budget left, the step needs ~{needs_s:.0f}"
            )
        try:
            fn()
        except Exception as error:  # noqa: BLE001 (recorded; the next step runs)
            self.passes[step] = False
            self.emit(step, error=f"{type(error).__name__}: {error}"[:1500],
                      trace=traceback.format_exc()[-2000:])

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def mean_ms(self, fn: Callable[[], Any], n: int) -> float:
        """Mean ms of n back-to-back fn() calls after one warm-up, one sync at the end."""
        fn()
        self.sync()
        begin = time.perf_counter()
        for _ in range(n):
            fn()
        self.sync()
        return round(1e3 * (time.perf_counter() - begin) / n, 3)

    def forward_ms(self, runner: Any, ids: torch.Tensor, context: int, n: int) -> float:
        """``mean_ms`` of ``runner.forward(ids)`` at ``context`` cached tokens, cropped back."""

        def forward() -> None:
            runner.forward(ids)
            runner.crop(context)

        return self.mean_ms(forward, n)

    def window(self, context: int, width: int = W) -> torch.Tensor:
        """The ``width`` image tokens that follow ``context`` cached tokens."""
        start = context - self.prompt.numel()
        return self.image[start : start + width]

    # ---- steps -------------------------------------------------------------------------

    def build(self) -> None:
        tiny, device, dtype = self.tiny, self.device, self.dtype
        config = shapes.model_config(tiny)
        model = build_lumina_model(
            config, shapes.random_state(config, device=device, dtype=dtype, seed=0), device=device
        )
        self.layout = layout = LuminaImageLayout.from_vocabulary(
            config.vocabulary_map, 128 if tiny else 768
        )
        self.adapter = adapter = LuminaMGPTAdapter(
            model, layout, top_k=2000, temperature=1.0, cfg_scale=3.0
        )
        embeddings = model.get_input_embeddings().weight
        self.weight_bytes = sum(
            p.numel() * p.element_size() for p in model.parameters() if p is not embeddings
        )
        generator = torch.Generator(device=device).manual_seed(0)
        self.prompt = shapes._text_prompt(layout, config.vocab_size, 32, generator, device)
        self.short_prompt = shapes._text_prompt(layout, config.vocab_size, 16, generator, device)
        P = self.prompt.numel()
        self.image = adapter.random_tokens(
            torch.arange(layout.num_image_tokens, device=device), generator
        )
        last = P + layout.num_image_tokens - W - 1
        self.positions = [P + 4, P + 27, last] if tiny else [300, 1200, min(2300, last)]
        # Tiny: short length buckets, so that the dry run meets several lengths too.
        self.length_step = 16 if tiny else self.args.length_step
        self.capture = "graph" if self.cuda else "none"
        self.static = self.engine("none")
        self.graph = self.engine(self.capture)
        self.model_only = self.engine(self.capture, capture_processing=False)
        self.methods = {"ar": DecodingMethod("ar"), "sjd": DecodingMethod("sjd", window=W - 1),
                        "gsd": shapes.released_gsd(W - 1).resolve(adapter)}
        cuda = torch.backends.cuda
        sdp = {name: getattr(cuda, name)() for name in SDP_FLAGS} if self.cuda else None
        self.emit(
            "build", header=shapes.run_header("gpu_static_check", tiny, device),
            attention=model.config._attn_implementation, sdp=sdp, dtype=str(dtype),
            weight_gb=round(self.weight_bytes / 1e9, 3), prompt_tokens=P,
            positions=self.positions, length_step=self.length_step, capture=self.capture,
            tv_tolerance=TV_TOLERANCE,
        )

    def engine(self, capture: str, **kwargs: Any) -> StaticEngine:
        engine = StaticEngine(self.adapter, capture=capture, length_step=self.length_step, **kwargs)
        engine.reserve(self.layout.num_image_tokens + 1, W - 1)
        return engine

    def limit(self) -> None:
        count = (4 << 20) if self.tiny else (1 << 30)
        data = torch.ones(count, dtype=torch.bfloat16, device=self.device)
        seconds = min(self.mean_ms(data.sum, 1) for _ in range(5)) / 1e3
        del data
        bandwidth = 2 * count / seconds
        self.limit_ms = 1e3 * self.weight_bytes / bandwidth
        self.emit("limit", bandwidth_tbs=round(bandwidth / 1e12, 3),
                  limit_ms=round(self.limit_ms, 3),
                  limit_ms_at_4_8_tbs=round(1e3 * self.weight_bytes / 4.8e12, 3))

    def prefill(self, runner: Any, context: int) -> None:
        """Start ``runner`` on the prompt and fill its cache to ``context`` tokens."""
        runner.start(self.prompt)
        runner.forward(torch.cat([self.prompt, self.image[: context - self.prompt.numel()]]),
                       num_rows=1)

    def sequence(self, runner: Any, context: int) -> list[torch.Tensor]:
        """The same calls on every runner at ``context`` cached tokens (module docstring)."""
        window = self.window(context, W + 1)
        self.prefill(runner, context)
        out = [runner.forward(window[:W])]
        runner.crop(context + 5)
        out.append(runner.forward(window[5:W]))  # padded to W
        out.append(runner.forward(window[W : W + 1]))
        runner.crop(context)
        out.append(runner.forward(window[:W]))
        runner.crop(context)
        return out

    def correctness(self) -> None:
        all_equal, all_close = True, True
        for context in self.positions:
            runs = [self.sequence(runner, context)
                    for runner in (self.adapter, self.static, self.graph)]
            rows = []
            for call, (e, s, g) in enumerate(zip(*runs)):
                row = {
                    "call": call,
                    "graph_equals_static": bool(torch.equal(g, s)),
                    "graph_static_maxdiff": float((g - s).abs().max()),
                    "static_eager_maxdiff": float((s - e).abs().max()),
                    "static_eager_tv_max": float(tv_rows(s, e).max()),
                    "argmax_agree": float((s.argmax(-1) == e.argmax(-1)).double().mean()),
                    "finite": bool(torch.isfinite(g).all()),
                }
                all_equal &= row["graph_equals_static"] and row["finite"]
                all_close &= row["static_eager_tv_max"] <= TV_TOLERANCE
                rows.append(row)
            self.emit("correctness", context=context, attended=self.graph.last_key, rows=rows,
                      graphs=sorted(self.graph._graphs),
                      capture_seconds=round(self.graph.capture_seconds, 2))
        self.passes["graph_equals_static"] = all_equal
        self.passes["static_eager_within_tolerance"] = all_close

    def speed(self) -> None:
        out: dict[str, Any] = {}
        few = max(1, self.repeats // 6)  # the static-eager and eager forwards: slow, fewer calls
        for context in (self.positions[0], self.positions[-1]):
            window = self.window(context)
            for name, runner in (("graph", self.graph), ("model_only", self.model_only),
                                 ("static", self.static), ("eager", self.adapter)):
                graphs = name in ("graph", "model_only")
                self.prefill(runner, context)
                for width in (1, W):
                    out[f"{name}_forward_ms_{width}_at_{context}"] = self.forward_ms(
                        runner, window[:width], context, self.repeats if graphs else few)
                    if self.cuda and graphs:
                        graph = runner._graphs[runner.last_key][0]
                        out[f"{name}_replay_ms_{width}_at_{context}"] = self.mean_ms(
                            graph.replay, self.repeats)
        last = self.positions[-1]
        window_ms = out.get(
            f"graph_replay_ms_{W}_at_{last}", out[f"graph_forward_ms_{W}_at_{last}"]
        )
        out["window_over_limit"] = round(window_ms / self.limit_ms, 3)
        out["peak_gb"] = shapes.peak_gib(self.device)
        if self.cuda:  # a CPU has no launch overhead to remove: the target is the GPU's
            self.passes["window_within_2x_limit"] = out["window_over_limit"] <= 2
        self.emit("speed", limit_ms=round(self.limit_ms, 3), **out)

    def batch_runner(self, kind: str, images: int) -> Any:
        """The ``kind`` ("eager" or "static") batch runner for ``images`` images."""
        from gsd_lab.models.batched import BatchRunner
        from gsd_lab.models.static_batched import StaticBatchRunner

        if kind == "eager":
            return BatchRunner(self.adapter)
        return StaticBatchRunner(
            self.adapter, images=images, new_tokens=self.layout.num_image_tokens + 1,
            window=W - 1, max_prompt=self.prompt.numel(), capture=self.capture,
            length_step=self.length_step,
        )

    def batch(self) -> None:
        from gsd_lab.models.batched import ForwardCall

        size = 3 if self.tiny else BATCH
        repeats = self.repeats if self.tiny else 10
        out: dict[str, Any] = {"batch": size}
        for context in (self.positions[0], self.positions[-1]):
            window = self.window(context)
            probs: dict[str, torch.Tensor] = {}
            for kind in ("eager", "static"):
                for images in (1, size):
                    runner = self.batch_runner(kind, images)
                    sequences = [runner.add(self.prompt) for _ in range(images)]
                    prefill = torch.cat([self.prompt, self.image[: context - self.prompt.numel()]])
                    runner.forward([ForwardCall(s, prefill, 1) for s in sequences])
                    for width in (1, W):

                        def forward(
                            runner: Any = runner, sequences: list[Any] = sequences,
                            ids: torch.Tensor = window[:width], context: int = context,
                        ) -> list[Any]:
                            got = runner.forward(
                                [ForwardCall(s, ids, ids.numel()) for s in sequences]
                            )
                            for sequence in sequences:
                                sequence.crop(context)
                            return got

                        name = f"{kind}_batch{images}"
                        ms = self.mean_ms(forward, repeats)
                        out[f"{name}_forward_ms_{width}_at_{context}"] = ms
                        out[f"{name}_per_image_ms_{width}_at_{context}"] = round(ms / images, 3)
                    probs[name] = forward()[-1]  # the last image's window rows
                    del runner, sequences
                    if self.cuda:
                        torch.cuda.empty_cache()
                for width in (1, W):
                    one = out[f"{kind}_batch1_per_image_ms_{width}_at_{context}"]
                    many = out[f"{kind}_batch{size}_per_image_ms_{width}_at_{context}"]
                    out[f"{kind}_per_image_ratio_{width}_at_{context}"] = round(many / one, 3)
            reference = probs["eager_batch1"]
            out[f"tv_max_vs_eager_batch1_at_{context}"] = {
                name: round(float(tv_rows(p, reference).max()), 6) for name, p in probs.items()
            }
        last = self.positions[-1]
        for kind in ("eager", "static"):
            out[f"{kind}_per_image_over_limit"] = round(
                out[f"{kind}_batch{size}_per_image_ms_{W}_at_{last}"] / self.limit_ms, 3
            )
            if self.cuda:  # the claim is the GPU's: on a CPU the forward is compute-bound
                self.passes[f"{kind}_batch{size}_per_image_within_{BATCH_TARGET}x"] = (
                    out[f"{kind}_per_image_ratio_{W}_at_{last}"] <= BATCH_TARGET
                )
        out["peak_gb"] = shapes.peak_gib(self.device)
        self.emit("batch", target=BATCH_TARGET, **out)

    def kernels(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        context = self.positions[-1]
        ids = self.window(context)
        activities = [ProfilerActivity.CUDA] if self.cuda else [ProfilerActivity.CPU]
        key = "device_time_total" if self.cuda else "self_cpu_time_total"
        summary = {}
        runners = (("eager", self.adapter), ("static_eager", self.static), ("graph", self.graph))
        for name, engine in runners:
            self.prefill(engine, context)
            engine.forward(ids)  # recorded before the profile
            engine.crop(context)
            self.sync()
            with profile(activities=activities) as prof:
                engine.forward(ids)
                self.sync()
            engine.crop(context)
            events = [e for e in prof.key_averages()
                      if (e.device_time_total > 0 if self.cuda else e.key.startswith("aten::"))]
            events = sorted(events, key=lambda e: -getattr(e, key))
            summary[name] = {
                "count": sum(e.count for e in events),
                "total_ms": round(sum(getattr(e, key) for e in events) / 1e3, 3),
                "top": [
                    (e.key[:80], e.count, round(getattr(e, key) / 1e3, 3)) for e in events[:12]
                ],
            }
        self.emit("kernels", context=context, width=W,
                  kind="cuda kernels" if self.cuda else "cpu aten ops", **summary)

    def decode(self, name: str, tokens: int, runner: Any, seed: int) -> Any:
        """``generate`` of method ``name`` over ``tokens`` from the short prompt on ``runner``."""
        generator = torch.Generator(device=self.device).manual_seed(seed)
        return generate(self.adapter, self.short_prompt, self.methods[name], num_tokens=tokens,
                        runner=runner, generator=generator)

    def decode_equality(self) -> None:
        tokens = 16 if self.tiny else 128
        rows, equal = {}, True
        for name in self.methods:
            results = {label: self.decode(name, tokens, runner, 1) for label, runner in
                       (("eager", "eager"), ("static", self.static), ("graph", self.graph))}
            s, g, e = results["static"], results["graph"], results["eager"]
            mismatch = (s.tokens != e.tokens).nonzero()
            rows[name] = {
                "graph_equals_static": bool(torch.equal(g.tokens, s.tokens)) and g.nfe == s.nfe,
                "static_equals_eager": bool(torch.equal(s.tokens, e.tokens)),
                "static_eager_first_mismatch": int(mismatch[0]) if mismatch.numel() else None,
                "nfe": {k: r.nfe for k, r in results.items()},
                "ms_per_forward": {
                    k: round(1e3 * r.wall_seconds / r.nfe, 3) for k, r in results.items()
                },
            }
            equal &= rows[name]["graph_equals_static"]
        self.passes["decode_graph_equals_static"] = equal
        self.emit("decode_equality", tokens=tokens, methods=rows, graphs=len(self.graph._graphs))

    def decode_image(self) -> None:
        tokens = self.layout.num_image_tokens // (4 if self.tiny else 1)  # tiny: two rows of 9
        rows = {}
        for name in ("ar", "gsd"):
            r = self.decode(name, tokens, self.graph, 2)
            rows[name] = {
                "nfe": r.nfe,
                "wall_s": round(r.wall_seconds, 2),
                "model_s": round(r.model_seconds, 2),
                "wall_ms_per_forward": round(1e3 * r.wall_seconds / r.nfe, 3),
                "outside_ms_per_step": round(1e3 * (r.wall_seconds - r.model_seconds) / r.nfe, 3),
            }
        self.emit(
            "decode_image", tokens=tokens, methods=rows, capacity=self.graph.capacity,
            graphs=len(self.graph._graphs),
            # AR's wall time per forward over GSD's: GSD's wall-clock speed-up over its NFE
            # speed-up (target >= 0.85; random weights accept almost nothing, so measured so).
            gsd_wall_over_nfe=round(
                rows["ar"]["wall_ms_per_forward"] / rows["gsd"]["wall_ms_per_forward"], 3
            ),
        )

    def compile(self) -> None:
        options = {"backend": "eager"} if self.tiny else None  # tiny: dynamo's trace only
        cache = self.args.compile_cache
        engine = self.engine("compile", compile_options=options, compile_cache=cache)
        context = self.positions[-1]
        ids = self.window(context)
        self.prefill(engine, context)
        begin = time.perf_counter()
        probs = engine.forward(ids)  # compiles (W, L) only
        engine.crop(context)
        seconds = time.perf_counter() - begin
        self.prefill(self.static, context)
        reference = self.static.forward(ids)
        self.static.crop(context)
        forward_ms = self.forward_ms(engine, ids, context, self.repeats)
        self.emit(
            "compile", compile_seconds=round(seconds, 1),
            warm_cache_loaded=engine.compile_cache_loaded,
            cache_file=None if cache is None else str(cache),
            maxdiff_vs_static=float((probs - reference).abs().max()),
            tv_vs_static=float(tv_rows(probs, reference).max()), forward_ms=forward_ms,
            forward_over_limit=round(forward_ms / self.limit_ms, 3),
        )

    def run(self) -> None:
        self.guarded("build", self.build)
        if not hasattr(self, "adapter"):
            return self.emit("done", passes=self.passes, seconds=round(self.elapsed(), 1))
        big = 0 if self.tiny else 1
        for step, needs_s in STEPS:
            self.guarded(step, getattr(self, step), needs_s * big)
        if self.args.no_compile:
            self.emit("compile", skipped="--no-compile")
        else:
            self.guarded("compile", self.compile, 240 * big)
        self.emit("done", passes=self.passes, all_passed=all(self.passes.values()),
                  seconds=round(self.elapsed(), 1), log=str(self.log_path))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true",
                        help="tiny model on the CPU (the tests' dry run)")
    parser.add_argument("--out", default=None,
                        help="folder for static_check.jsonl (default: $OUT, else /tmp)")
    parser.add_argument("--budget-s", type=float, default=360.0,
                        help="seconds for the whole run: later steps are skipped when they "
                        "would not fit")
    parser.add_argument("--length-step", type=int, default=256,
                        help="StaticEngine's length_step (GPU run)")
    parser.add_argument("--no-compile", action="store_true", help="skip the inductor step")
    parser.add_argument("--compile-cache", default=None,
                        help="inductor artifacts file: loaded first if present, saved after "
                        "compiling")
    Check(parser.parse_args(argv)).run()


if __name__ == "__main__":
    main()
