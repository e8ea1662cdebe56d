"""A static-shape forward for ``generate(..., runner="static")``: a KV cache of fixed size, rollback
by cache position, two window shapes, and the window forward (model + logits processing)
captured as a CUDA graph or compiled. For a GPU, where an eager 7B forward is bound by its kernel
launches (docs/lumina-mgpt.md, section 5); on a CPU it serves the tests.

``StaticEngine(adapter)`` offers the ``CausalLMAdapter`` contract the decoding loop uses (its own
``start``, ``forward``, ``crop``, ``prompt``, ``num_forwards``, ``model_seconds``; the adapter's
for the rest) with the same results: ``forward`` returns ``adapter.forward``'s distributions
(``adapter._process``), ``crop`` rolls back.

Its cache (``StaticLayer``), shapes, capture modes and arithmetic: docs/runtimes.md.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

from ..engine.ranking import top_k_support, top_k_support_width
from .adapter import CausalLMAdapter, check_crop, forced_support

CAPTURES = ("auto", "none", "graph", "compile")
_COMPILED_FRAMES = [0]  # (width, L) frames compiled in this process, by every engine
ATTENTION = ("sdpa", "eager")


def int_at_least(name: str, value: Any, low: int) -> None:
    """Refuse ``value`` unless it is an int >= low (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def static_settings(
    what: str,
    adapter: CausalLMAdapter,
    capture: str,
    captures: tuple[str, ...],
    capacity_step: int,
    length_step: int | None,
) -> tuple[str, str, Any]:
    """The checks a static-cache forward of ``adapter`` shares (``StaticEngine``,
    ``gsd_lab.models.static_batched.StaticBatchRunner``; ``what`` names it in the errors):
    capture among ``captures``, "graph" on CUDA only, capacity_step an int >= 1, length_step
    one or None, sdpa or eager attention, full attention in every layer. Returns the capture
    ("auto" resolved: "graph" on CUDA, else "none"), the attention implementation and the
    model's text config. A model with a cache of its own (the stand-in's ``llama_forward``) is
    refused: the static cache is a ``transformers`` one."""
    adapter.require_transformers_cache(what)
    if capture not in captures:
        raise ValueError(f"unknown capture {capture!r}; expected one of {captures}")
    device = adapter.device
    if capture == "auto":
        capture = "graph" if device.type == "cuda" else "none"
    if capture == "graph" and device.type != "cuda":
        raise ValueError(f"capture 'graph' records CUDA graphs; the model is on {device}")
    int_at_least("capacity_step", capacity_step, 1)
    if length_step is not None and (
        isinstance(length_step, bool) or not isinstance(length_step, int) or length_step < 1
    ):
        raise ValueError(f"length_step must be an int >= 1 or None, got {length_step!r}")
    config = adapter.model.config
    attention = getattr(config, "_attn_implementation", None)
    if attention not in ATTENTION:
        raise ValueError(
            f"{what} prepares the attention mask for {ATTENTION} attention; the model uses "
            f"{attention!r} (load it with attn_implementation='sdpa')"
        )
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    kinds = set(getattr(text, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"} or getattr(text, "sliding_window", None):
        raise ValueError(f"{what} needs full attention in every layer, got {sorted(kinds)}")
    return capture, attention, text


def attended_length(capacity: int, step: int | None, filled: int) -> int:
    """The slots L attention reads: ``filled`` rounded up to a multiple of ``step``, at most the
    ``capacity`` C (step None: all C)."""
    return min(capacity, capacity if step is None else -(-filled // step) * step)


def additive_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean attention mask as eager attention's additive one: 0 where attended, the
    dtype's smallest value elsewhere."""
    return torch.zeros((), dtype=dtype, device=mask.device).where(mask, torch.finfo(dtype).min)


def record_graph(device: torch.device, run: Callable[[], Any]) -> tuple[Any, Any]:
    """Three warm-up calls of ``run`` on a side stream (lazy library set-up), then ``run``
    recorded as a CUDA graph (which runs nothing): (graph, its outputs)."""
    current = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            run()
    current.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        outputs = run()
    return graph, outputs


@functools.lru_cache(maxsize=None)
def _static_layer_class() -> type:
    from transformers.cache_utils import StaticLayer

    class SlotLayer(StaticLayer):
        """A ``StaticLayer`` writing at slots start .. start + T - 1 (``start`` shared, set by
        the engine) instead of after its own running count, and handing attention the first
        L slots only (``length[0]``, a host int the engine sets: a view, no copy)."""

        def __init__(self, max_cache_len: int, start: Tensor, length: list[int]) -> None:
            super().__init__(max_cache_len=max_cache_len)
            self.start = start
            self.length = length  # [L], shared: attention reads slots 0 .. L - 1 only

        def update(
            self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any
        ) -> tuple[Tensor, Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            slots = torch.arange(key_states.shape[-2], device=key_states.device) + self.start
            self.keys.index_copy_(2, slots, key_states)
            self.values.index_copy_(2, slots, value_states)
            length = self.length[0]
            return self.keys[:, :, :length], self.values[:, :, :length]

        def get_seq_length(self) -> Tensor:
            return self.start

    return SlotLayer


class StaticEngine:
    """The static-shape forward of one ``CausalLMAdapter`` (module docstring).

    capture: "auto" ("graph" on CUDA, else "none"), "none", "graph" (CUDA only) or "compile".
    compile_options: keyword arguments for ``torch.compile`` with capture "compile" (default
    ``fullgraph=True, dynamic=False``, plus ``mode="reduce-overhead"`` on CUDA).
    capacity_step: cache slots come in multiples of it (nearby prompt lengths reuse the cache
    and graphs). length_step: attention reads L = the slots in use rounded up to a multiple of
    it (at most C): one graph per (width, L), at most 2 C / length_step + 2; None reads all C.
    compile_cache: a file of inductor's compiled artifacts (capture "compile"), loaded before
    the first compilation and rewritten after each (a warm start in another process or machine
    with the same torch and device). capture_processing: False captures the model only, the
    processing then eager after each replay (a fallback should a device refuse to record it).
    """

    def __init__(
        self,
        adapter: CausalLMAdapter,
        *,
        capture: str = "auto",
        compile_options: dict[str, Any] | None = None,
        capacity_step: int = 128,
        length_step: int | None = 256,
        capture_processing: bool = True,
        compile_cache: str | os.PathLike[str] | None = None,
    ) -> None:
        if not isinstance(adapter, CausalLMAdapter):
            raise ValueError(f"adapter must be a CausalLMAdapter, got {type(adapter).__name__}")
        capture, attention, text = static_settings(
            "the static engine", adapter, capture, CAPTURES, capacity_step, length_step
        )
        if compile_options is not None and capture != "compile":
            raise ValueError("compile_options is for capture 'compile'")
        if compile_cache is not None and capture != "compile":
            raise ValueError("compile_cache is for capture 'compile'")
        device = adapter.device
        self.adapter = adapter
        self.device = device
        self.capture = capture
        self.capture_processing = bool(capture_processing)
        self._compile_options = dict(fullgraph=True, dynamic=False)
        if device.type == "cuda":
            self._compile_options["mode"] = "reduce-overhead"
        self._compile_options.update(compile_options or {})
        self._capacity_step = capacity_step
        self._length_step = length_step
        self._length = [0]  # L, shared with the cache layers
        self.compile_cache = None if compile_cache is None else Path(compile_cache)
        self.compile_cache_loaded = False
        # Whether the last forward's top-k support missed a positive id (0-d bool tensor, read
        # with the loop's status; None: the support is complete by construction).
        self.support_overflow: Tensor | None = None
        self.last_key: tuple[int, int] | None = None  # (width, L) of the last fixed-width forward
        self._num_layers = int(text.num_hidden_layers)
        self._additive_mask = attention == "eager"
        self.num_forwards = 0
        self._seconds = 0.0
        self._pending: list[tuple[Any, Any]] = []
        self._reserved = 0
        self._window_width: int | None = None
        self._cache: Any = None
        self._layout: tuple[int, int, torch.dtype] | None = None  # (capacity, batch, dtype)
        self._slots = 0
        self._started = False
        self._graphs: dict[tuple[int, int], Any] = {}  # (width, L) -> graph and outputs
        self._settings: tuple[Any, ...] | None = None
        self.capture_seconds = 0.0  # recording graphs / compiling, outside model_seconds

    def __getattr__(self, name: str) -> Any:
        """Everything else (``random_tokens``, ``forced_tokens``, ``row_length``, ``vocab_size``,
        ``allowed_tokens``, ...) is the adapter's: the engine stands in for it in the loop."""
        if name == "adapter":  # not set yet (during __init__): no recursion
            raise AttributeError(name)
        return getattr(self.adapter, name)

    # ---- sizes and buffers -------------------------------------------------------------

    def reserve(self, new_tokens: int, window: int) -> None:
        """Room for ``new_tokens`` slots after the prompt at the next ``start`` (generate passes
        the tokens to decode + window + 1) and the window width W = window + 1. A new width drops
        the old width's graph only; window 0 (AR, whose forwards after the prefill are 1 token
        wide) keeps the width and graphs there are: calls alternating AR with SJD or GSD record
        each graph once (a recording inside a call would count in its wall time)."""
        int_at_least("new_tokens", new_tokens, 1)
        int_at_least("window", window, 0)
        self._reserved = new_tokens
        if window > 0 and window + 1 != self._window_width:
            self._graphs = {
                key: graph for key, graph in self._graphs.items() if key[0] != self._window_width
            }
            self._window_width = window + 1

    @property
    def capacity(self) -> int:
        """Cache slots allocated (0 before the first ``start``)."""
        return 0 if self._layout is None else self._layout[0]

    def _allocate(self, capacity: int, batch: int, dtype: torch.dtype) -> None:
        device = self.device
        self._start = torch.zeros((), dtype=torch.long, device=device)
        layer = _static_layer_class()
        from transformers.cache_utils import Cache

        self._cache = Cache(
            layers=[layer(capacity, self._start, self._length) for _ in range(self._num_layers)]
        )
        self._pad = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self._key_ok = torch.ones(batch, capacity, dtype=torch.bool, device=device)
        self._generated_offset = torch.zeros((), dtype=torch.long, device=device)
        self._slot_ids = torch.arange(capacity, device=device)
        self._inputs: dict[int, Tensor] = {}
        self._graphs = {}
        self._compiled: Any = None
        for buffer in (
            self._start,
            self._pad,
            self._key_ok,
            self._generated_offset,
            self._slot_ids,
        ):
            torch._dynamo.mark_static_address(buffer)
        self._layout = (capacity, batch, dtype)

    def _input_buffer(self, width: int) -> Tensor:
        if width not in self._inputs:
            batch = self._layout[1]
            self._inputs[width] = torch.zeros(batch, width, dtype=torch.long, device=self.device)
            torch._dynamo.mark_static_address(self._inputs[width])
        return self._inputs[width]

    # ---- the adapter contract ----------------------------------------------------------

    def start(self, prompt_ids: Any, uncond_prompt_ids: Any = None) -> None:
        """The adapter's ``start`` (prompt checks, CFG rows; it also ends the adapter's own
        sequence), then this engine's cache set for it: (re)allocated when the prompt's width +
        the reserved tokens exceed its slots, or the batch or dtype changed; the per-prompt
        buffers written in place; graphs recorded under other processing settings (CFG scale,
        top-k, temperature, allowed tokens) dropped."""
        if self._reserved < 1:
            raise ValueError("call reserve(new_tokens, window) before start()")
        adapter = self.adapter
        adapter.start(prompt_ids, uncond_prompt_ids)
        rows = adapter._batch_prompt
        batch, width = rows.shape
        needed = width + self._reserved
        dtype = adapter.compute_dtype
        if (
            self._layout is None
            or needed > self._layout[0]
            or batch != self._layout[1]
            or dtype != self._layout[2]
        ):
            step = self._capacity_step
            self._allocate(-(-needed // step) * step, batch, dtype)
        settings = (
            adapter.cfg_scale,
            adapter.top_k,
            adapter.temperature,
            id(adapter.allowed_tokens),
        )
        if settings != self._settings:  # a recorded graph holds them as constants
            self._graphs, self._settings = {}, settings
        real = adapter._prompt_mask.to(torch.bool)
        self._pad.copy_((~real).sum(1, keepdim=True))
        self._key_ok.fill_(True)
        self._key_ok[:, :width].copy_(real)
        self._generated_offset.fill_(1 - width)
        self._width = width
        self._padding = width - adapter.prompt_len  # the conditional row's, as in the adapter
        self._slots = 0
        self._started = True

    @property
    def prompt(self) -> Tensor:
        return self.adapter.prompt

    @property
    def prompt_len(self) -> int:
        return self.adapter.prompt_len

    @property
    def seq_len(self) -> int:
        """Logical positions (prompt + generated tokens) held in the cache."""
        return self._slots - self._padding if self._slots else 0

    def crop(self, length: int) -> None:
        """Keep the first ``length`` logical positions (P <= length <= seq_len): the next forward
        writes from there."""
        check_crop(length, self.prompt_len, self.seq_len)
        self._slots = length + self._padding

    @property
    def model_seconds(self) -> float:
        """Seconds in the forwards (model + processing): perf_counter on a CPU, CUDA events on a
        GPU (read here, one sync, not in each forward)."""
        for begin, end in self._pending:
            end.synchronize()
            self._seconds += begin.elapsed_time(end) / 1e3
        self._pending.clear()
        return self._seconds

    def forward(
        self, input_ids: Tensor, num_rows: int | None = None, *, with_support: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """``CausalLMAdapter.forward`` on the static cache: the processed distributions [R, V] of
        the last R = ``num_rows`` (default T) of the T new tokens (a fresh tensor); with
        ``with_support``, (probs, support [R, K]): ids holding every id with p > 0 (forced rows:
        the forced id, then (forced + 1) mod V) unless ``support_overflow`` (set by each forward;
        ``_processed``) says otherwise."""
        if not self._started:
            raise ValueError("call start(prompt_ids) before forward()")
        adapter = self.adapter
        input_ids, num_rows = adapter._checked_input(input_ids, num_rows)
        T = input_ids.numel()
        batch = self._layout[1]
        if self._slots == 0:
            ids, width, rows = adapter._prefill_batch(input_ids), None, num_rows
            real = ids.shape[1]
        else:
            real = T
            width = 1 if T == 1 else self._window_width
            if width is not None and T > width:
                width = None
            ids, rows = input_ids.unsqueeze(0).expand(batch, -1), num_rows
        span = real if width is None else width
        if self._slots + span > self.capacity:
            raise ValueError(
                f"the static cache holds {self.capacity} slots; this forward needs "
                f"{self._slots + span} (reserve more new tokens before start())"
            )
        adapter.cache = self._cache
        self._start.fill_(self._slots)
        self._length[0] = attended_length(self.capacity, self._length_step, self._slots + span)
        if width is not None:
            self._fill_window(input_ids, width, batch)
        timer = self._begin()
        if width is None:
            with torch.no_grad():
                probs, support, overflow = self._step(ids, rows, with_support)
        else:
            probs, support, overflow = self._run(width, with_support)
            probs = probs[T - num_rows : T]
            support = support[T - num_rows : T] if with_support else None
            if with_support and overflow is not None:
                overflow = overflow[T - num_rows : T]
        probs = probs.clone()  # a graph's outputs are overwritten by its next replay
        support = support.clone() if with_support else None
        self.support_overflow = overflow.any() if with_support and overflow is not None else None
        self._end(timer)
        self.num_forwards += 1
        self._slots += real
        return (probs, support) if with_support else probs

    def _fill_window(self, input_ids: Tensor, width: int, batch: int) -> None:
        """Copy the T new tokens into the input buffer of ``width`` (a tail padded at its end
        with its last token) and capture that shape's graph if it is new."""
        buffer = self._input_buffer(width)
        T = input_ids.numel()
        if width > T:  # the tail: padded at its end with its last token
            input_ids = torch.cat([input_ids, input_ids[-1:].expand(width - T)])
        buffer.copy_(input_ids.expand(batch, -1))
        self.last_key = (width, self._length[0])
        if self.capture != "none" and self.last_key not in self._graphs:
            self._prepare(width)

    # ---- the step (captured) -----------------------------------------------------------

    def _step(
        self, ids: Tensor, num_rows: int, with_support: bool = True
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Model and processing for ``ids`` [B, T] at slots start .. start + T - 1, from the
        engine's buffers only: (probs [num_rows, V], support [num_rows, K] or None without
        ``with_support``, overflow [num_rows] or None: ``_processed``)."""
        return self._processed(*self._model(ids, num_rows), with_support)

    def _model(self, ids: Tensor, num_rows: int) -> tuple[Tensor, Tensor]:
        """The model part of ``_step``:
        (logits [B, num_rows, V], generated positions [num_rows])."""
        adapter = self.adapter
        T = ids.shape[1]
        slots = torch.arange(T, device=ids.device) + self._start
        positions = (slots.unsqueeze(0) - self._pad).clamp(min=0)
        length = self._length[0]
        causal = self._slot_ids[:length].unsqueeze(0) <= slots.unsqueeze(1)  # [T, L]
        mask = (self._key_ok[:, :length].unsqueeze(1) & causal.unsqueeze(0)).unsqueeze(1)  # B,1,T,L
        if self._additive_mask:
            mask = additive_mask(mask, self._layout[2])
        logits = adapter.compute_logits(ids, mask, positions, num_rows)
        return logits, slots[T - num_rows :] + self._generated_offset

    def _processed(
        self, logits: Tensor, generated: Tensor, with_support: bool
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """The processing part of ``_step``: (probs, support, overflow). The support: on a CPU
        outside compilation the adapter's kept ids (as its own forward gives; numpy; overflow
        None), else with top-k the allowed ids of each row's K largest entries (``top_k_support``,
        K = top-k + room for ties: 2250 of Lumina's 8192 image ids) and overflow [R] (True where a
        row has more than K positive entries), without top-k all allowed ids (overflow None);
        forced rows replaced."""
        adapter = self.adapter
        if not with_support:
            return adapter._process(logits, generated, sync_free=True), None, None
        probs, support = adapter._process(logits, generated, with_support=True, sync_free=True)
        overflow = None
        if support is None:
            allowed = adapter.allowed_tokens
            width = top_k_support_width(adapter.top_k, allowed.numel())
            if width < allowed.numel():
                support, overflow = top_k_support(probs, allowed, width)
            else:
                support = allowed.expand(generated.shape[0], -1)
            forced = adapter.forced_tokens(generated)
            if forced is not None:
                support = forced_support(support, forced, adapter.vocab_size)
                overflow = None if overflow is None else overflow & (forced < 0)
        return probs, support, overflow

    def _captured(self, ids: Tensor, width: int) -> tuple[Tensor, Tensor]:
        """What a graph records or compile compiles: the whole step (support included), or with
        ``capture_processing=False`` the model part only."""
        if self.capture_processing:
            return self._step(ids, width)
        return self._model(ids, width)

    def _run(
        self, width: int, with_support: bool = True
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """The width's forward from its input buffer: eager, replayed graph or compiled."""
        buffer = self._inputs[width]
        with torch.no_grad():
            if self.capture == "none":
                return self._step(buffer, width, with_support)
            if self.capture == "graph":
                graph, outputs = self._graphs[(width, self._length[0])]
                graph.replay()
            else:
                if self.device.type == "cuda":
                    torch.compiler.cudagraph_mark_step_begin()
                outputs = self._compiled(buffer, width)
            return outputs if self.capture_processing else self._processed(*outputs, with_support)

    def _prepare(self, width: int) -> None:
        """Before the first forward at a width (untimed, in ``capture_seconds``). "graph": three
        warm-up runs on a side stream (lazy library set-up), then the capture, which records and
        runs nothing; "compile": two calls (compilation; on CUDA the graph trees record on the
        second). Both write only the slots this forward writes, with the same values."""
        begin = time.perf_counter()
        buffer = self._inputs[width]
        if self.capture == "compile":
            if self._compiled is None:
                self._load_compile_cache()
                self._compiled = torch.compile(self._captured, **self._compile_options)
            self._graphs[(width, self._length[0])] = None
            # One frame per (width, L), counted by dynamo per code object (every engine's
            # ``_captured`` is one): past its limit (8) fullgraph=True fails.
            _COMPILED_FRAMES[0] += 1
            limit = 8 + 2 * _COMPILED_FRAMES[0]
            limits = {"recompile_limit": limit, "accumulated_recompile_limit": max(256, limit)}
            config = torch._dynamo.config
            with config.patch({k: v for k, v in limits.items() if hasattr(config, k)}):
                for _ in range(2):
                    self._run(width)
            self._save_compile_cache()
        else:
            recorded = record_graph(self.device, lambda: self._captured(buffer, width))
            self._graphs[(width, self._length[0])] = recorded
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.capture_seconds += time.perf_counter() - begin

    def _load_compile_cache(self) -> None:
        """Inductor's artifacts from ``compile_cache``, if the file exists (a warm start: the
        compiled kernels are read, not built; dynamo still traces)."""
        path = self.compile_cache
        if path is not None and path.is_file():
            loaded = torch.compiler.load_cache_artifacts(path.read_bytes())
            self.compile_cache_loaded = loaded is not None

    def _save_compile_cache(self) -> None:
        """Everything inductor compiled in this process so far, written to ``compile_cache``
        (atomically; nothing is written when there is nothing, e.g. a tracing-only backend)."""
        path = self.compile_cache
        artifacts = None if path is None else torch.compiler.save_cache_artifacts()
        if artifacts is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            partial.write_bytes(artifacts[0])
            partial.replace(path)

    # ---- timing ------------------------------------------------------------------------

    def _begin(self) -> Any:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _end(self, begin: Any) -> None:
        if self.device.type == "cuda":
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._pending.append((begin, end))
        else:
            self._seconds += time.perf_counter() - begin


def static_engine(adapter: CausalLMAdapter) -> StaticEngine:
    """The adapter's default ``StaticEngine`` (capture "auto"), made once and kept on the adapter
    so that its cache and captured graphs serve every later ``generate(..., runner="static")``."""
    engine = getattr(adapter, "_static_engine", None)
    if engine is None:
        engine = StaticEngine(adapter)
        adapter._static_engine = engine
    return engine


ENGINES = ("eager", "static")


def runner_for(
    adapter: CausalLMAdapter, engine: str | StaticEngine, *, new_tokens: int, window: int
) -> CausalLMAdapter | StaticEngine:
    """What ``generate`` runs its forwards on: the adapter itself (``runner="eager"``), the
    adapter's kept ``StaticEngine`` ("static") or the given one, reserved for ``new_tokens``
    slots after the prompt and windows of ``window`` drafts."""
    if isinstance(engine, StaticEngine):
        if engine.adapter is not adapter:
            raise ValueError("the StaticEngine given as engine wraps another adapter")
    elif engine == "static":
        engine = static_engine(adapter)
    elif engine == "eager":
        return adapter
    else:
        raise ValueError(f"unknown engine {engine!r}; expected one of {ENGINES} or a StaticEngine")
    engine.reserve(new_tokens, window)
    return engine
