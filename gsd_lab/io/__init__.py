"""Reading inputs and writing outputs of runs.

- ``provenance``: the record of what produced an output (commit, versions), atomic writes and
  the clean-tree rule for committed outputs;
- ``figure_io``: figures (PNG + SVG + JSON sidecar), images and markdown tables;
- ``prompts``: prompt lists (plain lines or PartiPrompts TSV);
- ``progress``: done / to do and ETA lines for long runs.
"""
