"""What every family's ``generation`` and ``image`` items share: the run's options (the
``check-weights`` flags), the model loaded as ``generate`` loads it, its AR rows and the PNG."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable

from .items import FAIL, OK, SKIP, Outcome

DEFAULT_PROMPT = "a lighthouse on a rocky coast at sunset"


@dataclass(frozen=True)
class RunOptions:
    """What every family's checks take besides the folder: the tokenizer (a file or folder;
    default the checkpoint's), the device (default cuda where available), the image rows, seed
    and prompt of the AR decode, the PNG to save, and ``force_cpu`` (load a model above the CPU
    limit anyway)."""

    tokenizer: str | Path | None = None
    device: str | None = None
    rows: int = 2
    seed: int = 0
    prompt: str = DEFAULT_PROMPT
    out: Path | None = None
    force_cpu: bool = False

    @classmethod
    def from_args(cls, args: Any) -> "RunOptions":
        """The options of the parsed ``check-weights`` flags (``args``), by the fields' names."""
        return cls(**{field.name: getattr(args, field.name) for field in fields(cls)})

    @property
    def device_or_default(self) -> str:
        """``device``, else cuda where available, else cpu."""
        import torch

        return self.device or ("cuda" if torch.cuda.is_available() else "cpu")

    @property
    def load_kwargs(self) -> dict[str, Any]:
        """The loaders' keywords: device (``device_or_default``), tokenizer, force_cpu."""
        device, tokenizer, force_cpu = self.device_or_default, self.tokenizer, self.force_cpu
        return {"device": device, "tokenizer": tokenizer, "force_cpu": force_cpu}


def load_timed(load: Callable[[], Any]) -> tuple[Any, str]:
    """(the adapter ``load()`` returns, "loaded in S s on DEVICE (DTYPE)"), or (None, why) when
    the loader refuses a model too large for the CPU (``loading.refuse_large_on_cpu``)."""
    from ..models.loading import TooLargeForCPU

    started = time.perf_counter()
    try:
        adapter = load()
    except TooLargeForCPU as error:
        return None, (
            f"a {error.parameters / 1e9:.1f}B-parameter model on the CPU takes minutes per token "
            "(--device cuda, or --force-cpu to insist)"
        )
    seconds = time.perf_counter() - started
    dtype = next(adapter.model.parameters()).dtype
    return adapter, f"loaded in {seconds:.1f} s on {adapter.device} ({dtype})"


def ar_rows(adapter: Any, run: RunOptions, count: int) -> Any:
    """``generate``'s AR decode of ``count`` tokens after the run's prompt with the run's seed
    (the unconditional prompt the adapter's default): the model run as the package runs it."""
    import torch

    from ..decode.loop import generate
    from ..decode.methods import DecodingMethod

    return generate(
        adapter,
        adapter.prompt_ids(run.prompt),
        DecodingMethod("ar"),
        num_tokens=count,
        generator=torch.Generator(device=adapter.device).manual_seed(run.seed),
    )


def grid_generation(load: Callable[[], Any], run: RunOptions) -> tuple[Any, Outcome, Any]:
    """(the adapter, the ``generation`` outcome, the rows' VQ indices [rows, width]) of
    ``run.rows`` image rows by AR on the grid adapter (``models.grid_image``: Lumina-mGPT, Anole,
    Emu3) ``load()`` returns: a FAIL where a row end is misplaced or a code position holds a
    non-image token (no indices), a SKIP where the loader refuses the CPU (no adapter)."""
    adapter, loaded = load_timed(load)
    if adapter is None:
        return None, (SKIP, loaded), None
    layout = adapter.layout
    rows = max(1, min(run.rows, layout.height))
    count = rows * layout.row_length
    result = ar_rows(adapter, run, count)
    tokens = result.tokens.view(rows, layout.row_length).to(adapter.device)
    indices = adapter.code_of_token[tokens[:, : layout.width]]
    pair = " (CFG pair)" if adapter.uses_cfg else ""
    detail = (
        f"{loaded}; {count} tokens ({rows} rows) by AR in {result.wall_seconds:.2f} s, "
        f"{1000 * result.wall_seconds / result.nfe:.1f} ms per forward{pair}, "
        f"{len(set(indices.flatten().tolist()))} distinct codes"
    )
    if layout.row_end is not None and not bool((tokens[:, -1] == layout.row_end).all()):
        return adapter, (FAIL, detail + ": row ends misplaced"), None
    if not bool((indices >= 0).all()):
        return adapter, (FAIL, f"{detail}: a code position holds a non-image token"), None
    return adapter, (OK, detail), indices


def save_png(pixels: Any, out: Path | None) -> str:
    """"" when ``out`` is None, else ``pixels`` (uint8 [H, W, 3]) written to ``out`` and
    "; saved to OUT"."""
    if out is None:
        return ""
    from ..io.figure_io import save_image_atomic

    return f"; saved to {save_image_atomic(pixels, out)}"
