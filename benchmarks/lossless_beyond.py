"""Lossless decoders beyond MC-SJD on the stand-in's frontier images, paired image by image with
the committed frontier's records: block verification (default;
``DecodingMethod(verifier="block")``, ``gsd_core.verify_block``, proofs/14) against SJD, MC-SJD
(maximal) and MC-GSD (G = 50, maximal), or, with ``--candidates K ...``, multiple drafts
(``DecodingMethod(candidates=k)``: k candidates at the first undecided position, recursive
rejection sampling, one tree forward; proofs/15) against MC-SJD and MC-GSD.

Images: the frontier's prompts x seeds (``figures/results.json``, ``tables.frontier``), class i of
seed s decoded with generator seed ``generator_seed(s, i)`` at the frontier's window, the figures'
adapter settings. MC-SJD re-decoded on the first ``--check`` images pairs them with the stored
rows if it gives their NFE: block mode stops unless it does; multiple drafts record whether it
does (``mc_sjd_reproduced_image_by_image``). Every decode records the exact per-token distortion
(0 for a lossless rule up to rounding).

Block verification (``--out STEM``: STEM.json, STEM.txt): per configuration mean NFE (SE), mean
distortion (SD's per-token TV formula: 0 by construction for every rule here, the lossy coupled
block combination included, so not evidence of losslessness; proofs/14, proofs/15 and
tests/lab/decode/test_decode_laws_exact.py give that), accepted drafts per forward (sum(accepted) / NFE),
tokens processed per forward (the window's inputs, L + 1: the last committed token and L drafts;
the prefill's prompt left out), and the cost model's GPU seconds: NFE x the measured 7B forward of
a 16-token window (``SHAPES``, last line, ``forward_ms["16"]``; block and token verification feed
the same windows, so the model's cost per forward is the same; the verifiers' own O(L V) row
operations are left out).
Paired differences with their paired SE and ``verdicts.verdict`` (beyond 2 paired SE).

Multiple drafts: MC-SJD (decoded on the ``--check`` images, all by default) and MC-SJD with k
candidates for each k: NFE (mean, s.e.), distortion, committed tokens and tokens processed (the
prompt at the first) per forward, wall seconds per image (a shared CPU: indicative), and paired
``verdicts.verdict``s: target NFE(k) < 0.9 NFE(MC-SJD), moonshot NFE(k) <= NFE(MC-GSD). Cost
model for a 7B model on an H200 (stated, not measured): a forward over W input tokens with a CFG
pair reads the weights once (2 bytes x P parameters at ``BANDWIDTH``) and computes 2 x 2 P W
FLOPs (``PEAK_FLOPS``); its time is max(read, compute), flat up to W_ridge = read time x
PEAK_FLOPS / (4 P) tokens (P, the CFG batch and the measured forwards from ``SHAPES``); a
decode's modelled time is the sum over forwards of max(1, W / W_ridge) read times
(``gsd_lab.accounting.roofline``, where the model is stated).

Token trees (``--trees``; ``DecodingMethod(tree=...)``, proofs/16): positional acceptance measured
on the first ``--measure`` images with a wide tree (``--measure-shape``), the shapes ranked by
modelled time per committed token under the ridge (``gsd_lab.decode.tree_shapes``), the best
``--top`` decoded on the images, each with NFE, tokens per forward and modelled time, paired
against the stored MC-SJD and MC-GSD (whose forwards, 17 tokens and the prompt at the first, sit
below the ridge: their modelled time is their NFE, checked on the MC-SJD images re-decoded) by
``verdicts.verdict``: target modelled time <= 0.85 x MC-SJD's, moonshot < MC-GSD's. The stored
multiple-draft files' rows are listed beside them. ``--tree-shape`` decodes one given shape,
unmeasured and unranked. Caveats: the measuring images (the first 3) are also among the 30
evaluated; the roofline ignores ``verify_tree``'s host reads (one value per node the walk visits,
up to L + 1 per pass: they matter for GPU timing, not for this model); a shape deeper than the
window is cut to the window's depths (``tree_step``), not refused. The distortion column for trees
is not evidence about them: ``commit`` logs the window drafts' q beside the branch's p rows, which
is not the (p, q) pair verified where the path goes through an extra candidate, and under SD the
formula is 0 by construction; the trees' law is checked by the exact tests instead (proofs/16).

The committed token-tree files (their JSONs record no arguments; ``--top 1`` read from the single
tree row of the first; ``--measure 3 --measure-shape 8 3 --check 2`` the defaults). Six tries in
all: (8,) at window 12 first (the model's best), then (3, 2) and (6,) at window 16 chosen after it
failed, then the spine tree (8, 4, 3, 2, 2) with side tail 5 (``--side-tail``, 101 tokens), twice:
first with the drafts past a side branch refilled fresh (stopped after 14 images: its log and the
JSON parsed from it, ``token_trees_standin_spine_dropped``), then with them kept (the loop as
committed), then the spine tree (6, 3) with side tail 10. The best of them is a selected maximum:

    nice -n 10 python benchmarks/lossless_beyond.py --trees --top 1 \
        --out benchmarks/results/token_trees_standin
    nice -n 10 python benchmarks/lossless_beyond.py --trees --tree-shape 3 2 --tree-window 16 \
        --out benchmarks/results/token_trees_standin_3x2
    nice -n 10 python benchmarks/lossless_beyond.py --trees --tree-shape 6 --tree-window 16 \
        --out benchmarks/results/token_trees_standin_6
    timeout 1500 python benchmarks/lossless_beyond.py --trees --tree-shape 8 4 3 2 2 \
        --tree-window 16 --side-tail 5 --out benchmarks/results/token_trees_standin_spine
    timeout 1500 python benchmarks/lossless_beyond.py --trees --tree-shape 6 3 \
        --tree-window 16 --side-tail 10 --out benchmarks/results/token_trees_standin_spine_6x3

    nohup python benchmarks/lossless_beyond.py &  # --out benchmarks/results/lossless_beyond_standin
    nice -n 10 python benchmarks/lossless_beyond.py --candidates 2 4  # --out .../multidraft_standin
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from gsd_lab.accounting.roofline import Roofline
from gsd_core.token_tree import children_of, spine_tree_size
from gsd_lab.decode.loop import VerifiedWindow, generate
from gsd_lab.decode.tree_shapes import (ScoredShape, positional_acceptance, ranked_shapes,
                                        tree_tokens)
from gsd_lab.decode.methods import DecodingMethod, SDAcceptance
from gsd_lab.experiments.image_model import ImageModel, load_image_model
from gsd_lab.experiments.runs import Recording, generate_one, generator_seed, resolve_for
from gsd_lab.experiments.verdicts import POWER, minimum_detectable, paired_values, verdict, word

ROOT = Path(__file__).resolve().parents[1]
STORED = {  # label here: (frontier curve, index of the configuration on it)
    "SJD": ("TV-optimal relaxation", 0),  # relaxation_delta = 0: plain SJD, independent drafts
    "MC-SJD (maximal)": ("MC-SJD (maximal)", 0),
    "MC-GSD (G=50, maximal)": ("MC-GSD (G=50, maximal)", 0),
}
BLOCK = "SJD + block verification"
SHAPES = ROOT / "benchmarks/results/gpu_lumina_shapes_h200.jsonl"


def nan(se: float | None) -> float:
    """An SE for printing: nan where there is none (one image)."""
    return math.nan if se is None else se


def said(v: dict, power: bool = True) -> str:
    """A verdict in the one vocabulary (``verdicts.WORDS``); "no difference detected" names the
    smallest difference the run could have detected (at ``POWER``, said when ``power``)."""
    text, detectable = word(v["verdict"]), minimum_detectable(v["se"])
    if v["verdict"] == "noise" and detectable is not None:
        text += f" (detectable{f' at {POWER:.0%} power' if power else ''}: |d| >= {detectable:.2f})"
    return text


def paired_verdict(a: list[float], b: list[float], scale: float) -> dict:
    """The paired difference a - scale b over images and its verdict (expected sign -1)."""
    paired = paired_values(a, [scale * v for v in b])
    return {**paired.as_dict(), "verdict": verdict(paired.difference, paired.se, -1)}


def against(a: list[float], ref: dict[str, list[float]], name: str, scale: float,
            **fields: str) -> dict:
    """``paired_verdict`` of ``a`` against the first len(a) images of ``ref[name]``, as a row's
    entry: the reference, the scale, ``fields``, the difference, its SE and the verdict."""
    found = paired_verdict(a, ref[name][: len(a)], scale)
    return {"against": name, "scale": scale, **fields, "difference": found["difference"],
            "se": found["se"], "verdict": found["verdict"]}


def mc_sjd_checks(model: ImageModel, images: list[tuple[int, str]], stored_nfe: list[float],
                  window: int) -> list[dict]:
    """MC-SJD re-decoded on ``images``: per image its NFE beside the stored one; stops at the
    first that differs."""
    maximal = resolve_for(model, DecodingMethod("sjd", window=window, draft="maximal"))
    checks = []
    for (seed, prompt), stored in zip(images, stored_nfe):
        result, _ = generate_one(model, maximal, prompt, seed, Recording(images=False))
        checks.append({"prompt": prompt, "seed": seed, "nfe_alone": result.nfe,
                       "nfe_stored": int(stored)})
        if result.nfe != int(stored):
            raise SystemExit(f"MC-SJD re-decoded: NFE {result.nfe} != {int(stored)} stored")
    return checks


def block_mode(
    model: ImageModel, frontier: dict, rows: dict[str, dict], images: list[tuple[int, str]],
    nfe: dict[str, list[float]], results: dict, checks: list[dict], threads: int,
) -> dict:
    """Block verification decoded here against the stored rows (module docstring); ``checks``:
    the MC-SJD re-decodes' records, stored with the results."""
    shape = json.loads(SHAPES.read_text().splitlines()[-1])
    forward_ms = float(shape["forward_ms"]["16"])
    num_tokens, window = results["config"]["num_tokens"], results["config"]["sizes"]["window"]
    block = resolve_for(model, DecodingMethod("sjd", window=window, verifier="block"))
    per_image, started = [], time.perf_counter()
    for seed, prompt in images:
        result, _ = generate_one(model, block, prompt, seed,
                                 Recording(distortion=True, images=False))
        per_image.append({
            "prompt": prompt, "seed": seed, "nfe": result.nfe,
            "distortion": float(result.distortion.mean()),
            "accepted_per_forward": sum(result.accepted) / result.nfe,
            "processed_per_forward": sum(d + 1 for d in result.drafted) / result.nfe,
            "wall_seconds": result.wall_seconds,
        })
        print(f"{prompt:22s} seed {seed:8d} NFE {result.nfe:4d}", flush=True)
    seconds, n = time.perf_counter() - started, len(images)
    nfe[BLOCK] = [float(r["nfe"]) for r in per_image]
    summary = {}
    for label, values in nfe.items():
        mean, stored = sum(values) / n, rows.get(label)
        summary[label] = {
            "nfe": mean, "nfe_se": paired_values(values, [0.0] * n).se,
            "distortion": (sum(r["distortion"] for r in per_image) / n if stored is None
                           else float(sum(stored["per_image"]["distortion"][:n]) / n)),
            "max_image_distortion": (max(abs(r["distortion"]) for r in per_image)
                                     if stored is None else None),
            "accepted_per_forward": (num_tokens - mean) / mean if stored is None else
            sum((num_tokens - v) / v for v in values) / n,
            "tokens_per_forward": sum(num_tokens / v for v in values) / n,
            "gpu_seconds_7b": mean * forward_ms / 1000,
        }
    for key in ("accepted_per_forward", "processed_per_forward"):
        summary[BLOCK][key] = sum(r[key] for r in per_image) / n
    claims = [  # (claim, a, b, scale on b): the paired difference a - scale * b, expected < 0
        ("block verification needs fewer forwards than SJD", BLOCK, "SJD", 1.0),
        ("block verification needs fewer forwards than MC-SJD", BLOCK, "MC-SJD (maximal)", 1.0),
        ("target: at most 0.9x MC-SJD's NFE", BLOCK, "MC-SJD (maximal)", 0.9),
        ("moonshot: fewer forwards than MC-GSD (G=50, maximal)", BLOCK,
         "MC-GSD (G=50, maximal)", 1.0),
    ]
    verdicts = [{"claim": claim, "a": a, "b": b, "scale": scale,
                 **paired_verdict(nfe[a], nfe[b], scale)} for claim, a, b, scale in claims]
    out = {
        "benchmark": "lossless_beyond", "images": n, "prompts": frontier["prompts"],
        "seeds": frontier["seeds"], "num_tokens": num_tokens, "window": window,
        "threads": threads,
        "stored_from": "figures/results.json tables.frontier (git " + str(results["git"]) + ")",
        "cost_model": {"forward_ms_16": forward_ms, "source": str(SHAPES.relative_to(ROOT)),
                       "source_commit": shape["git_commit"], "device": shape["device"],
                       "rule": "GPU seconds per image = NFE x forward_ms_16 / 1000"},
        "mc_sjd_alone_check": checks, "summary": summary, "verdicts": verdicts,
        "per_image": {"block": per_image, "stored_nfe": {k: nfe[k] for k in STORED}},
        "decode_seconds": seconds,
        "note": "block verification is offered with independent drafts only (proofs/14)",
    }
    lines = [f"{'configuration':28s} {'NFE':>7s} {'SE':>5s} {'distortion':>11s} "
             f"{'acc/fwd':>8s} {'tok/fwd':>8s} {'7B GPU s':>9s}"]
    for label, row in summary.items():
        lines.append(f"{label:28s} {row['nfe']:7.2f} {nan(row['nfe_se']):5.2f} "
                     f"{row['distortion']:11.2e} {row['accepted_per_forward']:8.3f} "
                     f"{row['tokens_per_forward']:8.3f} {row['gpu_seconds_7b']:9.3f}")
    lines.append(f"tokens processed per forward (block): "
                 f"{summary[BLOCK]['processed_per_forward']:.3f}")
    for v in verdicts:  # JSON keeps the verdict's key
        diff = "-" if v["difference"] is None else f"{v['difference']:+.2f} (SE {nan(v['se']):.2f})"
        lines.append(f"{v['claim']:55s} {diff:18s} {said(v)}")
    return {"json": out, "lines": lines,
            "ok": all(math.isfinite(s["nfe"]) for s in summary.values())}


