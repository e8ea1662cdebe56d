"""gsd_lab: experiments for Grouped Speculative Decoding over Hugging Face causal LMs.

A map, in reading order (each package's ``__init__`` maps its files):

- ``decode/``: ``generate``, the AR / SJD / GSD loop, and the method spec it runs;
- ``engine/``: gsd_core's verification shaped for an accelerator (and op / sync profiling),
  and the rules' optional capabilities (``engine.capabilities``);
- ``accounting/``: the exact distortion (TV) and transport (W1) of every verified position;
- ``models/``: the adapter interface, Lumina-mGPT and the families Anole (Chameleon), Emu3 and
  Janus; ``standin/``: the embedded stand-in model;
- ``quality/``: image quality proxies and CLIP score;
- ``experiments/``: the analyses behind the figures and notebooks;
- ``teaching/``: the notebooks' helpers and checked cells, and the notebook runner;
- ``io/``: provenance, figures and tables on disk, prompts, progress lines;
- ``cli`` (``python -m gsd_lab``), ``figures``, ``evaluate`` (sharded runs), ``check_weights``
  (Lumina-mGPT), ``check_weights_janus`` and ``family_checks`` (the families' weight checks), on
  ``weight_checks`` (what they share).
"""

__version__ = "0.1.0"
