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
    assert "same decoding sources, DECODING_SOURCES, as this checkout" in loaded.line()
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


def test_records_of_other_code_are_refused(model, tmp_path, monkeypatch):
    """Any change to the package sources between the figures run and the notebook (here: a
    fingerprint that differs) loads nothing, so that no table can show stale records."""
    cache = _cache(model)
    cache.records(tables.AR)
    path = records.save(cache, tmp_path / "records.npz", git={"commit": "a" * 40, "dirty": False})
    assert records.load(_cache(model), path).configurations == 1
    fingerprint = records.code_fingerprint()
    monkeypatch.setattr(records, "code_fingerprint", lambda: "0" * 64)
    refused = records.load(_cache(model), path)
    assert refused.configurations == 0 and refused.reason.startswith("made by other code")
    assert "aaaaaaaaaaaa" in refused.line() and "decoded here" in refused.line()
    assert "had other decoding sources (DECODING_SOURCES)" in refused.reason
    monkeypatch.undo()
    assert records.code_fingerprint() == fingerprint and len(fingerprint) == 64


def test_live_check_fails_when_the_stored_records_differ(model):
    """Stale records (what another decoder would have stored) turn the checked line False."""
    from dataclasses import replace

    real = _cache(model, model.default_prompts[:1]).records(tables.SJD)[0]
    for stale in (replace(real, tokens=real.tokens.flip(0)), replace(real, nfe=real.nfe + 1),
                  replace(real, distortion=1e-6)):
        cache = _cache(model, model.default_prompts[:1])
        cache.preload(repr(tables.SJD.key), [stale])
        assert records.check_live(cache, [tables.SJD])[0].endswith("False")


def _copy_sources(tmp_path):
    """The decoding sources and two files outside them, copied to tmp_path as a tree."""
    import shutil
    from pathlib import Path

    import gsd_core

    root = Path(gsd_core.__file__).resolve().parent.parent
    extra = [root / "gsd_lab/experiments/plots.py", root / "gsd_lab/cli/generate.py"]
    for path in records.decoding_files(root) + extra:
        target = tmp_path / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return tmp_path


def test_code_fingerprint_follows_decoding_sources_only(tmp_path):
    tree = _copy_sources(tmp_path)
    before = records.code_fingerprint(tree)
    assert before == records.code_fingerprint()  # the copy hashes as the package does
    for outside in ("gsd_lab/experiments/plots.py", "gsd_lab/cli/generate.py"):  # a plot label, a help text
        path = tree / outside
        path.write_text(path.read_text().replace("better", "Better") + "# an edit\n")
        assert records.code_fingerprint(tree) == before
    for inside in ("gsd_lab/decode/loop.py", "gsd_core/verification.py",
                   "gsd_lab/accounting/distortion.py", "gsd_lab/standin/adapter.py"):
        path = tree / inside
        original = path.read_text()
        path.write_text(original + "# a comment\n")
        assert records.code_fingerprint(tree) != before, inside
        path.write_text(original)
    assert records.code_fingerprint(tree) == before
    (tree / "gsd_lab/decode/presets.py").unlink()  # a moved source is not silently dropped
    (tree / "gsd_lab/standin/loading.py").unlink()
    with pytest.raises(FileNotFoundError, match="standin/loading.py"):
        records.code_fingerprint(tree)


@pytest.mark.parametrize("name", ["tiny-random", "digits"])
def test_code_fingerprint_covers_every_module_decoding_imports(name):
    """Decode a run the way figures does, in a fresh process: every gsd_core / gsd_lab module it
    imported is among the fingerprinted files (a new decoding dependency must be listed)."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from gsd_lab.experiments import tables\n"
        "from gsd_lab.experiments.image_model import load_image_model\n"
        "from gsd_lab.experiments.runs import FilterSettings, RunCache\n"
        f"model = load_image_model({name!r})\n"
        "cache = RunCache(model, model.default_prompts[:2], [0], FilterSettings.for_model(model.name))\n"
        "cache.table([tables.AR, tables.SJD, tables.gsd(3)], tables.AR)\n"
        "print('\\n'.join(m.__file__ for n, m in sys.modules.items()\n"
        "      if n.split('.')[0] in ('gsd_core', 'gsd_lab') and getattr(m, '__file__', None)))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         timeout=300)
    from pathlib import Path

    # Imported but not read by decoding: the table configurations (a changed spec is another
    # record key) and rows, the verdict arithmetic, progress lines, the quality proxies
    # (recomputed from the stored tokens), the worker scheduling (records equal for any
    # number of workers: tests/lab/test_workers.py) and packages' docstring maps.
    not_decoding = {"gsd_lab/__init__.py", "gsd_lab/experiments/__init__.py",
                    "gsd_lab/experiments/tables.py", "gsd_lab/experiments/verdicts.py",
                    "gsd_lab/workers.py", "gsd_lab/digits/__init__.py",
                    "gsd_lab/standin/__init__.py", "gsd_lab/standin/classifier.py",
                    "gsd_lab/io/__init__.py", "gsd_lab/io/progress.py",
                    "gsd_lab/quality/__init__.py", "gsd_lab/quality/metrics.py"}
    covered = {path.resolve() for path in records.decoding_files()}
    imported = {Path(line).resolve() for line in out.stdout.split()}
    missing = sorted("/".join(p.parts[-3:]) for p in imported - covered)
    assert [m for m in missing if not any(m.endswith(n) for n in not_decoding)] == []


def test_the_live_check_tolerance_is_relative_with_an_absolute_floor():
    """A lossless rule's rounding-level distortion (~4e-17) moves by a large relative amount
    between a batch-8 record and a re-decode alone: within DISTORTION_ATOL; a real distortion
    must still agree to DISTORTION_RTOL relative."""
    assert records._close(5.67e-17, 5.87e-17)
    assert records._close(0.1, 0.1 * (1 + 1e-10))
    assert not records._close(0.1, 0.1 * (1 + 1e-8))
    assert not records._close(1e-3, 1e-3 + 1e-11)
    assert records._close(None, None) and not records._close(0.0, None)
