"""Write the notebooks from this script (nbformat) and, with ``--execute``, run them top to
bottom with nbclient so that they are committed with outputs.

    python notebooks/build_notebooks.py                # write the .ipynb files (no outputs)
    python notebooks/build_notebooks.py --execute      # write and execute them in place
    python notebooks/build_notebooks.py --execute --only 02 --set model_name='"tiny-random"' --allow-dirty

Committed outputs must come from a clean checkout of a commit: ``--execute`` into this folder
refuses a dirty tree (``--allow-dirty`` for development: it warns, and every notebook's header
then prints ``dirty True``). All notebooks are executed before any is written, so that writing
one does not dirty the tree under the next. Each notebook's first code cell after the
parameters prints its provenance (commit, dirty flag, package versions).

Cells hold narrative and calls into gsd_core / gsd_lab only; the analyses live in
``gsd_lab.experiments`` and the checks in ``gsd_lab.nbcheck``. ``# NBVAL_CHECK_OUTPUT`` cells
(``pytest --nbval-lax notebooks/`` compares them) print exact quantities or the verdicts of
statistical invariants with stated tolerances, never sampled numbers: sampled numbers are shown
in unchecked cells, and text that states a measured result is printed by code from the outputs.
Every notebook has one cell tagged ``parameters`` (papermill style); kernelspec is normalised
to ``python3``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
CHECK = "# NBVAL_CHECK_OUTPUT\n"

MODEL_NOTE = (
    "**Which model produced the outputs shown.** The stored outputs come from the default model, "
    "`standin`: the small class-conditional image model trained in this repository "
    "(`gsd_lab/standin`; the setup cell prints its codebook, tokens per image and guidance), run on "
    "CPU with its forward in float64 so that the outputs are the same on any x86 CPU. Its numbers "
    "show the *shape* of the paper's results, not Lumina-mGPT's values. To run Lumina-mGPT 7B on a "
    "GPU, set `model_name = \"lumina-mgpt-7b-768\"` and `weights` (and `vqgan`, `clip`) in the "
    "parameters cell; `model_name = \"tiny-random\"` runs everything on a random tiny model in seconds."
)

MODEL_PARAMETERS = '''# Parameters (papermill style: this cell is tagged "parameters")
model_name = "standin"      # or "tiny-random" (seconds, meaningless numbers), "lumina-mgpt-7b-768" (GPU)
weights = None              # Lumina-mGPT checkpoint folder
vqgan = None                # folder with vqgan.yaml + vqgan.ckpt (Chameleon VQGAN)
clip = None                 # local CLIP model folder (CLIP score for Lumina-mGPT)
device = None               # None: cpu for the stand-in, cuda if available for Lumina-mGPT
threads = 1                 # torch CPU threads (results do not depend on it: float64 forward on CPU)
'''

PROVENANCE = '''from gsd_lab.nbcheck import provenance_header

provenance_header()  # commit, dirty flag, package versions of this run'''

MODEL_SETUP = '''import warnings

import torch

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto without ipywidgets

from gsd_lab.experiments.image_model import load_image_model
from gsd_lab.nbcheck import provenance_header

provenance_header()  # commit, dirty flag, package versions of this run
torch.set_num_threads(threads)
model = load_image_model(model_name, weights=weights, vqgan=vqgan, clip=clip, device=device)
print(f"model: {model.name}; {model.num_tokens} tokens per image; {model.image_vocabulary.numel()} image codes; "
      f"cfg {model.adapter.cfg_scale}, top-k {model.adapter.top_k}; device {model.adapter.device}, "
      f"forward in {model.adapter.compute_dtype}")
print("weights:", model.weights_info)'''


def md(text: str) -> nbformat.NotebookNode:
    return new_markdown_cell(text.strip("\n"))


def code(src: str, *, tags: list[str] | None = None) -> nbformat.NotebookNode:
    cell = new_code_cell(src.strip("\n"))
    if tags:
        cell.metadata["tags"] = tags
    return cell


def params(src: str) -> nbformat.NotebookNode:
    return code(src, tags=["parameters"])


# --------------------------------------------------------------------------------------------
def nb01() -> list:
    return [
        md("""
# 01 - Total variation: why flat distributions reject good drafts (paper Fig. 6)

Speculative sampling accepts a draft x ~ q with probability min(1, p(x)/q(x)); averaged over x
the acceptance rate is exactly **1 - TV(p, q)**, TV(p, q) = 1/2 sum_x |p(x) - q(x)|.
This notebook shows the paper's argument with exact numbers: two distributions can agree on
*which* tokens are viable and still have a large TV when their mass is spread over many tokens,
because many tiny per-token gaps add up. Grouping tokens into clusters shrinks TV (Theorem 1).

