"""Distortion accounting: how far each verified position's one-step output law is from p.

- ``distortion``: exact TV(out(p, q), p) per verified position (``DistortionLog``);
- ``transport``: W1(out(p, q), p) with the codes' decoded content as ground cost (``W1Log``);
- ``roofline``: the cost model of one forward in weight-read times, max(1, W / W_ridge)
  (``Roofline``), and so of a decode.

The engine's a(x) on the support of q, which both read, is ``gsd_lab.engine.accounting``.
"""
