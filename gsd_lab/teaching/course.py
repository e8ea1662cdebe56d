"""Helpers of the teaching notebooks (05 the course, 01 the TV lesson, 04 the tables): the small
exact computations a cell shows step by step, kept here so that they are tested.

Notation as in ``gsd_core``: p target, q draft over V tokens, a drafted x ~ q accepted with
a(x) = min(1, p(C(x)) / q(C(x))) (C(x) = {x} for standard speculative sampling, SD), otherwise a
token drawn from the residual r. Exact arithmetic uses ``fractions.Fraction``; tensors are float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from itertools import accumulate
from typing import Any, Sequence

import torch
from torch import Tensor

from gsd_core import (
    DynamicClusters,
    FixedPartition,
    Lantern,
    acceptance_rate,
    dynamic_cluster,
    group_probs,
    latent_neighbourhoods,
    output_distribution,
    probability_ranks,
    tv_distance,
)

from ..experiments.toy import (  # proofs/04's p, q and hand-written clusters
    COUNTEREXAMPLE_CLUSTERS,
    COUNTEREXAMPLE_GROUP_SIZE,
    COUNTEREXAMPLE_P,
    COUNTEREXAMPLE_Q,
)

DTYPE = torch.float64
WALL_COLUMNS = ("wall_seconds", "speedup_wall")


# ---- distributions -----------------------------------------------------------------------------


def entropy(p: Tensor) -> Tensor:
    """Shannon entropy H(p) = -sum_x p(x) log p(x) in nats (0 log 0 = 0). p: [..., V] -> [...]."""
    p = p.to(DTYPE)
    return -(p * torch.log(torch.where(p > 0, p, torch.ones_like(p)))).sum(-1)


def effective_vocabulary(p: Tensor) -> Tensor:
    """exp(H(p)): the number of equally likely tokens with the same entropy (1 for a one-hot,
    V for the uniform law). p: [..., V] -> [...]."""
    return torch.exp(entropy(p))


def fractions_from_weights(weights: Sequence[int]) -> list[Fraction]:
    """Integer weights -> the exact distribution w / sum(w) as Fractions
    (e.g. (5,4,3,2,1) -> p/15)."""
    if not weights or any(int(w) != w or w < 0 for w in weights) or sum(weights) == 0:
        raise ValueError(
            f"weights must be non-negative integers with a positive sum, got {weights!r}"
        )
    total = sum(weights)
    return [Fraction(int(w), total) for w in weights]


def fraction_text(values: Sequence[Fraction | int]) -> str:
    """Exact values as text, e.g. "(2/5, 3/10, 0)"."""
    return "(" + ", ".join(str(v) for v in values) + ")"


def as_tensor(values: Sequence[Fraction | float]) -> Tensor:
    """Exact Fractions (or floats) -> a float64 tensor, for the package's functions."""
    return torch.tensor([float(v) for v in values], dtype=DTYPE)


# ---- 1. speculative sampling, decomposed --------------------------------------------------------

WORKED_P = (8, 6, 3, 2, 1)  # notebook 05's worked example: p = weights / 20
WORKED_Q = (4, 8, 4, 2, 2)  # q = weights / 20


@dataclass(frozen=True)
class SpeculativeParts:
    """One step of standard speculative sampling, term by term (exact Fractions, lists of length V).

    accepted(y) = q(y) min(1, p(y)/q(y)) = min(p(y), q(y)); the rejection probability is
    1 - sum min(p, q) = sum (p - q)+ = TV(p, q); the residual r = (p - q)+ / TV(p, q); the output
    accepted + P(reject) r = min(p, q) + (p - q)+ = p (proofs/02_sd_lossless.md)."""

    p: list[Fraction]
    q: list[Fraction]
    accepted: list[Fraction]
    excess: list[Fraction]
    reject_probability: Fraction
    residual: list[Fraction]
    output: list[Fraction]


def speculative_parts(p: Sequence[Fraction], q: Sequence[Fraction]) -> SpeculativeParts:
    """The exact decomposition of ``SpeculativeParts`` for Fraction distributions p, q
    of equal length."""
    p, q = list(p), list(q)
    if len(p) != len(q) or sum(p) != 1 or sum(q) != 1 or min(p + q) < 0:
        raise ValueError(
            "p and q must be exact distributions (Fractions summing to 1) of the same length"
        )
    accepted = [min(a, b) for a, b in zip(p, q)]
    excess = [max(a - b, Fraction(0)) for a, b in zip(p, q)]
    reject = 1 - sum(accepted)
    residual = [e / reject if reject else Fraction(0) for e in excess]
    output = [a + reject * r for a, r in zip(accepted, residual)]
    return SpeculativeParts(p, q, accepted, excess, reject, residual, output)


