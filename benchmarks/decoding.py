"""AR vs SJD vs GSD through ``gsd_lab.decoding.generate`` on a small random LlamaForCausalLM:
nfe, wall time, and the share of wall time spent outside the model's forward pass (logits
processing, verification, drafting, cache bookkeeping). Target: under 10% when one forward
takes a few milliseconds.

The model is randomly initialised with the stand-in's shape (Llama, hidden 256, 4 layers, 4 heads,
FFN 704; vocabulary 1100 with 1024 image tokens; a class-token prompt, 256 generated tokens, a
CFG pair; optional top-k), so acceptance is low and
nfe is not the point here (the stand-in issue measures real acceptance); the point is that
the loop around the model is cheap. Each method runs ``--repeats`` generations with fixed
seeds after one warm-up; the table reports totals over the repeats.

    python benchmarks/decoding.py [--tokens 256] [--window 16] [--group-size 10] [--repeats 3]
                                  [--hidden 256] [--layers 4] [--top-k K] [--threads T] [--no-cfg] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from gsd_core import DynamicClusters
from gsd_lab.decoding import generate
from gsd_lab.models import CausalLMAdapter

IMAGE_TOKENS = 1024
VOCAB = 1100


def build_adapter(args: argparse.Namespace) -> CausalLMAdapter:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=args.hidden, intermediate_size=args.intermediate,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         max_position_embeddings=args.tokens + 64, initializer_range=0.05)
    model = LlamaForCausalLM(config).eval()
    return CausalLMAdapter(model, allowed_tokens=torch.arange(IMAGE_TOKENS), top_k=args.top_k,
                           cfg_scale=None if args.no_cfg else args.cfg, row_length=16)


def forward_ms(adapter: CausalLMAdapter, prompt: torch.Tensor, uncond, context: int, new: int, repeats: int = 20) -> float:
    """Median model time of one forward of ``new`` tokens at ``context`` cached tokens."""
    adapter.start(prompt, uncond)
    filler = torch.randint(IMAGE_TOKENS, (context - prompt.numel(),), generator=torch.Generator().manual_seed(0))
    adapter.forward(torch.cat([prompt, filler]), num_rows=1)
    times = []
    for _ in range(repeats):
        before = adapter.model_seconds
        adapter.forward(filler[:new], num_rows=new)
        times.append(adapter.model_seconds - before)
        adapter.crop(context)
    return 1000 * sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=704)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--cfg", type=float, default=3.0)
    parser.add_argument("--no-cfg", action="store_true")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    adapter = build_adapter(args)
    prompt = torch.tensor([IMAGE_TOKENS + 3])  # a class token
    uncond = None if args.no_cfg else torch.tensor([IMAGE_TOKENS])  # the null class
    methods = {
        "ar": dict(method="ar"),
        "sjd": dict(method="sjd", window=args.window),
        f"gsd(G={args.group_size})": dict(method="gsd", window=args.window,
                                          clusters=DynamicClusters(args.group_size)),
    }
    rows = {}
    for name, kwargs in methods.items():
        generate(adapter, prompt, num_tokens=16, generator=torch.Generator().manual_seed(99),
                 uncond_prompt_ids=uncond, **kwargs)  # warm-up
        nfe = wall = model = accepted = drafted = 0
        for seed in range(args.repeats):
            result = generate(adapter, prompt, num_tokens=args.tokens, generator=torch.Generator().manual_seed(seed),
                              uncond_prompt_ids=uncond, **kwargs)
            nfe += result.nfe
            wall += result.wall_seconds
            model += result.model_seconds
            accepted += sum(result.accepted)
            drafted += sum(result.drafted)
        rows[name] = dict(nfe=nfe / args.repeats, wall_seconds=wall / args.repeats,
                          model_seconds=model / args.repeats, overhead_share=(wall - model) / wall,
                          acceptance_rate=accepted / drafted if drafted else None,
                          ms_per_forward=1000 * wall / nfe, overhead_ms_per_forward=1000 * (wall - model) / nfe)
    context = args.tokens // 2
    latency = {f"model_ms_{n}": forward_ms(adapter, prompt, uncond, context, n) for n in (1, args.window + 1)}
    report = dict(config=dict(tokens=args.tokens, window=args.window, hidden=args.hidden, layers=args.layers,
                              vocab=VOCAB, top_k=args.top_k, cfg=None if args.no_cfg else args.cfg,
                              threads=torch.get_num_threads(), params=sum(p.numel() for p in adapter.model.parameters())),
                  forward_latency_at_context=dict(context=context, **latency), methods=rows)
    if args.json:
        print(json.dumps(report))
        return
    cfg = report["config"]
    print(f"random Llama: {cfg['params'] / 1e6:.2f}M params, vocab {VOCAB}, {cfg['tokens']} tokens, window "
          f"{cfg['window']}, top-k {cfg['top_k']}, cfg {cfg['cfg']}, {cfg['threads']} threads; "
          f"mean of {args.repeats} seeds")
    print(f"model forward at {context} cached tokens: {latency['model_ms_1']:.2f} ms for 1 token, "
          f"{latency[f'model_ms_{args.window + 1}']:.2f} ms for {args.window + 1}")
    header = f"{'method':<12}{'nfe':>8}{'accept':>8}{'wall s':>9}{'model s':>9}{'ms/fwd':>8}{'ovh ms/fwd':>11}{'outside':>9}"
    print(header)
    for name, r in rows.items():
        acc = "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.3f}"
        print(f"{name:<12}{r['nfe']:>8.1f}{acc:>8}{r['wall_seconds']:>9.3f}{r['model_seconds']:>9.3f}"
              f"{r['ms_per_forward']:>8.2f}{r['overhead_ms_per_forward']:>11.2f}{100 * r['overhead_share']:>8.1f}%")


if __name__ == "__main__":
    start = time.perf_counter()
    main()
