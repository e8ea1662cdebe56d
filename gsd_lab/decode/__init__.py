"""Decoding: everything ``generate`` needs, in reading order.

- ``methods``: ``DecodingMethod``, the one spec of AR, SJD, GSD, Amplify, LANTERN (kind, rule,
  residual, drafting, window, preset) and ``method_rule``, the gsd_core rule it verifies with;
- ``presets``: the package's exact ``default`` and the GSD release's ``release`` settings;
- ``clustering``: static clusters by embedding distance (``FixedPartition`` labels, Table 2 A);
- ``coupling``: coupled Jacobi drafts (MC-SJD / SCD) and the maximal coupling;
- ``relaxation_w1``: the transport relaxation (a W1 budget per token on content neighbours);
- ``budget``: the certified dial (a total TV or W1 budget, ``BudgetDial``);
- ``planned``: a window's transported targets as a rule (``PlannedTargets``), verified as SD;
- ``loop``: ``generate``, the one AR / SJD / GSD loop over a ``CausalLMAdapter``;
- ``batch``: ``generate_batch``, several images per forward, each decoded as alone.

    from gsd_lab.decode.loop import generate
    from gsd_lab.decode.methods import DecodingMethod
"""
