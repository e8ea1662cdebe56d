"""GPU benchmark of the static engine (issue 24) at Lumina-mGPT 7B shapes: per-forward times of
the 1-token and window forwards, eager against static + CUDA graphs, beside the weight-read
limit; AR / SJD / GSD decode time per 768 px image; time outside the model per step.

Builds the full-size Chameleon 7B with random bf16 weights as ``gpu_lumina_shapes.py`` does
(its ``model_config`` / ``random_state``, the real loading path), wraps it in
``LuminaMGPTAdapter`` (768 x 768 layout, CFG 3.0, top-k 2000) and measures, in this order:

- ``bandwidth``: the device's read bandwidth, measured (best of ``torch.sum`` over a 2 GiB bf16
  buffer), and ``limit_ms``: the bytes one forward must read (every weight but the input
  embeddings, of which it reads only its tokens' rows; ``weights``, and with the CFG pair's
  keys and values at the context, ``weights_and_kv``) over that bandwidth (and over
  ``--nominal-tbs`` when given, e.g. 4.8 for an H200);
- ``forwards``: at a ``--context`` token cache (prefix of random image tokens), forwards of
  1 token and of window + 1 tokens (the loop's shapes; --window 15 gives the release's
  16-token input), sizes interleaved, the cache rolled back after each: per engine ("eager":
  the adapter's dynamic cache; "static-eager": the static engine without capture; "captured":
  with CUDA graphs of model and processing; "captured-model": of the model only), median ``wall_ms`` (the call, synchronised) and ``model_ms`` (the engine's
  own model timer: the adapter's synchronised one, or CUDA events), and ``queued_ms``: the mean of
  ``--repeats`` forwards issued back to back with one sync at the end (graphs: no host gap);
- ``decoding``: ``generate`` for AR, SJD and GSD (``DynamicClusters(14)`` with d = 0.5, δ = 0.15
  on the input embeddings, as gpu_lumina_shapes.py), with the static engine of the fullest
  capture that recorded (``decoding_engine``) and with the eager adapter over
  ``--compare-tokens`` (256), and with that static engine over ``--decode-tokens`` (default one
  whole 768 px image, 2352 tokens; fewer if the compare run's pace would overrun
  ``--budget-s``): nfe, wall and model seconds per image, ``outside_ms_per_step``
  = (wall - model) / nfe, the NFE and wall-clock speed-ups over AR and their ratio
  (``wall_over_nfe``: 1 when a forward costs the same in every method); plus host syncs per
  step of a short static GSD call (``gsd_lab.engine.profiling``);
- ``compile`` (``--compile``, last, only when ``--budget-s`` leaves 240 s): the forwards again
  with ``capture="compile"`` (inductor, ``mode="reduce-overhead"``) and its compile seconds.

Targets printed (``targets``): the window forward within 2x of the weight-read limit, and GSD's
wall-clock speed-up over AR within 15% of its NFE speed-up (``wall_over_nfe >= 0.85``). Random
weights give near-uniform distributions, so almost nothing is accepted and the NFE speed-up is
near 1; the ratio still measures what the target asks, since wall_over_nfe = AR's wall time per
forward / GSD's (a method's wall time per forward barely depends on what it accepts).

Prints one JSON line after the decoding part (``"complete": false`` when the compile part
follows) and, with ``--compile``, another with it (the last line is the record); each names the
code by ``git_commit`` and ``source_sha256``. Needs nothing downloaded; about 30 GB of GPU memory
(estimated: the 7B's 14 GB and a 2.55 GB static cache per engine, up to five); expected 4-6
minutes on an H200 without ``--compile`` (graphs take seconds to record; not yet measured), up
to the budget with it. A part that fails (a capture this device refuses) is recorded under ``errors``
and the others still run. ``--tiny`` runs every part on a tiny model on the CPU (the tests'
dry run; "captured" there is the static engine without capture, "compile" a tracing-only
backend).

    timeout 480 python benchmarks/gpu_static_engine.py --nominal-tbs 4.8 --compile --budget-s 460   # one H200
    python benchmarks/gpu_static_engine.py --tiny                         # CPU dry run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_lumina_shapes as shapes  # noqa: E402  (the 7B build, prompts, provenance)

from gsd_lab.decode.methods import DecodingMethod, FilterSettings, ResolvedMethod  # noqa: E402
from gsd_lab.decode.loop import generate  # noqa: E402
from gsd_lab.models.lumina_mgpt import (  # noqa: E402
    LuminaImageLayout,
    LuminaMGPTAdapter,
    build_lumina_model,
    estimated_parameters,
)
from gsd_lab.models.static import StaticEngine  # noqa: E402
from gsd_lab.engine.profiling import ops_and_syncs  # noqa: E402

COMPILE_RESERVE_S = 240.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def read_bandwidth(device: torch.device, tiny: bool) -> float:
    """Bytes per second of ``torch.sum`` over a bf16 buffer (2 GiB; 8 MiB with --tiny), best
    of 5 after one warm-up: what a forward's weight reads can reach at best."""
    count = (4 << 20) if tiny else (1 << 30)
    data = torch.ones(count, dtype=torch.bfloat16, device=device)
    best = float("inf")
    for attempt in range(6):
        _sync(device)
        begin = time.perf_counter()
        data.sum()
        _sync(device)
        if attempt:
            best = min(best, time.perf_counter() - begin)
    del data
    return 2 * count / best


