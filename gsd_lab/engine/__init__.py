"""The engine: gsd_core's verification shaped for an accelerator, tested bit for bit against it.

- ``verify``: gsd_core.verify's window with fused validation (one host sync; with
  ``validate=False`` none, but one for dynamic clusters ranked by p without ``support=``) and
  those clusters ranked on the support of p (``ranking``: one sort of each row's support,
  read by ``gsd_lab.rules.clusters``' registered window, bit for bit gsd_core's);
- ``draw``: gsd_core's inverse-CDF draw without checks;
- ``checks``: the input checks split for that one host sync (shapes first, then verdicts on the
  values read back; ``readback``: the fused read);
- ``support_accept``: a(x) on the support of q, what the exact distortion accounting needs
  (``accounting``);
- ``capabilities``: what the lab asks of a rule beyond gsd_core's (fast paths, support
  masses, row slicing, residuals, couplings), one generic function each, dispatched on the
  rule's class; a rule family's registrations are in its module of ``gsd_lab.rules``;
- ``profiling``: ops and host syncs a call costs, and where its CPU time goes (imported apart).

Costs (ops, syncs) are pinned by tests/lab/engine/test_engine_costs.py; equality with gsd_core by
tests/lab/engine/test_engine.py.
"""

from gsd_core import draw

from .accounting import support_accept
from .capabilities import support_masses, uses_support
from .verify import verify

__all__ = ["draw", "support_accept", "support_masses", "uses_support", "verify"]
