"""GPU shape check for Lumina-mGPT 7B: forward latency of a 1- and a 16-token window at a ~2300-token
context (a batched CFG pair) and the verification time of a 16-token window, on random weights.

Builds a full-size Chameleon 7B (vocab 65536, hidden 4096, 32 layers, FFN 11008, 32 heads) with
random bfloat16 weights directly on the GPU, through the same loading path as real checkpoints
(q/k-norms generated in the Lumina [1, head_dim] layout and expanded by ``expand_qk_norm``, strict
``build_lumina_model``), wraps it in ``LuminaMGPTAdapter`` (768 x 768 layout, CFG 3.0, top-k 2000),
prefills a CFG pair to ``--context`` tokens and times (CUDA-synchronised, median of ``--repeats``):

- ``forward_ms[T]``: one adapter forward of T = 1 and T = window new tokens (model + logits
  processing; the two sizes interleaved), the cache cropped back after each; ``model_ms[T]``:
  the model part alone;
- ``verify_ms``: the engine's ``verify`` (``gsd_lab.engine``, gsd_core's result) of one window, SJD (clusters None) and GSD (dynamic clusters,
  G = 14, d = 0.5 on the input embeddings, delta = 0.15; and unfiltered, the op-bound
  case), on the adapter's real [window + 1, 65536]
  distributions; ``verify_cost``: top-level aten ops and host syncs of those calls (each op is a
  kernel launch or a view on the GPU; ``gsd_lab.engine.profiling``), and the GSD call also given the
  support of p (``support=``) and without validation (``validate=False``, as the loop calls it);
- ``decoding``: ``gsd_lab.decode.loop.generate`` for AR, SJD and GSD (same rule) over
  ``--decode-tokens`` tokens from a short prompt: nfe, wall and model seconds, the share of
  wall time outside the model's forward, and the wall-clock against the NFE speed-up (random
  weights: near-uniform distributions, so acceptance is not the paper's; the point is the cost
  of everything around the forward on a GPU); the model's time per forward in those runs, and
  by the method's place in its round (the order rotates each round);
- ``bare_forwards_ms``: the model's time per forward at the same short context without the loop
  around it (1-token forwards appending, ``--window``-token windows cropped back), before and after the
  decoding part: what a forward costs when nothing runs between forwards.

Prints one JSON line. Needs nothing downloaded; about 16 GB of GPU memory; well under 8 minutes
on an H200. ``--tiny`` runs the same measurements on a tiny model on the CPU (used by the tests).

    python benchmarks/gpu_lumina_shapes.py            # on a GPU machine
    python benchmarks/gpu_lumina_shapes.py --tiny     # CPU smoke run
    python benchmarks/gpu_lumina_shapes.py --model janus-pro-7b   # Janus-Pro 7B shapes (run_janus)
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import socket
import statistics
import sys
import time

import torch
import transformers

from gsd_core import DynamicClusters
from gsd_lab.engine import verify
from gsd_lab.decode.loop import generate
from gsd_lab.decode.methods import DecodingMethod, FilterSettings, ResolvedMethod, ClusterAcceptance
from gsd_lab.models.lumina_checkpoint import (
    IMAGE_ENCODER_PREFIX,
    build_lumina_model,
    estimated_parameters,
    expand_qk_norm,
)
from gsd_lab.models.lumina_mgpt import (
    LuminaImageLayout,
    LuminaMGPTAdapter,
    chameleon_vocabulary_map,
)
from gsd_lab.engine.profiling import ops_and_syncs
from gsd_lab.io import provenance


def model_config(tiny: bool):
    from transformers import ChameleonConfig

    names = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
             "num_attention_heads", "num_key_value_heads", "max_position_embeddings")
    sizes = (8900, 64, 128, 2, 4, 4, 512) if tiny else (65536, 4096, 11008, 32, 32, 32, 4096)
    dims, num_codes = dict(zip(names, sizes)), 64 if tiny else 8192
    vocabulary_map = chameleon_vocabulary_map(dims["vocab_size"], num_codes)
    return ChameleonConfig(
        **dims,
        rope_theta=10000.0,
        model_parallel_size=1,
        tie_word_embeddings=False,
        vocabulary_map=vocabulary_map,
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=1,
    )


def random_state(
    config, *, device: torch.device, dtype: torch.dtype, seed: int
) -> dict[str, torch.Tensor]:
    """Random weights (std 0.02; norms 1) for every text-model key, q/k-norms in Lumina's
    [model_parallel_size, head_dim] layout expanded by the loader's ``expand_qk_norm``."""
    from transformers import ChameleonForConditionalGeneration

    with torch.device("meta"):
        shapes = {
            k: v.shape
            for k, v in ChameleonForConditionalGeneration(config).state_dict().items()
            if not k.startswith(IMAGE_ENCODER_PREFIX)
        }
    generator = torch.Generator(device=device).manual_seed(seed)
    head_dim = config.hidden_size // config.num_attention_heads
    state = {}
    for name, shape in shapes.items():
        if ".q_norm." in name or ".k_norm." in name:
            base = torch.ones if name.endswith("weight") else torch.zeros
            state[name] = expand_qk_norm(
                name, base(config.model_parallel_size, head_dim, device=device, dtype=dtype), config
            )
        elif name.endswith(("norm.weight", "layernorm.weight")):
            state[name] = torch.ones(shape, device=device, dtype=dtype)
        else:
            state[name] = (0.02 * torch.randn(shape, device=device, generator=generator)).to(dtype)
    return state