The first sections are model-free (exact, `gsd_core`); the last places a real image model's
next-token distributions on the same axes.
"""),
        md(MODEL_NOTE),
        params(MODEL_PARAMETERS + '''vocab_size = 1000           # toy vocabulary of the flat/peaked pair
num_pairs = 64              # random pairs per grid point
seed = 0
num_model_images = 2        # AR images whose target distributions are measured at the end
'''),
        code(PROVENANCE + '''

from gsd_core import tv_distance
from gsd_lab.experiments import plots, toy
from gsd_lab.nbcheck import rounded'''),
        md("""
## A flat pair and a peaked pair

*Flat*: p is uniform over V tokens; q puts 1.5/V on half of them and 0.5/V on the other half.
Every token is viable under both, and each gap is only 0.5/V, but TV = 1/2 * V * 0.5/V = 0.25.
*Peaked*: p(0) = 0.9, q(0) = 0.85, the rest spread evenly: TV = 0.05 although the pair
looks "less similar" on its top token.
"""),
        code('''pairs = toy.flat_and_peaked_pairs(vocab_size)
tvs = {name: float(tv_distance(p, q)) for name, (p, q) in pairs.items()}'''),
        code(CHECK + '''# Exact (enumerated) values.
for name, tv in tvs.items():
    print(f"{name:6s}  TV = {tv:.4f}   acceptance 1 - TV = {1 - tv:.4f}")'''),
        code('''plots.show(plots.tv_flat_vs_peaked(pairs, tvs))'''),
        md("""
## TV against the number of viable tokens and the concentration

Pairs that share the same base distribution b and differ only by independent per-token
log-normal noise: p, q proportional to b * exp(0.5 * eps). The base puts mass m on token 0 and
spreads 1 - m evenly over n - 1 further "viable" tokens (so m is the top-1 mass only when
m >= (1 - m)/(n - 1)). The values are Monte Carlo means over random pairs (printed below, not
checked); the checked cell states what holds exactly.
"""),
        code('''viable = [1, 2, 4, 16, 64, 256, 1024, 4096]
masses = [0.05, 0.5, 0.9]
grid = toy.tv_grid(viable, masses, vocab_size=4096, noise=0.5, num_pairs=num_pairs, seed=seed)
print("viable tokens n:", viable)
for mass, row in zip(masses, grid.tolist()):
    print(f"b(token 0) = {mass:4.2f}: mean TV over {num_pairs} random pairs", [round(v, 3) for v in row])'''),
        code(CHECK + '''# Exact: with one viable token p = q (TV 0); the Monte Carlo means are positive elsewhere.
print("n = 1: TV exactly 0 for every m:", bool((grid[:, 0] == 0).all()))
print("n >= 2: mean TV > 0 for every m:", bool((grid[:, 1:] > 0).all()))'''),
        code('''plots.show(plots.tv_against_viable(viable, masses, grid.numpy(), noise=0.5))
saturation = {m: row[-1] for m, row in zip(masses, grid.tolist())}
print("Measured here: at n = 4096 the mean TV is " + ", ".join(f"{v:.2f} for m = {m:g}" for m, v in saturation.items())
      + "; a larger shared mass m on one token " + ("lowers" if saturation[masses[-1]] < saturation[masses[0]] else "does not lower")
      + " TV at that n.")'''),
        md("""
## Grouping shrinks TV (Theorem 1, drawn)

Cut the p-ranking into bins of G consecutive tokens (a partition that depends on p only) and
compare cluster masses p'(C), q'(C). By the triangle inequality |p'(C) - q'(C)| <= sum over C of
|p - q|, so TV(p', q') <= TV(p, q) for **any** partition, and the acceptance rate of
verifying clusters, 1 - TV(p', q'), can only go up. Bins of 2G tokens are unions of bins of G
tokens of the same ranking, so for G = 1, 2, 4, ... TV(p', q') cannot rise with G for any pair.
Right: random pairs and random partitions; every point lies on or below the diagonal.
"""),
        code('''import torch

p_noisy, q_noisy = toy.noisy_pairs(1024, 0.05, vocab_size=4096, noise=0.5, num_pairs=num_pairs,
                                   generator=torch.Generator().manual_seed(seed + 1))
groups = [1, 2, 4, 8, 16, 32, 64, 128, 256]
tv_by_group = toy.rank_binned_tv(p_noisy, q_noisy, groups)
check = toy.theorem1_random_partitions(vocab_size=32, num_trials=2000, seed=seed)
print("G:", groups)
print("mean TV(p', q') over the random pairs:", [round(v, 3) for v in tv_by_group.mean(-1).tolist()])'''),
        code(CHECK + '''# Exact statements (tolerance 1e-12 for rounding).
nested = bool((tv_by_group[1:] <= tv_by_group[:-1] + 1e-12).all())
print(f"every pair: TV(p', q') non-increasing in G = {groups[0]}..{groups[-1]} (nested bins): {nested}")
print(f"Theorem 1 on 2000 random pairs and partitions: max(TV' - TV) <= 1e-12: {check.max_violation <= 1e-12}")'''),
        code('''plots.show(plots.grouping_and_theorem1(groups, tv_by_group.numpy(), check))'''),
        md("""
