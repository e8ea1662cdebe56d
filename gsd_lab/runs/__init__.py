"""The run store: one identity and one storage for every run that writes decoded images to disk.

- ``identity``: ``RunIdentity`` (what makes two runs the same; ``run_id``), the differences
  ``RunMismatch`` names, and the weights fingerprints;
- ``store``: a run's folder, ``run.json`` and one atomic JSON file per index, checked before a
  write and read back on resume (``rows``), merged (``merge_results``);
- ``ranks``: this process's rank (``DistributedContext``), ``shard_indices``, barriers;
- ``shards``: ``evaluate``, a prompt list sharded over ranks and worker processes, merged.

The ``evaluate`` command runs one ``RunIdentity`` through ``shards``; ``figures --paper``
(``experiments.stream``) one per (configuration, seed) through ``store`` (docs/run-store.md).
"""
