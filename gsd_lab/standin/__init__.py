"""The embedded stand-in image model, trained here on crops of images shipped in PyPI packages.

Modules: ``data`` (sources, split, crops, manifest), ``tokenizer`` (conv encoder/decoder with
FSQ, 1024 codes, 16x16 tokens per 64x64 crop), ``ar`` (LlamaForCausalLM over [class] + 256
codes, token layout), ``classifier`` (crop classifier for gsd_lab.metrics), ``sampling``
(batched reference sampler), ``loading`` / ``weights_io`` (safetensors only), ``export``,
``pipeline`` and ``__main__`` (``python -m gsd_lab.standin train --out DIR``). The ready
adapter is ``gsd_lab.models.standin.load_standin``. Weights ship in ``weights/``.
"""