## Where does a real image model sit?

The target distributions of a trained image model at every generated token (AR decoding,
teacher-forced): their top-1 mass and their effective number of viable tokens exp(H(p)).
The paper reports top-1 mass below 5% for 50-95% of Lumina-mGPT's tokens, the regime of the
plots above where TV is large and single-token verification rejects often. The cell after the
measurement states where this model sits.
"""),
        code(MODEL_SETUP),
        code('''from gsd_lab.experiments.replacement import target_distributions
from gsd_lab.experiments.runs import MethodSpec, run_method

records = run_method(model, MethodSpec("AR", "ar"), model.default_prompts[:num_model_images], [seed])
dists = torch.cat([target_distributions(model, r.prompt, r.tokens).cpu() for r in records])
top1 = dists.max(-1).values
entropy = -(dists * torch.log(dists.clamp(min=1e-300))).sum(-1)
effective = torch.exp(entropy)'''),
        code(CHECK + '''# Exact: each teacher-forced row is a distribution.
print(f"{dists.shape[0]} positions; every row sums to 1 within 1e-9: {bool(((dists.sum(-1) - 1).abs() < 1e-9).all())}")'''),
        code('''from gsd_lab.experiments.plots import percent

share_flat = float((top1 < 0.05).double().mean())
print(f"median top-1 mass {top1.median():.3f}; median effective viable tokens exp(H) {effective.median():.1f}; "
      f"share of positions with top-1 < 0.05: {percent(share_flat)}")
regime = ("flat: most positions spread their mass, as in the paper" if share_flat >= 0.5 else
          "peaked: most positions put more than 5% on one token, unlike the paper's 50-95% flat positions")
print(f"This model's target distributions are {regime}.")'''),
    ]


def nb02() -> list:
    return [
        md("""
# 02 - Top-1 probability histograms (the paper's diversity statistic)

For every generated image token, the largest probability of the target distribution it was
sampled from (after CFG, top-k and temperature, i.e. the distribution verification uses).
The paper reports that for **50-95% of Lumina-mGPT's tokens the top-1 probability is below 5%**:
the model spreads its mass over many plausible tokens, so a single drafted token is rarely
confirmed even when it is a fine choice. AR decoding is used, so each row is exactly
p(. | prompt, previous tokens).
"""),
        md(MODEL_NOTE),
        params(MODEL_PARAMETERS + '''seeds = [0]                 # one image per (seed, prompt)
max_prompts = None          # None: every class of the stand-in (or the default prompt list)
threshold = 0.05
'''),
        code(MODEL_SETUP),
        code('''from gsd_lab.experiments import plots
from gsd_lab.experiments.plots import percent
from gsd_lab.experiments.replacement import target_distributions
from gsd_lab.experiments.runs import MethodSpec, run_method
from gsd_lab.experiments.top1 import top1_stats

prompts = model.default_prompts[:max_prompts]
records = run_method(model, MethodSpec("AR", "ar"), prompts, seeds, record_top1=True)
stats = top1_stats(records, threshold)
summary = stats.summary()
print(f"{summary['images']} images x {summary['tokens_per_image']} tokens (sampled: not checked)")
print(f"pooled share of tokens with top-1 < {threshold}: {percent(summary['pooled_share_below'])}")
print(f"per image: min {percent(summary['min_share_below'])}, max {percent(summary['max_share_below'])}")
print(f"median top-1 probability: {summary['median_top1']:.3f}")
for record, share in zip(records, stats.share_below):
    print(f"  {record.prompt:22s} {percent(share)}")'''),
        code(CHECK + '''# Exact: the recorded top-1 of each token is the largest probability of the distribution it was
# sampled from, recomputed teacher-forced in one pass (float rounding tolerance 1e-9).
gap = max(float((target_distributions(model, r.prompt, r.tokens).cpu().amax(-1) - r.top1).abs().max())
          for r in records)
print(f"recorded top-1 = max of the teacher-forced target distribution at every token (within 1e-9): {gap < 1e-9}")
print(f"pooled share = mean of the per-image shares (equal tokens per image): "
      f"{abs(stats.pooled_share_below - float(stats.share_below.mean())) < 1e-12}")'''),
        code('''plots.show(plots.top1_histograms(stats, max_images=9))'''),
        md("""
The share is measured here, not assumed: it depends on the codebook size, the data, the
model's capacity and the guidance scale. Compare with the paper's 50-95% on Lumina-mGPT (8,192
codes, open-ended text prompts); the cell below says which regime this model is in.
"""),
        code('''share = stats.pooled_share_below
print(f"This model: {percent(share)} of tokens have top-1 < {threshold}. "
      + ("Its target distributions are flat, as the paper describes for Lumina-mGPT." if share >= 0.5 else
         "Its target distributions are mostly peaked, so the acceptance of single drafted tokens "
         "(notebook 04) is limited by something else as well: random initial drafts, which a peaked p rejects."))'''),
        md("""
