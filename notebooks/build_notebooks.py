"""Write the notebooks from this script (nbformat) and, with ``--execute``, run them top to
bottom with nbclient so that they are committed with outputs.

    python notebooks/build_notebooks.py                # write the .ipynb files (no outputs)
    python notebooks/build_notebooks.py --execute      # write and execute them in place
    python notebooks/build_notebooks.py --execute --only 02 --set model_name='"tiny-random"'

Cells hold narrative and calls into gsd_core / gsd_lab only; the analyses live in
``gsd_lab.experiments``. Key numbers are printed, rounded, in ``# NBVAL_CHECK_OUTPUT`` cells
(``pytest --nbval-lax notebooks/`` compares them). Every notebook has one cell tagged
``parameters`` (papermill style); kernelspec is normalised to ``python3``.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
CHECK = "# NBVAL_CHECK_OUTPUT\n"

MODEL_NOTE = (
    "**Which model produced the outputs shown.** The stored outputs come from the default model, "
    "`standin`: the small class-conditional image model trained in this repository (a Llama over "
    "16x16 FSQ image tokens, 1024 codes, CFG 3.0), run on CPU. Its numbers show the *shape* of the "
    "paper's results, not Lumina-mGPT's values. To run Lumina-mGPT 7B on a GPU, set "
    "`model_name = \"lumina-mgpt-7b-768\"` and `weights` (and `vqgan`, `clip`) in the parameters cell."
)

MODEL_PARAMETERS = '''# Parameters (papermill style: this cell is tagged "parameters")
model_name = "standin"      # or "lumina-mgpt-7b-768" (GPU; set weights, vqgan, clip below)
weights = None              # Lumina-mGPT checkpoint folder
vqgan = None                # folder with vqgan.yaml + vqgan.ckpt (Chameleon VQGAN)
clip = None                 # local CLIP model folder (CLIP score for Lumina-mGPT)
device = None               # None: cpu for the stand-in, cuda if available for Lumina-mGPT
threads = 1                 # torch CPU threads (1 keeps CPU results reproducible and fast at batch 1)
'''

MODEL_SETUP = '''import warnings

import torch

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto without ipywidgets

from gsd_lab.experiments.image_model import load_image_model
from gsd_lab.provenance import git_commit

torch.set_num_threads(threads)
model = load_image_model(model_name, weights=weights, vqgan=vqgan, clip=clip, device=device)
print(f"model: {model.name}; {model.num_tokens} tokens per image; cfg {model.adapter.cfg_scale}, "
      f"top-k {model.adapter.top_k}; device {model.adapter.device}; git commit {git_commit()['commit']}")
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
        code('''from gsd_core import tv_distance
from gsd_lab.experiments import plots, toy'''),
        md("""
## A flat pair and a peaked pair

*Flat*: p is uniform over V tokens; q puts 1.5/V on half of them and 0.5/V on the other half.
Every token is viable under both, and each gap is only 0.5/V, but TV = 1/2 * V * 0.5/V = 0.25.
*Peaked*: p(0) = 0.9, q(0) = 0.85, the rest spread evenly: TV = 0.05 although the pair
looks "less similar" on its top token.
"""),
        code('''pairs = toy.flat_and_peaked_pairs(vocab_size)
tvs = {name: float(tv_distance(p, q)) for name, (p, q) in pairs.items()}'''),
        code(CHECK + '''for name, tv in tvs.items():
    print(f"{name:6s}  TV = {tv:.4f}   acceptance 1 - TV = {1 - tv:.4f}")'''),
        code('''plots.show(plots.tv_flat_vs_peaked(pairs, tvs))'''),
        md("""
## TV against the number of viable tokens and the concentration

Pairs that share the same base distribution b (top-1 mass m on one token, the rest spread over
n - 1 "viable" tokens) and differ only by independent per-token log-normal noise:
p, q proportional to b * exp(0.5 * eps). With the per-token noise fixed, TV rises from 0 (one
viable token) and saturates once the mass is spread over tens of tokens, at a level set by the
noise alone; a large shared peak m cancels in |p - q| and keeps TV small.
"""),
        code('''viable = [1, 2, 4, 16, 64, 256, 1024, 4096]
masses = [0.05, 0.5, 0.9]
grid = toy.tv_grid(viable, masses, vocab_size=4096, noise=0.5, num_pairs=num_pairs, seed=seed)'''),
        code(CHECK + '''print("viable tokens:", viable)
for mass, row in zip(masses, grid.tolist()):
    print(f"top-1 mass {mass:4.2f}: mean TV", [round(v, 4) for v in row])'''),
        code('''plots.show(plots.tv_against_viable(viable, masses, grid.numpy(), noise=0.5))'''),
        md("""
