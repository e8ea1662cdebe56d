"""Time the engine's ``verify`` (``gsd_lab.engine``) against a per-position loop in the released
GSD code's style, and gsd_core's reference ``verify`` beside them.

Lumina-mGPT-sized case: vocabulary V = 65536 (image tokens are ids 4..8195), a Jacobi window
of L = 16 drafts plus a bonus row, target rows p = softmax(top-k 2000 of the logits), and the
paper's dynamic clusters (DynamicClusters(14): 14 tokens, the 6 ranks above the draft and the 7
below it in the p-ranking, the release's ``logit_sort[idx-7 : idx+7]``). The reference loop does what the released code does per window: a Python loop
over positions that, at every position, sorts the whole window's rows over the full
vocabulary, slices the draft's rank window, and tests u < min(1, p(C)/q(C)); at the first
rejection it resamples from norm((p - q)+) and stops. Both get the same uniforms; the script
checks that they take the same decisions and emit the same tokens, then prints the times
(median over repeats) and the ratios, for the engine's ``verify`` as it is called by default
(all L acceptance probabilities, inputs validated), gsd_core's reference (a sort of whole rows,
checks with a few syncs), the engine without input validation (``validate=False``, for
callers that guarantee valid inputs), and given the top-k ids of
the draft rows (``support=``, checked; and with ``validate=False``, as the decoding loop would
call it). The loop's cost grows with the
number of positions it visits (one sort of the window per position), ``verify``'s does not,
so the speed-up of a window grows with its accepted count.

Before timing, it counts per window kind what a GPU pays per call: top-level aten ops (each a
kernel launch or a view; torch.profiler) and host syncs (``aten::_local_scalar_dense`` from
item/int/bool, ``nonzero``, and ``Tensor.tolist`` calls), for the default call and without
validation (tests/lab/engine/test_engine_costs.py pins every rule's ops and syncs). After timing, it prints where the
default call's time goes (self CPU time per aten op, torch.profiler) beside the time per window
that a 20x speed-up over all windows together would allow, so the gap can be read op by op on
any CPU, and the costs of the other ways to find or order the support (``selection_costs``).

Two draft scenarios: "random-init" (SJD's random initialisation: q one-hot on a uniformly
drawn image token, so most drafts have p(x) = 0 after top-k) and "jacobi" (drafts sampled from
q = the previous iteration's top-k distribution, its logits perturbed by N(0, 1) noise, so
p(x) > 0 mostly and windows accept anywhere from 0 to 16 drafts).

``--draw`` times only gsd_core's inverse-CDF ``draw`` on float32 rows (softmax of N(0, 1)
logits) at V = 65,536 and 151,936, one row and a window of L + 1 rows: its float64 running sum
against a float32 running sum, side by side with the ratio, and the TV of each one's law
(differences of the running sum over its total) from w / sum(w).

Run: python benchmarks/verify.py [--dtype float64|float32] [--windows N] [--repeats R] [--threads T]
[--draw]
(one thread by default: timings on a shared machine are steadier, and both sides get the same).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import gsd_core
from gsd_core import DynamicClusters, sample_categorical
from gsd_lab.engine import verify
from gsd_lab.engine.profiling import op_times, ops_and_syncs

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
    """p [L+1, V], q [L, V], drafts [L], uniforms [L+1] and the top-k ids of the draft rows
    [L, K] (what the adapter knows; ``verify``'s ``support``) for one window."""
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
        previous[:, image] += 1.0 * torch.randn(WINDOW, len(IMAGE_TOKENS), generator=gen, dtype=torch.float64)
        q = topk_softmax(previous, TOP_K, dtype)
        drafts = torch.multinomial(q.double(), 1, generator=gen).squeeze(-1)
    uniforms = torch.rand(WINDOW + 1, generator=gen, dtype=torch.float64)
    support = torch.topk(logits[:WINDOW], TOP_K, dim=-1).indices
    return p, q, drafts, uniforms, support


def call_verify(p, q, drafts, rule, uniforms, kwargs):
    """The engine's verify with ``kwargs``, or gsd_core's reference for {"reference": True}."""
    if kwargs.get("reference"):
        return gsd_core.verify(p, q, drafts, rule, uniforms=uniforms)
    return verify(p, q, drafts, rule, uniforms=uniforms, **kwargs)


def released_style_verify(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, uniforms: torch.Tensor, group_size: int
) -> tuple[int, list[int]]:
    """Per-position loop as in the released code, computing our DynamicClusters(group_size)
    clusters (ranking by p descending, ties by smaller id, (G-1)//2 ranks above and G//2 below,
    clipped). Returns (num_accepted, emitted tokens list)."""
    above, below = (group_size - 1) // 2, group_size // 2
    window = q.shape[0]
    emitted: list[int] = []
    for i in range(window):
        order = torch.sort(p[:window], dim=-1, descending=True, stable=True).indices  # whole window, every position
        ranking = order[i]
        rank = int((ranking == drafts[i]).nonzero()[0, 0])
        cluster = ranking[max(0, rank - above) : rank + below + 1]
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




def selection_costs(p: torch.Tensor, repeats: int = 5) -> dict[str, float]:
    """Median seconds (timed in turns, ``interleaved_times``) of the ways to find or order each
    draft row's support that ``verify``'s default call could use, on the draft rows p[:L] [L, V]
    of one window: the top-K over V it uses (K = the widest support), ``nonzero`` of p > 0 (ids
    in id order, a host sync), a top-8 over V (one side of a rank window found without ranking
    the support), and the sorts of the [L, K] support: by value (stable and not), by id, and as
    one 1-D int64 key per entry."""
    rows = p[:WINDOW]
    width = int((rows > 0).sum(-1).max())
    top = torch.topk(rows, width, dim=-1, sorted=False)
    keys = (top.indices + VOCAB * torch.arange(WINDOW).unsqueeze(-1)).reshape(-1)
    candidates = {
        f"top-{width} over V": lambda: torch.topk(rows, width, dim=-1, sorted=False),
        "nonzero(p > 0)": lambda: (rows > 0).nonzero(),
        "top-8 over V": lambda: torch.topk(rows, 8, dim=-1),
        f"stable sort [{WINDOW}, {width}] by p": lambda: torch.sort(top.values, dim=-1, descending=True, stable=True),
        f"sort [{WINDOW}, {width}] by p": lambda: torch.sort(top.values, dim=-1, descending=True),
        f"sort [{WINDOW}, {width}] ids": lambda: torch.sort(top.indices, dim=-1),
        f"1-D sort of {keys.numel()} int64 keys": lambda: torch.sort(keys, stable=True),
    }
    return interleaved_times(candidates, repeats, inner=1)


def interleaved_times(functions: dict[str, object], repeats: int, inner: int) -> dict[str, float]:
    """Median seconds per call of each function, timed in turns (each repetition calls every
    function, the fast ones ``inner`` times) so that load changes on a shared machine hit all
    of them alike."""
    for fn in functions.values():
        fn()  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, fn in functions.items():
            calls = 1 if name == "loop" else inner
            for _ in range(calls):
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def float32_cdf_draw(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """``gsd_core.draw`` with its running sum stored in float32 (on CPU, torch's float32 cumsum
    adds in double and stores each partial sum in float32), its total and u * total in float32.
    weights [..., V] float32; uniform [..., 1]. Returns int64 [..., 1]."""
    cdf = weights.cumsum(-1)
    total = cdf[..., -1:]
    drawn = torch.searchsorted(cdf, uniform.float() * total, right=True)
    last = torch.searchsorted(cdf, total.contiguous())
    return torch.minimum(drawn, last).clamp_(max=weights.shape[-1] - 1)


def draw_costs(repeats: int, seed: int) -> None:
    """Time ``draw`` (float64 CDF) against ``float32_cdf_draw`` on float32 rows; print the
    ratio and the TV of each one's law from w / sum(w) (module docstring, ``--draw``)."""
    gen = torch.Generator().manual_seed(seed)
    print("float32 rows, ms per call (median, interleaved); TV of the law from w / sum(w)")
    print(f"{'V':>7} {'rows':>4} {'float32 cdf':>11} {'float64 cdf':>11} {'ratio':>6} "
          f"{'TV float32':>10} {'TV float64':>10}")
    for vocab in (65536, 151936):
        for rows in (1, WINDOW + 1):
            weights = torch.softmax(torch.randn(rows, vocab, generator=gen), -1)
            uniform = torch.rand(rows, 1, generator=gen, dtype=torch.float64)
            times = interleaved_times({
                "float32": lambda: float32_cdf_draw(weights, uniform),
                "float64": lambda: gsd_core.draw(weights, uniform),
            }, repeats, 20)
            exact = weights.double() / weights.double().sum(-1, keepdim=True)
            tvs = []
            for cdf in (weights.cumsum(-1).double(), weights.double().cumsum(-1)):
                law = torch.diff(cdf, prepend=cdf.new_zeros(rows, 1)) / cdf[:, -1:]
                tvs.append(float((law - exact).abs().sum(-1).max() / 2))
            print(f"{vocab:>7} {rows:>4} {times['float32'] * 1e3:>11.3f} "
                  f"{times['float64'] * 1e3:>11.3f} {times['float64'] / times['float32']:>6.2f} "
                  f"{tvs[0]:>10.2e} {tvs[1]:>10.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    parser.add_argument("--windows", type=int, default=4, help="windows per scenario (each checked and timed)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per window (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--draw", action="store_true", help="time only draw's float64 CDF")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.draw:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
        return draw_costs(args.repeats, args.seed)
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(args.seed)
    rule = DynamicClusters(GROUP_SIZE)
    print(f"V={VOCAB} L={WINDOW} top-k={TOP_K} DynamicClusters({GROUP_SIZE}) {args.dtype}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    variants = {  # name: keyword arguments of verify (support: filled in per window)
        "verify": {},
        "reference": {"reference": True},
        "nv": {"validate": False},
        "support": {"support": None},
        "support-nv": {"support": None, "validate": False},
    }
    counts_gen = torch.Generator().manual_seed(args.seed + 1)
    print("per window, one call: top-level aten ops / host syncs (pinned per rule by tests/lab/engine/test_engine_costs.py)")
    for scenario in ("random-init", "jacobi"):
        p, q, drafts, uniforms, support = make_case(scenario, dtype, counts_gen)
        row = []
        for name, kwargs in (("default", {}), ("validate=False", {"validate": False}),
                             ("support", {"support": support}),
                             ("support, validate=False", {"support": support, "validate": False})):
            # As the decoding loop calls it: the uniforms drawn inside from a generator.
            call = lambda kw=kwargs: verify(p, q, drafts, rule, generator=counts_gen, **kw)  # noqa: E731
            call()  # warm the cached index tensors, as in a decoding loop
            ops, syncs = ops_and_syncs(call)
            row.append(f"{name}: {ops} ops, {syncs} syncs")
        print(f"  {scenario:<12} " + "; ".join(row))
    print("columns: ms per window (median of repeats); speed-up = loop time / verify time")
    print(f"{'scenario':<12} {'win':>3} {'acc':>3} {'p(x)=0':>6} " + " ".join(f"{v:>9}" for v in variants)
          + f" {'loop':>8} " + " ".join(f"{'x ' + v:>10}" for v in variants) + "  same")
    all_same = True
    times: dict[str, list[float]] = {v: [] for v in variants}
    loop_times: list[float] = []
    for scenario in ("random-init", "jacobi"):
        for w in range(args.windows):
            p, q, drafts, uniforms, support = make_case(scenario, dtype, gen)
            calls = {name: {**kwargs, "support": support} if "support" in kwargs else kwargs
                     for name, kwargs in variants.items()}
            ref_accepted, ref_tokens = released_style_verify(p, q, drafts, uniforms, GROUP_SIZE)
            same = True
            for kwargs in calls.values():
                result = call_verify(p, q, drafts, rule, uniforms, kwargs)
                ours = result.tokens[: int(result.num_emitted)].tolist()
                same &= int(result.num_accepted) == ref_accepted and ours == ref_tokens
            all_same &= same
            functions = {name: (lambda kw=kwargs: call_verify(p, q, drafts, rule, uniforms, kw))
                         for name, kwargs in calls.items()}
            functions["loop"] = lambda: released_style_verify(p, q, drafts, uniforms, GROUP_SIZE)
            row = interleaved_times(functions, args.repeats, inner=4)
            for name in variants:
                times[name].append(row[name])
            t_ref = row["loop"]
            loop_times.append(t_ref)
            zeros = int((p[:WINDOW].gather(-1, drafts.unsqueeze(-1)) == 0).sum())
            print(f"{scenario:<12} {w:>3} {ref_accepted:>3} {zeros:>6} "
                  + " ".join(f"{row[v] * 1e3:>9.2f}" for v in variants) + f" {t_ref * 1e3:>8.1f} "
                  + " ".join(f"{t_ref / row[v]:>9.1f}x" for v in variants) + f"  {same}")
    for name in variants:
        ratios = [r / t for r, t in zip(loop_times, times[name])]
        print(f"{name:>9}: speed-up median {statistics.median(ratios):5.1f}x, min {min(ratios):5.1f}x, "
              f"all windows together {sum(loop_times) / sum(times[name]):5.1f}x")
    budget = sum(loop_times) / len(loop_times) / 20
    breakdown = op_times(lambda: verify(p, q, drafts, rule, uniforms=uniforms))
    total = sum(row.seconds for row in breakdown)
    print(f"20x over all windows together allows {budget * 1e3:.2f} ms per window; the default call "
          f"takes {statistics.fmean(times['verify']) * 1e3:.2f} ms per window (mean of the medians "
          f"above). Its aten ops' self times (last window, per op the median of 3 profiled calls) "
          f"sum to {total * 1e3:.2f} ms, of which:")
    print("  " + "; ".join(f"{row.name.removeprefix('aten::')} x{row.calls} {row.seconds * 1e3:.2f} ms"
                           for row in breakdown[:6]))
    print("other ways to find or order the support, same window (ms, median of 5): "
          + "; ".join(f"{name} {seconds * 1e3:.2f}" for name, seconds in selection_costs(p).items()))
    print(f"same decisions and tokens as the loop in every window and variant: {all_same}")
    if not all_same:
        raise SystemExit("verify and the reference loop disagree")


if __name__ == "__main__":
    main()
