"""What every family's loader (``load_lumina_mgpt``, ``load_anole``, ``load_emu3``,
``load_janus``) does before it builds its model: find the checkpoint folder and its tokenizer
file, pick the device and dtype, and refuse a model too large for the CPU.

- ``find_checkpoint(weights, repo, family)``: the folder holding ``config.json``: ``weights``
  itself, a Hugging Face cache entry of ``repo`` (``models--owner--name``) or a cache root
  holding one; None searches the Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub,
  ~/.cache/huggingface/hub), never anywhere else when ``weights`` is given;
- ``tokenizer_file(folder, tokenizer)``: ``tokenizer`` (a file, or a folder holding
  tokenizer.json), else the checkpoint's ``tokenizer.json``;
- ``device_and_dtype(device, dtype)``: default cuda when available, else cpu; default bfloat16
  on a GPU, float32 on the CPU;
- ``refuse_large_on_cpu``: ``TooLargeForCPU`` (a ``ValueError`` carrying the folder and the
  parameter count) above a family's parameter limit on the CPU unless ``force_cpu`` (such a
  model takes minutes per token there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from .lumina_tokenizer import cache_entry_name, hf_cache_roots, snapshot_with


def find_checkpoint(weights: str | Path | None, repo: str, family: str) -> Path:
    """The folder holding ``config.json`` (module docstring); ``FileNotFoundError`` naming
    ``repo`` and how to download it when there is none."""
    entry = cache_entry_name(repo)
    if weights is not None:  # only where the user pointed, never elsewhere
        root = Path(weights).expanduser()
        if (root / "config.json").is_file():
            return root
        candidates, where = [root / entry, root], str(root)
    else:
        candidates = [r / entry for r in hf_cache_roots()]
        where = "the Hugging Face cache (" + ", ".join(str(r) for r in hf_cache_roots()) + ")"
    for candidate in candidates:
        snapshot = snapshot_with(candidate, "config.json")
        if snapshot is not None:
            return snapshot
    raise FileNotFoundError(
        f"no {family} weights found in {where}. Download {repo} on a machine with internet, "
        f"e.g. `hf download {repo} --local-dir DIR` (huggingface_hub >= 1.0), and pass "
        "--weights DIR (or leave the files in the Hugging Face cache)."
    )


def tokenizer_file(folder: Path, tokenizer: str | Path | None = None) -> Path:
    """``tokenizer`` (a file, or a folder holding tokenizer.json), default the checkpoint
    folder's ``tokenizer.json``; ``FileNotFoundError`` when it is not there."""
    path = Path(tokenizer).expanduser() if tokenizer is not None else folder
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"no tokenizer file {path} (the release ships one)")
    return path


def device_and_dtype(
    device: str | torch.device | None, dtype: torch.dtype | None
) -> tuple[torch.device, torch.dtype]:
    """(device, dtype) with the defaults of the module docstring."""
    device = torch.device(device if device is not None else _default_device())
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return device, dtype


class TooLargeForCPU(ValueError):
    """A model above its family's CPU parameter limit, refused on the CPU without ``force_cpu``:
    ``folder`` holds it, ``parameters`` is its parameter count."""

    def __init__(self, folder: Path, parameters: int) -> None:
        self.folder, self.parameters = folder, parameters
        super().__init__(
            f"{folder} holds a {parameters / 1e9:.1f}B-parameter model; running it on the CPU "
            "would take minutes per token and tens of GB of memory. Use a GPU (device='cuda'), "
            "or pass force_cpu=True to insist."
        )

    def __reduce__(self) -> tuple[type, tuple[Path, int]]:
        """Pickled as (folder, parameters), what ``__init__`` takes."""
        return type(self), (self.folder, self.parameters)


def refuse_large_on_cpu(
    folder: Path,
    device: torch.device,
    parameters: Callable[[], int],
    limit: int,
    force_cpu: bool,
) -> None:
    """``TooLargeForCPU`` when ``device`` is the CPU, ``force_cpu`` is off and the model has
    more than ``limit`` parameters (``parameters()``, only called then)."""
    if device.type != "cpu" or force_cpu:
        return
    size = parameters()
    if size > limit:
        raise TooLargeForCPU(folder, size)


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"