Classifier-free guidance sharpens distributions (l = u + s (c - u), s > 1). The same prompts
and seeds without guidance (the conditional model alone), for models that use guidance:
"""),
        code('''from gsd_lab.experiments.image_model import guidance_scale

if model.adapter.uses_cfg:
    with guidance_scale(model, None):
        records_no_cfg = run_method(model, MethodSpec("AR", "ar"), prompts, seeds, record_top1=True)
    stats_no_cfg = top1_stats(records_no_cfg, threshold)
    for name, s in (("with guidance (model default)", stats), ("without guidance", stats_no_cfg)):
        print(f"{name:30s} share top-1 < {threshold}: {percent(s.pooled_share_below)}  "
              f"median top-1 {s.summary()['median_top1']:.3f}")
else:
    print(f"{model.name} does not use classifier-free guidance: nothing to compare")'''),
        code('''if model.decode is not None:
    plots.show(plots.image_grid({"AR samples": [r.image for r in records]}, max_columns=10))'''),
    ]


def nb03() -> list:
    return [
        md("""
# 03 - Replacing tokens with top-100 candidates (paper Fig. 4)

If image tokens are redundant, swapping a token for another *plausible* one should barely change
the image. Generate images with AR decoding, replace a random 50% of each image's tokens with a
candidate drawn uniformly from the top-100 of the target distribution at that position
(teacher-forced on the original sequence), decode, and compare quality with the unmodified
images and with a control that replaces with uniformly random tokens.

Quality on the stand-in: condition-consistency score (x100, the probability a classifier trained
on real crops gives the conditioning class; higher is better) and a Frechet distance on that
classifier's features against held-out real crops (lower is better). Both are proxies; only
their movement between variants means something. On Lumina-mGPT: CLIP score (paper: 32.089
after replacement vs 32.091).
"""),
        md(MODEL_NOTE),
        params(MODEL_PARAMETERS + '''seeds = [0]
max_prompts = None
fraction = 0.5
top_k = 100
replacement_seed = 0
'''),
        code(MODEL_SETUP),
        code('''from gsd_lab.experiments import plots
from gsd_lab.experiments.replacement import replacement_study
from gsd_lab.experiments.runs import MethodSpec, run_method

prompts = model.default_prompts[:max_prompts]
records = run_method(model, MethodSpec("AR", "ar"), prompts, seeds)
study = replacement_study(model, records, fraction=fraction, top_k=top_k, seed=replacement_seed)
print("Sampled (not checked); condition_score_sem is the standard error over images:")
for variant in study.images:
    q = study.quality[variant]
    metrics = ", ".join(f"{k} {v:.2f}" for k, v in q.items() if v is not None)
    print(f"{variant:9s} changed {study.changed_share[variant]:.3f}  "
          f"mean log p {study.mean_log_prob[variant]:.3f}  {metrics}")'''),
        code(CHECK + '''# Exact: the unmodified images change nothing; a variant changes at most the chosen share of
# positions (a replacement may coincide with the original token).
print(f"original: changed share exactly 0: {study.changed_share['original'] == 0}")
print(f"top-k and uniform: changed share <= {fraction}: "
      f"{all(study.changed_share[v] <= fraction + 1e-12 for v in ('top-k', 'uniform'))}")'''),
        code('''if "condition_score" in study.quality["original"]:
    q = study.quality
    drop_top = q["original"]["condition_score"] - q["top-k"]["condition_score"]
    drop_uni = q["original"]["condition_score"] - q["uniform"]["condition_score"]
    sem = q["original"].get("condition_score_sem")
    sem_text = f" (standard errors about {sem:.1f} points)" if sem is not None else " (one image: no standard error)"
    print(f"Measured here: condition score drops by {drop_top:.1f} points after top-{top_k} replacement and by "
          f"{drop_uni:.1f} after uniform replacement{sem_text}.")'''),
        md("""
Rows: unmodified AR images, 50% of tokens replaced by top-100 candidates, 50% replaced by
uniformly random tokens.
"""),
        code('''if model.decode is not None:
    plots.show(plots.image_grid({k: v[:10] for k, v in study.images.items()}, max_columns=10))'''),
    ]


def nb04() -> list:
    return [
        md("""
# 04 - Speed and quality: Table 1, Table 2 and Fig. 10 analogues

All methods decode the same prompts with the same generator seeds.

* **AR**: one token per forward pass. **SJD**: speculative Jacobi decoding, window 16, random
  initial drafts, exact (lossless). **GSD (G)**: the same loop, verifying the paper's dynamic
  cluster around the draft in the p-ranking (`DynamicClusters(G)`: the 2 floor(G/2) + 1 tokens
  ranked within G/2 of it), with its probability-gap (0.15) and embedding-distance filters
  (lossy). **Amplify (k)**: a naive lossy relaxation, *our definition* (the paper's was not
  found): SJD accepting with min(1, k p(x)/q(x)).
