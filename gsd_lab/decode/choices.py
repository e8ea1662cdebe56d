"""The values a decoding method's named fields take, in one torch-free place (validation, JSON
and the command line's choices read them; ``gsd_lab.decode.methods`` and
``gsd_lab.decode.acceptance`` re-export them).

Adding a value (a drafting scheme, a cluster kind) is one entry in its tuple here plus its
behaviour where it acts (``acceptance`` for a rule, ``loop`` / ``coupling`` for drafting).
"""

KINDS = ("ar", "sjd", "gsd")
INITS = ("random", "repeat_row")
DRAFTS = ("independent", "maximal", "gumbel")
RESIDUALS = ("token", "cluster")
# "dynamic": the paper's rule (rank window of G tokens by p, probability-gap and distance
# filters); "dynamic-gap" / "dynamic-distance": one filter; "dynamic-nofilter": no filter;
# "dynamic-q": ranked by the draft q, no filter; "rank-binned": our partition of rank bins;
# "static": k-means on the input embeddings (a fixed partition, the paper's Table 2 row A).
CLUSTER_KINDS = (
    "dynamic",
    "dynamic-gap",
    "dynamic-distance",
    "dynamic-nofilter",
    "dynamic-q",
    "rank-binned",
    "static",
)
FILTER_KINDS = ("dynamic", "dynamic-gap", "dynamic-distance")
PARTITION_KINDS = ("rank-binned", "static")
BUDGET_MEASURES = ("tv", "w1")
BUDGET_POLICIES = ("cap", "sure")
