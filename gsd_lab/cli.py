"""Command line: ``python -m gsd_lab {generate, figures, evaluate}`` (also ``gsd-lab``).

generate  one image by AR, SJD or GSD; prints nfe, acceptance rate and wall time (``--json``:
          one JSON object with nfe, acceptance_rate, wall_seconds, tokens, ...).
figures   every figure and results table into a folder (PNG + SVG + JSON sidecars, results.md).
evaluate  a prompt list sharded over processes (torchrun), resumable; merged summary.

Models: ``standin`` (default, embedded), ``lumina-mgpt-7b-{512,768,1024}`` with ``--weights DIR``
(and ``--vqgan DIR`` for pixels, ``--clip DIR`` for CLIP scores), ``tiny-random`` (tests only).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .models import MODEL_NAMES

MODEL_CHOICES = MODEL_NAMES + ("tiny-random",)


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--model", default="standin", choices=MODEL_CHOICES,
                       help="model to decode with (default: the embedded stand-in)")
    group.add_argument("--weights", help="Lumina-mGPT checkpoint folder (or Hugging Face cache)")
    group.add_argument("--vqgan", help="folder with the Chameleon VQGAN's vqgan.yaml and vqgan.ckpt")
    group.add_argument("--clip", help="local CLIP model folder for CLIP scores (Lumina-mGPT)")
    group.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda if available for Lumina-mGPT)")
    group.add_argument("--cfg", type=float, default=None, help="classifier-free guidance scale (model default)")
    group.add_argument("--top-k", type=int, default=None, help="top-k of the sampling distribution (model default)")
    group.add_argument("--threads", type=int, default=None,
                       help="torch CPU threads (default 1 for the CPU models: batch-1 decoding of a small "
                            "model is fastest and reproducible on one thread)")


def _add_method_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("decoding")
    group.add_argument("--method", choices=("ar", "sjd", "gsd"), default="gsd")
    group.add_argument("--group-size", type=int, default=25, help="GSD group size G")
    group.add_argument("--clusters", choices=("dynamic", "rank-binned"), default="dynamic",
                       help="GSD clusters: the paper's dynamic rule (with filters) or our rank-binned partition")
    group.add_argument("--residual", choices=("token", "cluster"), default="token",
                       help="resampling after a rejection (cluster: cluster-exact, rank-binned only)")
    group.add_argument("--window", type=int, default=16, help="Jacobi window L")
    group.add_argument("--amplify", type=float, default=1.0,
                       help="lossy relaxation: accept with min(1, k p/q) (k = 1: exact)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gsd_lab", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="generate one image and report nfe, acceptance, time")
    _add_model_args(gen)
    _add_method_args(gen)
    gen.add_argument("--class", dest="class_", default=None, help="stand-in class (index or name)")
    gen.add_argument("--prompt", default=None, help="text prompt (Lumina-mGPT)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--out", type=Path, default=None, help="save the image here (PNG)")
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    fig = sub.add_parser("figures", help="regenerate every figure and results.md")
    _add_model_args(fig)
    fig.add_argument("--out", type=Path, default=Path("figures"), help="output folder (default: figures/)")
    fig.add_argument("--prompts", type=Path, default=None,
                     help="prompt file: one per line, or a TSV with a Prompt column (PartiPrompts)")
    fig.add_argument("--quick", action="store_true", help="tiny sizes (tests)")
    fig.add_argument("--paper", action="store_true", help="one image per prompt (Lumina-mGPT on a GPU)")
    fig.add_argument("--no-progress", action="store_true")

    ev = sub.add_parser("evaluate", help="sharded, resumable evaluation over a prompt file (use torchrun)")
    _add_model_args(ev)
    _add_method_args(ev)
    ev.add_argument("--prompts", type=Path, required=True, help="prompt file (one per line or PartiPrompts TSV)")
    ev.add_argument("--out", type=Path, required=True, help="results folder (re-runs skip finished prompts)")
    ev.add_argument("--seed", type=int, default=0, help="base seed: prompt i uses seed + i")
    ev.add_argument("--no-images", action="store_true", help="do not save images")
    ev.add_argument("--no-progress", action="store_true")
    return parser


def _load(args: argparse.Namespace):
    from .experiments.image_model import load_image_model

    if args.model.startswith("lumina") and not args.weights:
        raise SystemExit(f"--model {args.model} needs --weights DIR (the checkpoint folder)")
    return load_image_model(args.model, weights=args.weights, vqgan=args.vqgan, clip=args.clip, device=args.device,
                            cfg_scale=args.cfg, top_k=args.top_k)


def _spec(args: argparse.Namespace):
    from .experiments.runs import MethodSpec

    if args.method == "gsd":
        label = f"GSD ({args.clusters}, G={args.group_size})"
        return MethodSpec(label, "gsd", args.clusters, args.group_size, args.residual, args.amplify, args.window)
    if args.residual != "token":
        raise SystemExit("--residual cluster applies to --method gsd --clusters rank-binned only")
    return MethodSpec(args.method.upper(), args.method, None, 0, "token", args.amplify, args.window)


def _prompt_for(args: argparse.Namespace, model: Any) -> str:
    if args.model.startswith("lumina"):
        if not args.prompt:
            raise SystemExit("Lumina-mGPT needs --prompt \"...\"")
        return args.prompt
    if args.prompt is not None:
        raise SystemExit(f"--prompt is for Lumina-mGPT; the {args.model} model takes --class")
    return args.class_ if args.class_ is not None else model.default_prompts[0]


def cmd_generate(args: argparse.Namespace) -> int:
    from .experiments.runs import FilterSettings, build_clusters, generate_one

    model = _load(args)
    spec = _spec(args)
    prompt = _prompt_for(args, model)
    clusters = build_clusters(spec, model, FilterSettings.for_model(model.name))
    result, image = generate_one(model, spec, prompt, args.seed, clusters=clusters, progress=not args.json)
    if args.out is not None:
        if image is None:
            raise SystemExit(f"{args.model} cannot decode to pixels here (Lumina-mGPT needs --vqgan DIR)")
        from PIL import Image

        args.out.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(args.out)
    report = {
        "model": model.name, "method": spec.method, "prompt": prompt, "seed": args.seed,
        "group_size": spec.group_size if spec.method == "gsd" else None,
        "clusters": spec.clusters, "residual": spec.residual, "window": spec.window,
        "acceptance_scale": spec.acceptance_scale,
        "nfe": result.nfe, "acceptance_rate": result.acceptance_rate, "wall_seconds": result.wall_seconds,
        "model_seconds": result.model_seconds, "num_tokens": int(result.tokens.numel()),
        "tokens": result.tokens.tolist(), "image": None if args.out is None else str(args.out),
    }
    if args.json:
        print(json.dumps(report))
    else:
        rate = "n/a (AR)" if result.acceptance_rate is None else f"{result.acceptance_rate:.3f}"
        print(f"{model.name} {spec.label}: {report['num_tokens']} tokens, nfe {result.nfe}, "
              f"acceptance rate {rate}, wall {result.wall_seconds:.2f} s"
              + (f", image {args.out}" if args.out else ""))
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    from .figures import FigureSizes, run_figures
    from .prompts import read_prompts

    sizes = FigureSizes.quick() if args.quick else FigureSizes.paper() if args.paper else FigureSizes.default()
    prompts = read_prompts(args.prompts) if args.prompts else None
    model = _load(args)
    result = run_figures(args.out, model=model, prompts=prompts, sizes=sizes, progress=not args.no_progress)
    print(f"{len(result['figures'])} figures and {result['results']} written in {result['seconds']:.0f} s")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from .evaluate import evaluate, init_distributed
    from .experiments.runs import FilterSettings, build_clusters, generate_one
    from .prompts import read_prompts

    prompts = read_prompts(args.prompts)
    # The stand-in runs on the CPU unless told otherwise; Lumina-mGPT takes cuda:LOCAL_RANK.
    context = init_distributed(args.device or (None if args.model.startswith("lumina") else "cpu"))
    args.device = context.device
    model = _load(args)
    spec = _spec(args)
    clusters = build_clusters(spec, model, FilterSettings.for_model(model.name))
    image_dir = args.out / "images"

    def work(index: int, prompt: str) -> dict[str, Any]:
        result, image = generate_one(model, spec, prompt, args.seed + index, clusters=clusters)
        row: dict[str, Any] = {"seed": args.seed + index, "nfe": result.nfe,
                               "acceptance_rate": result.acceptance_rate, "wall_seconds": result.wall_seconds,
                               "model_seconds": result.model_seconds, "tokens": result.tokens.tolist()}
        if image is not None:
            if model.condition_scores is not None:
                row["condition_score"] = float(model.condition_scores([image], [prompt])[0])
            if not args.no_images:
                row["image"] = _save_image_atomic(image, image_dir / f"{index:06d}.png")
        return row

    config = {"model": model.name, "spec": asdict(spec), "seed": args.seed, "world_size": context.world_size}
    summary = evaluate(prompts, args.out, work, context, config=config, progress=not args.no_progress)
    if summary is not None:
        print(json.dumps({k: summary[k] for k in ("num_prompts", "finished", "complete", "mean")}))
    return 0


def _save_image_atomic(image: Any, path: Path) -> str:
    import os

    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    Image.fromarray(image).save(tmp, format="PNG")
    os.replace(tmp, path)
    return str(path)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    threads = args.threads or (1 if args.model in ("standin", "tiny-random") else None)
    if threads:
        import torch

        torch.set_num_threads(threads)
    commands = {"generate": cmd_generate, "figures": cmd_figures, "evaluate": cmd_evaluate}
    try:
        return commands[args.command](args)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
