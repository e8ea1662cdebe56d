"""The stand-in's training (``python -m gsd_train.standin train --out DIR``).

Modules: ``train_tokenizer`` (Lloyd's k-means patch VQ, the seam decoder), ``classifier``
(``train_classifier``), ``ar`` (token windows of the training and held-out pixels, the Llama AR
model's training with early stopping on the held-out NLL), ``export`` (manifest, reference
outputs, generation statistics, sample grid), ``pipeline`` (the stages) and ``__main__``. The
models they train are ``gsd_lab.standin``'s; see docs/standin.md.
"""
