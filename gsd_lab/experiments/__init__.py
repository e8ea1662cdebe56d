"""The paper's analyses as functions, shared by the notebooks, ``python -m gsd_lab figures`` and
the tests (no analysis lives only in a notebook cell). In reading order:

- ``image_model``: what an experiment needs from a model, ``load_image_model`` for every name;
- ``toy``: exact TV examples (Fig. 6), Theorem 1, the dynamic-cluster counterexample;
- ``runs``: labelled decoding methods (``MethodSpec``), runs over prompts x seeds, table rows;
- ``verdicts``: the one verdict rule and the paired differences and ratios it judges;
- ``claims``: every claim as data (id, paper value, source, evidence paths, verdict rule: the
  declarative comparisons of ``evidence`` or the named ``judges``); ``ledger`` (docs/claims.md),
  ``findings`` (README's answer, docs/findings.md) and ``paper`` (notebooks 02-04) render it;
- ``tables``: Table 1 / Table 2 / Fig. 10 configurations and their tables;
- ``matched``: distortion at matched NFE; ``frontier``: NFE against TV and W1 for every rule,
  at matched distortion, and the one-step Pareto line; ``lossless_frontier``: the committed
  lossless decoders beyond MC-SJD paired on it; ``paper_values``: the paper's numbers;
- ``top1``: top-1 statistics; ``replacement``: Fig. 4; ``prose``: the documents' value spans;
- ``lossless``: a decoder's emitted joint law against AR's, exactly enumerated on a tiny model;
- ``determinism``: a fixed batch whose tokens and NFE must not depend on ISA or threads;
- ``records``: a figures run's per-image records on disk; ``stream``: the runs of ``--paper``;
- ``plots``: matplotlib figures for all of the above.
"""