* **NFE** = forward passes per image (a CFG pair counts once): the hardware-independent cost,
  with `nfe_sem` its standard error over images.
* Two acceptance measures. `accepted_per_tested` = accepted drafts / tested drafts, where a
  window tests its drafts up to and including its first rejection: the empirical
  E[min(1, p(C)/q(C))] at a tested position (1 - TV for SJD, as notebooks 01 and 05 compute).
  `acceptance_rate` = accepted drafts / all drafted positions, including the positions after a
  window's first rejection that were never tested: a throughput measure, always the smaller.
* Quality proxies as in notebook 03 (condition score x100, higher better, with its standard
  error over images `condition_score_sem`; Frechet distance, lower better, biased upward at
  small sample sizes, so compare it only between rows with the same number of images); on
  Lumina-mGPT: CLIP score. Differences within about two standard errors are noise.
* CPU wall time is shown in a separate table, for what it is: noise-dominated on a shared CPU
  (repeated runs of the same configuration differ by tens of percent), not the paper's GPU latency.

All tables are sampled (they depend on the random stream) and are not checked; the checked cells
state invariants. `python -m gsd_lab figures` runs the same functions at larger sizes
(figures/results.md).
"""),
        md(MODEL_NOTE),
        params(MODEL_PARAMETERS + '''seeds = [0]
max_prompts = None
table1_groups = (3, 10, 25, 50)
table1_amplify = (2.0, 3.0)
table2_group = 50
pareto_groups = (3, 10, 25, 50, 100)
pareto_amplify = (1.5, 2.0, 3.0, 4.0)
'''),
        code(MODEL_SETUP),
        code('''from IPython.display import Markdown, display

from gsd_lab import nbcheck
from gsd_lab.experiments import plots, tables
from gsd_lab.experiments.runs import FilterSettings, RunCache
from gsd_lab.figure_io import markdown_table

prompts = model.default_prompts[:max_prompts]
cache = RunCache(model, prompts, seeds, FilterSettings.for_model(model.name))
columns = ["method", "images", "nfe", "nfe_sem", "speedup_nfe", "accepted_per_tested", "acceptance_rate",
           "condition_score", "condition_score_sem", "frechet_distance"]
wall_columns = ["method", "wall_seconds", "speedup_wall"]


def show_tables(rows):
    """The sampled table, then wall time separately (noise)."""
    display(Markdown(markdown_table(rows, [c for c in columns if any(r.get(c) is not None for r in rows)])))
    display(Markdown("CPU wall time (noise, see above):\\n\\n" + markdown_table(rows, wall_columns)))'''),
        md("## Table 1 analogue: AR, SJD, GSD over G, Amplify"),
        code('''table1 = tables.speed_quality_table(cache, tables.table1_specs(table1_groups, table1_amplify))
show_tables(table1)'''),
        code(CHECK + '''for line in nbcheck.nfe_invariants(table1, model.num_tokens) + nbcheck.acceptance_lines(table1):
    print(line)'''),
        code('''gsd_rows = [r for r in table1 if r["method"].startswith("GSD")]
monotone = all(a["nfe"] >= b["nfe"] for a, b in zip(gsd_rows, gsd_rows[1:]))
print("Measured here: GSD's NFE " + ("never rises" if monotone else "does not fall monotonically") + " as G grows ("
      + ", ".join(f"{r['method']}: {r['nfe']:.1f}" for r in gsd_rows) + "). Theorem 1 says nothing about this: "
      "it bounds one verification step of a fixed partition, and the dynamic rule is not a partition.")'''),
        md("""
## Table 2 analogue: which clusters?