def forward_bytes(model: Any, kv_slots: int, batch: int) -> dict[str, int]:
    """Bytes one forward reads at least: every parameter but the input embeddings (``weights``),
    plus the keys and values of ``kv_slots`` cache slots for ``batch`` rows (``weights_and_kv``)."""
    embeddings = model.get_input_embeddings().weight
    weights = sum(p.numel() * p.element_size() for p in model.parameters() if p is not embeddings)
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    element = next(model.parameters()).element_size()
    kv = 2 * config.num_hidden_layers * batch * config.num_key_value_heads * head_dim * kv_slots * element
    return {"weights": weights, "weights_and_kv": weights + kv}


def _median_ms(seconds: list[float]) -> float:
    return round(1e3 * statistics.median(seconds), 3)


def time_forwards(runner: Any, tokens: torch.Tensor, kept: int, widths: tuple[int, ...],
                  repeats: int, device: torch.device) -> dict[str, dict[str, float]]:
    """Per width: median wall and model ms of ``repeats`` synchronised forwards (sizes
    interleaved, one warm-up round, rolled back to ``kept`` after each), and the mean of
    ``repeats`` forwards queued back to back (one sync at the end)."""
    wall: dict[int, list[float]] = {w: [] for w in widths}
    model: dict[int, list[float]] = {w: [] for w in widths}
    for attempt in range(repeats + 1):
        for width in widths:
            before = runner.model_seconds
            _sync(device)
            begin = time.perf_counter()
            runner.forward(tokens[:width])
            _sync(device)
            seconds = time.perf_counter() - begin
            runner.crop(kept)
            if attempt:
                wall[width].append(seconds)
                model[width].append(runner.model_seconds - before)
    out = {}
    for width in widths:
        _sync(device)
        begin = time.perf_counter()
        for _ in range(repeats):
            runner.forward(tokens[:width])
            runner.crop(kept)
        _sync(device)
        queued = (time.perf_counter() - begin) / repeats
        out[str(width)] = {"wall_ms": _median_ms(wall[width]), "model_ms": _median_ms(model[width]),
                           "queued_ms": round(1e3 * queued, 3)}
    return out


def prefilled(runner: Any, prompt: torch.Tensor, image: torch.Tensor, context: int) -> int:
    """Start ``runner`` on ``prompt`` and fill its cache to ``context`` tokens with the image
    prefix; returns the logical length to roll back to."""
    runner.start(prompt)
    runner.forward(torch.cat([prompt, image[: context - prompt.numel()]]), num_rows=1)
    return runner.seq_len