## Grouping shrinks TV (Theorem 1, drawn)

Cut the p-ranking into bins of G consecutive tokens (a partition that depends on p only) and
compare cluster masses p'(C), q'(C). By the triangle inequality |p'(C) - q'(C)| <= sum over C of
|p - q|, so TV(p', q') <= TV(p, q) for **any** partition, and the acceptance rate of
verifying clusters, 1 - TV(p', q'), can only go up. Right: random pairs and random partitions;
every point lies on or below the diagonal.
"""),
        code('''import torch

p_noisy, q_noisy = toy.noisy_pairs(1024, 0.05, vocab_size=4096, noise=0.5, num_pairs=num_pairs,
                                   generator=torch.Generator().manual_seed(seed + 1))
groups = [1, 2, 4, 8, 16, 32, 64, 128, 256]
tv_by_group = toy.rank_binned_tv(p_noisy, q_noisy, groups)
check = toy.theorem1_random_partitions(vocab_size=32, num_trials=2000, seed=seed)'''),
        code(CHECK + '''print("G:", groups)
print("mean TV(p', q'):", [round(v, 4) for v in tv_by_group.mean(-1).tolist()])
print(f"Theorem 1 on 2000 random pairs/partitions: max(TV' - TV) = {round(check.max_violation, 4) + 0.0:.4f} (<= 0)")'''),
        code('''plots.show(plots.grouping_and_theorem1(groups, tv_by_group.numpy(), check))'''),
        md("""
## Where does a real image model sit?

The target distributions of a trained image model at every generated token (AR decoding,
teacher-forced): their top-1 mass and their effective number of viable tokens exp(H(p)).
Image-token distributions are flat: many viable tokens and a small top-1 mass, the regime of
the plots above where TV is large and single-token verification rejects often.
"""),
        code(MODEL_SETUP),
        code('''from gsd_lab.experiments.replacement import target_distributions
from gsd_lab.experiments.runs import MethodSpec, run_method

records = run_method(model, MethodSpec("AR", "ar"), model.default_prompts[:num_model_images], [seed])
dists = torch.cat([target_distributions(model, r.prompt, r.tokens).cpu() for r in records])
top1 = dists.max(-1).values
entropy = -(dists * torch.log(dists.clamp(min=1e-300))).sum(-1)
effective = torch.exp(entropy)'''),
        code(CHECK + '''print(f"{dists.shape[0]} positions: median top-1 mass {top1.median():.4f}, "
      f"median effective viable tokens exp(H) {effective.median():.1f}, "
      f"share with top-1 < 0.05: {(top1 < 0.05).double().mean():.4f}")'''),
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
from gsd_lab.experiments.runs import MethodSpec, run_method
from gsd_lab.experiments.top1 import top1_stats

prompts = model.default_prompts[:max_prompts]
records = run_method(model, MethodSpec("AR", "ar"), prompts, seeds, record_top1=True)
stats = top1_stats(records, threshold)'''),
        code(CHECK + '''summary = stats.summary()
print(f"{summary['images']} images x {summary['tokens_per_image']} tokens")
print(f"pooled share of tokens with top-1 < {threshold}: {summary['pooled_share_below']:.4f}")
print(f"per image: min {summary['min_share_below']:.4f}, max {summary['max_share_below']:.4f}")
print(f"median top-1 probability: {summary['median_top1']:.4f}")
for record, share in zip(records, stats.share_below):
    print(f"  {record.prompt:22s} {share:.4f}")'''),
        code('''plots.show(plots.top1_histograms(stats, max_images=9))'''),
        md("""
The share is measured here, not assumed: it depends on the codebook size, the data, the
model's capacity and the guidance scale. Compare with the paper's 50-95% on Lumina-mGPT (8,192
codes, open-ended text prompts). The stand-in is trained on crops of ten photographs, one per
class, so it is far more certain of its next token than a text-to-image model: a small share
here means its target distributions are peaked, and the acceptance of single drafted tokens
(notebook 04) is limited by something else: random initial drafts, which a peaked p rejects.