def cost_model() -> dict:
    """The roofline numbers (module docstring) from the stored H200 shapes run."""
    record = json.loads(SHAPES.read_text().splitlines()[-1])
    model = Roofline.from_record(record)
    return {
        "parameters": model.parameters, "cfg_batch": model.cfg_batch,
        "bandwidth_bytes_per_s": model.bandwidth, "peak_flops": model.peak_flops,
        "weight_read_ms": 1e3 * model.weight_read_seconds, "ridge_tokens": model.ridge_tokens,
        "measured_forward_ms": record["forward_ms"], "measured_commit": record["git_commit"],
    }


def candidates_mode(
    model: ImageModel, nfe: dict[str, list[float]], images: list[tuple[int, str]],
    candidates: list[int], check: int | None, window: int,
) -> dict:
    """MC-SJD on the first ``check`` images (None: all), then MC-SJD with k candidates for each
    of ``candidates`` on all, at ``window`` (module docstring)."""
    n, costs = len(images), cost_model()
    ref = {"MC-SJD": nfe["MC-SJD (maximal)"], "MC-GSD": nfe["MC-GSD (G=50, maximal)"]}
    configs = {"MC-SJD (decoded here)": DecodingMethod("sjd", window=window, draft="maximal")}
    for k in candidates:
        configs[f"MC-SJD, {k} candidates"] = DecodingMethod(
            "sjd", window=window, draft="maximal", candidates=k
        )
    check = n if check is None else min(check, n)
    rows = {}
    for label, method in configs.items():
        count = check if method.candidates == 1 else n
        decoded = decode_images(model, method, images[:count], costs, label)
        nfe_k, dist = decoded["nfe"], decoded["distortion"]
        row = {
            "images": count, "nfe": float(np.mean(nfe_k)),
            "nfe_sem": paired_values(nfe_k, [0.0] * count).se,
            "distortion": float(np.mean(dist)), "distortion_max": float(np.max(dist)),
            "accepted_per_forward": float(np.mean(decoded["committed"])),
            "tokens_processed_per_forward": float(np.mean(decoded["processed"])),
            "modelled_read_times": float(np.mean(decoded["modelled"])),
            "wall_seconds": float(np.mean(decoded["wall"])),
            "per_image": {"nfe": nfe_k, "distortion": dist,
                          "seed": [s for s, _ in images[:count]]},
        }
        for name, scale, key in (("MC-SJD", 0.9, "target"), ("MC-GSD", 1.0, "moonshot")):
            row[key] = against(nfe_k, ref, name, scale)
        row["nfe_ratio_to_mc_sjd"] = float(np.mean(nfe_k) / np.mean(ref["MC-SJD"][:count]))
        diff = paired_values(nfe_k, ref["MC-SJD"][:count])
        row["difference_to_mc_sjd"] = {"difference": diff.difference, "se": diff.se}
        rows[label] = row
    same = rows["MC-SJD (decoded here)"]["per_image"]["nfe"] == [int(v) for v in ref["MC-SJD"]][
        :check]
    stored = {name: {"nfe": float(np.mean(v)), "nfe_sem": paired_values(v, [0.0] * n).se}
              for name, v in ref.items()}
    out = {
        "benchmark": "multidraft", "images": n, "check_images": check,
        "num_tokens": model.num_tokens, "window": window, "stored": stored,
        "mc_sjd_reproduced_image_by_image": same, "cost_model": costs, "rows": rows,
    }
    lines = [
        f"multidraft on the stand-in: {n} images, window {window}, {model.num_tokens} tokens; "
        f"stored MC-SJD {stored['MC-SJD']['nfe']:.2f} NFE, MC-GSD (G=50) "
        f"{stored['MC-GSD']['nfe']:.2f}; "
        f"MC-SJD re-decoded equal image by image ({check} images): {same}",
        f"cost model: weight read {costs['weight_read_ms']:.2f} ms, ridge "
        f"{costs['ridge_tokens']:.0f} tokens (measured forward ms {costs['measured_forward_ms']})",
    ]
    for label, row in rows.items():
        t, m = row["target"], row["moonshot"]
        lines.append(
            f"{label}: NFE {row['nfe']:.2f} +- {nan(row['nfe_sem']):.2f} "
            f"({row['nfe_ratio_to_mc_sjd']:.3f}x MC-SJD), distortion {row['distortion']:.2e} "
            f"(max {row['distortion_max']:.2e}), accepted/forward "
            f"{row['accepted_per_forward']:.2f}, processed/forward "
            f"{row['tokens_processed_per_forward']:.1f}, modelled read times "
            f"{row['modelled_read_times']:.1f}, wall {row['wall_seconds']:.1f} s; target "
            f"(< 0.9 MC-SJD) {t['difference']:+.2f} +- {nan(t['se']):.2f}: {said(t, False)}; "
            f"moonshot (<= MC-GSD) {m['difference']:+.2f} +- {nan(m['se']):.2f}: "
            f"{said(m, False)}"
        )
    return {"json": out, "lines": lines, "ok": True}


