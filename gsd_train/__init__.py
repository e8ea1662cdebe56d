"""How the embedded image models were trained: an optional part of gsd, never imported by
``gsd_core`` or ``gsd_lab`` (which load the committed weights and decode with them).

Subpackages: ``standin`` (``python -m gsd_train.standin train --out DIR``: the stand-in's patch-VQ
tokenizer, seam decoder, crop classifier, Llama AR model and export) and ``digits``
(``python -m gsd_train.digits train --out DIR``: the digits model on the stand-in's modules).
The runtime half of each model (token layout, tokenizer, classifier, loading, adapter) is in
``gsd_lab.standin`` and ``gsd_lab.digits``; the weights ship there. See docs/standin.md.
"""
