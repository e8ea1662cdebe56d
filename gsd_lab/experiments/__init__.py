"""The paper's analyses as functions, shared by the notebooks, ``python -m gsd_lab figures`` and
the tests (no analysis lives only in a notebook cell).

- ``image_model``: what an experiment needs from a model (adapter, prompts, pixels, quality
  proxies) and ``load_image_model`` for every model name of the command line.
- ``toy``: exact TV examples (Fig. 6), Theorem 1, the dynamic-cluster counterexample, GSD's
  exact distortion against G.
- ``runs``: labelled decoding methods (``MethodSpec``: a ``gsd_lab.decode.methods.DecodingMethod`` with a
  label), runs over prompts x seeds, table rows.
- ``tables``: Table 1 / Table 2 / Fig. 10 configurations and their tables.
- ``top1``: top-1 probability statistics; ``replacement``: the top-100 replacement study (Fig. 4).
- ``plots``: matplotlib figures for all of the above.
"""
