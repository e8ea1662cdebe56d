"""The paper's analyses as functions, shared by the notebooks, ``python -m gsd_lab figures`` and
the tests (no analysis lives only in a notebook cell). In reading order:

- ``image_model``: what an experiment needs from a model (adapter, prompts, pixels, quality
  proxies) and ``load_image_model`` for every model name of the command line.
- ``toy``: exact TV examples (Fig. 6), Theorem 1, the dynamic-cluster counterexample, GSD's
  exact distortion against G.
- ``runs``: labelled decoding methods (``MethodSpec``: a ``gsd_lab.decode.methods.DecodingMethod``
  with a label), runs over prompts x seeds, table rows.
- ``verdicts``: the one verdict rule ("yes / direction only / no / no difference detected / not
  run") and the paired differences and ratios it judges.
- ``claims``: every claim by a stable id, its paper value and source, and its evidence from a
  run's tables (numbers stored in results.json's ``claims``); ``ledger`` (docs/claims.md),
  ``findings`` (README) and ``paper`` (notebooks 02-04) render from it.
- ``tables``: Table 1 / Table 2 / Fig. 10 configurations and their tables.
- ``matched``: distortion at matched NFE, GSD's curve against another rule's (TV and W1).
- ``frontier``: NFE against TV and W1 for GSD, MC-SJD, the rivals and the optimal lossy rules
  (the TV-optimal relaxation, the certified TV dial, the W1 transport relaxation, the W1 dial)
  on 30 images, NFE at matched distortion, and the one-step Pareto line every rule sits under.
- ``top1``: top-1 probability statistics; ``replacement``: the top-100 replacement study (Fig. 4).
- ``paper_values``: the paper's numbers with their sources; ``paper``: the "paper against here"
  tables of notebooks 02-04 (rows of ``claims``).
- ``ledger``: every claim in one table (docs/claims.md, results.md's claims section);
  ``findings``: README's answer (one row per finding), docs/findings.md's full table and Table 1.
- ``lossless``: a decoder's emitted joint law against AR's, exactly enumerated on a tiny model.
- ``determinism``: a fixed batch whose tokens and NFE must not depend on ISA or threads.
- ``records``: a figures run's per-image records on disk, reused by notebook 04.
- ``stream``: the resumable, sharded decoding runs of ``figures --paper``.
- ``workers``: work split over worker processes with one intra-op thread each (``runs``'
  configurations and ``evaluate``'s chunks, ``--workers``).
- ``plots``: matplotlib figures for all of the above.
"""
