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
own line), ``gsd_core.verify``, the loop's draws (gsd_core's ``draw``: AR's token;
``DraftChain.redraft``: the Jacobi re-drafts) and the rest of the loop (input and position ids,
random drafts, cache crop, status read, bookkeeping): cumulative times (``PARTS``) from one more
decode of the first image under cProfile, so cProfile's cost per Python call is in them; the
other columns come from the unprofiled decodes.

Why SJD/GSD's overhead stays high on a CPU: the adapter's bit-exact float64 processing of the
window's [L + 1, V] rows (CFG mix, top-k selection and mask, softmax: each a full pass over the
rows) costs about as much as a small forward, before verify and the Jacobi re-drafts; exp/softmax
over the kept top-k entries alone is not bit-identical to torch.softmax over the row (its sum runs
in vector lanes by column position), so it cannot replace it. Wall-clock speed-up = NFE speed-up x
(AR's ms per forward / the method's ms per forward): a forward over a 17-token window costs
more than a 1-token one on a CPU (printed), and the overhead per forward is larger too.

    python benchmarks/decoding.py [--model standin|random] [--images 2] [--tokens 256] [--window 16] [--runner eager|static]
                                  [--group-size 10] [--threads 1] [--json]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from typing import Iterator

import torch

import gsd_lab.decode.loop as decoding
from gsd_lab.decode.methods import DecodingMethod, ResolvedMethod, ClusterAcceptance
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
    gsd = DecodingMethod("gsd", window=args.window, acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=args.group_size))
    return adapter, gsd.resolve(adapter), prompts


def standin_adapter(args: argparse.Namespace) -> tuple[CausalLMAdapter, ResolvedMethod, list]:
    """The stand-in as the figures use it, GSD's dynamic clusters with the figures' filters."""
    from gsd_lab.experiments.image_model import standin_image_model
    from gsd_lab.experiments.runs import resolve_for
    from gsd_lab.standin.adapter import load_standin

    adapter = load_standin()
    model = standin_image_model(adapter, with_metrics=False)
    gsd = DecodingMethod("gsd", window=args.window, acceptance=ClusterAcceptance(group_size=args.group_size))
    prompts = [(adapter.prompt_ids(i % adapter.num_classes), adapter.uncond_prompt_ids())
               for i in range(args.images)]
    return adapter, resolve_for(model, gsd), prompts


# part: the (file, function) whose cumulative time it is, counting only calls from ``caller``
# (a file) where one is named.
PARTS = {
    "process": [("gsd_lab/models/adapter.py", "_process", None)],
    "cfg": [("gsd_lab/models/adapter.py", "combine_guidance", None)],
    "topk": [("gsd_lab/models/adapter.py", "process_logits", None)],
    "support": [("gsd_lab/models/adapter.py", "kept_ids", None)],
    "verify": [("gsd_lab/engine/verify.py", "verify", "gsd_lab/decode/loop.py"),
               ("benchmarks/decoding.py", "verify_without_support", "gsd_lab/decode/loop.py")],
    "sample": [("gsd_core/verification.py", "draw", "gsd_lab/decode/loop.py"),
               ("gsd_lab/decode/coupling.py", "redraft", "gsd_lab/decode/loop.py")],
}


def profiled_parts(decode: Callable[[], object]) -> tuple[object, dict[str, float]]:
    """``decode()``'s result and the seconds inside each of ``PARTS`` during it (cProfile's
    cumulative times, Python functions only; cProfile's own cost per call is in them)."""
    profile = cProfile.Profile(builtins=False)
    result = profile.runcall(decode)
    seconds: dict[str, float] = defaultdict(float)
    for (path, _, name), (_, _, _, cumulative, callers) in pstats.Stats(profile).stats.items():
        for part, functions in PARTS.items():
            for file, function, caller in functions:
                if path.endswith(file) and name == function:
                    seconds[part] += cumulative if caller is None else sum(
                        times[3] for (source, _, _), times in callers.items()
                        if source.endswith(caller))
    return result, seconds


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

    def decode(seed: int, prompt, uncond):
        return decoding.generate(adapter, prompt, method, num_tokens=tokens, runner=engine,
                                 generator=torch.Generator().manual_seed(seed),
                                 uncond_prompt_ids=uncond)

    for seed, (prompt, uncond) in enumerate(prompts):
        result = decode(seed, prompt, uncond)
        outputs.append(result.tokens)
        nfe += result.nfe
        wall += result.wall_seconds
        model += result.model_seconds
        accepted += sum(result.accepted)
        drafted += sum(result.drafted)
    n = len(prompts)
    overhead = wall - model
    totals = dict(nfe=nfe / n, wall_seconds=wall / n, model_seconds=model / n,
                  overhead_share=overhead / wall,
                  acceptance_rate=accepted / drafted if drafted else None,
                  ms_per_forward=1000 * wall / nfe, overhead_ms_per_forward=1000 * overhead / nfe)
    profiled, parts = profiled_parts(lambda: decode(0, *prompts[0]))
    parts["loop"] = (profiled.wall_seconds - profiled.model_seconds - parts["process"]
                     - parts["verify"] - parts["sample"])
    parts["softmax"] = parts["process"] - parts["cfg"] - parts["topk"] - parts["support"]
    totals.update({f"{part}_ms_per_forward": 1000 * seconds / profiled.nfe
                   for part, seconds in parts.items()})
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
