"""AR vs SJD vs GSD through ``gsd_lab.decode.loop.generate``, side by side in one run: nfe, wall
time, the share of wall time spent outside the model's forward pass, where that overhead goes,
and the wall-clock speed-ups of SJD and GSD over AR next to their NFE speed-ups.

Models (``--model``):
- ``standin`` (default): the embedded stand-in exactly as the figures run it
  (``load_standin``: float64 forward on CPU, CFG 3, top-k 2000 of 8192 image codes, 256 tokens;
  GSD with ``DynamicClusters`` and the figures' filters, ``DecodingMethod.resolve`` /
  ``FilterSettings``). Images: class ``i % classes`` with seed i, i < ``--images``.
- ``random``: a randomly initialised Llama of the stand-in's shape with vocabulary 1100 (1024
  image tokens), a class-token prompt, a CFG pair, optional top-k: acceptance is low, the point
  is the loop alone.

GSD runs twice: as the loop does it (the adapter's top-k support handed to ``verify``, which
then ranks those ids only) and with that support withheld (``verify`` finds it in all V); the
two must emit the same tokens (printed) and differ only in verify's time.

Target: at most 10% of the wall time outside the model for each method. Overhead per
forward is split into the adapter's processing (``_process``: the CFG mix, the allowed-token
mask / top-k / temperature, the support's ids for GSD, softmax and the rest, printed on their
own line), ``gsd_core.verify``, the loop's draws (``sample_categorical``: AR's token and the
Jacobi re-drafts) and the rest of the loop (input and position ids, random drafts, cache
crop, status read, bookkeeping), timed with ``time.perf_counter`` around those calls.

Why SJD/GSD stay above 10% on the stand-in on CPU (measured 2026-11-30, 1 thread): a 17-token
forward is about 12-13 ms, so 10% allows about 1.4 ms per forward outside it, while the
adapter's bit-exact float64 processing of the 17 x 8203 rows alone takes about 1.4 ms in the
loop (CFG mix 0.3, top-k selection and mask 0.8, softmax 0.3; about 1.0 ms in isolation, the
rest is cold caches after the forward), before verify (0.6 ms SJD) and the Jacobi re-drafts
(0.2 ms). Each of those steps is a full pass over [17, 8203] float64; exp/softmax over the
kept 2000 entries alone is not bit-identical to torch.softmax over the row (its sum runs in
vector lanes by column position), so it cannot replace it. Wall-clock speed-up = NFE speed-up x
(AR's ms per forward / the method's ms per forward): a forward over a 17-token window costs
more than a 1-token one on a CPU (printed), and the overhead per forward is larger too.

    python benchmarks/decoding.py [--model standin|random] [--images 2] [--tokens 256] [--window 16] [--runner eager|static]
                                  [--group-size 10] [--threads 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator

import torch

import gsd_lab.decode.loop as decoding
import gsd_lab.models.adapter as adapter_module
from gsd_lab.decode.methods import DecodingMethod, ResolvedMethod
from gsd_lab.models import CausalLMAdapter
from gsd_lab.models.static import runner_for

IMAGE_TOKENS = 1024
VOCAB = 1100


def random_adapter(args: argparse.Namespace) -> tuple[CausalLMAdapter, ResolvedMethod, list]:
    """The random Llama, its GSD method (no filters) and its (prompt, uncond) pairs."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=704,
                         num_hidden_layers=4, num_attention_heads=4,
                         max_position_embeddings=args.tokens + 64, initializer_range=0.05)
    model = LlamaForCausalLM(config).eval()
    adapter = CausalLMAdapter(model, allowed_tokens=torch.arange(IMAGE_TOKENS), top_k=args.top_k,
                              cfg_scale=3.0, row_length=16)
    null_class = torch.tensor([IMAGE_TOKENS])
    prompts = [(torch.tensor([IMAGE_TOKENS + 3 + i % 8]), null_class) for i in range(args.images)]
    gsd = DecodingMethod("gsd", window=args.window, clusters="dynamic-nofilter", group_size=args.group_size)
    return adapter, gsd.resolve(adapter), prompts


def standin_adapter(args: argparse.Namespace) -> tuple[CausalLMAdapter, ResolvedMethod, list]:
    """The stand-in as the figures use it, GSD's dynamic clusters with the figures' filters."""
    from gsd_lab.experiments.image_model import standin_image_model
    from gsd_lab.experiments.runs import resolve_for
    from gsd_lab.standin.adapter import load_standin

    adapter = load_standin()
    model = standin_image_model(adapter, with_metrics=False)
    gsd = DecodingMethod("gsd", window=args.window, clusters="dynamic", group_size=args.group_size)
    prompts = [(adapter.prompt_ids(i % adapter.num_classes), adapter.uncond_prompt_ids())
               for i in range(args.images)]
    return adapter, resolve_for(model, gsd), prompts


