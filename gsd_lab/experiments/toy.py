"""Toy distributions for the TV argument (paper Fig. 6), Theorem 1 and the tutorial: everything
here is exact (enumerated with gsd_core) or Monte Carlo over explicit small vocabularies, float64.

Notation: p target, q draft, TV(p, q) = 1/2 sum |p - q|; standard speculative sampling accepts
with probability 1 - TV(p, q); a partition into clusters accepts with 1 - TV(p', q') (Theorem 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import Tensor

from gsd_core import (
    DynamicClusters,
    FixedPartition,
    RankBinnedClusters,
    acceptance_rate,
    group_probs,
    output_distribution,
    tv_distance,
    verify,
)

from ..decode.methods import method_rule

DTYPE = torch.float64

# proofs/04's counterexample: p, q as integer weights over 15, and its clusters C(x), x = 0..4,
# written out by hand (G = 3: one rank each side of x in the p-ranking 0..4, clipped at its ends)
# so that the exact table does not depend on gsd_core.
COUNTEREXAMPLE_P = (5, 4, 3, 2, 1)
COUNTEREXAMPLE_Q = (5, 5, 3, 2, 0)
COUNTEREXAMPLE_CLUSTERS = ((0, 1), (0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4))
COUNTEREXAMPLE_GROUP_SIZE = 3


def counterexample_acceptance() -> tuple[Fraction, Fraction]:
    """proofs/04 in Fractions: (alpha_SD, alpha_dyn), alpha_SD = sum_x min(p(x), q(x)) and
    alpha_dyn = sum_x q(x) min(1, p(C(x)) / q(C(x))) over the hand-written clusters."""
    p = [Fraction(w, sum(COUNTEREXAMPLE_P)) for w in COUNTEREXAMPLE_P]
    q = [Fraction(w, sum(COUNTEREXAMPLE_Q)) for w in COUNTEREXAMPLE_Q]
    alpha_sd = sum((min(a, b) for a, b in zip(p, q)), Fraction(0))
    alpha_dyn = Fraction(0)
    for x, cluster in enumerate(COUNTEREXAMPLE_CLUSTERS):
        p_c, q_c = sum(p[y] for y in cluster), sum(q[y] for y in cluster)
        alpha_dyn += q[x] * (min(Fraction(1), p_c / q_c) if q_c else Fraction(1))
    return alpha_sd, alpha_dyn


def flat_and_peaked_pairs(vocab_size: int = 1000) -> dict[str, tuple[Tensor, Tensor]]:
    """The two Fig. 6 style pairs over ``vocab_size`` tokens (even, >= 4).

    "flat": p uniform; q puts 1.5/V on the first half of the tokens and 0.5/V on the second
    half. Every token is viable for both, each per-token gap is tiny (0.5/V), yet
    TV = 1/2 * V * 0.5/V = 0.25.
    "peaked": p(0) = 0.9 and q(0) = 0.85, the rest spread uniformly: TV = 0.05.
    """
    if vocab_size < 4 or vocab_size % 2:
        raise ValueError(f"vocab_size must be even and >= 4, got {vocab_size}")
    v = vocab_size
    p_flat = torch.full((v,), 1.0 / v, dtype=DTYPE)
    q_flat = torch.cat(
        [torch.full((v // 2,), 1.5 / v, dtype=DTYPE), torch.full((v // 2,), 0.5 / v, dtype=DTYPE)]
    )
    p_peak = torch.full((v,), 0.1 / (v - 1), dtype=DTYPE)
    p_peak[0] = 0.9
    q_peak = torch.full((v,), 0.15 / (v - 1), dtype=DTYPE)
    q_peak[0] = 0.85
    return {"flat": (p_flat, q_flat), "peaked": (p_peak, q_peak)}


def noisy_pairs(
    num_viable: int,
    top1_mass: float,
    *,
    vocab_size: int,
    noise: float,
    num_pairs: int,
    generator: torch.Generator,
) -> tuple[Tensor, Tensor]:
    """Pairs (p, q) that agree on which tokens are viable but differ token by token.

    A shared base b puts ``top1_mass`` on token 0 and spreads the rest evenly over tokens
    1..num_viable-1 (0 elsewhere; num_viable = 1 puts all mass on token 0). p and q multiply b by
    independent log-normal factors exp(noise * eps), eps ~ N(0, 1), and renormalise.
    Returns p, q: [num_pairs, vocab_size] float64.
    """
    if not 1 <= num_viable <= vocab_size:
        raise ValueError(f"num_viable must lie in [1, vocab_size={vocab_size}], got {num_viable}")
    if not 0 < top1_mass <= 1:
        raise ValueError(f"top1_mass must lie in (0, 1], got {top1_mass}")
    base = torch.zeros(vocab_size, dtype=DTYPE)
    if num_viable == 1:
        base[0] = 1.0
    else:
        base[0] = top1_mass
        base[1:num_viable] = (1 - top1_mass) / (num_viable - 1)
    eps = torch.randn(2, num_pairs, vocab_size, generator=generator, dtype=DTYPE)
    pq = base * torch.exp(noise * eps)
    pq = pq / pq.sum(-1, keepdim=True)
    return pq[0], pq[1]


def tv_grid(
    viable_counts: list[int],
    top1_masses: list[float],
    *,
    vocab_size: int = 4096,
    noise: float = 0.5,
    num_pairs: int = 64,
    seed: int = 0,
) -> Tensor:
    """Mean TV(p, q) of ``noisy_pairs`` over a grid: [len(top1_masses), len(viable_counts)].

    With the per-token noise fixed, TV grows with the number of viable tokens (small gaps add
    up) and shrinks as the top-1 mass grows (the shared peak cancels)."""
    generator = torch.Generator().manual_seed(seed)
    out = torch.empty(len(top1_masses), len(viable_counts), dtype=DTYPE)
    for i, mass in enumerate(top1_masses):
        for j, count in enumerate(viable_counts):
            p, q = noisy_pairs(
                count,
                mass,
                vocab_size=vocab_size,
                noise=noise,
                num_pairs=num_pairs,
                generator=generator,
            )
            out[i, j] = tv_distance(p, q).mean()
    return out


def rank_binned_tv(p: Tensor, q: Tensor, group_sizes: list[int]) -> Tensor:
    """TV(p', q') after grouping the p-ranking into bins of G tokens, per G:
    [len(group_sizes), ...].

    G = 1 is the ungrouped TV(p, q). By Theorem 1 every value is <= the G = 1 value."""
    return torch.stack(
        [tv_distance(*RankBinnedClusters(size).cluster_masses(p, q)[:2]) for size in group_sizes]
    )


@dataclass(frozen=True)
class Theorem1Check:
    """TV before (tv_tokens) and after (tv_clusters) grouping, per random (pair, partition): [N]."""

    tv_tokens: Tensor
    tv_clusters: Tensor

    @property
    def max_violation(self) -> float:
        """max(TV(p', q') - TV(p, q)): <= 0 (up to rounding) if Theorem 1 holds."""
        return float((self.tv_clusters - self.tv_tokens).max())


def theorem1_random_partitions(
    *,
    vocab_size: int,
    num_clusters: int | None = None,
    num_trials: int,
    seed: int = 0,
    alpha: float = 0.3,
) -> Theorem1Check:
    """Random Dirichlet(alpha) pairs and uniformly random partitions into ``num_clusters`` labels
    (None: a different number of labels per trial, uniform in 2..vocab_size).

    Acceptance with clusters (exact, gsd_core.acceptance_rate) is 1 - TV(p', q') >= 1 - TV(p, q)."""
    p, q = dirichlet_pairs(vocab_size, num_trials, alpha=alpha, seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    if num_clusters is None:
        counts = torch.randint(2, vocab_size + 1, (num_trials, 1), generator=generator)
    else:
        counts = torch.full((num_trials, 1), num_clusters)
    labels = (torch.rand(num_trials, vocab_size, generator=generator, dtype=DTYPE) * counts).long()
    tv_c = 1 - acceptance_rate(p, q, FixedPartition(labels))
    return Theorem1Check(tv_distance(p, q), tv_c)


def dirichlet_pairs(
    vocab_size: int, num_pairs: int, *, alpha: float, seed: int
) -> tuple[Tensor, Tensor]:
    """Independent Dirichlet(alpha) pairs (p, q): [num_pairs, vocab_size] float64, seeded."""
    generator = torch.Generator().manual_seed(seed)
    conc = torch.full((2, num_pairs, vocab_size), alpha, dtype=DTYPE)
    gamma = torch._standard_gamma(conc, generator=generator)
    pq = gamma / gamma.sum(-1, keepdim=True)
    return pq[0], pq[1]


def empirical_speculative_samples(
    p: Tensor,
    q: Tensor,
    *,
    num_samples: int,
    seed: int,
    clusters: object = None,
    residual: str = "token",
) -> tuple[Tensor, float]:
    """Run one-position speculative sampling ``num_samples`` times (vectorised): draft x ~ q,
    verify against p with gsd_core.verify (the rule: ``method_rule(clusters, residual)``).
    Returns the empirical law of the emitted token [V] and the empirical acceptance rate."""
    generator = torch.Generator().manual_seed(seed)
    drafts = torch.multinomial(q.expand(num_samples, -1), 1, replacement=True, generator=generator)
    result = verify(
        p.expand(num_samples, 1, -1),
        q.expand(num_samples, 1, -1),
        drafts,
        method_rule(clusters, residual),
        generator=generator,
    )
    counts = torch.bincount(result.tokens[:, 0], minlength=p.shape[-1]).to(DTYPE)
    return counts / num_samples, float(result.num_accepted.to(DTYPE).mean())


def rules_for_cluster_size(size: int) -> dict[str, object]:
    """Cluster rules whose clusters hold G = ``size`` tokens (1 is plain SD): the dynamic rank
    window of G tokens (fewer at the ends of the ranking) and bins of G consecutive ranks."""
    return {"dynamic": DynamicClusters(size), "rank_binned": RankBinnedClusters(size)}


def distortion_by_cluster_size(p: Tensor, q: Tensor, cluster_sizes: list[int]) -> dict[str, Tensor]:
    """Exact TV(output, p) of one verification step, averaged over the rows of p, q [N, V], per
    cluster size (``rules_for_cluster_size``).

    Rules: the paper's dynamic clusters (token residual), rank-binned clusters with the token
    residual and with the cluster-exact residual. Size 1 is plain SD (TV 0 up to rounding)."""
    out: dict[str, list[float]] = {
        "dynamic": [],
        "rank_binned_token": [],
        "rank_binned_cluster": [],
    }
    for size in cluster_sizes:
        rules = rules_for_cluster_size(size)
        dynamic, binned = rules["dynamic"], rules["rank_binned"]
        out["dynamic"].append(float(tv_distance(output_distribution(p, q, dynamic), p).mean()))
        out["rank_binned_token"].append(
            float(tv_distance(output_distribution(p, q, binned), p).mean())
        )
        out["rank_binned_cluster"].append(
            float(
                tv_distance(
                    output_distribution(p, q, RankBinnedClusters(size, "cluster")), p
                ).mean()
            )
        )
    return {name: torch.tensor(values, dtype=DTYPE) for name, values in out.items()}


def acceptance_by_cluster_size(p: Tensor, q: Tensor, cluster_sizes: list[int]) -> dict[str, Tensor]:
    """Exact mean acceptance per cluster size for SD, the dynamic and the rank-binned rules."""
    out: dict[str, list[float]] = {"sd": [], "dynamic": [], "rank_binned": []}
    sd = float(acceptance_rate(p, q).mean())  # does not depend on the size
    for size in cluster_sizes:
        rules = rules_for_cluster_size(size)
        out["sd"].append(sd)
        out["dynamic"].append(float(acceptance_rate(p, q, rules["dynamic"]).mean()))
        out["rank_binned"].append(float(acceptance_rate(p, q, rules["rank_binned"]).mean()))
    return {name: torch.tensor(values, dtype=DTYPE) for name, values in out.items()}


@dataclass(frozen=True)
class PartitionComparison:
    """TV(p', q') for bins of the p-ranking and for uniformly random partitions with the same
    cluster size, per G: [len(group_sizes), N]; and the cancellation ratio
    sum_C |sum_{x in C} (p - q)| / sum_x |p - q| = TV(p', q') / TV(p, q) (1: nothing cancels)."""

    group_sizes: list[int]
    rank_binned: Tensor
    random: Tensor
    tv_tokens: Tensor

    def cancellation(self) -> tuple[Tensor, Tensor]:
        """Mean TV(p', q') / TV(p, q) per G for the rank bins and the random
        partitions: [len(G)] each."""
        return (self.rank_binned / self.tv_tokens).mean(-1), (self.random / self.tv_tokens).mean(-1)


def rank_bins_against_random(
    p: Tensor, q: Tensor, group_sizes: list[int], *, seed: int
) -> PartitionComparison:
    """Rank bins of G tokens of the p-ranking against random partitions into clusters of G tokens
    (a seeded random permutation cut into consecutive blocks), on the same pairs p, q [N, V].

    Both are partitions, so both obey Theorem 1; what differs is how much the per-token gaps
    p - q cancel inside a cluster. Sorting by p sorts by p's own noise: the top bins collect the
    tokens whose noise raised p above q, the bottom bins those where it lowered it, so the gaps in a
    bin share a sign and add up. A random cluster mixes independent signs, and its gap sum grows
    like sqrt(G) while the sum of |gaps| grows like G."""
    generator = torch.Generator().manual_seed(seed)
    vocab = p.shape[-1]
    random_rows = []
    for size in group_sizes:
        labels = torch.randperm(vocab, generator=generator) // size
        random_rows.append(tv_distance(group_probs(p, labels), group_probs(q, labels)))
    return PartitionComparison(
        list(group_sizes),
        rank_binned_tv(p, q, group_sizes),
        torch.stack(random_rows),
        tv_distance(p, q),
    )
