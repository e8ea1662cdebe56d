"""Stored per-image records (``gsd_lab.experiments.records``): a round trip gives the same table
rows as decoding, a file made for another run is refused with the reason, and the live check
passes on the real decoder and fails when decoding changes."""

from __future__ import annotations

import numpy as np
import pytest

from gsd_lab.experiments import records, tables
from gsd_lab.experiments.image_model import load_image_model
from gsd_lab.experiments.runs import FilterSettings, RunCache

SPECS = [tables.AR, tables.SJD, tables.gsd(3)]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return load_image_model("tiny-random")


def _cache(model, prompts=None, seeds=(0,)):
    prompts = model.default_prompts[:2] if prompts is None else prompts
    return RunCache(model, list(prompts), list(seeds), FilterSettings.for_model(model.name))


def test_round_trip_gives_the_same_rows(model, tmp_path):
    cache = _cache(model)
    decoded = cache.table(SPECS, tables.AR)
    path = records.save(cache, tmp_path / "records.npz", git={"commit": "0" * 40, "dirty": False})
    loaded_cache = _cache(model)
    loaded = records.load(loaded_cache, path)
    assert (loaded.configurations, loaded.images, loaded.reason) == (3, 2, None)
    assert "3 configurations x 2 images" in loaded.line() and "commit 000000000000" in loaded.line()
    reloaded = loaded_cache.table(SPECS, tables.AR)
    for a, b in zip(decoded, reloaded):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == b[key] or (isinstance(a[key], float) and np.isnan(a[key]) and np.isnan(b[key])), key
    assert all(line.endswith("True") for line in records.check_live(loaded_cache, SPECS[1:]))


def test_another_run_is_refused_with_the_reason(model, tmp_path):
    cache = _cache(model)
    cache.records(tables.AR)
    path = records.save(cache, tmp_path / "records.npz")
    other = _cache(model, seeds=(1,))
    refused = records.load(other, path)
    assert refused.configurations == 0 and refused.reason == "made for another seeds"
    assert "decoded here" in refused.line()
    assert records.load(other, tmp_path / "absent.npz").reason == "no file"


def test_live_check_fails_when_the_stored_records_differ(model):
    """Stale records (what another decoder would have stored) turn the checked line False."""
    from dataclasses import replace

    real = _cache(model, model.default_prompts[:1]).records(tables.SJD)[0]
    for stale in (replace(real, tokens=real.tokens.flip(0)), replace(real, nfe=real.nfe + 1),
                  replace(real, distortion=1e-6)):
        cache = _cache(model, model.default_prompts[:1])
        cache.preload(repr(tables.SJD.key), [stale])
        assert records.check_live(cache, [tables.SJD])[0].endswith("False")
