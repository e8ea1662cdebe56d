"""The embedded stand-in image model, trained here on crops of images shipped in PyPI packages.

Modules: ``data`` (sources, held-out grid cells, multi-scale crops, manifest), ``tokenizer``
(k-means patch VQ: 8192 codes, one per 16x16 pixels, 16x16 tokens per 256x256 image),
``train_tokenizer`` (Lloyd's k-means), ``ar`` (LlamaForCausalLM over [class] + 256 codes, token
layout, teacher-forced statistics), ``classifier`` (crop classifier for gsd_lab.quality.metrics),
``sampling`` (batched reference sampler), ``llama_forward`` (the AR model's float64 forward and
KV cache without ``transformers``, bit for bit the cast LlamaForCausalLM: the command line's
generate), ``loading`` / ``weights_io`` (safetensors only),
``export``, ``pipeline`` and ``__main__`` (``python -m gsd_lab.standin train --out DIR``). The
ready adapter is ``gsd_lab.standin.adapter.load_standin``. Weights ship in ``weights/``.
"""