Classifier-free guidance sharpens distributions (l = u + s (c - u), s > 1). The same prompts
and seeds without guidance (the conditional model alone):
"""),
        code('''from gsd_lab.experiments.image_model import guidance_scale

with guidance_scale(model, None):
    records_no_cfg = run_method(model, MethodSpec("AR", "ar"), prompts, seeds, record_top1=True)
stats_no_cfg = top1_stats(records_no_cfg, threshold)'''),
        code(CHECK + '''for name, s in (("with guidance (model default)", stats), ("without guidance", stats_no_cfg)):
    print(f"{name:30s} share top-1 < {threshold}: {s.pooled_share_below:.4f}  median top-1 {s.summary()['median_top1']:.4f}")'''),
        code('''plots.show(plots.image_grid({"AR samples": [r.image for r in records]}, max_columns=10))'''),
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
study = replacement_study(model, records, fraction=fraction, top_k=top_k, seed=replacement_seed)'''),
        code(CHECK + '''for variant in study.images:
    q = study.quality[variant]
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in q.items() if v is not None)
    print(f"{variant:9s} changed {study.changed_share[variant]:.4f}  "
          f"mean log p {study.mean_log_prob[variant]:.4f}  {metrics}")'''),
        md("""
Rows: unmodified AR images, 50% of tokens replaced by top-100 candidates, 50% replaced by
uniformly random tokens.
"""),
        code('''plots.show(plots.image_grid({k: v[:10] for k, v in study.images.items()}, max_columns=10))'''),
    ]


def nb04() -> list:
    return [
        md("""
# 04 - Speed and quality: Table 1, Table 2 and Fig. 10 analogues

All methods decode the same prompts with the same generator seeds.

* **AR**: one token per forward pass. **SJD**: speculative Jacobi decoding, window 16, random
  initial drafts, exact (lossless). **GSD (G)**: the same loop, verifying the paper's dynamic
  cluster of G tokens around the draft in the p-ranking, with its probability-gap (0.15) and
  embedding-distance filters (lossy). **Amplify (k)**: a naive lossy relaxation, *our
  definition* (the paper's was not found): SJD accepting with min(1, k p(x)/q(x)).
* **NFE** = forward passes per image (a CFG pair counts once): the hardware-independent cost.
  Wall time on a shared CPU is noisy and not comparable with the paper's GPU latencies.
* Quality proxies as in notebook 03 (condition score x100, higher better, with its standard
  error over images `condition_score_sem`; Frechet distance, lower better, biased upward at
  small sample sizes, so compare it only between rows with the same number of images); on
  Lumina-mGPT: CLIP score. With 10 images per method, differences within about two standard
  errors are noise; `python -m gsd_lab figures` uses 30 per method.

`python -m gsd_lab figures` runs the same functions at larger sizes (figures/results.md).
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

from gsd_lab.experiments import plots, tables
from gsd_lab.experiments.runs import FilterSettings, RunCache
from gsd_lab.figure_io import markdown_table

prompts = model.default_prompts[:max_prompts]
cache = RunCache(model, prompts, seeds, FilterSettings.for_model(model.name))
columns = ["method", "images", "nfe", "speedup_nfe", "wall_seconds", "speedup_wall", "acceptance_rate",
           "condition_score", "condition_score_sem", "frechet_distance"]


def check_print(rows):
    """Deterministic columns only (NFE, acceptance, quality), rounded."""
    for r in rows:
        acc = "  n/a " if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.4f}"
        quality = "  ".join(f"{k} {r[k]:.4f}" for k in ("condition_score", "condition_score_sem", "frechet_distance")
                            if r.get(k) is not None)
        print(f"{r['method']:48s} nfe {r['nfe']:7.2f}  x{r['speedup_nfe']:.3f}  acc {acc}  {quality}")'''),
        md("## Table 1 analogue: AR, SJD, GSD over G, Amplify"),
        code('''table1 = tables.speed_quality_table(cache, tables.table1_specs(table1_groups, table1_amplify))