def git_commit() -> str | None:
    """HEAD of the repository this script runs from, with "-dirty" for local changes."""
    git = provenance.git_commit()
    return None if git["commit"] is None else git["commit"] + ("-dirty" if git["dirty"] else "")


def source_digest() -> str:
    """sha256 of the code measured (gsd_core/, gsd_lab/ and this script, *.py by path): names
    the code even where the checkout's git metadata is not current (a copied working tree)."""
    import hashlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = sorted([*root.glob("gsd_core/**/*.py"), *root.glob("gsd_lab/**/*.py"), Path(__file__).resolve()])
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def run_header(name: str, tiny: bool, device: torch.device,
               gpu_mode: str = "7b-gpu") -> dict[str, object]:
    """The fields that open a GPU benchmark's JSON record (the three ``gpu_*`` scripts share
    them): its name, when and where it ran (``mode`` "tiny-cpu" or ``gpu_mode``), the versions,
    and the code measured (``git_commit``, ``source_sha256``)."""
    return {
        "benchmark": name,
        "timestamp_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "mode": "tiny-cpu" if tiny else gpu_mode,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "git_commit": git_commit(),
        "source_sha256": source_digest(),
    }


def timed(fn, device: torch.device) -> tuple[float, object]:
    """(seconds, result) of ``fn()``, CUDA-synchronised before and after."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, result


def median_ms(fn, repeats: int, device: torch.device) -> float:
    """Median ms of ``repeats`` ``timed`` calls of ``fn`` after one warm-up call."""
    return 1e3 * statistics.median([timed(fn, device)[0] for _ in range(repeats + 1)][1:])


def device_and_dtype(tiny: bool) -> tuple[torch.device, torch.dtype]:
    """The CPU and float32 for ``--tiny``, else the GPU and bfloat16 (refused without one)."""
    if not tiny and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --tiny on the CPU")
    return (torch.device("cpu"), torch.float32) if tiny else (torch.device("cuda"), torch.bfloat16)


def peak_gib(device: torch.device) -> float | None:
    """Peak GPU memory allocated so far in GiB (2 decimals); None on the CPU."""
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 2)


def _text_prompt(layout: LuminaImageLayout, vocab_size: int, length: int,
                 generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """BOS, ``length`` random ids from the reserved range above the image tokens (the weights
    are random, so which ids does not matter), then the image header: [1 + length + H]."""
    text = torch.randint(layout.image_start + 1, vocab_size, (length,), generator=generator, device=device)
    return torch.tensor([layout.bos, *text.tolist(), *layout.header], device=device)


def _model_time(adapter: LuminaMGPTAdapter, input_ids: torch.Tensor) -> float:
    """Model seconds of one ``adapter.forward(input_ids)`` (its CUDA-synchronised timer)."""
    before = adapter.model_seconds
    adapter.forward(input_ids)
    return adapter.model_seconds - before


class ForwardTimes:
    """The model seconds of each forward pass of one ``generate`` call: an ``on_window`` hook
    (called once per pass) reading the adapter's own CUDA-synchronised model timer."""

    def __init__(self, adapter: LuminaMGPTAdapter) -> None:
        self.adapter, self.mark, self.seconds = adapter, adapter.model_seconds, []

    def __call__(self, window: object) -> None:
        now = self.adapter.model_seconds
        self.seconds.append(now - self.mark)
        self.mark = now


