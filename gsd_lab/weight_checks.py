"""What the ``check-weights`` items of every family share: the verdicts, the runner that orders
the items, the shard and tokenizer look-ups, the AR rows each decodes, and the report.

Lumina-mGPT's items are ``gsd_lab.check_weights``, Janus-Pro's ``gsd_lab.check_weights_janus``,
Anole's and Emu3's ``gsd_lab.family_checks``; each imports this module, none another's.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"
DEFAULT_PROMPT = "a lighthouse on a rocky coast at sunset"


@dataclass(frozen=True)
class Verdict:
    item: str
    status: str
    detail: str


Item = tuple[str, tuple[str, ...], Callable[[], Verdict]]


class ItemRunner:
    """Runs the items in order: ``run(item, needs, call)`` appends ``call()``'s verdict to
    ``verdicts``, a FAIL verdict for an error it raises (the FloatingPointError ``generate``
    raises on non-finite logits included), or a SKIP naming the items of ``needs`` that failed;
    a failed or skipped item joins ``failed`` (shared with the checks)."""

    def __init__(self, failed: set[str]) -> None:
        self.failed, self.verdicts = failed, []

    def __call__(self, item: str, needs: tuple[str, ...], call: Callable[[], Verdict]) -> None:
        blocked = [n for n in needs if n in self.failed]
        if blocked:
            self.failed.add(item)
            self.verdicts.append(Verdict(item, SKIP, f"needs {', '.join(blocked)}"))
            return
        try:
            verdict = call()
        except (OSError, ValueError, KeyError, RuntimeError, FloatingPointError) as error:
            verdict = Verdict(item, FAIL, f"{type(error).__name__}: {error}")
        if verdict.status in (FAIL, SKIP):
            self.failed.add(item)
        self.verdicts.append(verdict)

    def all(self, items: list[Item]) -> list[Verdict]:
        """Run ``items`` (item, needs, call) in order; every verdict so far."""
        for item, needs, call in items:
            self(item, needs, call)
        return self.verdicts


@dataclass(frozen=True)
class RunOptions:
    """What every family's checks take besides the folder (the ``check-weights`` flags): the
    tokenizer (a file or folder; default the checkpoint's), the device (default cuda where
    available), the image rows, seed and prompt of the AR decode, the PNG to save, and
    ``force_cpu`` (load a model above the CPU limit anyway)."""

    tokenizer: str | Path | None = None
    device: str | None = None
    rows: int = 2
    seed: int = 0
    prompt: str = DEFAULT_PROMPT
    out: Path | None = None
    force_cpu: bool = False

    @classmethod
    def from_args(cls, args: Any) -> "RunOptions":
        return cls(**{field.name: getattr(args, field.name) for field in fields(cls)})


def refuse_flags(args: Any, flags: tuple[str, ...], where: str) -> None:
    """Usage error (exit 2) for the first of ``flags`` (e.g. "--clip") given that does not apply
    ``where``: refused, not ignored."""
    for flag in flags:
        if getattr(args, flag[2:]) is not None:
            args.command_parser.error(f"{flag} does not apply to {where}")


def default_device(device: str | None) -> str:
    """``device``, else cuda where available, else cpu."""
    import torch

    return device or ("cuda" if torch.cuda.is_available() else "cpu")


def save_png(pixels: Any, out: Any) -> str:
    """"" when ``out`` is None, else ``pixels`` (uint8 [H, W, 3]) written to ``out`` and
    "; saved to OUT"."""
    if out is None:
        return ""
    from .io.figure_io import save_image_atomic

    return f"; saved to {save_image_atomic(pixels, out)}"


def size_text(num_bytes: int) -> str:
    return f"{num_bytes / 1e9:.2f} GB" if num_bytes >= 1e8 else f"{num_bytes / 1e6:.2f} MB"


def stored_shards(folder: Path) -> tuple[dict[str, tuple[int, ...]], dict[str, int], int]:
    """(shape of every stored tensor by name, tensors per shard file, the shards' bytes) of a
    safetensors checkpoint folder (``models.lumina_mgpt.stored_tensors``: no tensor twice, the
    index agrees with the shards)."""
    from .models.lumina_mgpt import stored_tensors

    shapes: dict[str, tuple[int, ...]] = {}
    shards: dict[str, int] = {}
    for name, file, handle in stored_tensors(folder):
        shapes[name] = tuple(handle.get_slice(name).get_shape())
        shards[file] = shards.get(file, 0) + 1
    return shapes, shards, sum((folder / f).stat().st_size for f in shards)


def tokenizer_json(given: str | Path | None, folder: Path) -> Path:
    """The tokenizer.json to check: ``given`` (a file, or a folder holding one), else the
    checkpoint folder's."""
    path = Path(given).expanduser() if given else folder
    return path / "tokenizer.json" if path.is_dir() else path


def ar_rows(adapter: Any, prompt: str, count: int, seed: int, *, cfg: bool = False) -> Any:
    """``generate``'s AR decode of ``count`` tokens after ``prompt`` (the unconditional prompt
    too with ``cfg``): the model run as the package runs it."""
    import torch

    from .decode.loop import generate
    from .decode.methods import DecodingMethod

    return generate(
        adapter,
        adapter.prompt_ids(prompt),
        DecodingMethod("ar"),
        num_tokens=count,
        uncond_prompt_ids=adapter.unconditional_prompt_ids() if cfg else None,
        generator=torch.Generator(device=adapter.device).manual_seed(seed),
    )


def format_verdicts(verdicts: list[Verdict]) -> str:
    width = max(len(v.item) for v in verdicts)
    lines = [f"  {v.status:<4}  {v.item:<{width}}  {v.detail}" for v in verdicts]
    failed = [v.item for v in verdicts if v.status == FAIL]
    warned = [v.item for v in verdicts if v.status == WARN]
    summary = (f"FAILED: {', '.join(failed)}" if failed else "all checks passed") + (
        f" ({len(warned)} warning(s): {', '.join(warned)})" if warned else ""
    )
    return "\n".join(lines + [f"verdict: {summary}"])


def report(args: Any, verdicts: list[Verdict], started: float, **named: str) -> int:
    """Print the verdicts (``--json``: one JSON line; ``named``, e.g. model=..., go in both) and
    return the exit status: 1 when an item failed (warnings allowed), else 0."""
    seconds = time.perf_counter() - started
    if args.json:
        data = {"weights": str(args.weights), **named, "seconds": seconds}
        print(json.dumps({**data, "verdicts": [asdict(v) for v in verdicts]}))
    else:
        flags = "".join(f" --{name} {value}" for name, value in named.items())
        print(f"check-weights {args.weights}{flags} ({seconds:.1f} s)")
        print(format_verdicts(verdicts))
    return 1 if any(v.status == FAIL for v in verdicts) else 0