At G = 50: (A) a static partition by k-means on the input embeddings (a fixed partition, so
Theorem 1 holds and acceptance can only rise, but the clusters ignore context); (B) the dynamic
window ranked by the draft q; (C) ranked by the target p without filters; (D) the paper's rule,
ranked by p with both filters, and each filter alone: (D1) the probability gap |p(y) - p(x)| <=
0.15, (D2) the embedding distance; and our rank-binned partition of the p-ranking with (E) the
token-level residual and (F) the cluster-exact residual (which keeps every cluster's output
mass equal to p'(C)).
"""),
        code('''table2 = cache.table(tables.table2_specs(table2_group), tables.AR)
show_tables(table2)'''),
        code(CHECK + '''for line in nbcheck.nfe_invariants(table2, model.num_tokens) + nbcheck.acceptance_lines(table2):
    print(line)'''),
        code('''row = {r["method"][:4]: r for r in table2}
c, d, d1, d2 = (row[k]["nfe"] for k in ("(C) ", "(D) ", "(D1)", "(D2)"))
if abs(d1 - d2) < 0.05:
    verdict = "the two filters cost about the same"
else:
    verdict = ("the |dp| filter" if d1 > d2 else "the embedding-distance filter") + " costs more of the unfiltered window's speed-up"
print(f"Measured here (G = {table2_group}): no filter {c:.1f} NFE, |dp| filter alone {d1:.1f}, distance filter "
      f"alone {d2:.1f}, both {d:.1f}: {verdict}.")'''),
        md("""
## Fig. 10 analogue: NFE against quality

GSD's curve over G against the Amplify relaxation's curve over k; AR and SJD as points.
A curve further up and to the left is the better trade-off. Error bars: one standard error.
"""),
        code('''curves = tables.pareto_specs(pareto_groups, pareto_amplify)
pareto = tables.pareto_points(cache, curves)
metrics = [(k, name) for k, name in model.quality_names.items() if any(k in r for r in table1)]
if metrics:
    plots.show(plots.pareto(pareto, metrics))
for name, rows in pareto.items():
    print(name)
    print(nbcheck.format_rows(rows, ["method", "nfe", "accepted_per_tested"] + [k for k, _ in metrics]))'''),
        code(CHECK + '''all_rows = [r for rows in pareto.values() for r in rows]
for line in nbcheck.nfe_invariants(all_rows, model.num_tokens):
    print(line)'''),
        code('''if model.decode is not None:
    plots.show(plots.image_grid({s.label: [r.image for r in cache.records(s)][:10]
                                 for s in tables.table1_specs(table1_groups, table1_amplify)[:4]}, max_columns=10))'''),
    ]


def nb05() -> list:
    return [
        md("""
# 05 - Speculative decoding, from scratch, with gsd_core

Teaching material on small vocabularies, everything exact or Monte Carlo with fixed seeds.
Uses `gsd_core` only (no model).

1. Speculative sampling: draft, accept, resample; why the output is exactly p.
2. The acceptance rate is 1 - TV(p, q).
3. Grouped verification and Theorem 1, with its proof.
4. Dynamic clusters are not a partition: a counterexample where they accept *less* than SD.
5. GSD is lossy: the exact distortion of its output distribution against the cluster size.
6. `verify` with clusters, by Monte Carlo, against its exact law.

Checked cells print exact values or the verdict of a Monte Carlo comparison with a stated
tolerance (4 standard errors), never a sampled number.
"""),
        params('''# Parameters (papermill style: this cell is tagged "parameters"). No model: gsd_core only.
vocab_size = 6
num_samples = 200_000
seed = 0
distortion_vocab = 16
distortion_pairs = 200
'''),
        code(PROVENANCE + '''

import torch

from gsd_core import (DynamicClusters, FixedPartition, RankBinnedClusters, acceptance_rate, group_probs,
                      output_distribution, tv_distance)
from gsd_lab.experiments import plots, toy
from gsd_lab.nbcheck import check_verify_law, rounded'''),
        md("""
## 1. Speculative sampling

A cheap draft proposes x ~ q; the target p accepts it with probability a(x) = min(1, p(x)/q(x)).
On rejection, sample from the residual r = (p - q)+ / sum (p - q)+.

**Why the output is p.** P(emit y) = q(y) a(y) + P(reject) r(y). The first term is min(q(y), p(y)).
P(reject) = 1 - sum_x min(p, q) = sum_x (p - q)+, so the second term is (p(y) - q(y))+.
min(q, p) + (p - q)+ = p. One draw of x and one uniform per position suffice.

The check below runs `gsd_core.verify` on many independent drafts x ~ q and compares the
frequency of every emitted token with the exact law (here p), and the acceptance frequency with
the exact acceptance rate: each must lie within 4 standard errors sqrt(f (1 - f) / n).
"""),
        code('''p, q = toy.dirichlet_pairs(vocab_size, 1, alpha=1.0, seed=seed)
p, q = p[0], q[0]
exact = output_distribution(p, q)
mc_seed = seed + 1000  # the Monte Carlo stream must not reuse the stream that drew p and q
sd_check = check_verify_law(p, q, num_samples=num_samples, seed=mc_seed, rule="SD")'''),
        code(CHECK + '''print("p             ", rounded(p))
print("q             ", rounded(q))
print("exact output  ", rounded(exact))
print("max |exact - p| < 1e-12:", bool((exact - p).abs().max() < 1e-12))
for line in sd_check.lines():
    print(line)'''),
        code('''empirical, accepted = toy.empirical_speculative_samples(p, q, num_samples=num_samples, seed=mc_seed)
print(f"Monte Carlo (sampled, not checked): max |empirical - p| = {(empirical - p).abs().max():.4f}, "
      f"acceptance {accepted:.4f}; largest z-scores {sd_check.law_max_z:.2f} (law), {sd_check.acceptance_max_z:.2f} (acceptance)")'''),
        md("""
## 2. Acceptance = 1 - TV(p, q)

E_{x~q}[min(1, p(x)/q(x))] = sum_x min(p(x), q(x)) = 1 - TV(p, q).
"""),
        code(CHECK + '''tv = float(tv_distance(p, q))
print(f"1 - TV = {1 - tv:.4f}; exact acceptance = {float(acceptance_rate(p, q)):.4f}; "
      f"equal within 1e-12: {abs(1 - tv - float(acceptance_rate(p, q))) < 1e-12}")'''),
        md("""
## 3. Grouped verification and Theorem 1

GSD verifies a *cluster* C(x) of tokens instead of x alone: accept with min(1, p(C)/q(C)).
For a **partition** of the vocabulary into clusters with masses p'(C), q'(C):

**Theorem 1.** The acceptance rate is 1 - TV(p', q') >= 1 - TV(p, q).

*Proof.* Acceptance = sum_x q(x) min(1, p'(C(x))/q'(C(x))) = sum_C q'(C) min(1, p'(C)/q'(C))
= sum_C min(p'(C), q'(C)) = 1 - TV(p', q'). And
TV(p', q') = 1/2 sum_C |sum_{x in C} (p(x) - q(x))| <= 1/2 sum_C sum_{x in C} |p(x) - q(x)| = TV(p, q)
by the triangle inequality. QED.

Checked exactly below on random pairs and partitions.
"""),
        code('''labels = torch.arange(vocab_size) // 2  # pairs of tokens {0, 1}, {2, 3}, ...
grouped = float(acceptance_rate(p, q, FixedPartition(labels)))
check = toy.theorem1_random_partitions(vocab_size=12, num_trials=5000, seed=seed)'''),
        code(CHECK + '''print(f"pairs partition {labels.tolist()}: acceptance {grouped:.4f} = "
      f"1 - TV(p', q') = {1 - float(tv_distance(group_probs(p, labels), group_probs(q, labels))):.4f} "
      f">= 1 - TV(p, q) = {1 - tv:.4f}")
print(f"5000 random pairs and partitions: max(TV(p', q') - TV(p, q)) <= 1e-12: {check.max_violation <= 1e-12}")'''),
        md("""
## 4. Dynamic clusters: no such guarantee

The paper's clusters are *dynamic*: `DynamicClusters(G)` puts into C(x) the tokens ranked within
floor(G/2) of the drafted x in the p-ranking, 2 floor(G/2) + 1 tokens (fewer at the ends of the
ranking). Different drafts get overlapping clusters, so they do not form a partition and the
proof above does not apply. A token x with p(x) >= q(x) (always accepted by plain SD) can share
its window with a token that q over-weights, and then p(C)/q(C) < 1. Searching random pairs
finds cases where the dynamic rule accepts less often than plain SD:
"""),
        code('''ce = toy.dynamic_counterexample(vocab_size=6, group_size=2, seed=seed)'''),
        code(CHECK + '''print("p", rounded(ce.p))
print("q", rounded(ce.q))
print(f"G = {ce.group_size} (3-token windows): SD acceptance {ce.acceptance_sd:.4f} > dynamic-cluster acceptance "
      f"{ce.acceptance_dynamic:.4f}")'''),
        md("""
## 5. GSD is lossy: the exact distortion against the cluster size

Accepting a cluster lets the drafted token stand in for any member, so inside an accepted
cluster the token follows q, not p, and the token-level residual does not correct this. The exact
law of one verification step (`gsd_core.output_distribution`) gives the distortion TV(out, p)
directly. Rules, compared at the same number of tokens per cluster (odd, since dynamic windows
are): the paper's dynamic window (G = size - 1, no filters), our rank-binned partition (bins of
that many tokens) with the token residual, and with the cluster-exact residual (which preserves
every cluster's mass: p'(C) is exact, only the within-cluster split is off). Size 1 is plain SD:
distortion 0.
"""),
        code('''pp, qq = toy.dirichlet_pairs(distortion_vocab, distortion_pairs, alpha=0.5, seed=seed + 1)
cluster_sizes = [s for s in (1, 3, 5, 9, 15) if s <= distortion_vocab]
distortion = toy.distortion_by_cluster_size(pp, qq, cluster_sizes)
acceptance = toy.acceptance_by_cluster_size(pp, qq, cluster_sizes)
binned = RankBinnedClusters(3)
out_cluster = output_distribution(pp, qq, binned, residual="cluster")
mass_error = (group_probs(out_cluster, binned.partition_labels(pp)) - group_probs(pp, binned.partition_labels(pp))).abs().max()'''),
        code(CHECK + '''# Exact (enumerated) means over the pairs.
print("tokens per cluster:", cluster_sizes)
for name, values in acceptance.items():
    print(f"acceptance {name:20s}", rounded(values))
for name, values in distortion.items():
    print(f"TV(out, p) {name:20s}", rounded(values))
print(f"cluster-exact residual, bins of 3: every cluster keeps its mass, max |out'(C) - p'(C)| < 1e-12: "
      f"{float(mass_error) < 1e-12}")'''),
        code('''plots.show(plots.distortion(cluster_sizes, {k: v.numpy() for k, v in distortion.items()},
                           "mean TV(output, p) per step"))'''),
        md("""
