"""A figures run's per-image decoding records, stored so that the notebooks reuse them.

``python -m gsd_lab figures`` decodes every configuration of notebook 04's tables (and more) on
the same prompts and seeds; ``save`` writes what each image's row needs (tokens, NFE, the two
acceptance measures, the exact distortion and W1, wall and model time) to ``figures/records.npz``.
Notebook 04 then ``load``s them into its ``RunCache`` instead of decoding them again (pixels
are decoded from the stored tokens, so the quality proxies are recomputed), and ``check_live``
re-decodes the first images of a few configurations and compares them with the stored records:
tokens, NFE and acceptance identically, the distortion within ``DISTORTION_RTOL`` relative or
``DISTORTION_ATOL`` absolute (float64 sums may differ in the last ulp between CPU kernels and
batch sizes: README, "Reproducibility"). A stored file made by other decoding code
(``code_fingerprint``: any change to a source file that decoding reads, ``DECODING_SOURCES``,
so that no table can be stale; a plot or a CLI help text can change without it), weights,
settings, prompts or seeds is not loaded (``load`` says why, and everything is decoded), and a
decoding change that alters any token of a live-checked configuration fails the live check.

File: one ``numpy.savez_compressed`` archive: ``tokens`` int32 [R, N], float64 columns
``FIELDS`` [R] (nan for None), and ``index``, a JSON string: the identity, the git state of the
run, and per record its configuration key (``repr(spec.key)``), label, prompt and seed.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .runs import GenerationRecord, MethodSpec, Recording, RunCache

FIELDS = (
    "nfe",
    "acceptance_rate",
    "accepted_per_tested",
    "wall_seconds",
    "model_seconds",
    "distortion",
    "accounting_seconds",
    "w1",
    "w1_sem",
    "substitution",
    "substitution_sem",
    "w1_seconds",
)
DISTORTION_RTOL = 1e-9
# Stored records decoded in batches against a re-decode alone: the model's batched rows round
# differently in the last bit, which moves a lossless rule's rounding-level distortion by a large
# relative amount; this is the bound for batched against alone.
DISTORTION_ATOL = 1e-12


# What a stored record's numbers can depend on, relative to the folder holding gsd_core and
# gsd_lab: the exact core, the engine, the decoding loop and its method spec, presets, coupling
# and clustering, the model adapters, the stand-in's and the digits model's model and loading
# code, the distortion and transport accounting, and the experiments code that decodes and stores
# the records. A folder stands for every ``.py`` file below it.
# tests/lab/experiments/test_records.py checks that every gsd_core or gsd_lab module that
# decoding a run imports is covered, and that a plotting edit is not.
DECODING_SOURCES = (
    "gsd_core",
    "gsd_lab/engine",
    "gsd_lab/decode",
    "gsd_lab/models",
    "gsd_lab/accounting",
    "gsd_lab/rules",
    "gsd_lab/digits/adapter.py",
    "gsd_lab/digits/data.py",
    "gsd_lab/standin/adapter.py",
    "gsd_lab/standin/ar.py",
    "gsd_lab/standin/data.py",
    "gsd_lab/standin/llama_forward.py",
    "gsd_lab/standin/loading.py",
    "gsd_lab/standin/tokenizer.py",
    "gsd_lab/standin/weights_io.py",
    "gsd_lab/experiments/image_model.py",
    "gsd_lab/experiments/runs.py",
    "gsd_lab/experiments/records.py",
)


def _source_root(root: Path | None) -> Path:
    """``root``, or the folder holding the imported gsd_core and gsd_lab."""
    import gsd_core

    return Path(gsd_core.__file__).resolve().parent.parent if root is None else Path(root)


def decoding_files(root: Path | None = None) -> list[Path]:
    """The ``.py`` files of ``DECODING_SOURCES`` under ``root`` (default: the folder holding the
    imported gsd_core), in path order; FileNotFoundError names a listed source that is missing
    (a moved file must be listed again, not silently dropped from the fingerprint)."""
    root = _source_root(root)
    files = set()
    for source in DECODING_SOURCES:
        path = root / source
        if path.is_dir():
            files.update(path.rglob("*.py"))
        elif path.is_file():
            files.add(path)
        else:
            raise FileNotFoundError(f"decoding source {source} not found under {root}")
    return sorted(files, key=lambda f: f.relative_to(root).as_posix())


def code_fingerprint(root: Path | None = None) -> str:
    """SHA-256 over the sources decoding depends on (``decoding_files``: relative path and bytes,
    in path order). Any edit there changes it, a comment included: stored records are reused only
    by the very decoding code that wrote them. Edits elsewhere (plots, the CLI, the notebooks'
    helpers) leave it unchanged."""
    root = _source_root(root)
    digest = hashlib.sha256()
    for path in decoding_files(root):
        digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def identity(cache: RunCache) -> dict[str, Any]:
    """What the records depend on: the code (``code_fingerprint``), model, weights (their
    digests), sampling settings, GSD's filters, prompts, seeds and the W1 accounting (whether
    recorded, rows solved per image)."""
    model = cache.model
    adapter = model.adapter
    return {
        "code": code_fingerprint(),
        "model": model.name,
        "num_tokens": model.num_tokens,
        "weights": {k: v for k, v in sorted(model.weights_info.items()) if "sha256" in k},
        "cfg_scale": adapter.cfg_scale,
        "top_k": adapter.top_k,
        "temperature": getattr(adapter, "temperature", None),
        "filters": asdict(cache.filters),
        "prompts": list(cache.prompts),
        "seeds": list(cache.seeds),
        "record_w1": cache.recording.w1,
        "w1_draws": cache.recording.w1_draws,
    }


def save(cache: RunCache, path: str | Path, *, git: dict[str, Any] | None = None) -> Path:
    """Write every configuration ``cache`` has decoded to ``path`` (.npz, module docstring)."""
    entries, tokens, columns = [], [], {f: [] for f in FIELDS}
    for key, records in cache.decoded().items():
        for r in records:
            entries.append({"key": repr(key), "label": r.label, "prompt": r.prompt, "seed": r.seed})
            tokens.append(r.tokens.cpu().to(torch.int32).numpy())
            for f in FIELDS:
                value = getattr(r, f)
                columns[f].append(math.nan if value is None else float(value))
    index = {"identity": identity(cache), "git": git or {}, "records": entries}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        path,
        tokens=np.stack(tokens) if tokens else np.zeros((0, 0), np.int32),
        index=np.array(json.dumps(index)),
        **{f: np.array(v, np.float64) for f, v in columns.items()},
    )
    return path


@dataclass(frozen=True)
class Loaded:
    """What ``load`` did: ``configurations`` preloaded (0 when refused), ``images`` per
    configuration, the git state of the run that wrote the file, and ``reason`` when refused."""

    path: str
    configurations: int
    images: int
    git: dict[str, Any]
    reason: str | None = None

    def line(self) -> str:
        if self.reason:
            return f"stored records not used ({self.reason}): every configuration is decoded here"
        commit = (self.git.get("commit") or "unknown")[:12]
        return (
            f"{self.configurations} configurations x {self.images} images loaded from {self.path} "
            f"(the figures run at commit {commit}, dirty {self.git.get('dirty')}, with the "
            "same decoding sources, DECODING_SOURCES, as this checkout); the others are decoded "
            "here"
        )


def load(cache: RunCache, path: str | Path | None) -> Loaded:
    """Preload ``cache`` with the records stored at ``path`` when they were made for the same
    identity (``identity``); otherwise load nothing and say why."""
    if path is None or not Path(path).is_file():
        return Loaded(str(path), 0, 0, {}, "no file" if path is not None else "none given")
    with np.load(path, allow_pickle=False) as archive:
        index = json.loads(str(archive["index"]))
        differs = sorted(k for k, v in identity(cache).items() if index["identity"].get(k) != v)
        git = index.get("git", {})
        if "code" in differs:
            commit = (git.get("commit") or "unknown")[:12]
            return Loaded(
                str(path),
                0,
                0,
                git,
                f"made by other code: the figures run at commit {commit}, dirty "
                f"{git.get('dirty')}, had other decoding sources (DECODING_SOURCES) than "
                "this checkout",
            )
        if differs:
            return Loaded(str(path), 0, 0, git, f"made for another {', '.join(differs)}")
        tokens, columns = archive["tokens"], {f: archive[f] for f in FIELDS}
    grouped: dict[str, list[GenerationRecord]] = {}
    decode = cache.model.decode
    for i, entry in enumerate(index["records"]):
        values = {f: None if math.isnan(columns[f][i]) else float(columns[f][i]) for f in FIELDS}
        row_tokens = torch.from_numpy(tokens[i].astype(np.int64))
        grouped.setdefault(entry["key"], []).append(
            GenerationRecord(
                label=entry["label"],
                prompt=entry["prompt"],
                seed=entry["seed"],
                tokens=row_tokens,
                image=decode(row_tokens) if decode is not None else None,
                **{  # every field of FIELDS; those never None as their type
                    **values,
                    "nfe": int(values["nfe"]),
                    "accounting_seconds": values["accounting_seconds"] or 0.0,
                    "w1_seconds": values["w1_seconds"] or 0.0,
                },
            )
        )
    for key, records in grouped.items():
        cache.preload(key, records)
    images = {len(v) for v in grouped.values()}
    return Loaded(str(path), len(grouped), max(images, default=0), index.get("git", {}))


def check_live(cache: RunCache, specs: list[MethodSpec], images: int = 1) -> list[str]:
    """Re-decode the first ``images`` images of each spec (first seed, first prompts) on a fresh
    cache and compare them with ``cache``'s records (stored or decoded): the checked-cell lines,
    one per spec. Tokens, NFE and both acceptance measures must be identical, the distortion
    within ``DISTORTION_RTOL`` relative or ``DISTORTION_ATOL`` absolute."""
    recording = Recording(top1=True, distortion=True)
    live = RunCache(
        cache.model, cache.prompts[:images], cache.seeds[:1], cache.filters, recording=recording
    )
    lines = []
    for spec in specs:
        stored, fresh = cache.records(spec)[:images], live.records(spec)
        same = all(
            torch.equal(a.tokens.cpu(), b.tokens.cpu())
            and a.nfe == b.nfe
            and a.acceptance_rate == b.acceptance_rate
            and a.accepted_per_tested == b.accepted_per_tested
            and _close(a.distortion, b.distortion)
            for a, b in zip(stored, fresh)
        )
        lines.append(
            f"{spec.label}: {len(fresh)} image(s) re-decoded here equal the records (tokens, NFE, "
            f"acceptance identical; distortion within {DISTORTION_RTOL:g} relative or "
            f"{DISTORTION_ATOL:g} absolute): "
            f"{same and len(stored) == len(fresh)}"
        )
    return lines


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= max(DISTORTION_ATOL, DISTORTION_RTOL * max(abs(a), abs(b)))
