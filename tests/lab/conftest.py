"""Fixtures shared by the gsd_lab tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_release_set(tmp_path_factory):
    """A tiny checkpoint set in the release layouts, written once per test session: Lumina-mGPT
    (config, 2 safetensors shards + index, per-rank q/k-norms, tokenizer with the vocabulary
    map), the Chameleon VQGAN (vqgan.yaml + vqgan.ckpt) and CLIP (save_pretrained).
    Fields: weights, vqgan, clip (``gsd_lab.testing.tiny_checkpoints.TinyReleaseSet``)."""
    from gsd_lab.testing.tiny_checkpoints import write_tiny_release_set

    return write_tiny_release_set(tmp_path_factory.mktemp("tiny-release-set"))
