"""Decoding: everything ``generate`` needs, in reading order.

- ``choices``: the values a method's named fields take (kinds, drafts, cluster kinds, ...);
- ``acceptance``: the acceptance rules as specs (SD, Amplify, clusters, LANTERN, the TV and
  transport relaxations, the dial): each validates, serialises, declares its command-line flags
  and builds its gsd_core rule; ``register_acceptance`` adds one;
- ``rule_parts``: what the specs build from (cluster rules, content neighbours, ``method_rule``);
- ``methods``: ``DecodingMethod``, the one spec of AR, SJD, GSD, Amplify, LANTERN (kind, window,
  drafting, residual, preset and the acceptance spec) and ``ResolvedMethod``, it with its rule;
- ``presets``: the package's exact ``default`` and the GSD release's ``release`` settings;
- ``clustering``: static clusters by embedding distance (``FixedPartition`` labels, Table 2 A);
- ``coupling``: coupled Jacobi drafts (MC-SJD / SCD) and the maximal coupling;
- ``relaxation_w1``: the transport relaxation (a W1 budget per token on content neighbours);
- ``budget``: the certified dial (a total TV or W1 budget, ``BudgetDial``);
- ``planned``: a window's transported targets as a rule (``PlannedTargets``), verified as SD;
- ``tree_shapes``: token-tree shapes ranked by modelled time (positional acceptance, roofline);
- ``loop``: ``generate``, the one AR / SJD / GSD loop (``DecodeLoop``) over a ``CausalLMAdapter``;
- ``batch``: ``generate_batch``, several images per forward, each decoded as alone
  (``from gsd_lab.decode.loop import generate``).
"""