def walk_recorder(walks: list) -> Callable[[VerifiedWindow], None]:
    """An ``on_window`` hook appending each token-tree pass's walk as (widths of the depths
    visited, the rank accepted at each or None): what ``positional_acceptance`` reads."""

    def record(window: VerifiedWindow) -> None:
        if window.parent is None:  # not a tree pass
            return
        children = children_of(window.parent)
        widths, ranks, node = [], [], -1
        for accepted in window.path.tolist() + [None]:
            kids = children[node]
            if not kids:
                break
            widths.append(len(kids))
            ranks.append(None if accepted is None else kids.index(accepted))
            node = accepted
        walks.append((widths, ranks))

    return record


def decode_images(model: ImageModel, method: DecodingMethod, images: list[tuple[int, str]],
                  costs: dict, label: str, on_window: Callable | None = None) -> dict:
    """Decode ``images`` with ``method`` (``on_window``: ``generate``'s hook); per image: NFE,
    mean distortion per token, committed and processed tokens per forward (the prompt at the
    first), modelled time (``Roofline.decode_cost``, in weight read times) and wall seconds."""
    roofline = Roofline(costs["parameters"], costs["cfg_batch"])
    out: dict[str, list] = {key: [] for key in
                            ("nfe", "distortion", "committed", "processed", "modelled", "wall")}
    for seed, prompt in images:
        ids, uncond = model.encode(prompt)
        start = time.perf_counter()
        result = generate(model.adapter, ids, method, num_tokens=model.num_tokens,
                          generator=torch.Generator().manual_seed(seed),
                          uncond_prompt_ids=uncond, record_distortion=True,
                          on_window=on_window)
        out["wall"].append(time.perf_counter() - start)
        processed = result.tokens_processed or [
            d + (ids.numel() if f == 0 else 1) for f, d in enumerate(result.drafted)
        ]
        out["nfe"].append(result.nfe)
        out["distortion"].append(float(result.distortion.mean()))
        out["committed"].append(result.tokens.numel() / result.nfe)
        out["processed"].append(sum(processed) / result.nfe)
        out["modelled"].append(roofline.decode_cost(processed))
        print(f"{label} {prompt} seed {seed}: nfe {result.nfe}", flush=True)
    return out


