"""Decoding: everything ``generate`` needs, in reading order.

- ``methods``: ``DecodingMethod``, the one spec of AR, SJD, GSD, Amplify, LANTERN (kind, rule,
  residual, drafting, window, preset) and ``method_rule``, the gsd_core rule it verifies with;
- ``presets``: the package's exact ``default`` and the GSD release's ``release`` settings;
- ``clustering``: static clusters by embedding distance (``FixedPartition`` labels, Table 2 A);
- ``coupling``: coupled Jacobi drafts (MC-SJD / SCD) and the maximal coupling;
- ``loop``: ``generate``, the one AR / SJD / GSD loop over a ``CausalLMAdapter``.

    from gsd_lab.decode.loop import generate
    from gsd_lab.decode.methods import DecodingMethod
"""