def output_law_is_p(p: Sequence[Fraction], q: Sequence[Fraction], tolerance: float = 1e-15) -> bool:
    """Notebook 05's check of section 1: SD's exact output law, gsd_core's float64
    ``output_distribution(p, q)``, equals the exact p (Fractions) within ``tolerance``:
    max_y |out(y) - p(y)| < tolerance (the Fractions rounded once to float64)."""
    p_t = as_tensor(p)
    return bool((output_distribution(p_t, as_tensor(q)) - p_t).abs().max() < tolerance)


def plot_speculative_parts(parts: SpeculativeParts) -> Any:
    """Bar charts of p, q, min(p, q) and (p - q)+ for a small vocabulary (a matplotlib Figure
    without pyplot state: ``plots.show`` displays it once, and nothing accumulates)."""
    from matplotlib.figure import Figure

    panels = {
        "target p": parts.p,
        "draft q": parts.q,
        "accepted: min(p, q)": parts.accepted,
        "residual mass: (p - q)+": parts.excess,
    }
    fig = Figure(figsize=(13, 2.8), layout="constrained")
    axes = fig.subplots(1, 4, sharey=True)
    tokens = list(range(len(parts.p)))
    for ax, (title, values) in zip(axes, panels.items()):
        ax.bar(
            tokens, [float(v) for v in values], color="tab:blue" if "p" == title[-1] else "tab:gray"
        )
        ax.set_title(title)
        ax.set_xticks(tokens)
        ax.set_xlabel("token")
    axes[0].set_ylabel("probability")
    return fig


# ---- 2. from acceptance per position to tokens per forward ------------------------------------


def prefix_length_distribution(acceptances: Sequence[Fraction | float]) -> list[Fraction | float]:
    """P(K = k), k = 0..L, for the accepted prefix K of a window of L drafts tested left to right,
    position j accepted with probability a_j independently of the others (given the window):
    P(K = k) = a_1 ... a_k (1 - a_{k+1}) for k < L, and a_1 ... a_L for k = L."""
    products = [1, *accumulate(acceptances, lambda x, y: x * y)]
    return [products[k] * (1 - acceptances[k]) for k in range(len(acceptances))] + [products[-1]]


def expected_accepted_prefix(acceptances: Sequence[Fraction | float]) -> Fraction | float:
    """E[K] = sum_{k=1}^{L} P(K >= k) = sum_k a_1 ... a_k (the window of
    ``prefix_length_distribution``)."""
    return sum(accumulate(acceptances, lambda x, y: x * y))


def tokens_per_forward(acceptances: Sequence[Fraction | float]) -> Fraction | float:
    """Tokens committed per forward pass: the accepted prefix plus the one token the forward adds
    itself (the residual draw at the first rejection, or the next token after a full window):
    1 + E[K]."""
    return 1 + expected_accepted_prefix(acceptances)