def decode_methods(adapter: LuminaMGPTAdapter, prompt: torch.Tensor, gsd: ResolvedMethod, window: int,
                   num_tokens: int, engine: str | StaticEngine, seed: int, device: torch.device
                   ) -> dict[str, Any]:
    """AR, SJD, GSD (``gsd``) through ``generate`` with ``engine`` ("eager" or a ``StaticEngine``):
    a short warm-up each (graphs recorded, first-use costs), then one timed call each; per method
    nfe, seconds, time outside the model per step, speed-ups over AR."""
    methods = {"ar": DecodingMethod("ar"), "sjd": DecodingMethod("sjd", window=window), "gsd": gsd}
    if isinstance(engine, StaticEngine):  # the cache sized for the timed calls: none allocated in them
        engine.reserve(num_tokens + window + 1, window)
        engine.start(prompt)
    warm = min(num_tokens, 2 * window + 8)
    for method in methods.values():
        generate(adapter, prompt, method, num_tokens=warm, runner=engine,
                 generator=torch.Generator(device=device).manual_seed(seed))
    rows = {}
    for name, method in methods.items():
        result = generate(adapter, prompt, method, num_tokens=num_tokens, runner=engine,
                          generator=torch.Generator(device=device).manual_seed(seed))
        rows[name] = {
            "nfe": result.nfe,
            "acceptance_rate": result.acceptance_rate,
            "wall_seconds": round(result.wall_seconds, 4),
            "model_seconds": round(result.model_seconds, 4),
            "wall_ms_per_forward": round(1e3 * result.wall_seconds / result.nfe, 3),
            "model_ms_per_forward": round(1e3 * result.model_seconds / result.nfe, 3),
            "outside_ms_per_step": round(1e3 * (result.wall_seconds - result.model_seconds) / result.nfe, 3),
        }
    for row in rows.values():
        row["nfe_speedup"] = round(rows["ar"]["nfe"] / row["nfe"], 4)
        row["wall_speedup"] = round(rows["ar"]["wall_seconds"] / row["wall_seconds"], 4)
        row["wall_over_nfe"] = round(row["wall_speedup"] / row["nfe_speedup"], 4)
    return {"engine": "eager" if engine == "eager" else "static", "tokens": num_tokens, "methods": rows}


def syncs_per_step(adapter: LuminaMGPTAdapter, prompt: torch.Tensor, gsd: ResolvedMethod, window: int,
                   engine: str | StaticEngine, device: torch.device) -> float:
    """Host syncs per forward of GSD through ``generate``: the difference between two calls'
    syncs over their difference in forwards (the per-call constant cancels)."""
    counts = []
    for tokens in (window + 2, 4 * window):
        result: list[Any] = []

        def call(n: int = tokens) -> None:
            result.append(generate(adapter, prompt, gsd, num_tokens=n, runner=engine,
                                   generator=torch.Generator(device=device).manual_seed(0)))

        counts.append((ops_and_syncs(call)[1], result[0].nfe))
    (s1, n1), (s2, n2) = counts
    return round((s2 - s1) / (n2 - n1), 3) if n2 != n1 else float("nan")


def compiled_forwards(adapter: LuminaMGPTAdapter, prompt: torch.Tensor, image: torch.Tensor,
                      window_tokens: torch.Tensor, context: int, image_count: int,
                      widths: tuple[int, ...], repeats: int, tiny: bool, device: torch.device
                      ) -> dict[str, Any]:
    """The forwards with ``capture="compile"``: both widths compiled first (their seconds), then
    timed as the other engines (tiny: a tracing-only backend; inductor's C++ build is slow)."""
    options = dict(backend="eager") if tiny else None
    compiled = StaticEngine(adapter, capture="compile", compile_options=options)
    compiled.reserve(image_count + 1, widths[-1] - 1)
    kept = prefilled(compiled, prompt, image, context)
    begin = time.perf_counter()
    for width in widths:
        compiled.forward(window_tokens[:width])
        compiled.crop(kept)
    return {"seconds": round(time.perf_counter() - begin, 2),
            "forwards": time_forwards(compiled, window_tokens, kept, widths, repeats, device)}


def image_tokens_within_budget(compare: dict[str, Any] | None, tokens: int, floor: int,
                               seconds_left: float) -> int:
    """``tokens``, or fewer (not below ``floor``) when the three methods at the static compare
    run's wall time per forward (+10%, one forward per token at worst) would not end 90 s before
    the budget does: the record says so (``decoding.static_image.tokens``)."""
    if not compare:
        return min(tokens, floor)
    ms = max(row["wall_ms_per_forward"] for row in compare["methods"].values())
    affordable = int((seconds_left - 90) / (3 * 1.1 * ms / 1e3))
    return max(floor, min(tokens, affordable))


