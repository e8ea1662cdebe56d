"""gsd_core: the exact core of Grouped Speculative Decoding (So et al., ICCV 2025,
arXiv 2508.07747).

Probabilities in, probabilities out: p is the target, q the draft distribution, both [..., V]
(the last dimension the vocabulary, leading dimensions batch). Read in this order:

- ``rules``: what each rule credits a drafted token, a(x) = min(1, P(x) / Q(x)), and its
  residual (SD, GSD's clusters and partitions, Amplify; LANTERN in ``lantern``);
- ``verification``: ``verify``, a whole window of drafts left to right;
- ``block_verification``: ``verify_block``, the window's accepted prefix decided jointly
  (Sun et al., arXiv 2403.10444; lossless, proofs/14), and its exact window law;
- ``exact``: the acceptance rate alpha and the law of the emitted token, by enumeration;
- ``relaxation``: the TV-optimal relaxation, the most accepting rule within a TV budget;
- ``checks``: the input checks (``check_window``).

gsd_lab.engine is a GPU-shaped implementation of ``verify``, tested bit for bit against this one.
"""

from .block_verification import verify_block, window_law
from .checks import check_window
from .exact import acceptance_rate, output_distribution, residual_distribution, tv_distance
from .lantern import Lantern, LatentNeighbourhoods, latent_neighbourhoods
from .relaxation import OptimalRelaxation
from .rules import (SD, Amplify, DynamicClusters, FixedPartition, RankBinnedClusters, Rule,
                    dynamic_cluster, group_probs, probability_ranks)
from .verification import VerifyResult, accept_probability, sample_categorical, verify

__all__ = [
    "SD", "Amplify", "DynamicClusters", "FixedPartition", "Lantern", "LatentNeighbourhoods",
    "OptimalRelaxation", "RankBinnedClusters", "Rule", "VerifyResult", "accept_probability",
    "acceptance_rate", "check_window", "dynamic_cluster",
    "group_probs", "latent_neighbourhoods", "output_distribution", "probability_ranks",
    "residual_distribution", "sample_categorical", "tv_distance", "verify",
    "verify_block", "window_law",
]