def iid_tokens_per_forward(alpha: Fraction | float, window: int) -> Fraction | float:
    """Tokens per forward of a window of L = ``window`` drafts when every tested draft is accepted
    with the same probability alpha, independently: 1 + alpha + ... + alpha^L =
    (1 - alpha^(L+1)) / (1 - alpha) (L + 1 at alpha = 1), which tends to 1 / (1 - alpha) as L grows.
    ``tokens_per_forward([alpha] * L)`` is the same sum term by term."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an int >= 0, got {window!r}")
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
    if alpha == 1:
        return window + 1
    return (1 - alpha ** (window + 1)) / (1 - alpha)


def random_draft_acceptance(p: Tensor, clusters: object = None) -> Tensor:
    """Acceptance of each possible random initial draft x (Jacobi decoding's first guess).

    A random draft is drawn uniformly and its "draft distribution" is the one-hot q = e_x, so
    q(C) = 1 for any cluster holding x and a(x) = min(1, p(C(x))) = p(C(x)): plain SD accepts x with
    p(x), GSD with the mass of x's cluster. p: [V]. Returns [V] (entry x: a(x), by gsd_core)."""
    vocab = p.shape[-1]
    one_hot = torch.eye(vocab, dtype=DTYPE)
    return acceptance_rate(p.to(DTYPE).expand(vocab, vocab), one_hot, clusters)


# ---- 3. one GSD cluster, step by step -----------------------------------------------------------


@dataclass(frozen=True)
class ClusterSteps:
    """gsd_core's dynamic cluster of a drafted ``token`` (its form of the paper's Algorithm 3:
    a rank window of G tokens, (G-1)//2 above x and G//2 below, inclusive filters), one filter
    at a time.

    All masks are bool [V]; ``members`` = window & gap & distance, equal to ``dynamic_cluster``."""

    token: int
    group_size: int
    ranks: Tensor
    window: Tensor
    gap_ok: Tensor
    distance_ok: Tensor
    members: Tensor

    @property
    def above(self) -> int:
        return (self.group_size - 1) // 2

    @property
    def below(self) -> int:
        return self.group_size // 2

    def lines(self, p: Tensor) -> list[str]:
        """The steps as text (exact ranks and ids; probabilities rounded to 4 digits)."""

        def ids(mask: Tensor) -> list[int]:
            return sorted(torch.nonzero(mask).flatten().tolist(), key=lambda t: int(self.ranks[t]))

        r = int(self.ranks[self.token])
        return [
            (
                "1. rank the tokens by p (descending, ties: smaller id "
                f"first): order {ids(torch.ones_like(self.window))}"
            ),
            f"2. the draft x = {self.token} has rank {r} (p(x) = {float(p[self.token]):.4f})",
            (
                f"3. window: ranks {r} - {self.above} .. {r} + {self.below} (G = {self.group_size} "
                f"tokens: (G-1)//2 above x, G//2 below, clipped at the ends): {ids(self.window)}"
            ),
            f"4. |p(y) - p(x)| filter keeps {ids(self.window & self.gap_ok)}",
            f"5. embedding-distance filter keeps {ids(self.window & self.distance_ok)}",
            (
                f"6. cluster C(x) = window & both filters = {ids(self.members)}; "
                f"p(C) = {float(p[self.members].sum()):.4f}"
            ),
        ]


def cluster_steps(
    p: Tensor,
    token: int,
    group_size: int,
    *,
    embeddings: Tensor | None = None,
    max_prob_gap: float | None = None,
    max_embedding_distance: float | None = None,
) -> ClusterSteps:
    """Build ``ClusterSteps`` for one row p [V] with gsd_core's ranking and window, then the filters
    |p(y) - p(x)| <= max_prob_gap and ||e_y - e_x||^2 <= max_embedding_distance (None: no filter).
    Raises ValueError if the composed mask differs from
    ``gsd_core.dynamic_cluster`` (it must not)."""
    if p.ndim != 1:
        raise ValueError(f"p must be one row [V], got shape {tuple(p.shape)}")
    ranks = probability_ranks(p)
    offset = ranks - ranks[token]  # window: (G-1)//2 ranks above x, G//2 below, clipped
    window = (offset >= -((group_size - 1) // 2)) & (offset <= group_size // 2)
    gap_ok = (
        torch.ones_like(window) if max_prob_gap is None else (p - p[token]).abs() <= max_prob_gap
    )
    if max_embedding_distance is None:
        distance_ok = torch.ones_like(window)
    else:
        if embeddings is None:
            raise ValueError("max_embedding_distance needs embeddings [V, D]")
        e = embeddings.to(DTYPE)
        distance_ok = (e - e[token]).square().sum(-1) <= max_embedding_distance
    members = window & gap_ok & distance_ok
    reference = dynamic_cluster(
        p,
        token,
        group_size,
        embeddings=embeddings,
        max_embedding_distance=max_embedding_distance,
        max_prob_gap=max_prob_gap,
    )
    if not torch.equal(members, reference):
        raise ValueError("step-by-step cluster differs from gsd_core.dynamic_cluster")
    return ClusterSteps(
        token, group_size, probability_ranks(p), window, gap_ok, distance_ok, members
    )


# ---- 4. the dynamic-cluster counterexample (proofs/04) -------------------------------------------



@dataclass(frozen=True)
class CounterexampleTable:
    """proofs/04_dynamic_counterexample.md computed exactly: one row per drafted token x with
    q(x), C(x), p(C), q(C), a(x) = min(1, p(C)/q(C)) and q(x) a(x) (Fractions, from the
    hand-written clusters); the totals alpha_dyn = sum_x q(x) a(x) and alpha_SD = sum_x
    min(p, q); next to them gsd_core's float64 ``acceptance_rate`` (SD and
    ``DynamicClusters(3)``) and gsd_core's clusters (``dynamic_cluster``), to be compared."""

    rows: list[dict[str, Any]]
    alpha_sd: Fraction
    alpha_dynamic: Fraction
    float_sd: float
    float_dynamic: float
    core_clusters: list[list[int]]

    denominator: int = 15

    def markdown(self) -> str:
        """The table of proofs/04 (masses over ``denominator`` where that is exact)."""

        def over(value: Fraction) -> str:
            scaled = value * self.denominator
            if scaled.denominator == 1 and value:
                return f"{scaled.numerator}/{self.denominator}"
            return str(value)

        head = "| x | q(x) | C(x) | p(C) | q(C) | a(x) | q(x) a(x) |\n|---|---|---|---|---|---|---|"
        body = [
            f"| {r['x']} | {over(r['q'])} | {set(r['cluster'])} | {over(r['p_cluster'])} "
            f"| {over(r['q_cluster'])} | {r['accept']} | {r['q_accept']} |"
            for r in self.rows
        ]
        return "\n".join([head, *body])


def counterexample_table() -> CounterexampleTable:
    """proofs/04's exact acceptance table from its hand-written clusters (Fractions), with
    gsd_core's float64 acceptance rates and ``dynamic_cluster`` clusters alongside."""
    p, q = fractions_from_weights(COUNTEREXAMPLE_P), fractions_from_weights(COUNTEREXAMPLE_Q)
    rows = []
    for x, cluster in enumerate(COUNTEREXAMPLE_CLUSTERS):
        p_c, q_c = sum(p[y] for y in cluster), sum(q[y] for y in cluster)
        accept = min(Fraction(1), p_c / q_c) if q_c else Fraction(1)
        rows.append(
            {
                "x": x,
                "q": q[x],
                "cluster": list(cluster),
                "p_cluster": p_c,
                "q_cluster": q_c,
                "accept": accept,
                "q_accept": q[x] * accept,
            }
        )
    pt, qt = as_tensor(p), as_tensor(q)
    rule = DynamicClusters(COUNTEREXAMPLE_GROUP_SIZE)
    core_clusters = [
        torch.nonzero(dynamic_cluster(pt, x, COUNTEREXAMPLE_GROUP_SIZE)).flatten().tolist()
        for x in range(len(p))
    ]
    return CounterexampleTable(
        rows,
        sum(min(a, b) for a, b in zip(p, q)),
        sum(r["q_accept"] for r in rows),
        float(acceptance_rate(pt, qt)),
        float(acceptance_rate(pt, qt, rule)),
        core_clusters,
        math.lcm(sum(COUNTEREXAMPLE_P), sum(COUNTEREXAMPLE_Q)),
    )


def counterexample_checks(table: CounterexampleTable, tolerance: float = 1e-12) -> dict[str, bool]:
    """Notebook 05's checks of section 6: gsd_core against the exact table. "clusters":
    ``dynamic_cluster`` gives proofs/04's clusters; "SD" / "dynamic": |float64
    ``acceptance_rate`` - exact alpha| < ``tolerance``."""
    return {
        "clusters": table.core_clusters == [r["cluster"] for r in table.rows],
        "SD": abs(table.float_sd - float(table.alpha_sd)) < tolerance,
        "dynamic": abs(table.float_dynamic - float(table.alpha_dynamic)) < tolerance,
    }


# ---- 5. residuals and the one-cluster limit ------------------------------------------------------


@dataclass(frozen=True)
class ResidualComparison:
    """Exact TV(output, p) of one GSD step on a partition with the token residual (the paper's)
    and with the cluster-exact residual, and how far each is from p'(C) on cluster masses."""

    tv_token: float
    tv_cluster: float
    cluster_mass_error_token: float
    cluster_mass_error_cluster: float


def residual_comparison(p: Tensor, q: Tensor, labels: Tensor) -> ResidualComparison:
    """``ResidualComparison`` for p, q [V] and a partition ``labels`` [V]
    (gsd_core.output_distribution)."""
    out_token = output_distribution(p, q, FixedPartition(labels))
    out_cluster = output_distribution(p, q, FixedPartition(labels, "cluster"))
    p_c = group_probs(p, labels)
    return ResidualComparison(
        float(tv_distance(out_token, p)),
        float(tv_distance(out_cluster, p)),
        float((group_probs(out_token, labels) - p_c).abs().max()),
        float((group_probs(out_cluster, labels) - p_c).abs().max()),
    )


def single_cluster(p: Tensor, q: Tensor) -> tuple[float, Tensor]:
    """One cluster holding the whole vocabulary: p(C) = q(C) = 1, so a(x) = 1 for every draft,
    nothing is ever rejected and the output law is q itself. Returns
    (acceptance, output law [V])."""
    everything = FixedPartition(torch.zeros(p.shape[-1], dtype=torch.long))
    return float(acceptance_rate(p, q, everything)), output_distribution(p, q, everything)


def single_cluster_checks(
    p: Sequence[Fraction], q: Sequence[Fraction], tolerance: float = 1e-12
) -> dict[str, bool]:
    """Notebook 05's checks of section 7 (one cluster holding everything), by gsd_core in
    float64 against the exact values: "acceptance = 1": |alpha - 1| < tolerance; "output law =
    q": max_y |out(y) - q(y)| < tolerance."""
    acceptance, out = single_cluster(as_tensor(p), as_tensor(q))
    return {
        "acceptance = 1": abs(acceptance - 1) < tolerance,
        "output law = q": bool((out - as_tensor(q)).abs().max() < tolerance),
    }


# ---- 6. LANTERN (proofs/08) ----------------------------------------------------------------------


@dataclass(frozen=True)
class LanternParts:
    """One LANTERN step in exact Fractions (proofs/08), computed without gsd_core: credited mass
    m(x) = max{S_j <= delta} over the prefix sums S_j of the neighbours' p, acceptance
    a(x) = min(1, (p(x) + m(x))/q(x)) (0 where q(x) = 0), the acceptance rate alpha = sum_x q(x)
    a(x), alpha_SD = sum_x min(p, q), out = q a + (1 - alpha) r with r = norm((p - q)+), and its
    distortion TV(out, p)."""

    credited: list[Fraction]
    accept: list[Fraction]
    alpha: Fraction
    alpha_sd: Fraction
    output: list[Fraction]
    tv: Fraction


def lantern_parts(
    p: Sequence[Fraction],
    q: Sequence[Fraction],
    neighbours: Sequence[Sequence[int]],
    delta: Fraction,
) -> LanternParts:
    """``LanternParts`` of p, q (exact distributions) with ``neighbours[x]``: the other tokens of
    B_k(x) nearest first (x itself excluded) and the budget ``delta``."""
    p, q = list(p), list(q)
    credited = []
    for x in range(len(p)):
        mass, total = Fraction(0), Fraction(0)
        for y in neighbours[x]:
            total += p[y]
            if total > delta:
                break
            mass = total
        credited.append(mass)
    accept = [
        min(Fraction(1), (p[x] + credited[x]) / q[x]) if q[x] else Fraction(0)
        for x in range(len(p))
    ]
    alpha = sum(a * b for a, b in zip(q, accept))
    parts = speculative_parts(p, q)
    output = [qy * ay + (1 - alpha) * ry for qy, ay, ry in zip(q, accept, parts.residual)]
    return LanternParts(
        credited,
        accept,
        alpha,
        1 - parts.reject_probability,
        output,
        sum(abs(a - b) for a, b in zip(output, p)) / 2,
    )


# proofs/08's example: the per-token budget does not bound the output law. V = 8, token i + 4 is
# the nearest neighbour of token i (and i of i + 4): 1-D embeddings 10 i and 10 i + 1, k = 2.
LANTERN_P = (0, 0, 0, 0, 1, 1, 1, 1)  # p = weights / 4
LANTERN_Q = (1, 1, 1, 1, 0, 0, 0, 0)  # q = weights / 4
LANTERN_EMBEDDINGS = (0.0, 10.0, 20.0, 30.0, 1.0, 11.0, 21.0, 31.0)
LANTERN_NEIGHBOURS = ((4,), (5,), (6,), (7,), (0,), (1,), (2,), (3,))  # B_2(x) minus x, by hand
LANTERN_DELTA = Fraction(1, 4)


def lantern_checks(
    parts: LanternParts,
    p: Sequence[Fraction],
    q: Sequence[Fraction],
    embeddings: Tensor,
    k: int,
    delta: float,
    tolerance: float = 1e-15,
) -> dict[str, bool]:
    """gsd_core's float64 law of the ``Lantern`` rule (``output_distribution``, ``acceptance_rate``;
    neighbourhoods from ``embeddings`` [V, D]) against the exact ``parts``: each
    within ``tolerance``."""
    rule = Lantern(latent_neighbourhoods(embeddings.to(DTYPE), k), delta)
    p_t, q_t = as_tensor(p), as_tensor(q)
    out = output_distribution(p_t, q_t, rule)
    return {
        "output law": bool((out - as_tensor(parts.output)).abs().max() < tolerance),
        "acceptance": abs(float(acceptance_rate(p_t, q_t, rule)) - float(parts.alpha)) < tolerance,
    }


def lantern_identity_gap(p: Tensor, q: Tensor, embeddings: Tensor, k: int, delta: float) -> float:
    """|TV(out, p) - (alpha - alpha_SD)| of one LANTERN step by gsd_core (proofs/08: 0 exactly, so
    float64 rounding only). p, q: [V]; embeddings [V, D]."""
    rule = Lantern(latent_neighbourhoods(embeddings.to(DTYPE), k), delta)
    gained = float(acceptance_rate(p, q, rule)) - float(acceptance_rate(p, q))
    return abs(float(tv_distance(output_distribution(p, q, rule), p)) - gained)


# ---- widgets (optional) --------------------------------------------------------------------------

EXPLORER_VOCAB = 64
EXPLORER_NOISE = 0.5  # notebook 01's per-token log-normal noise


def flatness_pair(
    viable: int, *, vocab_size: int = EXPLORER_VOCAB, noise: float = EXPLORER_NOISE, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """One pair of notebook 01's family (``toy.noisy_pairs``) at flatness ``viable``: a base
    uniform over the first ``viable`` tokens (0 elsewhere), and p, q that base times independent
    log-normal factors exp(noise eps), renormalised. More viable tokens: flatter p and q whose
    small per-token gaps add up to a larger TV (notebook 01), so SD accepts less on average, until
    the TV levels off: the gaps are relative to the base (``mean_sd_acceptance``).
    Returns p, q: [vocab_size] float64."""
    from ..experiments.toy import noisy_pairs

    p, q = noisy_pairs(
        viable,
        1 / viable,
        vocab_size=vocab_size,
        noise=noise,
        num_pairs=1,
        generator=torch.Generator().manual_seed(seed),
    )
    return p[0], q[0]


def tradeoff(p: Tensor, q: Tensor, group_size: int) -> dict[str, float]:
    """Exact acceptance and TV(output, p) of SD and of
    ``DynamicClusters(group_size)`` on one pair."""
    rule = DynamicClusters(group_size)
    return {
        "acceptance SD": float(acceptance_rate(p, q)),
        "acceptance GSD": float(acceptance_rate(p, q, rule)),
        "TV(output GSD, p)": float(tv_distance(output_distribution(p, q, rule), p)),
    }


def tradeoff_table(
    group_sizes: Sequence[int], viables: Sequence[int], seed: int = 0
) -> list[dict[str, Any]]:
    """``tradeoff`` at every (G, viable tokens) of the explorer's grid, on ``flatness_pair``:
    one row per point, exact (float64 enumeration)."""
    pairs = {n: flatness_pair(n, seed=seed) for n in viables}
    return [{"G": g, "viable": n, **tradeoff(*pairs[n], g)} for g in group_sizes for n in viables]


def mean_sd_acceptance(viables: Sequence[int], num_pairs: int, seed: int = 0) -> list[float]:
    """SD's exact acceptance 1 - TV(p, q) averaged over the ``flatness_pair`` seeds seed ..
    seed + num_pairs - 1, per number of viable tokens: the trend the explorer's single pairs
    scatter around."""
    return [
        sum(
            float(acceptance_rate(*flatness_pair(n, seed=s))) for s in range(seed, seed + num_pairs)
        )
        / num_pairs
        for n in viables
    ]


def tradeoff_figure(group_size: int, viable: int, seed: int = 0) -> Any:
    """Bars of p, q and GSD's exact output law on ``flatness_pair(viable)`` (tokens in p-rank
    order); the title states the exact acceptance (SD and GSD) and the distortion TV(output, p)."""
    from matplotlib.figure import Figure

    p, q = flatness_pair(viable, seed=seed)
    out = output_distribution(p, q, DynamicClusters(group_size))
    stats = tradeoff(p, q, group_size)
    order = torch.argsort(p, descending=True)
    fig = Figure(
        figsize=(9, 3), layout="constrained"
    )  # no pyplot state: one display per slider move
    ax = fig.subplots()
    x = torch.arange(p.shape[-1], dtype=DTYPE)
    for shift, (name, dist) in zip(
        (-0.27, 0.0, 0.27), (("p", p), ("q", q), (f"GSD output, G={group_size}", out))
    ):
        ax.bar((x + shift).numpy(), dist[order].numpy(), width=0.27, label=name)
    ax.set_xlabel("tokens in p-rank order")
    ax.set_ylabel("probability")
    ax.set_title(
        f"{viable} viable tokens: acceptance SD {stats['acceptance SD']:.3f}, GSD "
        f"{stats['acceptance GSD']:.3f}; TV(GSD output, p) {stats['TV(output GSD, p)']:.3f}",
        fontsize=10,
    )
    ax.legend()
    return fig


def tradeoff_explorer(
    group_sizes: Sequence[int] = (1, 3, 5, 9, 17), viables: Sequence[int] = (1, 2, 4, 8, 16, 32, 64)
) -> Any:
    """The static figures first (the second and the last flatness of the range at the middle G:
    what a rendered notebook shows and nbval executes), then sliders over G and the number of viable
    tokens above the figure they select (``tradeoff_sliders``) when ipywidgets (the ``notebooks``
    extra) can be imported, displayed with ``SLIDERS_TEXT`` as their text form: what a notebook
    stores and shows before its kernel runs. Returns the sliders' widget, or None without
    ipywidgets."""
    from ..experiments.plots import show

    for n in (viables[min(1, len(viables) - 1)], viables[-1]):
        show(tradeoff_figure(group_sizes[len(group_sizes) // 2], n))
    try:
        import ipywidgets  # noqa: F401  (the notebooks extra)
    except ImportError:
        print(SLIDERS_TEXT.replace("run this cell", "install ipywidgets and run this cell"))
        return None
    from IPython import get_ipython
    from IPython.display import display

    sliders = tradeoff_sliders(group_sizes, viables)
    shell = get_ipython()
    if shell is None:  # no front end to draw them in
        print(SLIDERS_TEXT)
        return sliders
    # the shell's public formatter gives the widget's own bundle (its view for a live kernel);
    # only its text form is replaced, which a stored notebook would otherwise show as the repr
    bundle, metadata = shell.display_formatter.format(sliders)
    bundle["text/plain"] = SLIDERS_TEXT
    display(bundle, metadata=metadata, raw=True)
    return sliders


SLIDERS_TEXT = (
    "Sliders over G and the number of viable tokens: run this cell in a live kernel (JupyterLab) "
    "to move them."
)


def tradeoff_sliders(group_sizes: Sequence[int], viables: Sequence[int]) -> Any:
    """A VBox: a slider over G (``description`` group_size), one over the number of viable tokens
    (viable), both at their last value, and an Image widget holding ``tradeoff_figure`` of the
    pair, redrawn whenever a slider moves. Needs ipywidgets; an exception raised while redrawing
    after a slider move goes to JupyterLab's log console, not to the cell's output.

    The figure is a widget's value, never cell output: ``ipywidgets.interactive`` displays into an
    Output widget while the cell runs, and nbclient (the executor under papermill) mirrors that
    widget by sending the kernel comm messages on the shell channel while it waits on the same
    channel for the cell's reply, traffic that can leave the reply undelivered and the execution
    waiting with the kernel idle (https://github.com/jupyter/nbclient/issues/312). With an Image
    widget the executor sends the kernel nothing beyond the cells' execute requests (and
    kernel_info)."""
    import ipywidgets

    from ..experiments.plots import png

    group = ipywidgets.SelectionSlider(
        options=list(group_sizes), value=group_sizes[-1], description="group_size"
    )
    viable = ipywidgets.SelectionSlider(
        options=list(viables), value=viables[-1], description="viable"
    )
    image = ipywidgets.Image(format="png")

    def redraw(change: Any = None) -> None:
        image.value = png(tradeoff_figure(group.value, viable.value))

    redraw()
    group.observe(redraw, names="value")
    viable.observe(redraw, names="value")
    return ipywidgets.VBox([group, viable, image])


# ---- tables (notebook 04) ------------------------------------------------------------------------


def present_columns(rows: list[dict[str, Any]], exclude: Sequence[str] = WALL_COLUMNS) -> list[str]:
    """The columns of ``rows`` (in the rows' key order) that hold a scalar value in some row, minus
    ``exclude``: a table shows whatever the runs report (new columns appear without code changes);
    nested data such as a row's ``per_image`` values is not a column."""

    def has_value(value: Any) -> bool:
        if isinstance(value, (dict, list, tuple)):
            return False
        return value is not None and not (isinstance(value, float) and math.isnan(value))

    order = list(
        dict.fromkeys(key for row in rows for key in row)
    )  # the rows' key order, not the first value's
    return [
        key for key in order if key not in exclude and any(has_value(row.get(key)) for row in rows)
    ]


# The parts a wide table is shown in, one narrow table each (method first): a column goes to the
# first part one of whose prefixes it starts with, else to the last.
TABLE_PARTS = {
    "forward passes and acceptance": ("nfe", "speedup", "accepted", "acceptance"),
    "exact distortion": ("distortion", "w1"),
    "quality": (),
}


def table_parts(columns: list[str]) -> dict[str, list[str]]:
    """``columns`` (``method`` first) split into ``TABLE_PARTS``, each with ``method`` and at
    least one other column; a table of at most five columns stays whole."""
    if len(columns) <= 5:
        return {"": columns}
    key, rest = columns[0], columns[1:]
    parts: dict[str, list[str]] = {name: [key] for name in TABLE_PARTS}
    for column in rest:
        name = next((n for n, prefixes in TABLE_PARTS.items()
                     if any(column.startswith(p) for p in prefixes)), "quality")
        parts[name].append(column)
    return {name: cols for name, cols in parts.items() if len(cols) > 1}


def show_tables(rows: list[dict[str, Any]], columns: list[str] | None = None) -> None:
    """Display a sampled decoding table (``columns`` where present, default every present column
    but wall time) in the narrow parts of ``table_parts``, then the CPU wall time separately
    (noise on a shared CPU)."""
    from IPython.display import Markdown, display

    from ..io.figure_io import markdown_table

    present = present_columns(rows)
    shown = present if columns is None else [c for c in columns if c in present]
    for name, part in table_parts(shown).items():
        head = f"**{name}**\n\n" if name else ""
        display(Markdown(head + markdown_table([r for r in rows if any(
            r.get(c) is not None for c in part[1:])] or rows, part)))
    wall = ["method", *[c for c in WALL_COLUMNS if any(r.get(c) is not None for r in rows)]]
    if len(wall) > 1:
        display(Markdown("CPU wall time (noise, see above):\n\n" + markdown_table(rows, wall)))


def residual_tv_gap_random(
    *, vocab_size: int, num_trials: int, seed: int, alpha: float = 0.5
) -> float:
    """max over random Dirichlet(alpha) pairs and uniformly random partitions of
    TV(out_token, p) - TV(out_cluster, p): <= 0 (up to rounding) when the cluster-exact residual is
    never the less distorting one. Exact enumeration (gsd_core.output_distribution), float64."""
    from ..experiments.toy import dirichlet_pairs

    p, q = dirichlet_pairs(vocab_size, num_trials, alpha=alpha, seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    counts = torch.randint(1, vocab_size + 1, (num_trials, 1), generator=generator)
    labels = (torch.rand(num_trials, vocab_size, generator=generator, dtype=DTYPE) * counts).long()

    def distortion(residual: str) -> Tensor:
        return 0.5 * (output_distribution(p, q, FixedPartition(labels, residual)) - p).abs().sum(-1)

    return float((distortion("token") - distortion("cluster")).max())


# ---- coupled drafts (MC-SJD / SCD): the coupling is the verification step ----------------------


def coupling_agreement(q_old: Sequence[Fraction], q_new: Sequence[Fraction]) -> dict[str, Fraction]:
    """P(new draft = previous draft) when a position's draft d ~ q_old is re-drafted with law q_new,
    exactly, for the three schemes of ``gsd_lab.decode.coupling``:

    - "independent": a fresh draw, sum_y q_old(y) q_new(y);
    - "maximal": keep d with probability min(1, q_new(d)/q_old(d)), else norm((q_new - q_old)+):
      sum_y min(q_old(y), q_new(y)) = 1 - TV(q_old, q_new), the most any coupling achieves;
    - "gumbel": both drafts argmax log q + g with one Gumbel vector g: both equal y exactly when
      E_z >= E_y max(q_old(z)/q_old(y), q_new(z)/q_new(y)) for all z (E = exp(-g) ~ Exp(1)),
      so P = sum_y 1 / sum_z max(q_old(z)/q_old(y), q_new(z)/q_new(y)) over y in both supports."""
    q_old, q_new = list(q_old), list(q_new)
    if len(q_old) != len(q_new) or sum(q_old) != 1 or sum(q_new) != 1 or min(q_old + q_new) < 0:
        raise ValueError(
            "q_old and q_new must be exact distributions "
            "(Fractions summing to 1) of the same length"
        )
    gumbel = Fraction(0)
    for a_y, b_y in zip(q_old, q_new):
        if a_y > 0 and b_y > 0:
            gumbel += 1 / sum(max(a_z / a_y, b_z / b_y) for a_z, b_z in zip(q_old, q_new))
    return {
        "independent": sum(a * b for a, b in zip(q_old, q_new)),
        "maximal": sum(min(a, b) for a, b in zip(q_old, q_new)),
        "gumbel": gumbel,
    }


def redraft_then_verify(
    q_old: Sequence[Fraction],
    q_new: Sequence[Fraction],
    target: Sequence[Fraction],
    *,
    declare_previous_when_kept: bool = False,
) -> list[Fraction]:
    """The exact law of the token emitted at a position whose draft d ~ q_old is re-drafted by the
    maximal coupling to q_new, then verified against ``target`` (02's step with the declared q):
    q_new, its law (proofs/09: the output is the target), or, with
    ``declare_previous_when_kept``, q_old for a kept draft and q_new for a redrawn one, as SCD's
    released code stores them (proofs/09, "What breaks it": not the target in general)."""
    coupling = speculative_parts(
        list(q_new), list(q_old)
    )  # target q_new, draft q_old: the same step
    out = [Fraction(0)] * len(coupling.p)
    for declared, law in (
        (list(q_old) if declare_previous_when_kept else list(q_new), coupling.accepted),
        (list(q_new), [coupling.reject_probability * r for r in coupling.residual]),
    ):
        mass = sum(law)
        if mass == 0:
            continue
        step = speculative_parts(list(target), declared)
        for y, w in enumerate(law):  # drafts y with weight w, declared ``declared``
            if w == 0:
                continue
            accept = min(Fraction(1), target[y] / declared[y]) if declared[y] > 0 else Fraction(0)
            out[y] += w * accept
            for z, r in enumerate(step.residual):
                out[z] += w * (1 - accept) * r
    return out
