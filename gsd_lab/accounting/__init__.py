"""Distortion accounting: how far each verified position's one-step output law is from p.

- ``distortion``: exact TV(out(p, q), p) per verified position (``DistortionLog``);
- ``transport``: W1(out(p, q), p) with the codes' decoded content as ground cost (``W1Log``).

The engine's a(x) on the support of q, which both read, is ``gsd_lab.engine.accounting``.
"""