display(Markdown(markdown_table(table1, columns)))'''),
        code(CHECK + '''check_print(table1)'''),
        md("""
## Table 2 analogue: which clusters?

At G = 50: (A) a static partition by k-means on the input embeddings (a fixed partition, so
Theorem 1 holds and acceptance can only rise, but the clusters ignore context); (B) the dynamic
window ranked by the draft q; (C) ranked by the target p without filters; (D) the paper's rule,
ranked by p with filters; and our rank-binned partition of the p-ranking with (E) the
token-level residual and (F) the cluster-exact residual (which keeps every cluster's output
mass equal to p'(C)).
"""),
        code('''table2 = cache.table(tables.table2_specs(table2_group), tables.AR)
display(Markdown(markdown_table(table2, columns)))'''),
        code(CHECK + '''check_print(table2)'''),
        md("""
## Fig. 10 analogue: NFE against quality

GSD's curve over G against the Amplify relaxation's curve over k; AR and SJD as points.
A curve further up and to the left is the better trade-off.
"""),
        code('''curves = tables.pareto_specs(pareto_groups, pareto_amplify)
pareto = tables.pareto_points(cache, curves)
metrics = [(k, name) for k, name in model.quality_names.items() if any(k in r for r in table1)]
if metrics:
    plots.show(plots.pareto(pareto, metrics))'''),
        code(CHECK + '''for name, rows in pareto.items():
    print(name)
    check_print(rows)'''),
        md("""
## Reading the stored outputs (stand-in)

* Speed: SJD needs far fewer forward passes than AR; every GSD rule needs fewer than SJD, and
  NFE falls as G grows (up to noise), as Theorem 1 promises for partitions (the dynamic rule is not a
  partition, but behaves alike here). The rank-binned partition accepts the most.
* The embedding-distance filter of the paper's rule (D) costs much of the speed-up of the
  unfiltered window (C) on the stand-in, unlike the paper's Table 2 where (C) and (D) are
  nearly equal: the stand-in's input embeddings are short-trained and nearly equidistant, so a
  distance threshold removes neighbours in the p-ranking almost at random.
* Wall time on a shared CPU favours AR more than NFE does: a 17-token forward pass is not
  nearly free on a CPU, unlike on a GPU. Quote NFE for speed.
* Quality: read the standard errors before reading differences between rows.
"""),
        code('''plots.show(plots.image_grid({s.label: [r.image for r in cache.records(s)][:10]
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
5. GSD is lossy: the exact distortion of its output distribution against the group size.
"""),
        params('''# Parameters (papermill style: this cell is tagged "parameters"). No model: gsd_core only.
vocab_size = 6
num_samples = 200_000
seed = 0
distortion_vocab = 16
distortion_pairs = 200
'''),
        code('''import torch

from gsd_core import (DynamicClusters, FixedPartition, RankBinnedClusters, acceptance_rate, group_probs,
                      output_distribution, tv_distance)
from gsd_lab.experiments import plots, toy

torch.set_printoptions(precision=4)'''),
        md("""
## 1. Speculative sampling

A cheap draft proposes x ~ q; the target p accepts it with probability a(x) = min(1, p(x)/q(x)).
On rejection, sample from the residual r = (p - q)+ / sum (p - q)+.

**Why the output is p.** P(emit y) = q(y) a(y) + P(reject) r(y). The first term is min(q(y), p(y)).
P(reject) = 1 - sum_x min(p, q) = sum_x (p - q)+, so the second term is (p(y) - q(y))+.
min(q, p) + (p - q)+ = p. One draw of x and one uniform per position suffice.
"""),
        code('''p, q = toy.dirichlet_pairs(vocab_size, 1, alpha=1.0, seed=seed)
p, q = p[0], q[0]
empirical, accepted = toy.empirical_speculative_samples(p, q, num_samples=num_samples, seed=seed)
exact = output_distribution(p, q)'''),
        code(CHECK + '''print("p             ", [round(v, 4) for v in p.tolist()])
print("q             ", [round(v, 4) for v in q.tolist()])
print("exact output  ", [round(v, 4) for v in exact.tolist()])
print("max |exact - p| < 1e-12:", bool((exact - p).abs().max() < 1e-12))
print(f"Monte Carlo ({num_samples} draws): max |empirical - p| = {(empirical - p).abs().max():.4f}")'''),
        md("""
## 2. Acceptance = 1 - TV(p, q)

E_{x~q}[min(1, p(x)/q(x))] = sum_x min(p(x), q(x)) = 1 - TV(p, q).
"""),
        code(CHECK + '''tv = float(tv_distance(p, q))
print(f"1 - TV = {1 - tv:.4f}; exact acceptance = {float(acceptance_rate(p, q)):.4f}; "
      f"Monte Carlo = {accepted:.4f}")'''),
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
        code('''labels = torch.tensor([0, 0, 1, 1, 2, 2])[:vocab_size]
grouped = float(acceptance_rate(p, q, FixedPartition(labels)))
check = toy.theorem1_random_partitions(vocab_size=12, num_trials=5000, seed=seed)'''),
        code(CHECK + '''print(f"pairs partition {labels.tolist()}: acceptance {grouped:.4f} = "
      f"1 - TV(p', q') = {1 - float(tv_distance(group_probs(p, labels), group_probs(q, labels))):.4f} "
      f">= 1 - TV(p, q) = {1 - tv:.4f}")
print(f"5000 random pairs and partitions: max(TV(p', q') - TV(p, q)) = {round(check.max_violation, 4) + 0.0:.4f}")'''),
        md("""
## 4. Dynamic clusters: no such guarantee

The paper's clusters are *dynamic*: C(x) is the window of G tokens around the drafted x in the
p-ranking. Different drafts get overlapping clusters, so they do not form a partition and the
proof above does not apply. A token x with p(x) >= q(x) (always accepted by plain SD) can share
its window with a token that q over-weights, and then p(C)/q(C) < 1. Searching random pairs
finds cases where the dynamic rule accepts less often than plain SD:
"""),
        code('''ce = toy.dynamic_counterexample(vocab_size=6, group_size=2, seed=seed)'''),
        code(CHECK + '''print("p", [round(v, 4) for v in ce.p.tolist()])
print("q", [round(v, 4) for v in ce.q.tolist()])
print(f"G = {ce.group_size}: SD acceptance {ce.acceptance_sd:.4f} > dynamic-cluster acceptance "
      f"{ce.acceptance_dynamic:.4f}")'''),
        md("""
## 5. GSD is lossy: the exact distortion against G

Accepting a cluster lets the drafted token stand in for any member, so inside an accepted
cluster the token follows q, not p, and the token-level residual does not correct this. The exact
law of one verification step (`gsd_core.output_distribution`) gives the distortion TV(out, p)
directly. Rules: the paper's dynamic window (no filters), our rank-binned partition with the
token residual, and with the cluster-exact residual (which preserves every cluster's mass:
p'(C) is exact, only the within-cluster split is off). G = 0 is plain SD: distortion 0.
"""),
        code('''pp, qq = toy.dirichlet_pairs(distortion_vocab, distortion_pairs, alpha=0.5, seed=seed + 1)
group_sizes = [0, 2, 4, 8, 16]
distortion = toy.distortion_by_group_size(pp, qq, group_sizes)
acceptance = toy.acceptance_by_group_size(pp, qq, group_sizes)
binned = RankBinnedClusters(4)
out_cluster = output_distribution(pp, qq, binned, residual="cluster")
mass_error = (group_probs(out_cluster, binned.partition_labels(pp)) - group_probs(pp, binned.partition_labels(pp))).abs().max()'''),
        code(CHECK + '''print("G:", group_sizes)
for name, values in acceptance.items():
    print(f"acceptance {name:20s}", [round(v, 4) for v in values.tolist()])
for name, values in distortion.items():
    print(f"TV(out, p) {name:20s}", [round(v, 4) for v in values.tolist()])
print(f"cluster-exact residual, G = 4: every cluster keeps its mass, max |out'(C) - p'(C)| < 1e-12: "
      f"{float(mass_error) < 1e-12}")'''),
        code('''plots.show(plots.distortion(group_sizes, {k: v.numpy() for k, v in distortion.items()},
                           "mean TV(output, p) per step"))'''),
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
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in NOTEBOOKS:
        if args.only and not any(name.startswith(prefix) for prefix in args.only):
            continue
        nb = build(name)
        if args.set:
            override_parameters(nb, args.set)
        if args.execute:
            seconds = execute(nb, args.timeout)
            print(f"{name}: executed in {seconds:.0f} s", flush=True)
        nbformat.write(nb, args.out / f"{name}.ipynb")


if __name__ == "__main__":
    main()