@contextmanager
def timed_parts(adapter: CausalLMAdapter) -> Iterator[dict[str, float]]:
    """Accumulate seconds spent while inside: in the adapter's processing ("process") and its
    parts (the CFG mix "cfg"; allowed-token mask, top-k and temperature "topk"; the support's
    ids "support"), in ``verify`` and in the loop's draws (``sample_categorical``: AR's token,
    the Jacobi re-drafts, "sample")."""
    seconds: dict[str, float] = defaultdict(float)
    original_verify, original_process = decoding.verify, adapter._process
    original_sample, original_kept = decoding.sample_categorical, adapter_module.kept_ids

    def timer(function, name):
        def wrapped(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[name] += time.perf_counter() - start
        return wrapped

    decoding.verify = timer(original_verify, "verify")
    decoding.sample_categorical = timer(original_sample, "sample")
    adapter_module.kept_ids = timer(original_kept, "support")
    adapter._process = timer(original_process, "process")
    adapter.combine_guidance = timer(adapter.combine_guidance, "cfg")
    adapter.process_logits = timer(adapter.process_logits, "topk")
    try:
        yield seconds
    finally:
        decoding.verify = original_verify
        decoding.sample_categorical = original_sample
        adapter_module.kept_ids = original_kept
        for name in ("_process", "combine_guidance", "process_logits"):
            delattr(adapter, name)  # back to the class's methods


@contextmanager
def support_withheld() -> Iterator[None]:
    """Inside: ``generate``'s verify calls get no ``support`` (verify finds it itself)."""
    original_verify = decoding.verify

    def verify_without_support(*args, support=None, **kwargs):
        return original_verify(*args, **kwargs)

    decoding.verify = verify_without_support
    try:
        yield
    finally:
        decoding.verify = original_verify


def forward_ms(adapter: CausalLMAdapter, prompt: torch.Tensor, uncond, context: int, new: int,
               repeats: int = 20, engine: str = "eager") -> float:
    """Median model time (ms) of one forward of ``new`` tokens at ``context`` cached tokens
    (``engine`` as ``generate``'s)."""
    runner = runner_for(adapter, engine, new_tokens=context + new, window=new - 1)
    runner.start(prompt, uncond)
    codes = adapter.allowed_tokens
    generator = torch.Generator().manual_seed(0)
    filler = codes[torch.randint(codes.numel(), (context - prompt.numel(),), generator=generator)]
    runner.forward(torch.cat([prompt, filler]), num_rows=1)
    times = []
    for _ in range(repeats):
        before = runner.model_seconds
        runner.forward(filler[:new], num_rows=new)
        times.append(runner.model_seconds - before)
        runner.crop(context)
    return 1000 * sorted(times)[len(times) // 2]


def run_method(adapter, prompts, tokens: int, method: DecodingMethod | ResolvedMethod,
               engine: str = "eager") -> tuple[list, dict]:
    """Totals over the prompts (seed i for prompt i) after a 16-token warm-up, and the tokens
    of each generation."""
    outputs = []
    prompt, uncond = prompts[0]
    decoding.generate(adapter, prompt, method, num_tokens=16, generator=torch.Generator().manual_seed(99),
                      uncond_prompt_ids=uncond, runner=engine)
    nfe = wall = model = accepted = drafted = 0
    with timed_parts(adapter) as parts:
        for seed, (prompt, uncond) in enumerate(prompts):
            generator = torch.Generator().manual_seed(seed)
            result = decoding.generate(adapter, prompt, method, num_tokens=tokens, generator=generator,
                                       uncond_prompt_ids=uncond, runner=engine)
            outputs.append(result.tokens)
            nfe += result.nfe
            wall += result.wall_seconds
            model += result.model_seconds
            accepted += sum(result.accepted)
            drafted += sum(result.drafted)
    n = len(prompts)
    overhead = wall - model
    outside = overhead - parts["process"] - parts["verify"] - parts["sample"]
    softmax = parts["process"] - parts["cfg"] - parts["topk"] - parts["support"]
    totals = dict(nfe=nfe / n, wall_seconds=wall / n, model_seconds=model / n,
                  overhead_share=overhead / wall,
                  acceptance_rate=accepted / drafted if drafted else None,
                  ms_per_forward=1000 * wall / nfe, overhead_ms_per_forward=1000 * overhead / nfe,
                  process_ms_per_forward=1000 * parts["process"] / nfe,
                  verify_ms_per_forward=1000 * parts["verify"] / nfe,
                  sample_ms_per_forward=1000 * parts["sample"] / nfe,
                  loop_ms_per_forward=1000 * outside / nfe,
                  cfg_ms_per_forward=1000 * parts["cfg"] / nfe,
                  topk_ms_per_forward=1000 * parts["topk"] / nfe,
                  support_ms_per_forward=1000 * parts["support"] / nfe,
                  softmax_ms_per_forward=1000 * softmax / nfe)
    return outputs, totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("standin", "random"), default="standin")
    parser.add_argument("--images", type=int, default=2,
                        help="generations per method (seed i, class i)")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=10)
    parser.add_argument("--top-k", type=int, default=None, help="random model only")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runner", choices=("eager", "static"), default="eager",
                        help="generate's runner (static: the static cache, uncaptured on a CPU)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the table")
    args = parser.parse_args()
    for flag, value in (("--images", args.images), ("--tokens", args.tokens),
                        ("--window", args.window), ("--group-size", args.group_size),
                        ("--threads", args.threads)):
        if value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    torch.set_num_threads(args.threads)

    build = standin_adapter if args.model == "standin" else random_adapter
    adapter, gsd_method, prompts = build(args)
    gsd = f"GSD(G={args.group_size})"
    methods = {"AR": DecodingMethod("ar"), "SJD": DecodingMethod("sjd", window=args.window), gsd: gsd_method}
    rows, outputs = {}, {}
    for name, method in methods.items():
        outputs[name], rows[name] = run_method(adapter, prompts, args.tokens, method, args.runner)
    with support_withheld():
        outputs["GSD -supp"], rows["GSD -supp"] = run_method(adapter, prompts, args.tokens,
                                                             methods[gsd], args.runner)
    same_tokens = all(torch.equal(a, b) for a, b in zip(outputs[gsd], outputs["GSD -supp"]))
    ar = rows["AR"]
    for r in rows.values():
        r["nfe_speedup"] = ar["nfe"] / r["nfe"]
        r["wall_speedup"] = ar["wall_seconds"] / r["wall_seconds"]
    context = args.tokens // 2
    prompt, uncond = prompts[0]
    latency = {f"model_ms_{n}": forward_ms(adapter, prompt, uncond, context, n, engine=args.runner)
               for n in (1, args.window + 1)}
    config = dict(model=args.model, images=args.images, tokens=args.tokens, window=args.window,
                  group_size=args.group_size, vocab=adapter.vocab_size, top_k=adapter.top_k,
                  cfg=adapter.cfg_scale, dtype=str(adapter.compute_dtype).removeprefix("torch."),
                  threads=torch.get_num_threads(), engine=args.runner,
                  params=sum(p.numel() for p in adapter.model.parameters()))
    report = dict(config=config, forward_latency_at_context=dict(context=context, **latency),
                  methods=rows, gsd_same_tokens_without_support=same_tokens)
    if args.json:
        print(json.dumps(report))
        return
    cfg = report["config"]
    print(f"{cfg['model']}: {cfg['params'] / 1e6:.2f}M params {cfg['dtype']}, "
          f"vocab {cfg['vocab']}, top-k {cfg['top_k']}, cfg {cfg['cfg']}, "
          f"{cfg['tokens']} tokens, window {cfg['window']}, {cfg['threads']} thread(s); "
          f"mean of {cfg['images']} image(s)")
    print(f"model forward at {context} cached tokens: {latency['model_ms_1']:.2f} ms for 1 token, "
          f"{latency[f'model_ms_{args.window + 1}']:.2f} ms for {args.window + 1}")
    print(f"{'method':<10}{'nfe':>7}{'accept':>8}{'wall s':>8}{'model s':>8}{'ms/fwd':>8}"
          f"{'ovh ms/fwd':>11}"
          f"{'process':>8}{'verify':>8}{'sample':>7}{'loop':>7}{'outside':>9}{'NFE x':>7}"
          f"{'wall x':>7}")
    for name, r in rows.items():
        acc = "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.3f}"
        print(f"{name:<10}{r['nfe']:>7.1f}{acc:>8}"
              f"{r['wall_seconds']:>8.3f}{r['model_seconds']:>8.3f}"
              f"{r['ms_per_forward']:>8.2f}{r['overhead_ms_per_forward']:>11.2f}"
              f"{r['process_ms_per_forward']:>8.2f}{r['verify_ms_per_forward']:>8.2f}"
              f"{r['sample_ms_per_forward']:>7.2f}"
              f"{r['loop_ms_per_forward']:>7.2f}{100 * r['overhead_share']:>8.1f}%"
              f"{r['nfe_speedup']:>7.2f}{r['wall_speedup']:>7.2f}")
    print("process, ms per forward: " + "; ".join(
        f"{name} cfg {r['cfg_ms_per_forward']:.2f} top-k {r['topk_ms_per_forward']:.2f} "
        f"support {r['support_ms_per_forward']:.2f} softmax+rest {r['softmax_ms_per_forward']:.2f}"
        for name, r in rows.items()))

    print(f"GSD -supp: GSD with the adapter's support withheld from verify; same tokens as "
          f"{gsd}: {same_tokens}")


if __name__ == "__main__":
    main()