def _part(errors: dict[str, str], name: str, fn: Any) -> Any:
    """``fn()``, or None with the error recorded under ``name`` (one failing part, e.g. a capture
    that does not work on this device, leaves the others measured)."""
    try:
        return fn()
    except Exception as error:  # noqa: BLE001 (recorded, the run goes on)
        errors[name] = f"{type(error).__name__}: {error}"[:2000]
        print(f"{name} failed: {errors[name]}", file=sys.stderr, flush=True)
        return None


def run(args: argparse.Namespace) -> None:
    total_start = time.perf_counter()
    tiny = args.tiny
    device = torch.device("cpu" if tiny else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --tiny on the CPU")
    dtype = torch.float32 if tiny else torch.bfloat16
    config = shapes.model_config(tiny)
    build_start = time.perf_counter()
    state = shapes.random_state(config, device=device, dtype=dtype, seed=args.seed)
    model = build_lumina_model(config, state, device=device)
    del state
    layout = LuminaImageLayout.from_vocabulary(config.vocabulary_map, 128 if tiny else 768)
    adapter = LuminaMGPTAdapter(model, layout, top_k=2000, temperature=1.0, cfg_scale=3.0)
    _sync(device)
    build_seconds = time.perf_counter() - build_start

    context = args.context or (48 if tiny else 2300)
    window = args.window
    widths = (1, window + 1)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    prompt = shapes._text_prompt(layout, config.vocab_size, 32, generator, device)
    image_count = context - prompt.numel() + window + 1
    if context <= prompt.numel() or image_count > layout.num_image_tokens:
        raise SystemExit(f"--context must leave room for a window inside one image "
                         f"({layout.num_image_tokens} tokens after a {prompt.numel()}-token prompt)")
    image = adapter.random_tokens(torch.arange(image_count, device=device), generator)
    window_tokens = image[context - prompt.numel():]

    bandwidth = read_bandwidth(device, tiny)
    capture = "graph" if device.type == "cuda" else "none"
    engines = {"eager": adapter,
               "static-eager": StaticEngine(adapter, capture="none"),
               "captured": StaticEngine(adapter, capture=capture),
               "captured-model": StaticEngine(adapter, capture=capture, capture_processing=False)}
    errors: dict[str, str] = {}
    forwards = {}
    for name, runner in engines.items():
        if runner is not adapter:
            runner.reserve(image_count + 1, window)
        forwards[name] = _part(errors, f"forwards {name}", lambda runner=runner: time_forwards(
            runner, window_tokens, prefilled(runner, prompt, image, context), widths, args.repeats, device))
    # Decoding on the fullest capture that worked (a device refusing to record the processing
    # still measures the model's graph).
    chosen = next((name for name in ("captured", "captured-model") if forwards[name]), "static-eager")
    decoder = StaticEngine(adapter, capture=capture if chosen != "static-eager" else "none",
                           capture_processing=chosen != "captured-model")
    batch = 2  # the CFG pair
    limits = {}
    for kind, count in forward_bytes(model, context, batch).items():
        limits[kind] = round(1e3 * count / bandwidth, 3)
        if args.nominal_tbs:
            limits[kind + "_nominal"] = round(1e3 * count / (args.nominal_tbs * 1e12), 3)

    # The paper's rule with the released filters (d = 0.5, gap 0.15) on the input embeddings.
    rule = DecodingMethod("gsd", window=window, clusters="dynamic", group_size=14,
                          filters=FilterSettings(max_prob_gap=0.15, max_embedding_distance=0.5)).resolve(adapter)
    short = shapes._text_prompt(layout, config.vocab_size, 16, generator, device)
    decode_tokens = args.decode_tokens or layout.num_image_tokens
    compare_tokens = args.compare_tokens or (24 if tiny else 256)
    decoding = {}  # the static cache only grows: the short runs first, each sized for its length
    for name, engine in (("static_compare", decoder), ("eager_compare", "eager")):
        decoding[name] = _part(errors, f"decoding {name}", lambda engine=engine: decode_methods(
            adapter, short, rule, window, compare_tokens, engine, args.seed, device))
    syncs = {name: _part(errors, f"syncs {name}", lambda engine=engine: syncs_per_step(
        adapter, short, rule, window, engine, device)) for name, engine in (("static", decoder), ("eager", "eager"))}
    decode_tokens = image_tokens_within_budget(decoding["static_compare"], decode_tokens, compare_tokens,
                                               args.budget_s - (time.perf_counter() - total_start))
    decoding["static_image"] = _part(errors, "decoding static_image", lambda: decode_methods(
        adapter, short, rule, window, decode_tokens, decoder, args.seed, device))
    window_ms = (forwards[chosen] or {}).get(str(window + 1), {}).get("model_ms")
    gsd_ratio = (decoding["static_image"] or {}).get("methods", {}).get("gsd", {}).get("wall_over_nfe")

    record: dict[str, Any] = {
        **shapes.run_header("gpu_static_engine", tiny, device),
        "dtype": str(dtype).replace("torch.", ""),
        "parameters": estimated_parameters(config),
        "context_tokens": context,
        "cfg_batch": batch,
        "window": window,
        "widths": list(widths),
        "repeats": args.repeats,
        "build_seconds": round(build_seconds, 3),
        "static_capacity": engines["captured"].capacity,
        "capture": capture,
        "capture_seconds": {name: round(engines[name].capture_seconds, 3)
                            for name in ("captured", "captured-model")},
        "decoding_engine": chosen,
        "bandwidth_gbs": round(bandwidth / 1e9, 1),
        "limit_ms": limits,
        "forwards": forwards,
        "decoding": decoding,
        "syncs_per_step": syncs,
        "targets": {
            "window_forward_ms": window_ms,
            "window_forward_limit_ms": limits["weights"],
            "window_over_limit": None if window_ms is None else round(window_ms / limits["weights"], 3),
            "window_within_2x": None if window_ms is None else window_ms <= 2 * limits["weights"],
            "gsd_wall_over_nfe": gsd_ratio,
            "gsd_within_15_percent": None if gsd_ratio is None else gsd_ratio >= 0.85,
        },
        "errors": errors,
        "peak_memory_gb": round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        if device.type == "cuda" else None,
        "complete": not args.compile,
        "total_seconds": round(time.perf_counter() - total_start, 2),
    }
    print(json.dumps(record), flush=True)
    if not args.compile:
        return
    elapsed = time.perf_counter() - total_start
    if elapsed > args.budget_s - COMPILE_RESERVE_S:
        record["compile"] = {"skipped": f"{elapsed:.0f} s elapsed; --budget-s {args.budget_s:.0f} "
                                        f"leaves less than {COMPILE_RESERVE_S:.0f} s"}
    else:
        record["compile"] = _part(errors, "compile", lambda: compiled_forwards(
            adapter, prompt, image, window_tokens, context, image_count, widths, args.repeats, tiny, device))
    record["complete"] = True
    record["total_seconds"] = round(time.perf_counter() - total_start, 2)
    if device.type == "cuda":
        record["peak_memory_gb"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    print(json.dumps(record), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny model on the CPU (dry run)")
    parser.add_argument("--context", type=int, default=None, help="cache tokens before the timed forwards "
                        "(default 2300; tiny 48)")
    parser.add_argument("--window", type=int, default=15, help="drafts per window (forward of window + 1)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--decode-tokens", type=int, default=None,
                        help="tokens per static decode (default: one image, 2352 at 768 px)")
    parser.add_argument("--compare-tokens", type=int, default=None,
                        help="tokens per decode in the eager-vs-static comparison (default 256; tiny 24)")
    parser.add_argument("--nominal-tbs", type=float, default=None,
                        help="the device's nominal bandwidth in TB/s for a second limit (H200: 4.8)")
    parser.add_argument("--compile", action="store_true",
                        help="also time capture='compile' (inductor, reduce-overhead), last")
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="seconds for the run: the image decode shortens to end 90 s before it, "
                             "the compile part is skipped when less than 240 s remain")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.window < 1 or args.repeats < 1:
        parser.error("--window and --repeats must be >= 1")
    run(args)


if __name__ == "__main__":
    main()
