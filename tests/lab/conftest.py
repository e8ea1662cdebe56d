"""Fixtures shared by the gsd_lab tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Many tiny forward passes: extra intra-op threads only add contention. Restores the count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_release_set(tmp_path_factory):
    """A tiny checkpoint set in the release layouts, written once per test session: Lumina-mGPT
    (config, 2 safetensors shards + index, per-rank q/k-norms, tokenizer with the vocabulary
    map), the Chameleon VQGAN (vqgan.yaml + vqgan.ckpt) and CLIP (save_pretrained).
    Fields: weights, vqgan, clip (``gsd_lab.models.tiny_checkpoints.TinyReleaseSet``)."""
    from gsd_lab.models.tiny_checkpoints import write_tiny_release_set

    return write_tiny_release_set(tmp_path_factory.mktemp("tiny-release-set"))
