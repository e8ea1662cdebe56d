"""A fixed batch of generations whose tokens and NFE must not depend on the CPU's instruction
set or thread count (``tests/lab/experiments/test_reproducible_isa.py`` runs it in subprocesses
under different ``ATEN_CPU_CAPABILITY`` / thread settings and compares the outputs exactly).

    python -m gsd_lab.experiments.determinism --model tiny-random --threads 1 --out batch.json

The batch: SJD and GSD (the paper's dynamic rule without filters, G = 3 and 50) for ``seeds``
on the model's first prompts, ``num_tokens`` tokens each. ``--dtype float32`` keeps the model's
float32 forward (to show that path is not reproducible); the default runs the experiments' model
as loaded (float64 on CPU).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from typing import Any

import torch

from ..decode.methods import DecodingMethod, ClusterAcceptance
from .image_model import load_image_model
from .runs import Recording, generate_one, resolve_for

METHODS = {
    "SJD": DecodingMethod("sjd"),
    "GSD G=3": DecodingMethod("gsd", acceptance=ClusterAcceptance("dynamic-nofilter", 3)),
    "GSD G=50": DecodingMethod("gsd", acceptance=ClusterAcceptance("dynamic-nofilter", 50)),
}


def generation_batch(
    model_name: str,
    *,
    seeds: list[int],
    num_tokens: int | None = None,
    num_prompts: int = 2,
    dtype: str | None = None,
) -> dict[str, Any]:
    """Tokens (as SHA-256 of their int64 bytes, and the first 16), NFE and the top-1 probability of
    each token's target distribution (float64: a fine-grained view of the forward's rounding) per
    (method, prompt, seed), with the CPU capability and thread count they ran under."""
    model = load_image_model(model_name, float64_on_cpu=dtype != "float32")
    if dtype is not None and model.adapter.compute_dtype != getattr(torch, dtype):
        model.adapter.set_compute_dtype(getattr(torch, dtype))
    num_tokens = num_tokens or model.num_tokens
    runs = []
    for label, method in METHODS.items():
        resolved = resolve_for(model, method)
        for index, prompt in enumerate(model.default_prompts[:num_prompts]):
            for seed in seeds:
                model_for_run = (
                    model if num_tokens == model.num_tokens else _shortened(model, num_tokens)
                )
                result, _ = generate_one(
                    model_for_run, resolved, prompt, 1000 * seed + index, Recording(top1=True)
                )
                tokens = result.tokens.to(torch.int64).numpy()
                runs.append(
                    {
                        "method": label,
                        "prompt": prompt,
                        "seed": seed,
                        "nfe": result.nfe,
                        "tokens_sha256": hashlib.sha256(tokens.tobytes()).hexdigest(),
                        "first_tokens": tokens[:16].tolist(),
                        "top1": result.top1.tolist(),
                    }
                )
    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "compute_dtype": str(model.adapter.compute_dtype),
        "num_tokens": num_tokens,
        "runs": runs,
    }


def _shortened(model: Any, num_tokens: int) -> Any:
    from dataclasses import replace

    return replace(model, num_tokens=num_tokens, decode=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="standin")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument(
        "--num-tokens",
        type=int,
        default=None,
        help="tokens per generation (default: a whole image)",
    )
    parser.add_argument("--num-prompts", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        default=None,
        help="override the forward's dtype (default: the model as loaded)",
    )
    parser.add_argument("--out", default=None, help="write JSON here (default: stdout)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    batch = generation_batch(
        args.model,
        seeds=args.seeds,
        num_tokens=args.num_tokens,
        num_prompts=args.num_prompts,
        dtype=args.dtype,
    )
    text = json.dumps(batch, indent=1)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
