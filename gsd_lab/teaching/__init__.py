"""The notebooks' package side: what their cells compute, kept here so that it is tested.

- ``course``: the small exact computations notebooks 05, 01 and 04 show step by step;
- ``nbcheck``: what the checked cells (``# NBVAL_CHECK_OUTPUT``) print, and their verdicts;
- ``notebooks``: ``python -m gsd_lab notebooks``, the papermill runner.
"""
