"""The lab by rule: one module per rule family with lab parts, beside its gsd_core reference.

A family's module holds what the lab adds to its gsd_core rule: the engine's fast paths (verify's
window, the accounting's support masses), variants the lab decodes with, and their
registrations in ``engine.capabilities`` (made when the module is imported; importing this
package imports every family). The generic machinery stays where it is: the registries and
dispatch in ``engine.capabilities`` and ``decode.acceptance``, the window loop in ``engine.verify``
and ``decode.loop``.

- ``clusters``: GSD's clusters (``DynamicClusters``, ``RankBinnedClusters``, ``FixedPartition``):
  ``dynamic_masses`` (verify), ``ranked_window_masses`` and ``packed_adjacency`` (accounting),
  the release's ``ReleaseDistanceClusters``;
- ``lantern``: LANTERN (``Lantern``): its support masses in chunks, members per token, and
  ``lantern_distortion`` (TV without the law, proofs/08).

Each family's tests (tests/lab/rules/) run every path on the same cases against gsd_core and
name the path that diverges. Adding a family: docs/lab.md.
"""

from . import clusters, lantern

__all__ = ["clusters", "lantern"]