## 6. `verify` with clusters, by Monte Carlo, against the exact law

The exact law above comes from `output_distribution`, which enumerates; `verify` is what the
decoders run. Running `verify` on many drafts x ~ q must reproduce `output_distribution` and
`acceptance_rate` for every rule, lossy or not: each token's frequency and the acceptance
frequency within 4 standard errors.
"""),
        code('''rules = {"dynamic G=2 (3 tokens)": (DynamicClusters(2), "token"),
         "rank bins of 3, token residual": (RankBinnedClusters(3), "token"),
         "rank bins of 3, cluster residual": (RankBinnedClusters(3), "cluster")}
cluster_checks = [check_verify_law(p, q, clusters=rule, residual=residual, num_samples=num_samples, seed=mc_seed + i + 1,
                                   rule=name) for i, (name, (rule, residual)) in enumerate(rules.items())]'''),
        code(CHECK + '''for name, (rule, residual) in rules.items():
    print(f"{name}: exact acceptance {float(acceptance_rate(p, q, rule)):.4f}, "
          f"exact TV(out, p) {float(tv_distance(output_distribution(p, q, rule, residual), p)):.4f}")
for result in cluster_checks:
    for line in result.lines():
        print(line)'''),
        md("""
## Closing note: do these checks catch bugs?

