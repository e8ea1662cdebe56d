"""The digits model's training (``python -m gsd_train.digits train --out DIR``).

Modules: ``train`` (the stages on the stand-in's modules: patch VQ with 2 x 2 patches and 1024
codes, k-means codebook; the stand-in's ``CropClassifier``; a stock ``LlamaForCausalLM`` over
[digit] + 196 codes with early stopping on the held-out NLL), ``export`` (manifest, reference
outputs, generation statistics, sample grid) and ``__main__``. The model is ``gsd_lab.digits``'s.
"""
