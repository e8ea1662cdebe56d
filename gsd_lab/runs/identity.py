"""A run's identity: what makes two runs the same, and the difference when they are not.

``RunIdentity``: a JSON-ready dict (model, weights fingerprint, decoding spec, seed, ...) and the
prompt list; ``run_id`` is the SHA-256 of their canonical JSON. ``identity_differences`` and
``prompt_differences`` name what differs (``RunMismatch``); ``weights_fingerprint`` identifies a
model's weights by content, not by path (docs/run-store.md).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


class RunMismatch(ValueError):
    """A folder holds (part of) another run: another configuration or prompt list."""


def canonical(data: Any) -> str:
    """The canonical JSON of ``data`` (sorted keys, no spaces): what ``run_id`` hashes."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RunIdentity:
    """What a run is: ``identity`` (a JSON-ready dict: model, weights fingerprint, decoding spec,
    seed, ...) and the prompt list. run_id = SHA-256 of the canonical JSON of both."""

    identity: dict[str, Any]
    prompts: list[str]
    run_id: str = field(init=False)

    def __post_init__(self) -> None:
        # JSON round trip: tuples become lists, keys strings, so that a run read back from
        # run.json compares equal to the one that wrote it.
        object.__setattr__(self, "identity", json.loads(canonical(self.identity)))
        object.__setattr__(self, "prompts", [str(p) for p in self.prompts])
        object.__setattr__(
            self,
            "run_id",
            sha256(canonical({"identity": self.identity, "prompts": self.prompts})),
        )

    @property
    def prompts_sha256(self) -> str:
        return sha256(canonical(self.prompts))

    def row_fields(self, index: int) -> dict[str, Any]:
        """What every result row records about its run and prompt."""
        return {
            "run_id": self.run_id,
            "run": self.identity,
            "prompts_sha256": self.prompts_sha256,
            "index": index,
            "prompt": self.prompts[index],
        }

    def row_matches(self, row: dict[str, Any], index: int) -> bool:
        """True when ``row`` is prompt ``index`` of this run (same run_id, index and prompt)."""
        return (
            row.get("run_id") == self.run_id
            and row.get("index") == index
            and row.get("prompt") == self.prompts[index]
        )


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1} (leaves: anything but a non-empty dict)."""
    if not isinstance(data, dict) or not data:
        return {prefix: data}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def identity_differences(
    stored: dict[str, Any], current: dict[str, Any], *, partial: bool = False
) -> list[str]:
    """One line per differing field ("decoding.method.window: 16 in the existing run, 8 now").
    partial: compare only the fields ``current`` has (a check before the model is loaded)."""
    old, new = _flatten(json.loads(canonical(stored))), _flatten(json.loads(canonical(current)))
    keys = sorted(new) if partial else sorted(set(old) | set(new))
    missing = "(absent)"
    return [
        f"{key}: {json.dumps(old.get(key, missing))} in the existing "
        f"run, {json.dumps(new.get(key, missing))} now"
        for key in keys
        if old.get(key, missing) != new.get(key, missing)
    ]


def prompt_differences(stored: list[str], current: list[str]) -> str | None:
    """None when equal, else what changed: the count, or the first changed position and how
    many differ (reordered or edited lines)."""
    if stored == current:
        return None
    if len(stored) != len(current):
        return f"the prompt list has {len(current)} prompts now, {len(stored)} in the existing run"
    changed = [i for i, (a, b) in enumerate(zip(stored, current)) if a != b]
    first = changed[0]
    kind = "reordered" if sorted(stored) == sorted(current) else "edited"
    return (
        f"the prompt list was {kind}: {len(changed)} of {len(current)} prompts differ; prompt "
        f"{first} is {current[first]!r} now, {stored[first]!r} in the existing run"
    )


WEIGHT_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".json",
    ".yaml",
    ".yml",
    ".model",
    ".tiktoken",
)
_FULL_HASH_LIMIT = 64 * 2**20
_EDGE_BYTES = 2**20


def _file_digest(path: Path) -> str:
    """SHA-256 of the file (files above 64 MiB: of its size, first and last MiB, which tells
    apart any two checkpoints met in practice without reading a whole multi-GB checkpoint)."""
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        if size <= _FULL_HASH_LIMIT:
            for block in iter(lambda: handle.read(2**20), b""):
                digest.update(block)
        else:
            digest.update(str(size).encode())
            digest.update(handle.read(_EDGE_BYTES))
            handle.seek(size - _EDGE_BYTES)
            digest.update(handle.read(_EDGE_BYTES))
    return digest.hexdigest()


def folder_fingerprint(folder: str | Path) -> str:
    """SHA-256 over (relative path, size, ``_file_digest``) of the weight-like files in
    ``folder`` (suffixes ``WEIGHT_SUFFIXES``, hidden entries skipped, symlinks followed): the
    same weights in another place give the same fingerprint."""
    root = Path(folder)
    entries = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if (
            any(part.startswith(".") for part in relative.parts)
            or path.suffix not in WEIGHT_SUFFIXES
        ):
            continue
        if path.is_file():
            entries.append([relative.as_posix(), path.stat().st_size, _file_digest(path)])
    return sha256(canonical(entries))


def parameters_fingerprint(module: torch.nn.Module) -> str:
    """SHA-256 of a module's state dict (names, dtypes, shapes and raw bytes)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


WEIGHT_FOLDER_KEYS = ("weights_dir", "weights", "vqgan", "clip", "tokenizer")


def weights_fingerprint(
    weights_info: dict[str, Any], module: torch.nn.Module | None = None
) -> dict[str, str]:
    """What identifies a model's weights: a ``folder_fingerprint`` of each existing folder named
    in ``weights_info`` (keys ``WEIGHT_FOLDER_KEYS``, as ``ImageModel.weights_info`` records
    them; the path itself is left out), else the ``parameters_fingerprint`` of ``module``
    (models built in code, e.g. tiny-random)."""
    fingerprint = {}
    for key in WEIGHT_FOLDER_KEYS:
        value = weights_info.get(key)
        if value and Path(str(value)).expanduser().is_dir():
            fingerprint[f"{key}_fingerprint"] = folder_fingerprint(Path(str(value)).expanduser())
    if not fingerprint:
        if module is None:
            raise ValueError("no weights folder in weights_info and no module to fingerprint")
        fingerprint["parameters_sha256"] = parameters_fingerprint(module)
    return fingerprint