def decode_row(model: ImageModel, method: DecodingMethod, images: list[tuple[int, str]],
               costs: dict, label: str, on_window: Callable | None = None) -> dict:
    """``decode_images``' means: NFE, tokens per forward, modelled time, the largest distortion."""
    decoded = decode_images(model, method, images, costs, label, on_window)
    return {
        "images": len(images), "nfe": float(np.mean(decoded["nfe"])),
        "tokens_processed_per_forward": float(np.mean(decoded["processed"])),
        "modelled_read_times": float(np.mean(decoded["modelled"])),
        "distortion_max": float(np.max(decoded["distortion"])),
        "wall_seconds": float(np.mean(decoded["wall"])),
        "per_image": {"nfe": decoded["nfe"], "modelled_read_times": decoded["modelled"],
                      "seed": [s for s, _ in images]},
    }


def stored_lossless(n: int) -> dict:
    """The stored multiple-draft rows (k = 2, 4, 8): NFE, tokens per forward, modelled time on
    their first ``n`` images where they hold them per image (modelled: mean over all images)."""
    rows = {}
    for name in ("multidraft_standin.json", "multidraft_standin_k8.json"):
        path = ROOT / "benchmarks/results" / name
        if not path.exists():
            continue
        for label, row in json.loads(path.read_text())["rows"].items():
            if "candidates" in label:
                rows[label] = {"file": f"benchmarks/results/{name}",
                               "images": row.get("images", len(row["per_image"]["nfe"])),
                               "nfe": row["nfe"],
                               "nfe_first_n": float(np.mean(row["per_image"]["nfe"][:n])),
                               "tokens_processed_per_forward":
                                   row["tokens_processed_per_forward"],
                               "modelled_read_times": row["modelled_read_times"]}
    return rows


