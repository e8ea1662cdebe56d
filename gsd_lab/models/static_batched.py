"""``StaticBatchRunner``: ``BatchRunner``'s batched forwards (several images per forward, each with
its own cache lengths) on a static KV cache with fixed shapes, CUDA graphs per (rows, width,
attended length) on a GPU; on a CPU the same static shapes run eagerly (static-eager, as
``StaticEngine``'s capture "none"), which is how the tests check it.

``generate_batch(..., runner="static")`` decodes through it; the decoding loop, the per-image
processing (``adapter._process``) and the bookkeeping of images (``add``, ``remove``, ``crop``
through ``ImageSequence``) are ``BatchRunner``'s. What differs is where the keys live:

Its cache (``RowSlotLayer``), mask and positions, shapes, capture and arithmetic:
docs/runtimes.md.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch
from torch import Tensor

from .adapter import CausalLMAdapter, timed
from .batched import BatchRunner, ImageSequence
from .static import additive_mask, attended_length, int_at_least, record_graph, static_settings

CAPTURES = ("auto", "none", "graph")


@functools.lru_cache(maxsize=None)
def _row_slot_layer_class() -> type:
    from transformers.cache_utils import StaticLayer

    class RowSlotLayer(StaticLayer):
        """A ``StaticLayer`` of ``rows`` rows writing row r's T new keys at slots start[r] ..
        start[r] + T - 1 (``start`` [rows], shared, set by the runner) and handing attention
        the first L slots (``length[0]``) of the forward's rows."""

        def __init__(self, max_cache_len: int, rows: int, start: Tensor, length: list[int]):
            super().__init__(max_cache_len=max_cache_len)
            self.rows, self.start, self.length = rows, start, length
            self.zero = torch.zeros((), dtype=torch.long, device=start.device)

        def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
            self.device = key_states.device
            self.batch_size, self.num_heads = self.rows, key_states.shape[1]
            self.k_head_dim, self.v_head_dim = key_states.shape[-1], value_states.shape[-1]
            shape = (self.rows, self.num_heads, self.max_cache_len)
            self.keys = key_states.new_zeros(shape + (self.k_head_dim,))
            self.values = value_states.new_zeros(shape + (self.v_head_dim,))
            self.is_initialized = True

        def update(
            self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any
        ) -> tuple[Tensor, Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            R, H, T, _ = key_states.shape
            slots = self.start[:R].unsqueeze(1) + torch.arange(T, device=key_states.device)
            index = slots.view(R, 1, T, 1).expand(R, H, T, 1)
            self.keys[:R].scatter_(2, index.expand(-1, -1, -1, self.k_head_dim), key_states)
            self.values[:R].scatter_(2, index.expand(-1, -1, -1, self.v_head_dim), value_states)
            length = self.length[0]
            return self.keys[:R, :, :length], self.values[:R, :, :length]

        def get_seq_length(self) -> Tensor:
            return self.zero  # positions and the mask are the runner's (module docstring)

    return RowSlotLayer


class StaticBatchRunner(BatchRunner):
    """``BatchRunner`` on a static cache (module docstring). images: the most images at once;
    new_tokens: the most tokens an image decodes; window: the most drafts per forward (0: AR
    only); max_prompt: the longest prompt row (CFG rows included, as ``adapter.start`` completes
    them). capture: "auto", "none" or "graph" (CUDA). capacity_step / length_step: as
    ``StaticEngine``'s (length_step None: attention reads all C slots)."""

    def __init__(
        self,
        adapter: CausalLMAdapter,
        *,
        images: int,
        new_tokens: int,
        window: int,
        max_prompt: int,
        capture: str = "auto",
        capacity_step: int = 128,
        length_step: int | None = 256,
    ) -> None:
        super().__init__(adapter)
        for name, value, low in (
            ("images", images, 1),
            ("new_tokens", new_tokens, 1),
            ("window", window, 0),
            ("max_prompt", max_prompt, 1),
        ):
            int_at_least(name, value, low)
        capture, attention, text = static_settings(
            "the static batch runner", adapter, capture, CAPTURES, capacity_step, length_step
        )
        device = adapter.device
        self.capture, self.images, self.window_width = capture, images, window + 1
        self.max_prompt = max_prompt
        self.rows_per_image = 2 if adapter.uses_cfg else 1
        rows = self.rows_per_image * images
        needed = 2 * max_prompt + new_tokens + 2 * (window + 1)
        self.capacity = -(-needed // capacity_step) * capacity_step
        self._length_step = length_step
        self._additive = attention == "eager"
        self._slot_of: dict[int, int] = {}  # id(sequence) -> image slot
        self._start = torch.zeros(rows, dtype=torch.long, device=device)
        self._attended = [0]
        layer = _row_slot_layer_class()
        from transformers.cache_utils import Cache

        self.cache = Cache(
            layers=[
                layer(self.capacity, rows, self._start, self._attended)
                for _ in range(int(text.num_hidden_layers))
            ]
        )
        self._slot_ids = torch.arange(self.capacity, device=device)
        self._inputs: dict[tuple[int, int], Tensor] = {}
        self._graphs: dict[tuple[int, int, int], tuple[Any, Tensor]] = {}
        self.last_key: tuple[int, int, int] | None = None  # (rows, width, L) of the last forward
        self.capture_seconds = 0.0

    def add(self, prompt_ids: Any, uncond_prompt_ids: Any = None) -> ImageSequence:
        sequence = super().add(prompt_ids, uncond_prompt_ids)
        longest = max(row.prompt.numel() for row in sequence.rows)
        if longest > self.max_prompt:
            raise ValueError(
                f"a prompt row of {longest} tokens; the static batch runner was made for at most "
                f"{self.max_prompt} (max_prompt)"
            )
        return sequence

    # ---- layout: image slots, no data moved -----------------------------------------------

    def _compact(self) -> None:
        self._sequences = [s for s in self._sequences if s.active]
        taken = {self._slot_of[id(s)] for s in self._sequences if id(s) in self._slot_of}
        self._slot_of = {
            id(s): self._slot_of[id(s)] for s in self._sequences if id(s) in self._slot_of
        }
        for sequence in self._sequences:
            if id(sequence) not in self._slot_of:
                free = next((i for i in range(self.images) if i not in taken), None)
                if free is None:
                    raise ValueError(f"more than {self.images} images at once")
                self._slot_of[id(sequence)] = free
                taken.add(free)

    def _physical_rows(self) -> list[int]:
        """Each row of ``self._sequences`` (in order): its row in the cache."""
        per = self.rows_per_image
        return [self._slot_of[id(s)] * per + k for s in self._sequences for k in range(len(s.rows))]

    # ---- the forward ----------------------------------------------------------------------

    def _block_shape(self, longest: int) -> tuple[int, int]:
        """(width, R) of the block: width 1 for single tokens, the window width for windows,
        else the longest input (a prefill, eager at its own width); R the rows of the images up
        to the highest slot in use, rounded up to a power of two (at most every image)."""
        if longest == 1:
            width = 1
        elif longest <= self.window_width:
            width = self.window_width
        else:
            width = longest  # a prefill: eager at its own width
        highest = max(self._slot_of.values()) + 1
        bucket = 1
        while bucket < highest:
            bucket *= 2
        return width, self.rows_per_image * min(bucket, self.images)

    def _run(self, inputs: list[Tensor], starts: list[int]) -> tuple[Tensor, int]:
        """The model on the [R_b, width] block (module docstring): logits [R, K, V] of each
        row's input columns width - K .. width - 1 (rows in ``self._sequences`` order, right-
        padded as ``BatchRunner``'s), and width - K."""
        device = self.device
        rows = [row for s in self._sequences for row in s.rows]
        physical = self._physical_rows()
        counts = [ids.numel() for ids in inputs]
        width, R = self._block_shape(max(counts))
        held = [row.held for row in rows]
        filled = max(held) + width
        if filled > self.capacity:
            raise ValueError(
                f"the static batch cache holds {self.capacity} slots per row; this forward "
                f"needs {filled}"
            )
        self._attended[0] = attended_length(self.capacity, self._length_step, filled)
        start = torch.zeros(R, dtype=torch.long)
        block = torch.zeros(R, width, dtype=torch.long, device=device)
        for r, ids, count, n in zip(physical, inputs, counts, held):
            start[r] = n
            block[r] = torch.cat([ids, ids[-1:].expand(width - count)])
        self._start[:R].copy_(start)
        self._start[R:].zero_()
        fixed = width <= self.window_width
        key = (R, width, self._attended[0])
        self.last_key = key if fixed else None
        adapter = self.adapter
        saved, adapter.cache = adapter.cache, self.cache
        try:
            if fixed:
                buffer = self._input_buffer(R, width)
                buffer.copy_(block)
                if self.capture == "graph" and key not in self._graphs:
                    self._record(key, buffer)
            logits, seconds = timed(
                device, lambda: self._forward(key if fixed else None, buffer if fixed else block),
                torch.no_grad,
            )
            self.model_seconds += seconds
        finally:
            adapter.cache = saved
        self.num_forwards += 1
        for row, count in zip(rows, counts):
            row.held += count
        # Column c of the result is block column min(starts) + c, as BatchRunner's.
        first_column = min(starts)
        index = torch.tensor(physical, device=device)
        return logits.index_select(0, index)[:, first_column:], first_column

    def _forward(self, key: tuple[int, int, int] | None, ids: Tensor) -> Tensor:
        """The block's logits: the graph of ``key`` replayed (its outputs copied) when one is
        recorded, else the model on ``ids`` eagerly."""
        if key is not None and self.capture == "graph":
            graph, outputs = self._graphs[key]
            graph.replay()
            return outputs.clone()
        return self._model(ids)

    def _model(self, ids: Tensor) -> Tensor:
        """Logits [R, T, V] of ``ids`` [R, T] written at the rows' ``start`` slots."""
        R, T = ids.shape
        slots = self._start[:R].unsqueeze(1) + torch.arange(T, device=ids.device)  # [R, T]
        L = self._attended[0]
        mask = (self._slot_ids[:L].view(1, 1, L) <= slots.unsqueeze(2)).unsqueeze(1)  # R,1,T,L
        if self._additive:
            mask = additive_mask(mask, self.adapter.compute_dtype)
        return self.adapter.compute_logits(ids, mask, slots, T)

    def _input_buffer(self, rows: int, width: int) -> Tensor:
        key = (rows, width)
        if key not in self._inputs:
            self._inputs[key] = torch.zeros(rows, width, dtype=torch.long, device=self.device)
        return self._inputs[key]

    def _record(self, key: tuple[int, int, int], buffer: Tensor) -> None:
        """Record the model part of the forward ``key`` as a CUDA graph (warm-up runs on a side
        stream first; each writes only the slots this forward writes, with the same values)."""
        begin = time.perf_counter()
        self._graphs[key] = record_graph(self.device, lambda: self._model(buffer))
        torch.cuda.synchronize(self.device)
        self.capture_seconds += time.perf_counter() - begin