def _ms_summary(seconds: list[float]) -> dict[str, float | int]:
    """median / min / max / mean of per-forward times in ms, and their count."""
    if not seconds:
        return {}
    ms = [1e3 * s for s in seconds]
    return {"median": round(statistics.median(ms), 3), "min": round(min(ms), 3),
            "max": round(max(ms), 3), "mean": round(statistics.fmean(ms), 3), "count": len(ms)}


def window_medians(adapter, tokens: torch.Tensor, window: int, repeats: int,
                   device: torch.device) -> tuple[dict[int, float], dict[int, float]]:
    """Median ms of one adapter forward of ``tokens[:1]`` and of ``tokens[:window]`` after what the
    cache holds (cropped back after each): wall (``forward_ms``) and the model part (``model_ms``),
    over ``repeats`` rounds after a warm-up. Sizes interleaved (1, window, 1, window, ...):
    host-side noise hits both alike."""
    if window < 2:
        raise ValueError(f"window must be >= 2 to time it beside one token, got {window}")
    kept = adapter.seq_len
    wall: dict[int, list[float]] = {1: [], window: []}
    inner: dict[int, list[float]] = {1: [], window: []}
    for attempt in range(repeats + 1):  # the first round is a warm-up
        for size in (1, window):
            before = adapter.model_seconds
            seconds, _ = timed(functools.partial(adapter.forward, tokens[:size]), device)
            adapter.crop(kept)
            if attempt:
                wall[size].append(seconds)
                inner[size].append(adapter.model_seconds - before)
    forward_ms = {size: 1e3 * statistics.median(times) for size, times in wall.items()}
    model_ms = {size: 1e3 * statistics.median(times) for size, times in inner.items()}
    return forward_ms, model_ms


def timing_fields(kept: int, window: int, repeats: int, build_seconds: float,
                  prefill_seconds: float, forward_ms: dict[int, float],
                  model_ms: dict[int, float]) -> dict[str, object]:
    """The record's shared timing fields (a CFG pair: ``cfg_batch`` 2), rounded."""
    return {
        "context_tokens": kept, "cfg_batch": 2, "window": window, "repeats": repeats,
        "build_seconds": round(build_seconds, 3), "prefill_seconds": round(prefill_seconds, 4),
        "forward_ms": {str(k): round(v, 3) for k, v in forward_ms.items()},
        "model_ms": {str(k): round(v, 3) for k, v in model_ms.items()},
    }


def released_gsd(window: int, group_size: int = 14) -> DecodingMethod:
    """GSD with the released filters: max_prob_gap 0.15, max_embedding_distance 0.5."""
    return DecodingMethod("gsd", window=window, acceptance=ClusterAcceptance(group_size=group_size),
                          filters=FilterSettings(max_prob_gap=0.15, max_embedding_distance=0.5))