def pair_trees(rows: dict[str, dict], ref: dict[str, list[float]], n: int) -> None:
    """Add to each tree row of ``rows`` its paired verdicts (``against``) on modelled time and
    NFE against the stored MC-SJD and MC-GSD (``ref``, first ``n`` images) and the ratios of its
    mean modelled time to theirs."""
    for label, row in rows.items():
        if label == "MC-SJD (decoded here)":
            continue
        mine = row["per_image"]["modelled_read_times"]
        for key, name, scale, on in (("target", "MC-SJD", 0.85, "modelled"),
                                     ("moonshot", "MC-GSD", 1.0, "modelled"),
                                     ("nfe_vs_mc_sjd", "MC-SJD", 1.0, "nfe"),
                                     ("nfe_vs_mc_gsd", "MC-GSD", 1.0, "nfe")):
            a = mine if on == "modelled" else row["per_image"]["nfe"]
            row[key] = against([float(v) for v in a], ref, name, scale, on=on)
        row["modelled_ratio_to_mc_sjd"] = float(np.mean(mine) / np.mean(ref["MC-SJD"][:n]))
        row["modelled_ratio_to_mc_gsd"] = float(np.mean(mine) / np.mean(ref["MC-GSD"][:n]))


def trees_mode(
    model: ImageModel, nfe: dict[str, list[float]], images: list[tuple[int, str]],
    window: int, measure: int, measure_shape: tuple[int, ...], top: int, check: int,
    given: tuple[tuple[int, ...], int] | None = None, side_tail: int | None = None,
) -> dict:
    """Token trees (module docstring): measure, rank, decode the best ``top``, pair; with
    ``given`` (shape, window), that shape alone, unmeasured and unranked, as a spine tree with
    ``side_tail`` when it is given (``gsd_core.spine_tree``)."""
    n, costs = len(images), cost_model()
    roofline = Roofline(costs["parameters"], costs["cfg_batch"])
    walks: list = []
    measured = None
    if given is None:
        wide = DecodingMethod("sjd", window=window, draft="maximal", tree=measure_shape)
        measured = decode_row(model, wide, images[:measure], costs, f"measure {measure_shape}",
                              walk_recorder(walks))
    width = max(measure_shape)
    acceptance = positional_acceptance(walks, window, width)
    ranked = ranked_shapes(acceptance, roofline, list(range(8, window + 1, 2)),
                           budget=costs["ridge_tokens"], max_depth=3)
    chosen = ranked[:top]
    if given is not None:
        shape, at = given
        tokens = (tree_tokens(shape, at) if side_tail is None
                  else 1 + spine_tree_size(shape, at, side_tail))
        chosen = [ScoredShape(shape, at, tokens, math.nan, math.nan)]
    rows = {"MC-SJD (decoded here)": decode_row(
        model, DecodingMethod("sjd", window=window, draft="maximal"), images[:check], costs,
        "MC-SJD")}
    for scored in chosen:
        label = f"MC-SJD, tree {scored.shape}, window {scored.window}" + (
            "" if side_tail is None else f", side tail {side_tail}")
        method = DecodingMethod("sjd", window=scored.window, draft="maximal", tree=scored.shape,
                                side_tail=side_tail)
        rows[label] = decode_row(model, method, images, costs, label)
        rows[label]["expected_committed_model"] = (
            None if math.isnan(scored.expected_committed) else scored.expected_committed)
    ref = {"MC-SJD": nfe["MC-SJD (maximal)"], "MC-GSD": nfe["MC-GSD (G=50, maximal)"]}
    mc_check = rows["MC-SJD (decoded here)"]["per_image"]
    modelled_is_nfe = all(abs(m - v) < 1e-9 for m, v in zip(mc_check["modelled_read_times"],
                                                            mc_check["nfe"]))
    reproduced = [int(v) for v in mc_check["nfe"]] == [int(v) for v in ref["MC-SJD"][:check]]
    pair_trees(rows, ref, n)
    stored = {name: {"nfe": float(np.mean(v[:n])), "modelled_read_times": float(np.mean(v[:n]))}
              for name, v in ref.items()}
    out = {
        "benchmark": "token_trees", "images": n, "window": window,
        "num_tokens": model.num_tokens, "cost_model": costs,
        "given_shape": None if given is None else {"shape": list(given[0]), "window": given[1]},
        "measure": {"images": 0 if given else measure, "shape": list(measure_shape),
                    "walks": len(walks),
                    "acceptance": [[None if v != v else v for v in r] for r in
                                   acceptance.tolist()], "row": measured},
        "ranked": [{"shape": list(s.shape), "window": s.window, "tokens": s.tokens,
                    "expected_committed": s.expected_committed,
                    "cost_per_token": s.cost_per_token} for s in ranked[:12]],
        "stored": stored, "mc_sjd_check_images": check,
        "mc_sjd_reproduced_image_by_image": reproduced,
        "mc_sjd_modelled_equals_nfe": modelled_is_nfe,
        "rows": rows, "stored_lossless": stored_lossless(n),
    }
    lines = tree_lines(out, acceptance, ranked, measure_shape)
    return {"json": out, "lines": lines, "ok": True}


