"""Images per second, batch 1 against batch B, on the embedded stand-in (CPU), side by side.

For each method (AR, SJD, GSD with the figures' dynamic clusters; ``--methods``) the same
``--images`` images (class i % classes, generator seed i, 256 tokens) are decoded by
``gsd_lab.decode.batch.generate_batch`` with ``batch_size=1`` and with ``batch_size=B``
(continuous batching: a finished image's place is taken by the next). Printed per method and
batch size: images per second (decoding wall time only, model loading and method resolution
excluded), the model's share of it, ms per batched forward, mean NFE per image, and whether
every image's tokens and NFE are those of batch 1 (they must be: ``gsd_lab.models.batched``).
A "mixed" row decodes all methods' images in one batch stream (each image keeps its method).

Batch 1 is ``generate`` itself, image after image.
The speed-up is bounded by the per-image work that batching does not share: the processing of
each image's [L + 1, V] rows (CFG mix, top-k, softmax: ~1.4 ms per forward at L = 16 on one
core), verify and the draws, the exact accounting when recorded; batching shares the model's
weight reads and the per-forward Python overhead of transformers.

What it measured on the stand-in, and under which load: docs/benchmarks.md.

``--stream``: the streamed runs instead (``figures --paper`` and ``evaluate``: result files on
disk, ``gsd_lab.experiments.stream.StreamedRunCache``): the methods' configurations on the first
``--images`` prompts of the stand-in, decoded into a fresh folder at batch 1 and at batch B,
timed over the whole ``run()`` (decoding, the image decode from tokens, the result files). Two
rows: "paper" records the exact TV and W1 per token (as ``figures --paper``), "evaluate" records
nothing (as ``evaluate``, whose rows are NFE, acceptance and tokens). "same" compares every
result file's tokens and NFE with batch 1's.

``--stream``'s saved output: ``benchmarks/results/batched_streams_standin.txt``.

    python benchmarks/batched_decoding.py [--images 16] [--batch 8] [--threads 1]
                                          [--methods ar,sjd,gsd] [--group-size 10] [--json]
                                          [--stream]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from gsd_lab.decode.loop import generate
from gsd_lab.decode.batch import DecodeRequest, generate_batch
from gsd_lab.decode.methods import DecodingMethod, ClusterAcceptance
from gsd_lab.models.batched import BatchRunner

METHODS = ("ar", "sjd", "gsd")


def methods_for(names: list[str], group_size: int) -> dict[str, DecodingMethod]:
    table = {"ar": DecodingMethod("ar"), "sjd": DecodingMethod("sjd"),
             "gsd": DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=group_size))}
    return {name: table[name] for name in names}


def requests_for(adapter, resolved, images: int, tokens: int) -> list[DecodeRequest]:
    return [DecodeRequest(adapter.prompt_ids(i % adapter.num_classes), resolved, tokens,
                          torch.Generator().manual_seed(i), adapter.uncond_prompt_ids())
            for i in range(images)]


def decode(adapter, requests: list[DecodeRequest], batch: int) -> tuple[float, list, int, float]:
    """(seconds, results, forwards, model seconds): ``generate`` image by image at batch 1, else
    one ``generate_batch`` call."""
    began = time.perf_counter()
    if batch == 1:
        results = [generate(adapter, r.prompt_ids, r.method, num_tokens=r.num_tokens,
                            generator=r.generator, uncond_prompt_ids=r.uncond_prompt_ids)
                   for r in requests]
        seconds = time.perf_counter() - began
        return seconds, results, sum(r.nfe for r in results), sum(r.model_seconds for r in results)
    runner = BatchRunner(adapter)  # its counters: the batched forwards and their model time
    results = generate_batch(adapter, requests, batch_size=batch, runner=runner)
    seconds = time.perf_counter() - began
    return seconds, results, runner.num_forwards, runner.model_seconds


def stream_rows(model, methods: dict[str, DecodingMethod], images: int, batch: int) -> dict:
    """images/s of the streamed runs at batch 1 and ``batch`` (module docstring, ``--stream``)."""
    from gsd_lab.runs.ranks import DistributedContext
    from gsd_lab.experiments.runs import FilterSettings, MethodSpec, Recording
    from gsd_lab.experiments.stream import Configuration, StreamedRunCache

    configurations = [Configuration(MethodSpec(name, m)) for name, m in methods.items()]
    prompts = list(model.default_prompts[:images])
    rows = {}
    for name, record in (("paper", True), ("evaluate", False)):
        row, reference = {}, None
        for size in (1, batch):
            with tempfile.TemporaryDirectory() as out:
                cache = StreamedRunCache(model, prompts, [0], FilterSettings.for_model(model.name),
                                         out, weights={"benchmark": "standin"},
                                         context=DistributedContext(0, 1, 0, "cpu"),
                                         progress=False, recording=Recording(
                                             distortion=record, w1=None, batch_size=size))
                cache.storage.plan(configurations)
                began = time.perf_counter()
                count = cache.storage.run()
                seconds = time.perf_counter() - began
                files = {str(p.relative_to(out)): json.loads(p.read_text())
                         for p in sorted(Path(out).rglob("results/*.json"))}
            got = {k: (v["tokens"], v["nfe"]) for k, v in files.items()}
            reference = got if reference is None else reference
            same = None if got is reference else got == reference
            row[size] = dict(images=count, seconds=seconds, images_per_second=count / seconds,
                             decoding_seconds=sum(v["wall_seconds"] for v in files.values()),
                             accounting_seconds=sum(v["accounting_seconds"]
                                                    for v in files.values()),
                             same_tokens_and_nfe=same)
        row["speedup"] = row[batch]["images_per_second"] / row[1]["images_per_second"]
        rows[name] = row
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--group-size", type=int, default=10)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the table")
    parser.add_argument("--stream", action="store_true",
                        help="time the streamed runs (figures --paper, evaluate) instead")
    args = parser.parse_args()
    names = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(names) - set(METHODS))
    if unknown:
        parser.error(f"unknown methods {unknown}; expected some of {METHODS}")
    for flag, value in (("--images", args.images), ("--batch", args.batch),
                        ("--tokens", args.tokens), ("--threads", args.threads),
                        ("--group-size", args.group_size)):
        if value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    torch.set_num_threads(args.threads)

    from gsd_lab.experiments.image_model import standin_image_model
    from gsd_lab.experiments.runs import resolve_for
    from gsd_lab.standin.adapter import load_standin

    adapter = load_standin()
    model = standin_image_model(adapter, with_metrics=False)
    methods = methods_for(names, args.group_size)
    resolved = {name: resolve_for(model, method) for name, method in methods.items()}
    # Warm-up (first calls allocate and load kernels).
    generate_batch(adapter, requests_for(adapter, resolved[names[0]], 2, 16), batch_size=2)

    if args.stream:
        rows = stream_rows(model, methods, args.images, args.batch)
        if args.json:
            print(json.dumps(dict(images=args.images, batch=args.batch, threads=args.threads,
                                  methods=names, stream=rows), indent=2))
            return
        print(f"stand-in streamed runs, {args.images} prompts x {names} "
              f"({model.num_tokens} tokens), {args.threads} thread(s); batch 1 vs {args.batch}")
        print(f"{'run':<9} {'images':>6} {'img/s b1':>9} {'img/s bB':>9} {'speed-up':>8} "
              f"{'s b1':>7} {'s bB':>7} {'acct s b1':>9} {'acct s bB':>9} {'same':>5}")
        for name, row in rows.items():
            one, many = row[1], row[args.batch]
            print(f"{name:<9} {one['images']:>6} {one['images_per_second']:>9.3f} "
                  f"{many['images_per_second']:>9.3f} {row['speedup']:>7.2f}x "
                  f"{one['seconds']:>7.1f} {many['seconds']:>7.1f} "
                  f"{one['accounting_seconds']:>9.1f} {many['accounting_seconds']:>9.1f} "
                  f"{str(many['same_tokens_and_nfe']):>5}")
        return
    streams = {name: requests_for(adapter, r, args.images, args.tokens)
               for name, r in resolved.items()}
    if len(names) > 1:  # image i: method i mod |methods|
        streams["mixed"] = [streams[names[i % len(names)]][i] for i in range(args.images)]
    rows = {}
    for name, requests in streams.items():
        row, reference = {}, None
        for batch in (1, args.batch):
            fresh = [DecodeRequest(r.prompt_ids, r.method, r.num_tokens,
                                   torch.Generator().manual_seed(i), r.uncond_prompt_ids)
                     for i, r in enumerate(requests)]
            seconds, results, forwards, model_seconds = decode(adapter, fresh, batch)
            reference = results if reference is None else reference
            same = None if results is reference else all(
                torch.equal(a.tokens, b.tokens) and a.nfe == b.nfe
                for a, b in zip(reference, results))
            row[batch] = dict(images_per_second=len(results) / seconds, seconds=seconds,
                              model_share=model_seconds / seconds,
                              ms_per_forward=1000 * seconds / forwards,
                              forwards=forwards, nfe=sum(r.nfe for r in results) / len(results),
                              same_tokens_and_nfe=same)
        row["speedup"] = row[args.batch]["images_per_second"] / row[1]["images_per_second"]
        rows[name] = row
    if args.json:
        print(json.dumps(dict(images=args.images, batch=args.batch, threads=args.threads,
                              rows=rows), indent=2))
        return
    print(f"stand-in, {args.images} images x {args.tokens} tokens, {args.threads} thread(s); "
          f"batch 1 vs {args.batch}")
    header = (f"{'method':<8} {'img/s b1':>9} {'img/s bB':>9} {'speed-up':>8} {'model% b1':>9} "
              f"{'model% bB':>9} {'ms/fwd b1':>9} {'ms/fwd bB':>9} {'NFE':>6} {'same':>5}")
    print(header)
    for name, row in rows.items():
        one, many = row[1], row[args.batch]
        print(f"{name:<8} {one['images_per_second']:>9.3f} {many['images_per_second']:>9.3f} "
              f"{row['speedup']:>7.2f}x {100 * one['model_share']:>8.0f}% "
              f"{100 * many['model_share']:>8.0f}% {one['ms_per_forward']:>9.1f} "
              f"{many['ms_per_forward']:>9.1f} {one['nfe']:>6.1f} "
              f"{str(many['same_tokens_and_nfe']):>5}")


if __name__ == "__main__":
    main()