`tests/lab/test_notebook_checks_power.py` runs the functions behind the checked cells of
sections 1 and 6 (`gsd_lab.nbcheck.check_verify_law`, with this notebook's parameters) on
mutated versions of `verify`, without running the notebook. A checked cell prints `False` (so
nbval fails) when `verify` resamples from p after a rejection instead of the residual, when it
tests p(x)/q(C) instead of p(C)/q(C), or when it ignores its clusters; every verdict stays
`True` (nbval passes) when its uniforms U are replaced by 1 - U, a harmless change of the
random stream.
"""),
    ]


NOTEBOOKS = {
    "01_tv_toy_examples": nb01,
    "02_top1_probability_histograms": nb02,
    "03_top100_replacement": nb03,
    "04_speedup_and_quality": nb04,
    "05_speculative_decoding_tutorial": nb05,
}


def build(name: str) -> nbformat.NotebookNode:
    nb = new_notebook(cells=NOTEBOOKS[name]())
    nb.metadata = build_metadata()
    return nb


def override_parameters(nb: nbformat.NotebookNode, assignments: list[str]) -> None:
    """Replace ``name = ...`` lines of the parameters cell (for development runs)."""
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    for assignment in assignments:
        name, value = assignment.split("=", 1)
        pattern = re.compile(rf"^{re.escape(name.strip())}\s*=.*?(\s+#.*)?$", re.M)
        if not pattern.search(cell.source):
            continue  # e.g. model parameters of a model-free notebook
        cell.source = pattern.sub(lambda m: f"{name.strip()} = {value.strip()}" + (m.group(1) or ""), cell.source)


def execute(nb: nbformat.NotebookNode, timeout: int) -> float:
    from nbclient import NotebookClient

    os.environ.setdefault("MPLBACKEND", "Agg")
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
    # nbclient records timing/ids in cell metadata; keep the committed files free of them.
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nb.metadata = build_metadata()
    return time.perf_counter() - start


def build_metadata() -> dict:
    return {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--execute", action="store_true", help="run each notebook and store its outputs")
    parser.add_argument("--only", nargs="*", default=None, help="notebook name prefixes, e.g. 02 04")
    parser.add_argument("--set", nargs="*", default=[], help="parameter overrides name=value (development)")
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write to (default: notebooks/)")
    parser.add_argument("--timeout", type=int, default=1800, help="per-cell timeout in seconds")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="execute from a checkout with uncommitted changes (development only: warns, and "
                             "the notebooks then record dirty True)")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE.parent))  # this checkout's gsd_lab, as the kernels import it
    from gsd_lab.provenance import DirtyTreeError, inside_repository, require_clean_tree

    if args.execute:
        # Committed outputs need a clean tree; a scratch folder outside the checkout only warns.
        try:
            require_clean_tree("notebook outputs", allow_dirty=args.allow_dirty or not inside_repository(args.out))
        except DirtyTreeError as error:
            raise SystemExit(f"error: {error}") from None
    args.out.mkdir(parents=True, exist_ok=True)
    built = {}
    for name in NOTEBOOKS:
        if args.only and not any(name.startswith(prefix) for prefix in args.only):
            continue
        nb = build(name)
        if args.set:
            override_parameters(nb, args.set)
        if args.execute:
            seconds = execute(nb, args.timeout)
            print(f"{name}: executed in {seconds:.0f} s", flush=True)
        built[name] = nb
    # Written only now: a notebook written earlier would make the tree dirty for the next one.
    for name, nb in built.items():
        nbformat.write(nb, args.out / f"{name}.ipynb")


if __name__ == "__main__":
    main()
