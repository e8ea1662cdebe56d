"""Time ``gsd_core.verify`` against a per-position loop in the released GSD code's style.

Lumina-mGPT-sized case: vocabulary V = 65536 (image tokens are ids 4..8195), a Jacobi window
of L = 16 drafts plus a bonus row, target rows p = softmax(top-k 2000 of the logits), and the
paper's dynamic clusters (DynamicClusters(14): the 7 ranks on each side of the draft in the
p-ranking). The reference loop does what the released code does per window: a Python loop
over positions that, at every position, sorts the whole window's rows over the full
vocabulary, slices the draft's rank window, and tests u < min(1, p(C)/q(C)); at the first
rejection it resamples from norm((p - q)+) and stops. Both get the same uniforms; the script
checks that they take the same decisions and emit the same tokens, then prints the times
(median over repeats) and the ratios, for ``verify`` as it is called by default (all L
acceptance probabilities, inputs validated) and with ``stop_early=True`` (position 0 first,
the rest only if it was accepted: the reference loop also stops at the first rejection).

Two draft scenarios: "random-init" (SJD's random initialisation: q one-hot on a uniformly
drawn image token, so most drafts have p(x) = 0 after top-k) and "jacobi" (drafts sampled from
q = the previous iteration's top-k distribution, so p(x) > 0 mostly).

Run: python benchmarks/verify.py [--dtype float64|float32] [--windows N] [--repeats R] [--threads T]
(one thread by default: timings on a shared machine are steadier, and both sides get the same).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from gsd_core import DynamicClusters, sample_categorical, verify

VOCAB = 65536
IMAGE_TOKENS = range(4, 8196)
WINDOW = 16
TOP_K = 2000
GROUP_SIZE = 14


def topk_softmax(logits: torch.Tensor, k: int, dtype: torch.dtype) -> torch.Tensor:
    """softmax over the k largest logits of each row, 0 elsewhere. [..., V] -> [..., V]."""
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return torch.softmax(logits.masked_fill(logits < kth, -torch.inf).to(dtype), dim=-1)


def make_case(scenario: str, dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """p [L+1, V], q [L, V], drafts [L], uniforms [L+1] for one window."""
    logits = torch.full((WINDOW + 1, VOCAB), -torch.inf, dtype=torch.float64)
    image = slice(IMAGE_TOKENS.start, IMAGE_TOKENS.stop)
    logits[:, image] = 2.0 * torch.randn(WINDOW + 1, len(IMAGE_TOKENS), generator=gen, dtype=torch.float64)
    p = topk_softmax(logits, TOP_K, dtype)
    if scenario == "random-init":
        drafts = torch.randint(IMAGE_TOKENS.start, IMAGE_TOKENS.stop, (WINDOW,), generator=gen)
        q = torch.zeros(WINDOW, VOCAB, dtype=dtype)
        q[torch.arange(WINDOW), drafts] = 1.0
    else:  # previous Jacobi iteration: nearby logits, drafts drawn from its top-k distribution
        previous = logits[:WINDOW].clone()
        previous[:, image] += 0.5 * torch.randn(WINDOW, len(IMAGE_TOKENS), generator=gen, dtype=torch.float64)
        q = topk_softmax(previous, TOP_K, dtype)
        drafts = torch.multinomial(q.double(), 1, generator=gen).squeeze(-1)
    uniforms = torch.rand(WINDOW + 1, generator=gen, dtype=torch.float64)
    return p, q, drafts, uniforms


def released_style_verify(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, uniforms: torch.Tensor, group_size: int):
    """Per-position loop as in the released code, computing our DynamicClusters(group_size)
    clusters (ranking by p descending, ties by smaller id, +-group_size//2 ranks, clipped).
    Returns (num_accepted, emitted tokens list)."""
    half = group_size // 2
    window = q.shape[0]
    emitted: list[int] = []
    for i in range(window):
        order = torch.sort(p[:window], dim=-1, descending=True, stable=True).indices  # whole window, every position
        ranking = order[i]
        rank = int((ranking == drafts[i]).nonzero()[0, 0])
        cluster = ranking[max(0, rank - half) : rank + half + 1]
        p_mass, q_mass = p[i, cluster].sum(), q[i, cluster].sum()
        ratio = min(1.0, float(p_mass / q_mass)) if q_mass > 0 else 0.0
        if uniforms[i] < ratio:
            emitted.append(int(drafts[i]))
            continue
        excess = (p[i] - q[i]).clamp(min=0)
        residual = excess / excess.sum() if excess.sum() > torch.finfo(p.dtype).eps else p[i]
        emitted.append(int(sample_categorical(residual, uniforms[window])))
        return i, emitted
    emitted.append(int(sample_categorical(p[window], uniforms[window])))
    return window, emitted


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    parser.add_argument("--windows", type=int, default=4, help="windows per scenario (each checked and timed)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per window (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(args.seed)
    rule = DynamicClusters(GROUP_SIZE)
    print(f"V={VOCAB} L={WINDOW} top-k={TOP_K} DynamicClusters({GROUP_SIZE}) {args.dtype}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'scenario':<12} {'win':>3} {'acc':>3} {'p(x)=0':>6} {'verify ms':>9} {'early ms':>8} {'loop ms':>8} "
          f"{'speed-up':>8} {'early':>6}  same")
    all_same, ratios, early_ratios = True, [], []
    for scenario in ("random-init", "jacobi"):
        for w in range(args.windows):
            p, q, drafts, uniforms = make_case(scenario, dtype, gen)
            ref_accepted, ref_tokens = released_style_verify(p, q, drafts, uniforms, GROUP_SIZE)
            same = True
            for stop_early in (False, True):
                result = verify(p, q, drafts, rule, uniforms=uniforms, stop_early=stop_early)
                ours = result.tokens[: int(result.num_emitted)].tolist()
                same &= int(result.num_accepted) == ref_accepted and ours == ref_tokens
            all_same &= same
            t_ours = median_time(lambda: verify(p, q, drafts, rule, uniforms=uniforms), args.repeats * 4)
            t_early = median_time(lambda: verify(p, q, drafts, rule, uniforms=uniforms, stop_early=True), args.repeats * 4)
            t_ref = median_time(lambda: released_style_verify(p, q, drafts, uniforms, GROUP_SIZE), args.repeats)
            ratios.append(t_ref / t_ours)
            early_ratios.append(t_ref / t_early)
            zeros = int((p[:WINDOW].gather(-1, drafts.unsqueeze(-1)) == 0).sum())
            print(f"{scenario:<12} {w:>3} {ref_accepted:>3} {zeros:>6} {t_ours * 1e3:>9.2f} {t_early * 1e3:>8.2f} "
                  f"{t_ref * 1e3:>8.1f} {t_ref / t_ours:>7.1f}x {t_ref / t_early:>5.1f}x  {same}")
    print(f"speed-up over the loop, median (min): verify {statistics.median(ratios):.1f}x ({min(ratios):.1f}x), "
          f"verify(stop_early=True) {statistics.median(early_ratios):.1f}x ({min(early_ratios):.1f}x); "
          f"same decisions and tokens in every window: {all_same}")
    if not all_same:
        raise SystemExit("verify and the reference loop disagree")


if __name__ == "__main__":
    main()