def decode_overhead(
    adapter, layout, config, gsd_rule, window: int, num_tokens: int, seed: int, device,
    rounds: int = 3,
) -> dict:
    """AR, SJD and GSD through ``generate`` from one short prompt (a full-length warm-up each, then
    ``rounds`` rounds, the methods' order rotated by one each round so that no method always
    runs first): mean nfe, wall and model seconds per call, overhead share (wall - model) / wall
    over all rounds (and its range over calls), speed-ups over AR; and the model's time per
    forward after the prompt's (``model_ms_window_forwards``: median, min, max, mean; AR's
    windows are single tokens), overall and by the method's place in its round
    (``model_ms_by_place``: medians; place p in round r is the method at index (r + p) mod 3
    of AR, SJD, GSD)."""
    generator = torch.Generator(device=device).manual_seed(seed + 1)
    prompt = _text_prompt(layout, config.vocab_size, 16, generator, device)
    # gsd_rule is the paper's rule with the released filters (d = 0.5, gap 0.15), as specified.
    gsd = ResolvedMethod(released_gsd(window, gsd_rule.group_size), clusters=gsd_rule)
    methods = {"ar": DecodingMethod("ar"), "sjd": DecodingMethod("sjd", window=window), "gsd": gsd}
    # Warm-up over the full length: on the H200 the first forwards at new context lengths took
    # up to 1.1 s (one-time costs; the same forwards take ~30 ms afterwards), which would
    # otherwise fall on whichever method reaches those lengths first.
    for method in methods.values():
        generate(adapter, prompt, method, num_tokens=num_tokens, generator=generator)
    runs: dict[str, list] = {name: [] for name in methods}
    window_forwards: dict[str, list[float]] = {name: [] for name in methods}
    by_place: dict[str, dict[int, list[float]]] = {name: {} for name in methods}
    names = list(methods)
    for r in range(rounds):  # methods interleaved, so that host-side noise hits each alike
        order = names[r % len(names):] + names[: r % len(names)]
        for place, name in enumerate(order):
            calls = ForwardTimes(adapter)
            runs[name].append(generate(adapter, prompt, methods[name], num_tokens=num_tokens,
                                       generator=generator, on_window=calls))
            after_prompt = calls.seconds[1:]  # every forward after the prompt's (AR's: 1 token)
            window_forwards[name] += after_prompt
            by_place[name].setdefault(place, []).extend(after_prompt)
    rows = {}
    for name, results in runs.items():
        wall = sum(r.wall_seconds for r in results)
        model = sum(r.model_seconds for r in results)
        nfe = sum(r.nfe for r in results)
        shares = [1 - r.model_seconds / r.wall_seconds for r in results]
        rows[name] = {
            "nfe": nfe / rounds,
            "acceptance_rate": None if name == "ar" else sum(sum(r.accepted) for r in results)
            / max(1, sum(sum(r.drafted) for r in results)),
            "wall_seconds": round(wall / rounds, 4),
            "model_seconds": round(model / rounds, 4),
            "overhead_share": round(1 - model / wall, 4),
            "overhead_share_range": [round(min(shares), 4), round(max(shares), 4)],
            "ms_per_forward": round(1e3 * wall / nfe, 3),
            "model_ms_per_forward": round(1e3 * model / nfe, 3),
            "model_ms_window_forwards": _ms_summary(window_forwards[name]),
            "model_ms_by_place": {str(place): _ms_summary(seconds)["median"]
                                  for place, seconds in sorted(by_place[name].items()) if seconds},
        }
    for row in rows.values():
        row["nfe_speedup"] = round(rows["ar"]["nfe"] / row["nfe"], 3)
        row["wall_speedup"] = round(rows["ar"]["wall_seconds"] / row["wall_seconds"], 3)
    return {"tokens": num_tokens, "rounds": rounds, "methods": rows}


def bare_forwards(
    adapter: LuminaMGPTAdapter, layout: LuminaImageLayout, config: object, window: int, seed: int,
    device: torch.device, count: int = 24,
) -> dict[str, dict[str, float | int]]:
    """The model's time per forward without the decoding loop around it, at the decoding
    part's short context: after the same kind of prompt, ``count`` 1-token forwards appending
    to the cache, then ``count`` forwards of ``window`` tokens (cache cropped back each time),
    back to back. Run before the decoding part it includes the first forwards at these short
    context lengths (one-time costs, if any); run after it, the steady state, to compare with
    the per-forward times inside the loop."""
    generator = torch.Generator(device=device).manual_seed(seed + 2)
    prompt = _text_prompt(layout, config.vocab_size, 16, generator, device)
    tokens = adapter.random_tokens(torch.arange(count + window, device=device), generator)
    adapter.start(prompt)
    adapter.forward(prompt, num_rows=1)
    one = [_model_time(adapter, tokens[i: i + 1]) for i in range(count)]
    kept = adapter.seq_len
    windows: list[float] = []
    for _ in range(count):
        windows.append(_model_time(adapter, tokens[count: count + window]))
        adapter.crop(kept)
    return {"one_token": _ms_summary(one), f"window_{window}": _ms_summary(windows)}


