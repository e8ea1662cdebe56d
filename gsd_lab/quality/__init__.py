"""Image quality of decoded images.

- ``metrics``: the stand-in's proxies (condition consistency, Frechet distance on the crop
  classifier's features);
- ``clip_score``: CLIP score against the prompts (Lumina-mGPT, local CLIP weights).
"""
