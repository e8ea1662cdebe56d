"""Lumina-mGPT's prompt tokenizer, read as ``tokenizer.json`` is written.

The release tokenises prompts with the ``tokenizer.json`` of ``Alpha-VLLM/Lumina-mGPT-7B-768``
(every resolution: Lumina-mGPT's ``FlexARItemProcessor`` defaults its tokenizer to that repo, and
the 512 and 1024 repos ship none) through transformers 4.x, which ran the file's own pipeline: a
byte-level BPE. transformers 5.x may not: its ``LlamaTokenizerFast`` (the class the file's
``tokenizer_config.json`` names) rebuilds the pipeline with a Metaspace pre-tokenizer and drops the
spaces (huggingface/transformers#45488, huggingface/transformers#48206; measured on 5.24, where
``AutoTokenizer`` happens to route the file to the generic backend). So the prompt ids here come
from ``tokenizers.Tokenizer.from_file`` alone: the file's normaliser, pre-tokenizer and model,
whatever class the config names and whatever transformers version is installed.

Where the file is looked for (``find_tokenizer_file``): the ``tokenizer`` argument (a folder
holding tokenizer.json, or the file), else the checkpoint folder, else the 768 repo next to it
(a sibling folder whose name contains ``lumina-mgpt-7b-768``, or the Hugging Face cache entry
``models--Alpha-VLLM--Lumina-mGPT-7B-768``); else ``FileNotFoundError`` saying what to download.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_REPO = "Alpha-VLLM/Lumina-mGPT-7B-768"
_SIBLING_NAME = re.compile(r"lumina-mgpt-7b-768", re.IGNORECASE)


def hf_cache_roots() -> list[Path]:
    """$HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub (those set, in this order)."""
    roots = []
    if os.environ.get("HF_HUB_CACHE"):
        roots.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        roots.append(Path(os.environ["HF_HOME"]) / "hub")
    roots.append(Path.home() / ".cache" / "huggingface" / "hub")
    return roots


def cache_entry_name(repo: str) -> str:
    """The Hugging Face cache folder of a repo: models--Owner--Name."""
    return "models--" + repo.replace("/", "--")


def snapshot_with(repo_cache: Path, filename: str) -> Path | None:
    """The snapshot folder of a Hugging Face cache entry that holds ``filename``: ``refs/main``'s
    if it does, else the newest that does (None when none does)."""
    snapshots = repo_cache / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo_cache / "refs" / "main"
    if ref.is_file() and (snapshots / ref.read_text().strip() / filename).is_file():
        return snapshots / ref.read_text().strip()
    found = sorted(
        (s for s in snapshots.iterdir() if (s / filename).is_file()),
        key=lambda s: s.stat().st_mtime,
    )
    return found[-1] if found else None


def download_hint(target: str = "DIR") -> str:
    """The command that fetches the release's tokenizer (huggingface_hub 1.x ``hf``)."""
    return (
        f"hf download {TOKENIZER_REPO} tokenizer.json tokenizer_config.json "
        f"special_tokens_map.json --local-dir {target}"
    )


def _sibling_candidates(weights: Path) -> list[Path]:
    """Folders where the 768 repo's tokenizer may sit next to ``weights`` (module docstring)."""
    weights = weights.resolve()
    candidates: list[Path] = []
    entry = cache_entry_name(TOKENIZER_REPO)
    # Inside a Hugging Face cache: .../models--Alpha-VLLM--Lumina-mGPT-7B-512/snapshots/<hash>.
    for parent in weights.parents:
        if parent.name.startswith("models--"):
            snapshot = snapshot_with(parent.parent / entry, TOKENIZER_FILE)
            if snapshot is not None:
                candidates.append(snapshot)
            break
    if weights.parent.is_dir():
        candidates += sorted(
            p
            for p in weights.parent.iterdir()
            if p.is_dir() and p != weights and _SIBLING_NAME.search(p.name)
        )
        snapshot = snapshot_with(weights.parent / entry, TOKENIZER_FILE)
        if snapshot is not None:
            candidates.append(snapshot)
    for root in hf_cache_roots():
        snapshot = snapshot_with(root / entry, TOKENIZER_FILE)
        if snapshot is not None:
            candidates.append(snapshot)
    return candidates


def find_tokenizer_file(weights: str | Path, tokenizer: str | Path | None = None) -> Path:
    """The ``tokenizer.json`` to tokenise prompts with (module docstring for the search order).

    Raises ``FileNotFoundError`` naming where it looked and the ``hf download`` command to run."""
    if tokenizer is not None:
        given = Path(tokenizer).expanduser()
        path = given if given.is_file() else given / TOKENIZER_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"--tokenizer {given}: no {TOKENIZER_FILE} there. Download it with "
                f"`{download_hint(str(given))}`"
            )
        return path
    weights = Path(weights).expanduser()
    if (weights / TOKENIZER_FILE).is_file():
        return weights / TOKENIZER_FILE
    for folder in _sibling_candidates(weights):
        if (folder / TOKENIZER_FILE).is_file():
            return folder / TOKENIZER_FILE
    raise FileNotFoundError(
        f"no {TOKENIZER_FILE} in {weights} nor in a Lumina-mGPT-7B-768 folder next to it or in the "
        "Hugging Face cache. The 512 and 1024 releases ship no tokenizer: every Lumina-mGPT 7B "
        f"uses the 768 repo's. Run `{download_hint(str(weights.parent / 'lumina-mgpt-7b-768'))}` "
        "(found there automatically) or pass --tokenizer DIR (Python: tokenizer=DIR)."
    )


class PromptTokenizer:
    """``tokenizers.Tokenizer.from_file(path)`` with the two things the adapter asks of a
    tokenizer: ``encode(text, add_special_tokens=False) -> list[int]`` and ``bos_token_id``.

    ``declared_class``: the ``tokenizer_class`` of the ``tokenizer_config.json`` beside the file
    (informative only: it does not change the ids)."""

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer

        self.path = Path(path)
        try:
            self.tokenizer = Tokenizer.from_file(str(self.path))
        except Exception as error:  # tokenizers raises its own Exception subclass
            raise ValueError(f"{self.path} is not a tokenizers file: {error}") from error
        self.config = self._read_config()
        self.declared_class = self.config.get("tokenizer_class")

    def _read_config(self) -> dict[str, Any]:
        path = self.path.parent / "tokenizer_config.json"
        if not path.is_file():
            return {}
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"{path} is not valid JSON: {error}") from error
        return config if isinstance(config, dict) else {}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """The file's ids for ``text`` (``add_special_tokens=True`` runs its post-processor)."""
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    @property
    def bos_token_id(self) -> int | None:
        """The id of the config's ``bos_token`` (a string or {"content": ...}), else of ``<s>``."""
        bos = self.config.get("bos_token", "<s>")
        if isinstance(bos, dict):
            bos = bos.get("content")
        return self.token_to_id(bos) if isinstance(bos, str) else None

    def __repr__(self) -> str:
        return f"PromptTokenizer({str(self.path)!r}, declared_class={self.declared_class!r})"