def run(
    tiny: bool, context: int, window: int, repeats: int, seed: int, decode_tokens: int
) -> dict:
    total_start = time.perf_counter()
    device, dtype = device_and_dtype(tiny)
    config = model_config(tiny)
    build_start = time.perf_counter()
    state = random_state(config, device=device, dtype=dtype, seed=seed)
    model = build_lumina_model(config, state, device=device)
    del state
    resolution = 128 if tiny else 768
    layout = LuminaImageLayout.from_vocabulary(config.vocabulary_map, resolution)
    adapter = LuminaMGPTAdapter(model, layout, top_k=2000, temperature=1.0, cfg_scale=3.0)
    build_seconds = timed(lambda: None, device)[0] + time.perf_counter() - build_start

    generator = torch.Generator(device=device).manual_seed(seed)
    prompt = _text_prompt(layout, config.vocab_size, 32, generator, device)
    generated_count = context - prompt.numel()
    if generated_count < 1 or generated_count + window + 1 > layout.num_image_tokens + 1:
        raise SystemExit(
            f"--context must leave room for the window inside one image ({layout.num_image_tokens} tokens)"
        )
    tokens = adapter.random_tokens(
        torch.arange(generated_count + window + 1, device=device), generator
    )
    adapter.start(prompt)
    prefill_input = torch.cat([prompt, tokens[:generated_count]])
    prefill_seconds, _ = timed(lambda: adapter.forward(prefill_input, num_rows=1), device)
    kept = adapter.seq_len

    forward_ms, model_ms = window_medians(
        adapter, tokens[generated_count:], window, repeats, device
    )

    # Verification of one window in the decoding loop's shape: p [L + 1, V] from a forward over
    # L + 1 tokens (L drafts and the bonus row), q [L, V] from another row set.
    p = adapter.forward(tokens[generated_count : generated_count + window + 1])
    adapter.crop(kept)
    q = torch.roll(p[:window], shifts=1, dims=0)
    drafts = torch.multinomial(q.float(), 1, generator=generator).squeeze(-1)
    gsd_rule = DynamicClusters(
        14, max_embedding_distance=0.5, max_prob_gap=0.15, embeddings=adapter.embeddings
    )
    # The support of the draft rows (every id with p > 0, width = the widest row), as the
    # adapter hands it to the loop on CPU; here computed once on the GPU.
    rows = p[: drafts.numel()]
    width = int((rows > 0).sum(-1).max())
    support = torch.topk(rows, width, dim=-1).indices
    variants = {
        "sjd": dict(rule=None),
        "gsd_unfiltered": dict(rule=DynamicClusters(14)),  # the op-bound case
        "gsd": dict(rule=gsd_rule),
        "gsd_support": dict(rule=gsd_rule, support=support),
        "gsd_support_novalidate": dict(rule=gsd_rule, support=support, validate=False),
    }
    verify_ms, verify_cost = {}, {}
    for name, kwargs in variants.items():
        call = functools.partial(verify, p, q, drafts, generator=generator, **kwargs)
        verify_ms[name] = median_ms(call, repeats, device)
        ops, syncs = ops_and_syncs(call)
        verify_cost[name] = {"ops": ops, "syncs": syncs}
    del p, q

    bare_before = bare_forwards(adapter, layout, config, window, seed, device, count=4 if tiny else 24)
    decoding = decode_overhead(adapter, layout, config, gsd_rule, window, decode_tokens, seed,
                               device, rounds=1 if tiny else 3)
    bare_after = bare_forwards(adapter, layout, config, window, seed, device, count=4 if tiny else 24)

    result = {
        **run_header("gpu_lumina_shapes", tiny, device),
        "dtype": str(dtype).replace("torch.", ""),
        "parameters": estimated_parameters(config),
        "vocab_size": config.vocab_size,
        **timing_fields(kept, window, repeats, build_seconds, prefill_seconds, forward_ms,
                        model_ms),
        "window_cost_ratio": round(forward_ms[window] / forward_ms[1], 3),
        "verify_ms": {k: round(v, 3) for k, v in verify_ms.items()},
        "verify_cost": verify_cost,
        "decoding": decoding,
        "bare_forwards_ms": {"before_decoding": bare_before, "after_decoding": bare_after},
        "peak_memory_gb": peak_gib(device),
        "total_seconds": None,
    }
    result["total_seconds"] = round(time.perf_counter() - total_start, 2)
    return result


JANUS_MODELS = ("janus-pro-1b", "janus-pro-7b")


