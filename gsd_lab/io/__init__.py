"""Reading inputs and writing outputs of runs.

- ``provenance``: the record of what produced an output (commit, versions), atomic writes and
  the clean-tree rule for committed outputs;
- ``figure_io``: figures (PNG + SVG + JSON sidecar), images and markdown tables;
- ``prompts``: prompt lists (plain lines or PartiPrompts TSV);
- ``progress``: done / to do and ETA lines for long runs;
- ``prose``: the numbers in README, docs, proofs and notebook markdown: value spans rendered
  from figures/results.json (``python -m gsd_lab readme``), quotes marked with their source,
  and the check that no other measured number is hand-written.
"""
