"""gsd_lab: experiments for Grouped Speculative Decoding: decoding (AR, SJD, GSD) over Hugging
Face causal LMs, model adapters (the embedded stand-in, Lumina-mGPT), metrics, figures, CLI."""

__version__ = "0.1.0"
