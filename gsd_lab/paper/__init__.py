"""``python -m gsd_lab figures``, the paper job: every figure and results table into one folder.

- ``plan``: how much to run (``FigureSizes``: ``default()`` for the stand-in on 2 CPU cores,
  ``quick()`` for tests, ``paper()`` for Lumina-mGPT on a GPU), the configurations to decode and
  a streamed run's dry run (``paper_plan``);
- ``decode``: the plan decoded through the run store and analysed into a ``PaperRun``;
- ``results_json``: the run as results.json's tables and configuration;
- ``figures``: each figure as PNG + SVG + JSON sidecar;
- ``render``: results.json with the claims by id, results.md from ``templates/results.md``
  (``template``), README and the ledger for the repository's figures/;
- ``job``: ``run_figures``, the steps in order (records.npz for notebook 04 included).
"""

from .job import run_figures
from .plan import FigureSizes, decoding_configurations, guided_specs, paper_plan
from .render import update_documents

__all__ = [
    "FigureSizes",
    "decoding_configurations",
    "guided_specs",
    "paper_plan",
    "run_figures",
    "update_documents",
]
