"""gsd_core: the exact core of Grouped Speculative Decoding (So et al., ICCV 2025,
arXiv 2508.07747).

Probabilities in, probabilities out: p is the target, q the draft distribution, both [..., V]
(the last dimension the vocabulary, leading dimensions batch). Read in this order:

- ``rules``: a(x) = min(1, P(x) / Q(x)) (``mass_ratio``) and the residual (``token_residual``)
  of SD, GSD's clusters and partitions (``Partition``), Amplify; ``as_rule``;
- ``lantern``: LANTERN's latent neighbourhoods and its rule;
- ``relaxation``: the TV-optimal relaxation, the most accepting rule within a TV budget;
- ``verification``: ``verify``, a whole window of drafts left to right (``resolve_window``);
- ``exact``: alpha and the emitted token's law by enumeration (``output_law``);
- ``block_verification``: ``verify_block``, the accepted prefix decided jointly (proofs/14);
- ``multidraft``: several candidates for one position, recursive rejection sampling (proofs/15);
- ``token_tree``: a token tree verified top-down (``verify_tree``, ``tree_law``; proofs/16);
- ``checks``: the input checks (``check_window``, ``SUM_TOLERANCE``, ``working_dtype``).

Each module's longer map (and gsd_lab.engine, tested bit for bit against ``verify``):
docs/core.md.
"""

from .block_verification import verify_block, window_law
from .checks import (SUM_TOLERANCE, check_count, check_pair, check_tokens, check_uniforms,
                     check_window, working_dtype)
from .exact import (acceptance_rate, fixed_order_sum, output_distribution, output_law,
                    residual_distribution, tv_distance)
from .lantern import Lantern, LatentNeighbourhoods, latent_neighbourhoods
from .multidraft import (MultiDraftResult, draw_without_replacement, multidraft_law, one_hot,
                         recursive_rejection, without_replacement_rows)
from .relaxation import OptimalRelaxation
from .token_tree import (
    TreeResult, level_tree, spine_tree, spine_tree_size, tree_law, tree_size, verify_tree,
)
from .rules import (SD, Amplify, DynamicClusters, FixedPartition, Partition, RankBinnedClusters,
                    Rule, as_rule, dynamic_cluster, group_probs, mass_ratio, member_masses,
                    probability_ranks, token_residual, window_rule)
from .verification import (VerifyResult, accept_probability, draw, resolve_window,
                           sample_categorical, verify)

__all__ = [
    "SD", "SUM_TOLERANCE", "Amplify", "DynamicClusters", "FixedPartition", "Lantern",
    "LatentNeighbourhoods", "MultiDraftResult", "OptimalRelaxation", "Partition",
    "RankBinnedClusters", "Rule", "TreeResult", "VerifyResult", "accept_probability",
    "acceptance_rate", "as_rule", "check_count", "check_pair", "check_tokens", "check_uniforms",
    "check_window", "draw", "draw_without_replacement", "dynamic_cluster", "fixed_order_sum",
    "group_probs", "latent_neighbourhoods", "level_tree", "mass_ratio", "member_masses",
    "multidraft_law", "one_hot", "output_distribution", "output_law", "probability_ranks",
    "recursive_rejection", "residual_distribution", "resolve_window", "sample_categorical",
    "spine_tree", "spine_tree_size", "token_residual", "tree_law", "tree_size", "tv_distance",
    "verify", "verify_block", "verify_tree", "window_law", "window_rule",
    "without_replacement_rows", "working_dtype"
]
