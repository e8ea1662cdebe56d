"""``BatchRunner``: the sequences of several images in one forward pass per step, on one
``CausalLMAdapter`` (the eager path, a ``DynamicCache``), each image with its own cache length.

Each image is a ``Sequence`` (``runner.add(prompt_ids, uncond_prompt_ids)``) offering the part of
the adapter contract that ``gsd_lab.decode.loop``'s loop uses (``prompt``, ``crop``,
``random_tokens``, ``forced_tokens``, ``row_length``, ``device``, ``vocab_size``) with the same
meaning as for the adapter alone; its forward is collective: ``runner.forward(calls)`` takes
one window per image (``input_ids`` [T_i], ``num_rows`` R_i, ``with_support``) and returns each
image's processed distributions [R_i, V] (and support), exactly what ``adapter.forward`` returns
for that image alone, up to the rounding of the model's batched arithmetic (docs/runtimes.md).

Model rows. An image is 1 model row, or 2 with CFG (conditional, unconditional; their prompts
may differ in length). The cache holds every active image's rows, [R, H, S, D] per layer.

The cache layout between forwards (left-padded rows, lazy ``crop`` / ``remove`` / ``add``), why
the batched arithmetic may differ in the last bit, and the costs: docs/runtimes.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .adapter import CausalLMAdapter, check_crop, timed

CPU_BATCH_SIZE = 8
CUDA_BATCH_SIZE = 8


def default_batch_size(device: torch.device | str) -> int:
    """Images per forward when the user does not say (``figures``, ``figures --paper``,
    ``evaluate``, the CLI): ``CUDA_BATCH_SIZE`` (8) on a GPU, ``CPU_BATCH_SIZE`` (8) elsewhere.

    Why: on a GPU a 7B forward at batch 1 is bound by reading the weights, so 8 images cost
    little more than one (``benchmarks/gpu_static_check.py``). On a CPU AR's 1-token forwards
    and the per-forward overhead are shared (``benchmarks/results/main_job_batched_standin.txt``);
    the figures job and ``evaluate`` split their images over one-thread worker processes by default
    (``gsd_lab.workers``), so busy cores slow them in proportion. A batched image's
    ``wall_seconds`` is its share of its batch's forwards, not its own latency. Tokens and NFE
    do not depend on it on a CPU in float64 (``gsd_lab.decode.batch``, tested); on a GPU batched
    forwards round differently from batch 1, so ``evaluate`` keeps a GPU run's batch size and
    runner in its identity. The GPU default has not run on a GPU yet."""
    kind = torch.device(device).type
    if kind == "cuda":
        return CUDA_BATCH_SIZE
    return CPU_BATCH_SIZE


@dataclass
class _Row:
    """One model row: ``prompt`` its real prompt ids, ``held`` the positions it holds in the
    cache, ``end`` the slot after the last of them (its held slots: [end - held, end))."""

    prompt: Tensor
    held: int = 0
    end: int = 0


@dataclass(frozen=True)
class ForwardCall:
    """One image's part of a batched forward (``BatchRunner.forward``): its window ``input_ids``
    [T] and the R = ``num_rows`` last positions whose distributions it needs."""

    sequence: "ImageSequence"
    input_ids: Tensor
    num_rows: int
    with_support: bool = False


class ImageSequence:
    """One image's sequence inside a ``BatchRunner``: the adapter's sequence contract (module
    docstring) for one image; its forwards go through ``BatchRunner.forward``."""

    def __init__(self, runner: "BatchRunner", prompt: Tensor, rows: list[_Row]) -> None:
        adapter = runner.adapter
        self.runner, self.rows, self._prompt = runner, rows, prompt
        self._seq_len = 0  # logical positions of the conditional sequence held, as the adapter's
        self.device, self.vocab_size = adapter.device, adapter.vocab_size
        self.row_length = adapter.row_length
        self.active = True

    @property
    def prompt(self) -> Tensor:
        return self._prompt

    @property
    def prompt_len(self) -> int:
        return int(self._prompt.shape[0])

    @property
    def seq_len(self) -> int:
        return self._seq_len

    def random_tokens(
        self,
        generated_positions: Tensor,
        generator: torch.Generator | None,
        *,
        respect_forced: bool = True,
    ) -> Tensor:
        return self.runner.adapter.random_tokens(
            generated_positions, generator, respect_forced=respect_forced
        )

    def forced_tokens(self, generated_positions: Tensor) -> Tensor | None:
        return self.runner.adapter.forced_tokens(generated_positions)

    def crop(self, length: int) -> None:
        """Keep the first ``length`` logical positions (P <= length <= seq_len), as
        ``CausalLMAdapter.crop``; the cache follows before the next forward."""
        check_crop(length, self.prompt_len, self._seq_len)
        removed = self._seq_len - length
        for row in self.rows:
            row.held -= removed
            row.end -= removed
        self._seq_len = length


class BatchRunner:
    """Batched forwards over ``adapter`` (module docstring). Lends the adapter its cache for
    the length of each forward; ``add`` checks a prompt with ``adapter.start``, which ends the
    adapter's own current sequence."""

    def __init__(self, adapter: CausalLMAdapter) -> None:
        if not isinstance(adapter, CausalLMAdapter):
            raise ValueError(f"adapter must be a CausalLMAdapter, got {type(adapter).__name__}")
        adapter.require_transformers_cache("the batched runner (BatchRunner)")
        self.adapter, self.device = adapter, adapter.device
        self.cache: Any = None
        self._sequences: list[ImageSequence] = []  # cache row order; removed ones until compacted
        self._row_order: list[_Row] = []  # the cache's rows, in order
        self._length = 0  # physical slots S of the cache
        self.num_forwards = 0
        self.model_seconds = 0.0

    @property
    def sequences(self) -> list[ImageSequence]:
        """The active images' sequences, in cache row order."""
        return [s for s in self._sequences if s.active]

    def add(self, prompt_ids: Any, uncond_prompt_ids: Any = None) -> ImageSequence:
        """A new image: its prompt (and, with CFG, unconditional prompt) checked and completed
        as ``adapter.start`` does (a subclass may supply a default unconditional prompt)."""
        adapter = self.adapter
        adapter.start(prompt_ids, uncond_prompt_ids)
        rows = [
            _Row(ids[mask.bool()].clone())
            for ids, mask in zip(adapter._batch_prompt, adapter._prompt_mask)
        ]
        sequence = ImageSequence(self, adapter.prompt.clone(), rows)
        self._sequences.append(sequence)
        return sequence

    def remove(self, sequence: ImageSequence) -> None:
        """The image is done: its rows leave the cache at the next forward."""
        sequence.active = False

    # ---- layout ---------------------------------------------------------------------------

    def _compact(self) -> None:
        """Restore the layout (module docstring): drop removed images' rows, right-align every
        row's held slots at the new end S = max held, append empty slots for new images' rows."""
        self._sequences = [s for s in self._sequences if s.active]
        rows = [row for s in self._sequences for row in s.rows]
        length = max((row.held for row in rows), default=0)
        if length == 0:  # only new images: a fresh cache
            self.cache, self._length, self._row_order = self.adapter._new_cache(), 0, rows
            return
        position = {id(row): i for i, row in enumerate(self._row_order)}
        old = [row for row in rows if id(row) in position]  # new rows (add() appends) come last
        keep = [position[id(row)] for row in old]
        layers = self._layers()
        every_row = keep == list(range(len(self._row_order)))
        if every_row and len({row.end for row in old}) == 1:
            end = old[0].end  # every row ends at one slot: a slice
            for layer in layers:
                layer.keys = layer.keys[:, :, end - length : end]
                layer.values = layer.values[:, :, end - length : end]
        else:
            rows_index = None if every_row else torch.tensor(keep, device=self.device)
            ends = torch.tensor([row.end for row in old], device=self.device)
            slots = ends.unsqueeze(1) - length + torch.arange(length, device=self.device)
            slots.clamp_(min=0)  # the left padding: any slot, masked
            for layer in layers:
                layer.keys = _gather_rows(layer.keys, rows_index, slots)
                layer.values = _gather_rows(layer.values, rows_index, slots)
        _append_empty_rows(layers, len(rows) - len(old))
        for row in rows:
            row.end = length
        self._length, self._row_order = length, rows

    def _layers(self) -> list[Any]:
        layers = getattr(self.cache, "layers", None)
        if layers is None:
            raise ValueError(
                "batched decoding needs a transformers cache with per-layer keys and "
                f"values, got {type(self.cache).__name__}"
            )
        return [layer for layer in layers if getattr(layer, "is_initialized", False)]

    # ---- forward --------------------------------------------------------------------------

    def forward(self, calls: list[ForwardCall]) -> list[Tensor | tuple[Tensor, Tensor | None]]:
        """One forward pass for every active image (each exactly once, in any order): per call,
        the processed distributions [R_i, V] of its last ``num_rows`` input positions (with
        ``with_support``, the pair (probs, support)), as ``CausalLMAdapter.forward``."""
        if sorted(id(c.sequence) for c in calls) != sorted(id(s) for s in self.sequences):
            raise ValueError("a batched forward takes exactly one call per active sequence")
        self._compact()
        by_sequence = {id(c.sequence): c for c in calls}
        inputs, starts = [], []  # per model row: its new ids, the first input column it reads
        for sequence in self._sequences:
            call = by_sequence[id(sequence)]
            ids = self._checked_input(sequence, call)
            for row in sequence.rows:
                if sequence.seq_len == 0:  # the prefill: this row's own prompt
                    row_ids = torch.cat([row.prompt, ids[sequence.prompt_len :]])
                else:
                    row_ids = ids
                inputs.append(row_ids)
                starts.append(row_ids.numel() - call.num_rows)
        logits, first_column = self._run(inputs, starts)
        results: dict[int, Any] = {}
        rows = iter(range(len(inputs)))
        for sequence in self._sequences:
            call = by_sequence[id(sequence)]
            index = [next(rows) for _ in sequence.rows]
            begins = {starts[r] - first_column for r in index}
            if len(begins) == 1:  # a view (the processing copies before writing)
                begin = begins.pop()
                own = logits[index[0] : index[-1] + 1, begin : begin + call.num_rows]
            else:  # the prefill of prompts of other lengths
                own = torch.stack(
                    [logits[r, starts[r] - first_column :][: call.num_rows] for r in index]
                )
            results[id(sequence)] = self._process(sequence, call, own)
        return [results[id(call.sequence)] for call in calls]

    def _checked_input(self, sequence: ImageSequence, call: ForwardCall) -> Tensor:
        ids = torch.as_tensor(call.input_ids, device=self.device)
        if ids.ndim != 1 or ids.numel() == 0:
            raise ValueError("input_ids must be a non-empty 1-D tensor of token ids (one image)")
        if not 1 <= call.num_rows <= ids.numel():
            raise ValueError(f"num_rows must be in [1, {ids.numel()}], got {call.num_rows}")
        if sequence.seq_len == 0:
            P = sequence.prompt_len
            if ids.numel() < P or not torch.equal(ids[:P], sequence.prompt):
                raise ValueError("an image's first forward must begin with its prompt")
        return ids

    def _run(self, inputs: list[Tensor], starts: list[int]) -> tuple[Tensor, int]:
        """The model on the padded [R, W] block: logits [R, K, V] of input columns
        W - K .. W - 1 (K covers every row's first column read), and W - K."""
        rows = [row for s in self._sequences for row in s.rows]
        S = self._length
        counts = [ids.numel() for ids in inputs]
        width = max(counts)
        batch = torch.stack(
            [torch.cat([ids, ids[-1:].expand(width - ids.numel())]) for ids in inputs]
        )
        held_list = [row.held for row in rows]
        held = torch.tensor(held_list, device=self.device)
        column = torch.arange(width, device=self.device)
        positions = held.unsqueeze(1) + column  # each row's real tokens counted
        mask = None
        if min(held_list) < S or min(counts) < width:
            slot = torch.arange(S, device=self.device)
            cached = slot >= S - held.unsqueeze(1)
            fed = column < torch.tensor(counts, device=self.device).unsqueeze(1)
            mask = torch.cat([cached, fed], 1).long()
        first_column = min(starts)
        adapter = self.adapter
        saved, adapter.cache = adapter.cache, self.cache
        # An adapter whose inputs depend on where each row's prompt ends (Janus: text vs image
        # embeddings) reads each row's real prompt length from ``row_prompt_lengths``.
        lends_lengths = hasattr(adapter, "row_prompt_lengths")
        if lends_lengths:
            lengths = [row.prompt.numel() for row in rows]
            adapter.row_prompt_lengths = torch.tensor(lengths, device=self.device)
        try:
            kept = width - first_column
            logits, seconds = timed(
                self.device, lambda: adapter.compute_logits(batch, mask, positions, kept)
            )
            self.model_seconds += seconds
        finally:
            adapter.cache = saved
            if lends_lengths:
                adapter.row_prompt_lengths = None
        self.num_forwards += 1
        found = int(self.cache.get_seq_length())
        if found != S + width:
            name = type(adapter.model).__name__
            raise ValueError(
                f"{name} did not extend the KV cache (expected {S + width} positions, "
                f"found {found})"
            )
        for row, count in zip(rows, counts):
            row.held += count
            row.end = S + count
        self._length = S + width
        return logits, first_column

    def _process(
        self, sequence: ImageSequence, call: ForwardCall, logits: Tensor
    ) -> Tensor | tuple[Tensor, Tensor | None]:
        """One image's logits [rows, R, V] through ``adapter._process`` (module docstring), its
        generated positions as the adapter numbers them."""
        T = call.input_ids.numel()
        first = sequence.seq_len + T - call.num_rows + 1 - sequence.prompt_len
        sequence._seq_len += T
        generated = torch.arange(first, first + call.num_rows, device=self.device)
        return self.adapter._process(logits, generated, with_support=call.with_support)


def _append_empty_rows(layers: list[Any], count: int) -> None:
    """Append ``count`` zero rows (new images' empty slots) to every layer's keys and values."""
    if count:
        for layer in layers:
            shape = (count,) + tuple(layer.keys.shape[1:])
            layer.keys = torch.cat([layer.keys, layer.keys.new_zeros(shape)])
            layer.values = torch.cat([layer.values, layer.values.new_zeros(shape)])


def _gather_rows(states: Tensor, rows: Tensor | None, slots: Tensor) -> Tensor:
    """states [R, H, S, D] -> [R', H, S', D]: row rows[i] (None: every row, in order), its slots
    slots[i] [S']. One ``index_select`` of whole D-vectors from states seen as [R * H * S, D]
    (a copy, the same values as ``gather`` along S, cheaper on a CPU)."""
    _, heads, length, dim = states.shape
    count, kept = slots.shape
    if rows is None:
        rows = torch.arange(count, device=states.device)
    head = torch.arange(heads, device=states.device).view(1, heads, 1)
    flat = (rows.view(count, 1, 1) * heads + head) * length + slots.view(count, 1, kept)
    picked = states.reshape(-1, dim).index_select(0, flat.reshape(-1))
    return picked.view(count, heads, kept, dim)
