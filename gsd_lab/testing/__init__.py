"""Test helpers that ship with the package, for its own tests and for anyone testing an adapter
of their own against the release file layouts:

- ``tiny_checkpoints``: tiny random checkpoints of every family (Lumina-mGPT with the Chameleon
  VQGAN and a CLIP, Chameleon / Anole, Emu3, Janus-Pro) written in its release file layout.
"""