def run_janus(
    name: str, tiny: bool, window: int, repeats: int, seed: int, decode_tokens: int
) -> dict:
    """Janus-Pro at its released size (``gsd_lab.models.janus.release_config``) with random
    weights (bfloat16, built on the GPU), through ``JanusAdapter`` (CFG 5, the stock defaults;
    ``--tiny``: the tiny test configuration on the CPU): ``forward_ms`` / ``model_ms`` of a 1-
    and a ``window``-token window of codes after a ~32-token prompt and ``context_codes`` codes
    (median of ``repeats``, cropped back after each), ``decoding`` (AR, SJD, GSD over
    ``decode_tokens`` codes: nfe, wall and model seconds) and ``vq_decode`` (one image of 576
    codes, or the tiny grid, through ``JanusVQVAE.decode``: its pixel shape and seconds)."""
    from gsd_lab.models.janus import JanusAdapter, estimated_parameters, release_config
    from gsd_lab.testing.tiny_checkpoints import tiny_janus_config
    from transformers import GenerationConfig, JanusForConditionalGeneration

    total_start = time.perf_counter()
    device, dtype = device_and_dtype(tiny)
    config = tiny_janus_config() if tiny else release_config(name)
    build_start = time.perf_counter()
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(dtype)
        with torch.random.fork_rng(devices=[]), torch.device(device):
            torch.manual_seed(seed)
            model = JanusForConditionalGeneration(config).eval()
    finally:
        torch.set_default_dtype(previous)
    text = config.text_config
    boi = 3 if tiny else 100016
    model.generation_config = GenerationConfig(
        bos_token_id=text.bos_token_id, pad_token_id=text.pad_token_id,
        generation_kwargs={"boi_token_id": boi}, guidance_scale=5.0,
    )
    adapter = JanusAdapter(model)
    build_seconds = timed(lambda: None, device)[0] + time.perf_counter() - build_start
    generator = torch.Generator(device=device).manual_seed(seed)
    low = 7 if tiny else 1000  # ordinary text ids (random weights: which ones does not matter)
    body = torch.randint(low, text.vocab_size if tiny else 90000, (30,), generator=generator,
                         device=device)
    prompt = torch.cat([torch.tensor([text.bos_token_id], device=device), body,
                        torch.tensor([boi], device=device)])
    n = adapter.num_image_tokens
    context_codes = max(1, min(n - window - 1, n // 2 if tiny else 500))
    codes = adapter.random_tokens(torch.arange(context_codes + window, device=device), generator)
    adapter.start(prompt)
    prefill_seconds, _ = timed(
        lambda: adapter.forward(torch.cat([prompt, codes[:context_codes]]), num_rows=1), device
    )
    kept = adapter.seq_len
    forward_ms, model_ms = window_medians(adapter, codes[context_codes:], window, repeats, device)
    decoding = {}
    tokens = min(decode_tokens, n)
    gsd = DecodingMethod("gsd", window=window, acceptance=ClusterAcceptance(group_size=10))
    for method in (DecodingMethod("ar"), DecodingMethod("sjd", window=window), gsd):
        forwards, model_before = adapter.num_forwards, adapter.model_seconds
        seconds, out = timed(lambda: generate(
            adapter, prompt, method, num_tokens=tokens,
            generator=torch.Generator(device=device).manual_seed(seed)), device)
        decoding[method.kind] = {
            "nfe": adapter.num_forwards - forwards,
            "wall_seconds": round(seconds, 3),
            "model_seconds": round(adapter.model_seconds - model_before, 3),
        }
    image_codes = adapter.random_tokens(torch.arange(n, device=device), generator)
    vq_seconds, pixels = timed(lambda: adapter.decode_images(image_codes), device)
    return {
        **run_header("gpu_lumina_shapes", tiny, device),
        "model": name,
        "dtype": str(dtype).replace("torch.", ""),
        "parameters": estimated_parameters(config),
        "codebook": adapter.vocab_size,
        "image_tokens": n,
        **timing_fields(kept, window, repeats, build_seconds, prefill_seconds, forward_ms,
                        model_ms),
        "decoding": {"tokens": tokens, "methods": decoding},
        "vq_decode": {"pixels": list(pixels.shape[1:]), "seconds": round(vq_seconds, 4)},
        "peak_memory_gb": peak_gib(device),
        "total_seconds": round(time.perf_counter() - total_start, 2),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny model on the CPU (smoke test)")
    parser.add_argument("--context", type=int, default=None,
                        help="tokens in the cache before the window (default 2300; tiny 48)")
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decode-tokens", type=int, default=None,
                        help="tokens per generate call in the decoding part (default 128; tiny 12)")
    parser.add_argument("--model", choices=("lumina-mgpt-7b-768", *JANUS_MODELS),
                        default="lumina-mgpt-7b-768", help="the family measured (default "
                        "Lumina-mGPT; Janus-Pro: run_janus, --context unused)")
    args = parser.parse_args(argv)
    decode_tokens = args.decode_tokens or (12 if args.tiny else 128)
    if args.window < 1 or args.repeats < 1 or decode_tokens < 2:
        parser.error("--window and --repeats must be >= 1, --decode-tokens >= 2")
    if args.model in JANUS_MODELS:
        result = run_janus(args.model, args.tiny, args.window, args.repeats, args.seed,
                           decode_tokens)
        print(json.dumps(result), flush=True)
        return result
    context = args.context if args.context is not None else (48 if args.tiny else 2300)
    result = run(args.tiny, context, args.window, args.repeats, args.seed, decode_tokens)
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
