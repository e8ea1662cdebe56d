"""The embedded stand-in image model, trained on crops of images shipped in PyPI packages.

Modules: ``data`` (sources, held-out grid cells, multi-scale crops, manifest), ``tokenizer``
(k-means patch VQ: 8192 codes, one per 16x16 pixels, 16x16 tokens per 256x256 image), ``ar``
(the token layout of [class] + 256 codes), ``classifier`` (crop classifier for
gsd_lab.quality.metrics), ``sampling`` (batched reference sampler), ``llama_forward`` (the AR
model's float64 forward and KV cache without ``transformers``, bit for bit the cast
LlamaForCausalLM: the command line's generate), ``loading`` / ``weights_io`` (safetensors only).
The ready adapter is ``gsd_lab.standin.adapter.load_standin``. Weights ship in ``weights/``;
how they were trained is ``gsd_train.standin``.
"""
