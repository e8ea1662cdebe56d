"""What a checkpoint folder holds, as every family's ``files`` and ``architecture`` items read
it: the safetensors shards, and their names and shapes against the stock class of the config
built on the meta device (nothing is loaded)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from .items import OK, Outcome

Shape = tuple[int, ...]


def size_text(num_bytes: int) -> str:
    """``num_bytes`` in GB (two decimals) from 0.1 GB on, else in MB."""
    return f"{num_bytes / 1e9:.2f} GB" if num_bytes >= 1e8 else f"{num_bytes / 1e6:.2f} MB"


def stored_shards(folder: Path) -> tuple[dict[str, Shape], dict[str, int], int]:
    """(shape of every stored tensor by name, tensors per shard file, the shards' bytes) of a
    safetensors checkpoint folder (``models.lumina_checkpoint.stored_tensors``: no tensor twice, the
    index agrees with the shards, every listed shard present)."""
    from ..models.lumina_checkpoint import stored_tensors

    shapes: dict[str, Shape] = {}
    shards: dict[str, int] = {}
    for name, file, handle in stored_tensors(folder):
        shapes[name] = tuple(handle.get_slice(name).get_shape())
        shards[file] = shards.get(file, 0) + 1
    return shapes, shards, sum((folder / f).stat().st_size for f in shards)


def files_outcome(folder: Path) -> tuple[dict[str, Shape], Outcome]:
    """The stored shapes (``stored_shards``) and the ``files`` item's outcome: shards, tensors,
    bytes on disk and the index's total_size where it has one."""
    shapes, shards, size = stored_shards(folder)
    index = folder / "model.safetensors.index.json"
    note = ""
    if index.is_file():
        total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
        note = "; index consistent" + (f", total_size {size_text(total)}" if total else "")
    detail = f"{folder}: {len(shards)} shard(s), {len(shapes)} tensors, {size_text(size)} on disk"
    return shapes, (OK, detail + note)


def tokenizer_json(given: str | Path | None, folder: Path) -> Path:
    """The tokenizer.json to check: ``given`` (a file, or a folder holding one), else the
    checkpoint folder's."""
    path = Path(given).expanduser() if given else folder
    return path / "tokenizer.json" if path.is_dir() else path


def on_meta(model_class: Any, config: Any) -> Any:
    """``model_class(config)`` built on the meta device: shapes without memory."""
    import torch

    with torch.device("meta"):
        return model_class(config)


def shape_mismatch(
    meta_model: Any, stored: dict[str, Shape], *, optional: Iterable[str] = ()
) -> str | None:
    """None when ``stored`` (name -> shape as the model loads it) holds exactly the tensors of
    ``meta_model``'s state dict, a name of ``optional`` (a tied head) allowed absent; else what
    differs (``models.lumina_checkpoint.architecture_mismatch``: missing, unexpected and
    mis-shaped names)."""
    from ..models.lumina_checkpoint import architecture_mismatch

    expected = {k: tuple(v.shape) for k, v in meta_model.state_dict().items()}
    for name in set(optional) - set(stored):
        expected.pop(name, None)
    return architecture_mismatch(expected, stored)


def chameleon_shapes(stored: dict[str, Shape], config: Any) -> dict[str, Shape]:
    """``stored`` as Lumina-mGPT's and Anole's loaders (``read_lumina_state_dict``) load it:
    without the image encoder ``model.vqmodel.*`` (they generate without it), q/k-norms
    expanded (``expand_qk_norm``: Lumina's per-rank layout to [heads, head_dim], a stock
    architecture's unchanged; ``ValueError`` with the reason when the layout is not the
    config's)."""
    import torch

    from ..models.lumina_checkpoint import IMAGE_ENCODER_PREFIX, expand_qk_norm, is_qk_norm

    shapes: dict[str, Shape] = {}
    for name, shape in stored.items():
        if name.startswith(IMAGE_ENCODER_PREFIX):
            continue
        if is_qk_norm(name):
            shape = tuple(expand_qk_norm(name, torch.empty(shape, device="meta"), config).shape)
        shapes[name] = shape
    return shapes
