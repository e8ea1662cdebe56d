"""gsd_core: the exact core of Grouped Speculative Decoding (So et al., ICCV 2025,
arXiv 2508.07747).

Probabilities in, probabilities out: p is the target, q the draft distribution, both [..., V]
(the last dimension the vocabulary, leading dimensions batch). Read in this order:

- ``rules``: what each rule credits a drafted token, a(x) = min(1, P(x) / Q(x)) (``mass_ratio``),
  and its residual (``token_residual``: norm((p - q)+)): SD, GSD's clusters and partitions
  (``Partition``), Amplify; ``as_rule`` reads None / labels / a rule;
- ``lantern``: LANTERN's latent neighbourhoods and its rule;
- ``relaxation``: the TV-optimal relaxation, the most accepting rule within a TV budget;
- ``verification``: ``verify``, a whole window of drafts left to right (``resolve_window``: its
  stop and draw given every a_i; ``draw``: the inverse-CDF draw);
- ``exact``: the acceptance rate alpha and the law of the emitted token, by enumeration
  (``output_law``), summed in one fixed order (``fixed_order_sum``) so the bits do not depend
  on the CPU or thread count;
- ``block_verification``: ``verify_block``, the window's accepted prefix decided jointly
  (Sun et al., arXiv 2403.10444; lossless, proofs/14), and its exact window law;
- ``multidraft``: several candidates for one position, recursive rejection sampling (proofs/15);
- ``token_tree``: a token tree (candidates at several depths) verified top-down by recursive
  rejection at every node (``verify_tree``, ``level_tree``, its exact law ``tree_law``; proofs/16);
- ``checks``: the input checks (``check_window``, ``check_pair``, ``check_tokens``,
  ``check_uniforms``, ``check_count``; ``SUM_TOLERANCE``, ``working_dtype``).

gsd_lab.engine is a GPU-shaped implementation of ``verify``, tested bit for bit against this one.
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
from .token_tree import TreeResult, level_tree, tree_law, tree_size, verify_tree
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
    "token_residual", "tree_law", "tree_size", "tv_distance", "verify", "verify_block",
    "verify_tree", "window_law", "window_rule", "without_replacement_rows", "working_dtype"
]