def tree_lines(out: dict, acceptance: torch.Tensor, ranked: list[ScoredShape],
               measure_shape: tuple[int, ...]) -> list[str]:
    """The printed lines of ``trees_mode``'s record ``out``: the setting, the measured
    positional ``acceptance`` and the ``ranked`` shapes (when measured), then every row."""
    stored, costs, n = out["stored"], out["cost_model"], out["images"]
    lines = [
        f"token trees on the stand-in: {n} images, window {out['window']}, "
        f"{out['num_tokens']} tokens; stored MC-SJD {stored['MC-SJD']['nfe']:.2f} NFE, MC-GSD "
        f"(G=50) {stored['MC-GSD']['nfe']:.2f} on these images (below the ridge: modelled = "
        f"NFE; checked on {out['mc_sjd_check_images']} MC-SJD images: "
        f"{out['mc_sjd_modelled_equals_nfe']}, reproduced: "
        f"{out['mc_sjd_reproduced_image_by_image']})",
        f"cost model: weight read {costs['weight_read_ms']:.2f} ms, ridge "
        f"{costs['ridge_tokens']:.1f} tokens",
        "max distortion below: SD's per-token TV formula with the window drafts' q, 0 by "
        "construction and not the (p, q) verified through an extra candidate: no evidence about "
        "trees (their law: the exact tests, proofs/16)",
    ]
    if out["given_shape"] is None:  # with a given shape nothing was measured or ranked
        lines.append(f"positional acceptance from {out['measure']['walks']} walks of tree "
                     f"{measure_shape} on {out['measure']['images']} images, also among the {n} "
                     "evaluated (depth: A[1 .. width]):")
        for t, r in enumerate(acceptance.tolist()[:6]):
            lines.append(f"  depth {t + 1}: "
                         + " ".join("-" if v != v else f"{v:.3f}" for v in r))
        lines.append("best shapes by modelled read times per committed token (model):")
        for s in ranked[:8]:
            lines.append(f"  {s.shape} window {s.window}: {s.tokens} tokens, "
                         f"E {s.expected_committed:.2f}"
                         f" committed, {s.cost_per_token:.4f} read times per token")
    for label, row in out["rows"].items():
        text = (f"{label} ({row['images']} images): NFE {row['nfe']:.2f}, tokens/forward "
                f"{row['tokens_processed_per_forward']:.1f}, modelled read times "
                f"{row['modelled_read_times']:.1f}, max distortion {row['distortion_max']:.1e}, "
                f"wall {row['wall_seconds']:.1f} s")
        if "target" in row:
            t, m = row["target"], row["moonshot"]
            text += (f"; {row['modelled_ratio_to_mc_sjd']:.3f}x MC-SJD's modelled time, "
                     f"{row['modelled_ratio_to_mc_gsd']:.3f}x MC-GSD's; target (<= 0.85 MC-SJD) "
                     f"{t['difference']:+.2f} +- {nan(t['se']):.2f}: {said(t, False)}; moonshot "
                     f"(< MC-GSD) {m['difference']:+.2f} +- {nan(m['se']):.2f}: {said(m, False)}")
        lines.append(text)
    for label, row in out["stored_lossless"].items():
        lines.append(f"stored {label} ({row['images']} images, {row['file']}): NFE "
                     f"{row['nfe']:.2f}, tokens/forward {row['tokens_processed_per_forward']:.1f}, "
                     f"modelled read times {row['modelled_read_times']:.1f}")
    return lines


