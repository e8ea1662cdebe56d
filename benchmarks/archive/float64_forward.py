"""Cost of the float64 forward on CPU (``CausalLMAdapter(compute_dtype=torch.float64)``).

A stand-in-size Llama (4 layers, hidden 256, 4 heads, MLP 704, vocabulary 8203), CFG batch 2,
a Jacobi window of 16 drafts (17 input tokens) after a prefix of ``--prefix`` cached positions,
through the adapter (forward + float64 processing): median time per call in float32 and in
float64, and a whole SJD generation of 256 tokens in both.

    python benchmarks/archive/float64_forward.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def build(dtype: torch.dtype | None):
    from transformers import LlamaConfig, LlamaForCausalLM

    from gsd_lab.models.adapter import CausalLMAdapter

    config = LlamaConfig(vocab_size=8203, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=300)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).eval()
    return CausalLMAdapter(model, torch.arange(8192), cfg_scale=3.0, row_length=16, compute_dtype=dtype)


def time_window(adapter, prefix: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        adapter.start(torch.tensor([8192]), torch.tensor([8193]))
        adapter.forward(torch.cat([torch.tensor([8192]), torch.randint(8192, (prefix,))]), num_rows=1)
        window = torch.randint(8192, (17,))
        start = time.perf_counter()
        adapter.forward(window)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_generation(adapter) -> tuple[float, int]:
    from gsd_lab.decode.loop import generate
    from gsd_lab.decode.methods import DecodingMethod

    start = time.perf_counter()
    result = generate(adapter, torch.tensor([8192]), DecodingMethod("sjd"), num_tokens=256,
                      generator=torch.Generator().manual_seed(0), uncond_prompt_ids=torch.tensor([8193]))
    return time.perf_counter() - start, result.nfe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prefix", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    results = {}
    for name, dtype in (("float32", None), ("float64", torch.float64)):
        adapter = build(dtype)
        time_window(adapter, args.prefix, 3)  # warm-up
        window = time_window(adapter, args.prefix, args.repeats)
        generation, nfe = time_generation(adapter)
        results[name] = (window, generation)
        print(f"{name}: window forward (17 tokens, CFG pair, {args.prefix} cached) {1e3 * window:.2f} ms; "
              f"SJD generation of 256 tokens {generation:.2f} s ({nfe} forwards)")
    print(f"float64 / float32: window forward x{results['float64'][0] / results['float32'][0]:.2f}, "
          f"generation x{results['float64'][1] / results['float32'][1]:.2f}")


if __name__ == "__main__":
    main()
