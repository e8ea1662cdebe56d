"""gsd_core: the exact core of Grouped Speculative Decoding (So et al., ICCV 2025, arXiv 2508.07747).

Probabilities in, probabilities out; the last dimension is the vocabulary V and leading
dimensions batch. ``p`` is the target distribution, ``q`` the draft distribution.
"""

from .distances import tv_distance
from .exact import acceptance_rate, output_distribution, token_accept_probabilities
from .grouping import (
    ClusterRule,
    DynamicClusters,
    FixedPartition,
    RankBinnedClusters,
    cluster_mask,
    dynamic_cluster,
    group_probs,
    probability_rank,
    probability_ranks,
    rank_window,
    rule_members,
)
from .lantern import (
    Lantern,
    LatentNeighbourhoods,
    lantern_acceptance_rate,
    lantern_credited_mass,
    lantern_output_distribution,
    lantern_token_accept_probabilities,
    latent_neighbourhoods,
    verify_lantern,
)
from .verification import (
    VerifyResult,
    accept_probability,
    residual_distribution,
    sample_categorical,
    uses_support,
    verify,
)

__all__ = [
    "ClusterRule",
    "DynamicClusters",
    "FixedPartition",
    "Lantern",
    "LatentNeighbourhoods",
    "RankBinnedClusters",
    "VerifyResult",
    "accept_probability",
    "acceptance_rate",
    "cluster_mask",
    "dynamic_cluster",
    "group_probs",
    "lantern_acceptance_rate",
    "lantern_credited_mass",
    "lantern_output_distribution",
    "lantern_token_accept_probabilities",
    "latent_neighbourhoods",
    "output_distribution",
    "probability_rank",
    "probability_ranks",
    "rank_window",
    "residual_distribution",
    "rule_members",
    "sample_categorical",
    "token_accept_probabilities",
    "tv_distance",
    "uses_support",
    "verify",
    "verify_lantern",
]