def stored_frontier(limit: int | None) -> tuple[dict, dict, list[tuple[int, str]], dict]:
    """``figures/results.json``, the frontier's ``STORED`` rows, its images (generator seed,
    prompt; the first ``limit``) and each row's NFE on them; stops unless the stored SJD point
    is plain SJD and every row holds its images in that order."""
    results = json.loads((ROOT / "figures/results.json").read_text())
    frontier = results["tables"]["frontier"]
    rows = {label: frontier["curves"][curve][index] for label, (curve, index) in STORED.items()}
    sjd_spec = DecodingMethod.from_dict(frontier["specs"]["TV-optimal relaxation"][0]["method"])
    if not (sjd_spec.kind == "sjd" and sjd_spec.draft == "independent"
            and sjd_spec.acceptance == SDAcceptance()):  # delta = 0: SJD's key
        raise SystemExit(f"the stored frontier's SJD point is not plain SJD: {sjd_spec!r}")
    images = [(generator_seed(s, i), prompt)
              for s in frontier["seeds"] for i, prompt in enumerate(frontier["prompts"])]
    images = images[:limit] if limit else images
    n = len(images)
    for label, row in rows.items():
        if row["per_image"]["seed"][:n] != [seed for seed, _ in images]:
            raise SystemExit(f"the stored {label}'s image order differs from prompts x seeds")
    nfe = {label: [float(v) for v in row["per_image"]["nfe"][:n]] for label, row in rows.items()}
    return results, rows, images, nfe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="path stem: writes .json and .txt (default: benchmarks/"
                        "results/lossless_beyond_standin, --candidates: multidraft_standin)")
    parser.add_argument("--candidates", type=int, nargs="+", default=None,
                        help="multiple drafts with these k instead of block verification")
    parser.add_argument("--trees", action="store_true",
                        help="token trees: shapes chosen for the forward's cost")
    parser.add_argument("--measure", type=int, default=3,
                        help="--trees: images measuring the positional acceptance")
    parser.add_argument("--measure-shape", type=int, nargs="+", default=[8, 3])
    parser.add_argument("--top", type=int, default=2, help="--trees: shapes decoded")
    parser.add_argument("--tree-shape", type=int, nargs="+", default=None,
                        help="--trees: decode this shape alone (no measurement, no ranking)")
    parser.add_argument("--side-tail", type=int, default=None,
                        help="--tree-shape as a spine tree: the chain under each extra candidate")
    parser.add_argument("--tree-window", type=int, default=None,
                        help="--tree-shape's window (default: the frontier's)")
    parser.add_argument("--images", type=int, default=None, help="the first n images only")
    parser.add_argument("--check", type=int, default=None,
                        help="MC-SJD images re-decoded alone (2; with --candidates all)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results, rows, images, nfe = stored_frontier(args.images)
    frontier = results["tables"]["frontier"]
    window = results["config"]["sizes"]["window"]
    if args.trees:
        model = load_image_model("standin", quick=True)
        done = trees_mode(model, nfe, images, window, args.measure, tuple(args.measure_shape),
                          args.top, 2 if args.check is None else args.check,
                          None if args.tree_shape is None else
                          (tuple(args.tree_shape), args.tree_window or window),
                          args.side_tail)
    elif args.candidates is not None:  # the quick stand-in: the same logits bit for bit
        model = load_image_model("standin", quick=True)
        done = candidates_mode(model, nfe, images, args.candidates, args.check, window)
    else:
        model = load_image_model("standin")
        checks = mc_sjd_checks(model, images[: 2 if args.check is None else args.check],
                               nfe["MC-SJD (maximal)"], window)
        done = block_mode(model, frontier, rows, images, nfe, results, checks, args.threads)
    stem = ("token_trees_standin" if args.trees else "multidraft_standin"
            if args.candidates is not None else "lossless_beyond_standin")
    out = Path(args.out or ROOT / "benchmarks/results" / stem)
    out.with_suffix(".json").write_text(json.dumps(done["json"], indent=1) + "\n")
    out.with_suffix(".txt").write_text("\n".join(done["lines"]) + "\n")
    print("\n".join(done["lines"]))
    return 0 if done["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
