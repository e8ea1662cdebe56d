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
        md(r"""
## The lesson: rank bins stop helping, a random partition does not

Compare the printed means at small and at large G: how far does grouping the p-ranking go? Theorem 1 only says grouping never *hurts*; how much it *helps*
depends on how much the per-token gaps $p(x) - q(x)$ cancel inside a cluster, since
$\mathrm{TV}(p', q') = \tfrac12\sum_C \bigl|\sum_{x\in C} (p(x) - q(x))\bigr|$.

*Rank bins of p* group tokens by the value of p, and here p differs from the shared base only by
its own noise: the top bins collect the tokens whose noise pushed p *above* q, the lower bins
those where it pushed p below. Inside a bin the gaps share a sign and add up, so no amount of
grouping cancels them. A *random partition* with clusters of the same size mixes independent
signs: a cluster's gap sum grows like $\sqrt G$ while the sum of its |gaps| grows like $G$, so
TV keeps falling. The cancellation ratio $\mathrm{TV}(p', q') / \mathrm{TV}(p, q)$ (1: nothing cancels)
shows it. This is a fact about *this* pair family (independent noise on a shared base): on an
image model p and q are correlated through the context, and ranking by p is what GSD does.
"""),
        code('''comparison = toy.rank_bins_against_random(p_noisy, q_noisy, groups, seed=seed + 2)
rank_ratio, random_ratio = comparison.cancellation()
print("G:                               ", groups)
print("mean TV(p', q'), rank bins of p: ", [round(v, 3) for v in comparison.rank_binned.mean(-1).tolist()])
print("mean TV(p', q'), random clusters:", [round(v, 3) for v in comparison.random.mean(-1).tolist()])
print("cancellation TV'/TV, rank bins:  ", [round(v, 2) for v in rank_ratio.tolist()])
print("cancellation TV'/TV, random:     ", [round(v, 2) for v in random_ratio.tolist()])
last = len(groups) - 1
print(f"Measured here (Monte Carlo over {num_pairs} pairs): at G = {groups[last]} rank bins leave mean TV "
      f"{float(comparison.rank_binned[last].mean()):.3f} ({float(rank_ratio[last]):.0%} of the ungrouped TV), random "
      f"clusters of the same size {float(comparison.random[last].mean()):.3f} ({float(random_ratio[last]):.0%}); "
      f"random clusters are lower on {int((comparison.random[last] < comparison.rank_binned[last]).sum())} of "
      f"{num_pairs} pairs.")'''),
        code(CHECK + '''# Exact statements: both are partitions, so Theorem 1 holds for each (tolerance 1e-12).
print("rank bins and random clusters: TV(p', q') <= TV(p, q) for every pair and G:",
      bool((comparison.rank_binned <= comparison.tv_tokens + 1e-12).all() and
           (comparison.random <= comparison.tv_tokens + 1e-12).all()))'''),
        md("""
## Where does a real image model sit?

The target distributions of a trained image model at every generated token (AR decoding,
teacher-forced): their top-1 mass and their effective number of viable tokens exp(H(p)).
The paper reports top-1 mass below 5% for 50-95% of Lumina-mGPT's tokens, the regime of the
plots above where TV is large and single-token verification rejects often. The cell after the
measurement states where this model sits.
"""),
        code(MODEL_SETUP),
        code('''from tqdm.auto import tqdm

from gsd_lab.course import effective_vocabulary
from gsd_lab.experiments.replacement import target_distributions
from gsd_lab.experiments.runs import run_method
from gsd_lab.experiments.tables import AR

records = run_method(model, AR, model.default_prompts[:num_model_images], [seed],
                     progress=tqdm(total=num_model_images, desc="AR images"))
dists = torch.cat([target_distributions(model, r.prompt, r.tokens).cpu() for r in records])
top1 = dists.max(-1).values
effective = effective_vocabulary(dists)  # exp(H(p)), gsd_lab.course'''),
        code(CHECK + '''# Exact: each teacher-forced row is a distribution.
print(f"{dists.shape[0]} positions; every row sums to 1 within 1e-9: {bool(((dists.sum(-1) - 1).abs() < 1e-9).all())}")'''),
        code('''from gsd_lab.experiments import paper
from gsd_lab.experiments.plots import percent

share_flat = float((top1 < 0.05).double().mean())
print(f"median top-1 mass {top1.median():.3f}; median effective viable tokens exp(H) {effective.median():.1f}; "
      f"share of positions with top-1 < 0.05: {percent(share_flat)}")
regime = ("flat: most positions spread their mass, as in the paper" if share_flat >= 0.5 else
          "peaked: most positions put more than 5% on one token, unlike the paper's "
          f"{paper.TOP1_SHARE_RANGE[0].value:.0%}-{paper.TOP1_SHARE_RANGE[1].value:.0%} flat positions")
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
        code('''from tqdm.auto import tqdm

from gsd_lab.experiments import plots
from gsd_lab.experiments.plots import percent
from gsd_lab.experiments.replacement import target_distributions
from gsd_lab.experiments.runs import run_method
from gsd_lab.experiments.tables import AR
from gsd_lab.experiments.top1 import top1_stats

prompts = model.default_prompts[:max_prompts]
records = run_method(model, AR, prompts, seeds, record_top1=True,
                     progress=tqdm(total=len(prompts) * len(seeds), desc="AR images"))
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
model's capacity and the guidance scale. Compare with the paper's range on Lumina-mGPT (8,192
codes, open-ended text prompts; the table below); the cell below says which regime this model is in.
"""),
        code('''share = stats.pooled_share_below
print(f"This model: {percent(share)} of tokens have top-1 < {threshold}. "
      + ("Its target distributions are flat, as the paper describes for Lumina-mGPT." if share >= 0.5 else
         "Its target distributions are mostly peaked, so the acceptance of single drafted tokens "
         "(notebook 04) is limited by something else as well: random initial drafts, which a peaked p rejects."))'''),
        md("""
### Paper against here

The paper's number lives in `gsd_lab.experiments.paper` (cited to the reference digest).
"""),
        code('''from IPython.display import Markdown, display

from gsd_lab.experiments import paper
from gsd_lab.figure_io import markdown_table

display(Markdown(markdown_table(paper.top1_comparison(stats.pooled_share_below, threshold, model.name), paper.COLUMNS)))'''),
        md("""
Classifier-free guidance sharpens distributions (l = u + s (c - u), s > 1). The same prompts
and seeds without guidance (the conditional model alone), for models that use guidance:
"""),
        code('''from gsd_lab.experiments.image_model import guidance_scale

if model.adapter.uses_cfg:
    with guidance_scale(model, None):
        records_no_cfg = run_method(model, AR, prompts, seeds, record_top1=True)
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
their movement between variants means something. On Lumina-mGPT: CLIP score (the paper's
values are in the "paper against here" table below).
"""),
        md(MODEL_NOTE),
        params(MODEL_PARAMETERS + '''seeds = [0]
max_prompts = None
fraction = 0.5
top_k = 100
replacement_seed = 0
'''),
        code(MODEL_SETUP),
        code('''from tqdm.auto import tqdm

from gsd_lab.experiments import plots
from gsd_lab.experiments.replacement import replacement_study
from gsd_lab.experiments.runs import run_method
from gsd_lab.experiments.tables import AR

prompts = model.default_prompts[:max_prompts]
records = run_method(model, AR, prompts, seeds,
                     progress=tqdm(total=len(prompts) * len(seeds), desc="AR images"))
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
### Paper against here

The paper's numbers live in `gsd_lab.experiments.paper` (cited to the reference digest). The
paper reports a CLIP difference on Lumina-mGPT; ours is this model's quality proxy, so only the
verdict (a change within noise or not) is comparable.
"""),
        code('''from IPython.display import Markdown, display

from gsd_lab.experiments import paper
from gsd_lab.figure_io import markdown_table

display(Markdown(markdown_table(paper.replacement_comparison(study.quality), paper.COLUMNS)))'''),
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
* **Exact distortion** (`distortion`, with `distortion_sem` over images): for every generated
  token, TV(one-step output law, p) of the rule that emitted it, computed exactly from that
  position's p, q and clusters (`gsd_lab.distortion`; 0 for AR, SJD and bonus tokens). It is
  noise-free per position: what a lossy rule trades for speed, next to the noisy proxies.
* **Error bars for quality**: `condition_score_diff_ar` is the condition score minus AR's on the
  same prompts and seeds, with a 95% paired bootstrap interval over images
  (`..._low`, `..._high`); the row "AR, second seed set" is AR against AR on other seeds (pure
  sampling noise), and the real-crops row scores real held-out images (stand-in only).
* **LANTERN** (Jang et al., ICLR 2025; `gsd_core.lantern`): SJD's drafts with a relaxed test
  that credits the drafted token's neighbourhood (the token and its 1000 nearest input-embedding
  neighbours: k = 1001 counts the token) within a total variation budget delta. Run where its
  neighbourhood table over the whole vocabulary, O(V^2), is cheap (`tables.lantern_affordable`:
  a GPU, or V <= 16384 on a CPU: the stand-in, not Lumina-mGPT's 65536 on a CPU).
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
table1_lantern = (0.1, 0.4)          # LANTERN budgets delta in Table 1 (stand-in only, see above)
pareto_lantern = (0.001, 0.003, 0.01, 0.1, 0.4)  # the NFE curves: small budgets reach GSD's NFE range
distortion_rank_groups = (10, 50)    # rank bins on the distortion-against-NFE plot
seed_noise = True                    # the AR-against-AR row
'''),
        code(MODEL_SETUP),
        code('''from IPython.display import Markdown, display
from tqdm.auto import tqdm

from gsd_lab import nbcheck
from gsd_lab.experiments import plots, tables
from gsd_lab.experiments.runs import FilterSettings, RunCache, real_image_baseline
from gsd_lab.course import show_tables  # every column the runs report, then CPU wall time apart
from gsd_lab.experiments import paper
from gsd_lab.figure_io import markdown_table

prompts = model.default_prompts[:max_prompts]
cache = RunCache(model, prompts, seeds, FilterSettings.for_model(model.name),
                 progress=tqdm(desc="images decoded (all tables)", unit="image"))
if not tables.lantern_affordable(model.adapter.vocab_size, model.adapter.device):
    table1_lantern, pareto_lantern = (), ()  # LANTERN's O(V^2) neighbourhood table: too slow here
real = real_image_baseline(model, len(prompts) * len(seeds))  # None without a real-image set'''),
        md("## Table 1 analogue: AR, SJD, GSD over G, Amplify, LANTERN"),
        code('''table1 = tables.speed_quality_table(
    cache, tables.table1_specs(table1_groups, table1_amplify, table1_lantern, seed_noise))
show_tables(table1 + ([real] if real else []))'''),
        code(CHECK + '''for line in (nbcheck.nfe_invariants(table1, model.num_tokens) + nbcheck.acceptance_lines(table1)
             + nbcheck.distortion_lines(table1)):
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
        code(CHECK + '''for line in (nbcheck.nfe_invariants(table2, model.num_tokens) + nbcheck.acceptance_lines(table2)
             + nbcheck.distortion_lines(table2)):
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

GSD's curve over G against the Amplify relaxation's curve over k (and LANTERN's over delta);
AR and SJD as points; real crops and AR on other seeds as reference lines where available.
A curve further up and to the left is the better trade-off. Error bars: one standard error.
"""),
        code('''curves = tables.pareto_specs(pareto_groups, pareto_amplify, pareto_lantern)
pareto = tables.pareto_points(cache, curves)
metrics = [(k, name) for k, name in model.quality_names.items() if any(k in r for r in table1)]
noise_row = next((r for r in table1 if r["method"] == tables.AR_SEED_NOISE.label), None)
if metrics:
    plots.show(plots.pareto(pareto, metrics, {"real crops": real, "AR, other seeds": noise_row}))
for name, rows in pareto.items():
    print(name)
    print(nbcheck.format_rows(rows, ["method", "nfe", "accepted_per_tested"] + [k for k, _ in metrics]))'''),
        code(CHECK + '''all_rows = [r for rows in pareto.values() for r in rows]
for line in nbcheck.nfe_invariants(all_rows, model.num_tokens):
    print(line)'''),
        md("""
## Exact distortion against NFE

The quality proxies above are noisy: ten images cannot separate methods a few points apart.
The exact distortion is not: per generated token it is the TV between the law the rule emitted
that token from and the model's p, averaged over the image's tokens, then over images. GSD over
G, rank bins with the token-level and the cluster-exact residual (our provable partition),
Amplify over k and LANTERN over delta, against NFE; AR and SJD are lossless, at 0.
"""),
        code('''distortion_curves = tables.distortion_specs(pareto_groups, distortion_rank_groups, pareto_amplify,
                                            pareto_lantern)
distortion_points = tables.pareto_points(cache, distortion_curves)
plots.show(plots.distortion_vs_nfe(distortion_points))
for name, rows in distortion_points.items():
    print(name)
    print(nbcheck.format_rows(rows, ["method", "nfe", "distortion", "distortion_sem"], digits=4))'''),
        code(CHECK + '''for line in nbcheck.distortion_lines([r for rows in distortion_points.values() for r in rows]):
    print(line)'''),
        md("""
## Paper against here

Each paper number (`gsd_lab.experiments.paper`, cited to the reference digest of the paper),
ours from the tables above, and whether it reproduces: speed as NFE ratios against this run's AR
(within 20%: "yes"; same side of 1: "direction only"), quality as differences against AR
(within two standard errors: "noise"). Absolute values cannot match on another model.
"""),
        code('''comparison = paper.speed_quality_comparison(table1, table2)
display(Markdown(markdown_table(comparison, paper.COLUMNS)))
verdicts = [r["reproduces"] for r in comparison]
print(f"Measured here: {verdicts.count('yes')} of {len(comparison)} comparisons reproduce, "
      f"{verdicts.count('direction only')} in direction only, {verdicts.count('no')} do not, "
      f"{verdicts.count('noise')} are within noise, {verdicts.count('not run')} not run.")'''),
        code('''if model.decode is not None:
    plots.show(plots.image_grid({s.label: [r.image for r in cache.records(s)][:10]
                                 for s in tables.table1_specs(table1_groups, table1_amplify)[:4]}, max_columns=10))'''),
    ]


def nb05() -> list:
    return [
        md(r"""
# 05 - Speculative decoding, from scratch: a course with `gsd_core`

Teaching material on small vocabularies; everything is exact (fractions or float64
enumeration) or a Monte Carlo run with a fixed seed. No model: `gsd_core` and
`gsd_lab.course` only. Each section ends with a checked cell (`# NBVAL_CHECK_OUTPUT`): an exact
value or a verdict with its tolerance, so the notebook fails when the code it teaches is wrong.

1. Speculative sampling on a worked example ($V = 5$): draft, accept, resample, and why the
   output law is exactly $p$.
2. The acceptance rate is $1 - \mathrm{TV}(p, q)$.
3. Where $q$ comes from in Jacobi decoding, and how acceptance per position becomes tokens per
   forward pass and NFE.
4. How one GSD cluster is built on a concrete row.
5. Grouped verification and Theorem 1, with its proof.
6. Dynamic clusters are not a partition: the exact counterexample (898/975 against 14/15).
7. GSD is lossy: distortion against cluster size, the two residuals, one cluster holding everything.
8. `verify` by Monte Carlo against its exact law.
9. An explorer (G, flatness) and exercises with checked solutions.

Notation: $p$ the target distribution, $q$ the draft's, over $V$ tokens;
$\mathrm{TV}(p, q) = \tfrac12 \sum_x |p(x) - q(x)|$, $(t)_+ = \max(t, 0)$. Proofs:
[`proofs/`](../proofs/README.md).
"""),
        params('''# Parameters (papermill style: this cell is tagged "parameters"). No model: gsd_core only.
vocab_size = 6
num_samples = 200_000
seed = 0
distortion_vocab = 16
distortion_pairs = 200
'''),
        code(PROVENANCE + '''

from fractions import Fraction

import torch
from IPython.display import Markdown, display

from gsd_core import (DynamicClusters, FixedPartition, RankBinnedClusters, acceptance_rate, group_probs,
                      output_distribution, tv_distance)
from gsd_lab import course
from gsd_lab.experiments import paper, plots, toy
from gsd_lab.nbcheck import check_verify_law, rounded'''),
        md(r"""
## 1. Speculative sampling on a worked example

A cheap draft proposes $x \sim q$; the target accepts it with probability
$$a(x) = \min\Bigl(1, \frac{p(x)}{q(x)}\Bigr).$$
On rejection, a token is drawn from the residual $r = (p - q)_+ / \sum_y (p(y) - q(y))_+$.

**Why the output law is exactly $p$.** For every token $y$,
$$\Pr[\text{emit } y] = \underbrace{q(y)\,a(y)}_{\text{drafted and accepted}} + \Pr[\text{reject}]\, r(y).$$
The first term is $q(y)\min(1, p(y)/q(y)) = \min(p(y), q(y))$. The rejection probability is
$1 - \sum_x \min(p(x), q(x)) = \sum_x (p(x) - q(x))_+$, which is exactly the normaliser of $r$, so
the second term is $(p(y) - q(y))_+$. And $\min(p, q) + (p - q)_+ = p$.
([proofs/02_sd_lossless.md](../proofs/02_sd_lossless.md).)

Below, $V = 5$, $p = (8, 6, 3, 2, 1)/20$, $q = (4, 8, 4, 2, 2)/20$, every term in exact fractions.
"""),
        code('''p5 = course.fractions_from_weights(course.WORKED_P)  # (8, 6, 3, 2, 1)
q5 = course.fractions_from_weights(course.WORKED_Q)  # (4, 8, 4, 2, 2)
parts = course.speculative_parts(p5, q5)
plots.show(course.plot_speculative_parts(parts))'''),
        code(CHECK + '''# Exact: fractions, then gsd_core's float64 output law against them (tolerance 1e-15).
fmt = course.fraction_text
print("p                 ", fmt(parts.p))
print("q                 ", fmt(parts.q))
print("min(p, q)         ", fmt(parts.accepted), " sum =", sum(parts.accepted))
print("(p - q)+          ", fmt(parts.excess), " sum = P(reject) =", parts.reject_probability)
print("residual r        ", fmt(parts.residual))
print("min + P(reject) r ", fmt(parts.output), " equals p exactly:", parts.output == parts.p)
print("gsd_core.output_distribution equals p within 1e-15:", course.output_law_is_p(p5, q5))'''),
        md(r"""
The same statement by simulation: `gsd_core.verify` on many independent drafts $x \sim q$
(here a random pair on $V = 6$ tokens), every emitted token's frequency against the exact law
and the acceptance frequency against the exact rate, each within 4 standard errors
$\sqrt{f(1-f)/n}$. The printed verdicts fail if `verify` resamples from $p$ instead of the residual
(`tests/lab/test_notebook_checks_power.py`).
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
        md(r"""
## 2. Acceptance $= 1 - \mathrm{TV}(p, q)$

$$\beta = \mathbb E_{x\sim q}\Bigl[\min\Bigl(1, \tfrac{p(x)}{q(x)}\Bigr)\Bigr] = \sum_x \min(p(x), q(x))
= 1 - \mathrm{TV}(p, q),$$
since $\min(a, b) = \tfrac12(a + b - |a - b|)$ and $p$, $q$ each sum to 1. In the worked example,
$\sum \min(p, q) = 16/20$: 4 drafts in 5 are accepted.
"""),
        code(CHECK + '''tv = float(tv_distance(p, q))
print(f"1 - TV = {1 - tv:.4f}; exact acceptance = {float(acceptance_rate(p, q)):.4f}; "
      f"equal within 1e-12: {abs(1 - tv - float(acceptance_rate(p, q))) < 1e-12}")
tv5 = sum(abs(a - b) for a, b in zip(p5, q5)) / 2
print(f"worked example: 1 - TV = {1 - tv5} = sum min(p, q) = {sum(parts.accepted)}; gsd_core.acceptance_rate within 1e-15: "
      f"{abs(float(acceptance_rate(course.as_tensor(p5), course.as_tensor(q5))) - float(1 - tv5)) < 1e-15}")'''),
        md(r"""
## 3. Where $q$ comes from in Jacobi decoding, and what acceptance buys

There is **no draft model**. Speculative Jacobi decoding (SJD) appends a window of $L$ guessed
tokens (16 in the paper) after the accepted prefix, and one forward pass of the target model
gives, at every window position $j$, the target distribution $p^{(t)}_j$ given the prefix and the
guesses before $j$. The guess $x_j$ at position $j$ was itself *sampled at the previous
iteration* from $p^{(t-1)}_j$, so that is its draft distribution: $q_j = p^{(t-1)}_j$. A brand-new
position has no previous iteration: its guess is a uniformly random token, stored as a one-hot
$q = e_x$, so $q(x) = 1$ and
$$a(x) = \min(1, p(x)) = p(x)\quad\text{(SD)},\qquad a(x) = p(C(x))\quad\text{(GSD: } q(C(x)) = 1).$$
A random guess is accepted by SD with probability $1/V$ on average, by GSD with the mean cluster mass.

**From acceptance per position to tokens per forward.** The window is tested left to right and
stops at the first rejection. If position $j$ is accepted with probability $a_j$, the accepted
prefix $K$ has $\Pr[K \ge k] = a_1 \cdots a_k$, so
$$\mathbb E[K] = \sum_{k=1}^{L} a_1 a_2 \cdots a_k,$$
and every forward commits $1 + K$ tokens (the accepted prefix, plus the token drawn from the
residual at the rejection or the next token after a full window). With $N$ tokens per image,
$\mathrm{NFE} \approx N / (1 + \mathbb E[K])$ (AR: $\mathrm{NFE} = N$). The $a_j$ are not
independent across iterations in practice; notebook 04 measures NFE directly.
"""),
        code('''p5_t = course.as_tensor(p5)
random_sd = course.random_draft_acceptance(p5_t)
random_gsd = course.random_draft_acceptance(p5_t, DynamicClusters(2))
window = [Fraction(4, 5), Fraction(4, 5), Fraction(1, 2)]
prefix = course.prefix_length_distribution(window)
per_forward = course.tokens_per_forward(window)'''),
        code(CHECK + '''# Exact (fractions; gsd_core float64 for the random-draft acceptances, rounded).
print("random guess x, SD accepts with p(x):        ", rounded(random_sd), "mean", round(float(random_sd.mean()), 4))
print("random guess x, GSD (G=2) accepts with p(C(x)):", rounded(random_gsd), "mean", round(float(random_gsd.mean()), 4))
print(f"window acceptances {[str(a) for a in window]}: P(K = k), k = 0..3:", [str(v) for v in prefix])
print(f"E[K] = {course.expected_accepted_prefix(window)} = sum_k k P(K = k) = {sum(k * v for k, v in enumerate(prefix))}; "
      f"tokens per forward = {per_forward}")
image_sd = Fraction(paper.SD_ACCEPTANCE_IMAGE.value).limit_denominator(100)  # the paper's ~40% for image models
# Lumina-mGPT's AR NFE (2392 forwards per image on Parti, paper.md 1.8), not its token count: an
# image is about 2.35k tokens (48 rows of 48 + a row-end token = 2352). The NFEs below divide the
# AR NFE by the tokens per forward: an approximation.
ar_nfe = int(paper.AR_NFE.value)
for a in (image_sd, Fraction(4, 5), Fraction(19, 20)):
    tpf = course.tokens_per_forward([a] * 16)
    print(f"16 positions each accepted with {a}: tokens per forward {float(tpf):.3f}; "
          f"NFE ~ AR's {ar_nfe} / {float(tpf):.3f} = {ar_nfe / float(tpf):.0f}")'''),
        md(r"""
The last lines start from the paper's acceptance of plain speculative sampling on image models
(`gsd_lab.experiments.paper`, cited to the reference digest): tokens per forward grow much
faster than the per-position acceptance, because $\mathbb E[K]$ is a sum of products. Raising
acceptance is what grouping is for.

## 4. How one GSD cluster is built

`gsd_core`'s form of the paper's Algorithm 3 (`gsd_core.DynamicClusters`, `dynamic_cluster`)
for a drafted token $x$ on one target row $p$:

1. rank the vocabulary by $p$, descending (ties: smaller id first);
2. find the rank $r(x)$;
3. take the window of ranks $r(x) - \lfloor G/2\rfloor \ldots r(x) + \lfloor G/2\rfloor$:
   $2\lfloor G/2\rfloor + 1$ tokens, clipped at the ends of the ranking;
4. keep $y$ only if $|p(y) - p(x)| \le \delta$ (probability-gap filter);
5. keep $y$ only if $\lVert e_y - e_x\rVert^2 \le d$ (embedding-distance filter; $e$ the input embeddings);
6. accept $x$ with probability $\min(1, p(C)/q(C))$.

Steps 3-5 are `gsd_core`'s conventions, not the paper's words. The paper (paper.md 1.6) takes
"the $G$ tokens adjacent to $x$" in the ranking, $x$ included, and keeps $y$ only if
$|p(y) - p(x)| < \delta$ and the distance is $< d$, both strict; here the window is symmetric,
$2\lfloor G/2\rfloor + 1$ ranks (odd), and both bounds are inclusive ($\le$). The released code
differs from both: it slices 7 ranks on one side of $x$ and 6 on the other (14 tokens whatever
$G$), filters strictly with $\delta = 0.15$ and a squared input-embedding distance $d = 0.5$, and
falls back to plain SJD at the ends of the ranking (README, "How the reference code differs").

A concrete row on $V = 10$ tokens with 2-dimensional embeddings, $G = 4$, $\delta = 0.05$, $d = 2$,
drafted token $x = 3$ (`course.cluster_steps` builds each mask with package calls and checks
the result against `gsd_core.dynamic_cluster`):
"""),
        code('''p_row = course.as_tensor(course.fractions_from_weights([12, 20, 3, 14, 16, 2, 9, 10, 6, 8]))
embeddings = torch.tensor([[0, 0], [1, 0], [0, 1], [2, 2], [5, 5], [1, 1], [3, 2], [2, 1], [4, 4], [2, 3]],
                          dtype=torch.float64)
steps = course.cluster_steps(p_row, 3, 4, embeddings=embeddings, max_prob_gap=0.05, max_embedding_distance=2.0)'''),
        code(CHECK + '''# Exact: ids and ranks; the composed mask equals gsd_core.dynamic_cluster (cluster_steps raises otherwise).
for line in steps.lines(p_row):
    print(line)'''),
        md(r"""
## 5. Grouped verification and Theorem 1

GSD verifies a *cluster* $C(x)$ instead of $x$ alone: accept with
$\min\bigl(1, p(C(x))/q(C(x))\bigr)$. For a **partition** $\mathcal C$ of the vocabulary with
cluster masses $p'(C) = \sum_{x\in C} p(x)$, $q'(C) = \sum_{x\in C} q(x)$:

**Theorem 1** (paper.md 1.7). $\beta_{\mathrm{GSD}} = 1 - \mathrm{TV}(p', q') \ \ge\ 1 - \mathrm{TV}(p, q) = \beta_{\mathrm{SD}}.$

*Proof.* Group the drafts by cluster:
$$\beta_{\mathrm{GSD}} = \sum_x q(x) \min\Bigl(1, \frac{p'(C(x))}{q'(C(x))}\Bigr)
= \sum_{C\in\mathcal C} q'(C)\min\Bigl(1, \frac{p'(C)}{q'(C)}\Bigr) = \sum_C \min(p'(C), q'(C)) = 1 - \mathrm{TV}(p', q').$$
By the triangle inequality, for every cluster $\bigl|\sum_{x\in C}(p(x) - q(x))\bigr| \le \sum_{x\in C}|p(x) - q(x)|$;
summing over the clusters and halving gives $\mathrm{TV}(p', q') \le \mathrm{TV}(p, q)$. $\square$

The first step needs every $x$ in $C$ to have the *same* cluster $C$, i.e. a partition.
Full proofs: [01_theorem1_partitions.md](../proofs/01_theorem1_partitions.md); partitions chosen
from $p$ such as rank bins keep the guarantee: [05_partitions_chosen_from_p.md](../proofs/05_partitions_chosen_from_p.md);
a machine check: [07_z3_bounded_check.md](../proofs/07_z3_bounded_check.md).
"""),
        code('''labels = torch.arange(vocab_size) // 2  # pairs of tokens {0, 1}, {2, 3}, ...
grouped = float(acceptance_rate(p, q, FixedPartition(labels)))
check = toy.theorem1_random_partitions(vocab_size=12, num_trials=5000, seed=seed)'''),
        code(CHECK + '''print(f"pairs partition {labels.tolist()}: acceptance {grouped:.4f} = "
      f"1 - TV(p', q') = {1 - float(tv_distance(group_probs(p, labels), group_probs(q, labels))):.4f} "
      f">= 1 - TV(p, q) = {1 - tv:.4f}")
print(f"5000 random pairs and partitions: max(TV(p', q') - TV(p, q)) <= 1e-12: {check.max_violation <= 1e-12}")'''),
        md(r"""
## 6. Dynamic clusters: the exact counterexample

The paper's clusters are *dynamic*: $C(x)$ is the window around the drafted $x$, so different
drafts get overlapping clusters, not a partition, and the first step of the proof fails.
[proofs/04_dynamic_counterexample.md](../proofs/04_dynamic_counterexample.md): $V = 5$, $G = 2$ (one
rank on each side), no filters, $p = (5,4,3,2,1)/15$, $q = (5,5,3,2,0)/15$. The table, in exact
fractions from proofs/04's clusters written out by hand in `gsd_lab.course` (the check below
compares them with `gsd_core.dynamic_cluster`):
"""),
        code('''table = course.counterexample_table()
display(Markdown(table.markdown()))'''),
        code(CHECK + '''# Exact fractions; gsd_core's clusters and float64 acceptance rates vs them.
agrees = course.counterexample_checks(table)
print(f"SD:      alpha = sum min(p, q) = {table.alpha_sd}")
print(f"dynamic: alpha = sum q(x) a(x) = {table.alpha_dynamic}")
print(f"SD - dynamic = {table.alpha_sd - table.alpha_dynamic} > 0: {table.alpha_sd > table.alpha_dynamic}")
print(f"gsd_core.dynamic_cluster gives these clusters: {agrees['clusters']}")
print(f"gsd_core.acceptance_rate agrees within 1e-12: SD {agrees['SD']}, "
      f"dynamic {agrees['dynamic']}")'''),
        md(r"""
Token 1 is over-drafted ($q(1) > p(1)$) and sits in the clusters of its neighbours 0 and 2,
pulling *their* ratios below 1 although SD accepts both surely ($p(0) \ge q(0)$, $p(2) \ge q(2)$).

## 7. GSD is lossy

Accepting a cluster lets the drafted token stand in for any member, so inside an accepted
cluster the token follows $q$, not $p$. The exact law of one verification step
(`gsd_core.output_distribution`, [proofs/06_token_level_gsd_output.md](../proofs/06_token_level_gsd_output.md))
gives the distortion $\mathrm{TV}(\mathrm{out}, p)$ directly. Rules compared at the same number of
tokens per cluster (odd, since dynamic windows are): the paper's dynamic window ($G$ = size - 1,
no filters), rank bins of that many tokens with the token residual, and with the cluster-exact
residual ([proofs/03_cluster_exact_residual.md](../proofs/03_cluster_exact_residual.md)). Size 1 is SD: distortion 0.
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
        md(r"""
### Why the cluster-exact residual has the *larger* token-level TV

The two residuals share the accepted part $q(y)\,a(y)$ and the rejection probability
$\mathrm{TV}(p', q')$; they differ in where the rejected mass goes.

* **Token residual** $(p - q)_+/\mathrm{TV}(p, q)$: onto the tokens with $p(y) > q(y)$, exactly
  the tokens the accepted part under-serves (where $a = 1$ the accepted part is $q$, short of $p$
  by $(p - q)_+$). It repairs token deficits, but only a share
  $\mathrm{TV}(p', q')/\mathrm{TV}(p, q) \le 1$ of them, and it moves mass across clusters, so the
  cluster masses are off.
* **Cluster-exact residual**: a cluster with $p'(C) > q'(C)$, then a token $\propto p$ inside
  it. Every cluster gets its exact mass $p'(C)$, but inside it the accepted part keeps $q$'s
  shape: $\mathrm{TV}(\mathrm{out}, p) = \sum_C \min(p'(C), q'(C))\,\mathrm{TV}\bigl(q(\cdot\mid C), p(\cdot\mid C)\bigr)$
  (proofs/03), and nothing repairs the within-cluster deficit of a cluster with $p'(C) \le q'(C)$.

So the cluster-exact residual gets the law of *which cluster* exactly right at the price of the
token law; the token residual does the opposite. That its token-level TV is never the smaller is
an observation, not a theorem proved here: it is computed below on a small pair, on the random
pairs above, and on 5000 random pairs and partitions. The small pair: $V = 4$,
$p = (0, 3, 3, 4)/10$, $q = (7, 0, 3, 0)/10$, partition $\{0, 1\}, \{2, 3\}$; the token residual
puts part of the rejected mass on token 1 although cluster $\{0, 1\}$ already gets its whole
mass $p'(\{0, 1\}) = 3/10$ from accepted drafts of token 0.
"""),
        code('''p4 = course.as_tensor(course.fractions_from_weights([0, 3, 3, 4]))
q4 = course.as_tensor(course.fractions_from_weights([7, 0, 3, 0]))
residuals = course.residual_comparison(p4, q4, torch.tensor([0, 0, 1, 1]))
tv_token_pairs = distortion["rank_binned_token"]
tv_cluster_pairs = distortion["rank_binned_cluster"]
residual_check = course.residual_tv_gap_random(vocab_size=6, num_trials=5000, seed=seed)'''),
        code(CHECK + '''# Exact (float64 enumeration), rounded.
print(f"V = 4 pair, token residual:         TV(out, p) = {residuals.tv_token:.4f}, "
      f"max |out'(C) - p'(C)| = {residuals.cluster_mass_error_token:.4f}")
print(f"V = 4 pair, cluster-exact residual: TV(out, p) = {residuals.tv_cluster:.4f}, "
      f"max |out'(C) - p'(C)| = {residuals.cluster_mass_error_cluster:.4f}")
print("section 7's random pairs, every bin size > 1: mean TV cluster-exact > mean TV token:",
      bool((tv_cluster_pairs[1:] > tv_token_pairs[1:]).all()))
print(f"5000 random pairs and partitions: TV cluster-exact >= TV token - 1e-12 in every one: "
      f"{residual_check <= 1e-12}")'''),
        md(r"""
### One cluster holding everything: acceptance 1, output $q$

If a single cluster holds the whole vocabulary, $p(C) = q(C) = 1$, every draft is accepted,
nothing is ever resampled, and the output law is $q$: maximal speed, and the distortion is
$\mathrm{TV}(q, p)$, the whole gap. Grouping trades exactness for speed along this line.
"""),
        code(CHECK + '''everything = course.single_cluster_checks(p5, q5)  # float64 vs exact
print(f"acceptance = 1 within 1e-12: {everything['acceptance = 1']}")
print(f"output law = q within 1e-12: {everything['output law = q']}")
print(f"distortion TV(out, p) = TV(q, p) = {sum(abs(a - b) for a, b in zip(p5, q5)) / 2}")'''),
        md(r"""
## 8. `verify` with clusters, by Monte Carlo, against the exact law

The exact laws above come from `output_distribution`, which enumerates; `verify` is what the
decoders run. Running `verify` on many drafts $x \sim q$ must reproduce `output_distribution`
and `acceptance_rate` for every rule, lossy or not: each token's frequency and the acceptance
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
        md(r"""
## 9. Explore: cluster size and flatness

A fixed pair of logit vectors turned into $p$ and $q$ at temperature "flatness": large flatness
spreads the mass (the image-model regime of notebook 01). With `ipywidgets` installed this cell
shows sliders; without it (it is not a dependency) it draws the two ends of the flatness range
at a middle $G$ (4). The title states the exact acceptance (SD and GSD) and the distortion.
"""),
        code('''sliders = course.tradeoff_explorer()
print("sliders shown" if sliders else "ipywidgets not installed: static figures above")'''),
        md(r"""
## Exercises

Work them on paper, then run the solution cells: each computes the answer exactly and checks it
against `gsd_core`.

**E1.** $p = (1/2, 1/4, 1/4)$, $q = (1/4, 1/4, 1/2)$. What is SD's acceptance rate, and the residual $r$?

**E2.** Same pair, partition $\{0, 2\}, \{1\}$. What is GSD's acceptance rate, what is the
output law, and what is its distortion $\mathrm{TV}(\mathrm{out}, p)$?

**E3.** A Jacobi window of 3 drafts, each accepted with probability 1/2 (given the ones before).
Expected accepted prefix and tokens per forward?

**E4.** With the $p$ of E1 and a *random* initial guess (uniform over the 3 tokens, one-hot $q$),
what is SD's mean acceptance? And with one cluster holding all three tokens?
"""),
        md(r"""
**Solutions.** E1: $\sum\min(p, q) = 1/4 + 1/4 + 1/4 = 3/4$; $(p - q)_+ = (1/4, 0, 0)$, so $r = (1, 0, 0)$.
E2: $p' = (3/4, 1/4)$, $q' = (3/4, 1/4)$, so every draft is accepted (acceptance 1) and nothing is
resampled: the output is $q$, distortion $\mathrm{TV}(q, p) = 1/4$. Theorem 1 holds ($1 \ge 3/4$),
and the example shows the price. E3: $1/2 + 1/4 + 1/8 = 7/8$, tokens per forward $15/8$.
E4: $\frac13\sum_x p(x) = 1/3$; with one cluster, $p(C) = 1$: acceptance 1.
"""),
        code('''pe = [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)]
qe = [Fraction(1, 4), Fraction(1, 4), Fraction(1, 2)]
pe_t, qe_t = course.as_tensor(pe), course.as_tensor(qe)
e1 = course.speculative_parts(pe, qe)
e2_labels = torch.tensor([0, 1, 0])
e2_acceptance = float(acceptance_rate(pe_t, qe_t, FixedPartition(e2_labels)))
e2_out = output_distribution(pe_t, qe_t, FixedPartition(e2_labels))
e3 = course.expected_accepted_prefix([Fraction(1, 2)] * 3)
e4_sd = course.random_draft_acceptance(pe_t).mean()
e4_one = course.random_draft_acceptance(pe_t, FixedPartition(torch.zeros(3, dtype=torch.long))).mean()'''),
        code(CHECK + '''# Exact answers (fractions), each against gsd_core's float64 value within 1e-12.
print(f"E1: acceptance {1 - e1.reject_probability}, residual {[str(v) for v in e1.residual]}; gsd_core agrees: "
      f"{abs(float(acceptance_rate(pe_t, qe_t)) - 0.75) < 1e-12}")
print(f"E2: acceptance = 1: {abs(e2_acceptance - 1) < 1e-12}; output = q: {bool((e2_out - qe_t).abs().max() < 1e-12)}; "
      f"TV(out, p) = 1/4: {abs(float(tv_distance(e2_out, pe_t)) - 0.25) < 1e-12}")
print(f"E3: E[K] = {e3}, tokens per forward = {1 + e3}")
print(f"E4: SD mean acceptance = 1/3: {abs(float(e4_sd) - 1 / 3) < 1e-12}; one cluster = 1: {abs(float(e4_one) - 1) < 1e-12}")'''),
        md("""
## Closing note: do these checks catch bugs?

`tests/lab/test_notebook_checks_power.py` runs the functions behind the Monte Carlo checks of
sections 1 and 8 (`gsd_lab.nbcheck.check_verify_law`, with this notebook's parameters) on mutated
versions of `verify`, without running the notebook. A checked cell prints `False` (so nbval
fails) when `verify` resamples from p after a rejection instead of the residual, when it tests
p(x)/q(C) instead of p(C)/q(C), or when it ignores its clusters; every verdict stays `True` (nbval
passes) when its uniforms U are replaced by 1 - U, a harmless change of the random stream. The
exact checks (sections 1-7, exercises) compare `gsd_core`'s float64 enumeration with fractions
computed without it (in `gsd_lab.course` or in the cell: section 6's clusters are written out by
hand from proofs/04); `tests/lab/test_course.py` checks those against hand-computed values, and
`tests/lab/test_notebook_checks_power.py` runs the verdict functions that sections 1, 6 and 7
print (`course.output_law_is_p`, `counterexample_checks`, `single_cluster_checks`) on mutated
versions of the enumeration and of `dynamic_cluster`: each mutation turns a verdict to `False`.
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
