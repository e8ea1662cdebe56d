"""``python -m gsd_lab check-weights``: a download checked with the package's own code, one
verdict per item (files, architecture, vocabulary, tokenizer, a short AR generation, its image).

- ``items``: the verdicts, ``run_items`` (an item whose prerequisite failed or was skipped is
  skipped, naming it; an ``ITEM_ERRORS`` error an item raises is its FAIL, any other error a
  traceback) and the report (text or one JSON line);
- ``checkpoint``: the shards and the one shape check, stored names and shapes against the stock
  class built on the meta device (``shape_mismatch``), and ``tokenizer_json`` (the
  tokenizer.json to check);
- ``generation``: the run's options, the model loaded as ``generate`` loads it (a model refused
  on the CPU a SKIP), its AR rows, and ``save_png`` (the PNG --out names);
- ``lumina``, ``janus``, ``families`` (Anole, Emu3): each family's items.

The ``check-weights`` command (``gsd_lab.cli.check_weights``) picks the family by ``--model``
and config.json.

Each family's module reads the shared three, none another family's.
"""
