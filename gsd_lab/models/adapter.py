"""``CausalLMAdapter``: next-token distributions from a Hugging Face causal LM, with a KV cache
that can be rolled back, classifier-free guidance, and the logits processing that turns
logits into the distribution tokens are sampled from (the full contract, which
``gsd_lab.decode.loop.generate`` relies on: docs/adapter-contract.md).

- ``start(prompt_ids, uncond_prompt_ids=None)``: a fresh cache and the prompt (P tokens);
- ``forward(input_ids [T], num_rows=None, *, with_support=False) -> probs [R, V]`` float64: the
  processed distribution of the token after each of the last R input positions, exactly the one
  tokens are sampled from and verified against (with ``with_support``: also ids [R, K] holding
  every id with p > 0); one call is one forward (``num_forwards``, ``model_seconds``);
- ``crop(length)``: roll back rejected drafts without recomputing the prefix;
- processing (``_process``): l = u + s (c - u) with CFG (``combine_guidance``), -inf outside
  ``allowed_tokens``, top-k, / temperature (``process_logits``), softmax, forced rows one-hot
  (``forced_tokens``);
- ``random_tokens``, ``embeddings``, ``code_content()``, ``row_length``, ``compute_dtype``;
  subclasses override ``compute_logits`` (Lumina-mGPT: from the backbone's hidden states).
"""

from __future__ import annotations

import inspect
import math
import time
from typing import Any, Callable

import torch
from torch import Tensor


def _numpy_ok(values: Tensor) -> bool:
    """Whether the numpy forms may run: a CPU tensor outside ``torch.compile``'s tracing (which
    cannot trace numpy's selection; the torch forms give the same values bit for bit)."""
    return values.device.type == "cpu" and not torch.compiler.is_compiling()


def kth_largest(values: Tensor, k: int) -> Tensor:
    """The k-th largest entry of each row of ``values`` [..., n], as [..., 1] (1 <= k <= n).

    An order statistic is one exact value whatever the algorithm: on CPU numpy's selection
    (``np.partition``, introselect on plain values, cheaper than ``torch.topk``), elsewhere
    ``kth_largest_topk`` (a sorted ``torch.topk``, no host sync). NaN counts as the largest
    value in both."""
    n = values.shape[-1]
    if _numpy_ok(values):
        import numpy as np

        selected = np.partition(values.numpy(), n - k, axis=-1)[..., n - k : n - k + 1]
        return torch.from_numpy(selected)
    return kth_largest_topk(values, k)


def kth_largest_topk(values: Tensor, k: int) -> Tensor:
    """``kth_largest`` by ``torch.topk`` on any device: the last of the k largest, sorted, as
    [..., 1]. Sorted, not the ``amin`` of an unsorted top-k: ``amin`` propagates NaN, so a row
    with a NaN among its k largest would give NaN on GPU where numpy gives the k-th value."""
    return torch.topk(values, k, dim=-1, sorted=True).values[..., -1:]


def mask_below_(values: Tensor, threshold: Tensor) -> Tensor:
    """In place: -inf where values < threshold (broadcast), everything else (NaN included) kept
    bit for bit; returns ``values``. On CPU a branch-free numpy form, cheaper than
    ``masked_fill_`` on randomly kept entries: min(x, b) with b = -inf where masked and NaN
    elsewhere, as ``fmin`` ignores a NaN operand (fmin(x, NaN) = x exactly, -0.0 and NaN x
    included)."""
    if not _numpy_ok(values):
        return values.masked_fill_(values < threshold, -torch.inf)
    import numpy as np

    array = values.numpy()
    bound = np.less(array, threshold.numpy()).astype(array.dtype)  # 1 where masked, else 0
    with np.errstate(invalid="ignore"):
        bound *= -np.inf  # -inf where masked; 0 * -inf = NaN where kept
    np.fmin(array, bound, out=array)
    return values


def kept_ids(logits: Tensor) -> Tensor | None:
    """Per row of processed logits [R, V] (CPU), the ids whose logit is not -inf: int64 [R, K],
    each row in ASCENDING id order, then padded (pads last) to the widest row K with that
    row's first -inf id.

    softmax(l)(y) = 0 exactly where l(y) = -inf, so every id with p > 0 appears once and the
    padding has p = 0 (a NaN or +inf logit is kept: its row is NaN and the decoder raises).
    The ascending order is for ``verify``, which sorts the support by id first (cheaper on
    sorted rows).
    None when a row keeps all V ids (no restriction: ``verify`` then finds the support itself).
    One comparison and a flat ``np.flatnonzero`` (cheaper than a 2-D ``np.nonzero``); the row
    counts are read off the sorted flat indices by a search (no second pass over [R, V])."""
    import numpy as np

    array = logits.numpy()
    rows, vocab = array.shape
    kept = array != -np.inf
    flat = np.flatnonzero(kept)  # row-major: row r's ids in increasing order, rows in turn
    counts = np.diff(np.searchsorted(flat, np.arange(rows + 1) * vocab))  # kept ids per row
    width = int(counts.max()) if rows else 0
    if width == vocab:
        return None
    if int(counts.min()) == width:  # equal rows (no ties at the k-th value): a reshape
        ids = flat.reshape(rows, width) - (np.arange(rows) * vocab)[:, None]
    else:
        row_of = np.repeat(np.arange(rows), counts)
        slot = np.arange(flat.size) - np.repeat(np.cumsum(counts) - counts, counts)
        ids = np.repeat(np.argmin(kept, axis=1)[:, None], width, axis=1)  # first -inf id
        ids[row_of, slot] = flat - row_of * vocab
    return torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64))


def one_hot_rows(tokens: Tensor, vocab: int) -> Tensor:
    """[R] ids in [0, V) -> [R, V] float64 one-hot rows, by a scatter: no range check that reads
    the ids back (``F.one_hot`` does one on CPU)."""
    out = torch.zeros(tokens.shape[0], vocab, dtype=torch.float64, device=tokens.device)
    return out.scatter_(1, tokens.unsqueeze(1), 1.0)


def forced_support(support: Tensor, forced: Tensor, vocab: int) -> Tensor:
    """``support`` [R, K] with each forced row (forced [R] >= 0, p one-hot there) replaced by
    [forced, (forced + 1) mod V, ...]: the one positive id once, then an id of p = 0."""
    column = torch.arange(support.shape[-1], device=support.device)
    forced = forced.to(support.device).unsqueeze(-1)
    forced_rows = torch.where(column == 0, forced, (forced + 1) % vocab)
    return torch.where(forced >= 0, forced_rows, support)


def cache_kwarg(module: torch.nn.Module) -> str:
    """The name under which ``module.forward`` takes its KV cache: "cache" (transformers >= 5.2x,
    where "past_key_values" is a deprecated alias) or "past_key_values" (earlier releases, where
    an unknown "cache" keyword would be silently dropped into ``**kwargs``)."""
    params = inspect.signature(module.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        # A wrapper's forward(*args, **kwargs) (compiled, PEFT): "past_key_values" is the name every
        # transformers 5.x release accepts (5.2x through a deprecation alias).
        return "past_key_values"
    raise ValueError(
        f"{type(module).__name__}.forward takes no KV cache (no 'cache' or 'past_key_values' "
        "argument); decoding needs a causal LM with a KV cache"
    )


def check_crop(length: Any, prompt_len: int, seq_len: int) -> None:
    """Refuse a crop ``length`` unless it is an int in [P, seq_len] (``crop`` of the adapter and
    of every runner)."""
    if not isinstance(length, int) or not prompt_len <= length <= seq_len:
        raise ValueError(
            f"crop length must be an int in [prompt_len={prompt_len}, seq_len={seq_len}], "
            f"got {length!r}"
        )


def timed(
    device: torch.device,
    run: Callable[[], Any],
    grad_mode: Callable[[], Any] = torch.inference_mode,
) -> tuple[Any, float]:
    """``run()`` under ``grad_mode()`` and its seconds (perf_counter; CUDA-synchronised before and
    after on a GPU): one forward of the adapter or of a batch runner."""
    sync = device.type == "cuda"
    if sync:
        torch.cuda.synchronize(device)
    began = time.perf_counter()
    with grad_mode():
        out = run()
    if sync:
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - began


class CausalLMAdapter:
    """Wrap a ``transformers`` causal LM (e.g. ``LlamaForCausalLM``); see docs/adapter-contract.md.

    model: the causal LM, in eval mode on its device. allowed_tokens: ids [A] that may be
    sampled (an image vocabulary), None for all. temperature > 0; top_k >= 1 or None;
    cfg_scale: guidance scale s (None: no CFG; s = 1 gives the conditional logits but still
    runs both rows). row_length: tokens per image row, for ``init="repeat_row"``.
    compute_dtype: None (the model's own dtype) or a floating dtype to cast the model to in
    place (torch.float64: the whole forward in float64, see docs/adapter-contract.md).
    """

    def __init__(
        self,
        model: Any,
        allowed_tokens: Tensor | list[int] | None = None,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        cfg_scale: float | None = None,
        row_length: int | None = None,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        if not isinstance(model, torch.nn.Module):
            raise ValueError(
                f"model must be a torch.nn.Module causal LM, got {type(model).__name__}"
            )
        self._cache_kwarg = cache_kwarg(model)
        params = inspect.signature(model.forward).parameters
        self._has_logits_to_keep = "logits_to_keep" in params
        self.model = model
        if compute_dtype is not None:
            self.set_compute_dtype(compute_dtype)
        self.device = next(model.parameters()).device
        self.vocab_size = self._infer_vocab_size(model)
        V = self.vocab_size

        self._set_allowed_tokens(allowed_tokens, V)

        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be an int >= 1 or None, got {top_k!r}")
        if row_length is not None and (not isinstance(row_length, int) or row_length < 1):
            raise ValueError(f"row_length must be an int >= 1 or None, got {row_length!r}")
        finite = isinstance(cfg_scale, (int, float)) and math.isfinite(cfg_scale)
        if cfg_scale is not None and not finite:
            raise ValueError(f"cfg_scale must be a finite number or None, got {cfg_scale!r}")
        self.temperature = float(temperature)
        self.top_k = top_k
        self.cfg_scale = None if cfg_scale is None else float(cfg_scale)
        self.row_length = row_length

        self.cache: Any = None
        self.num_forwards = 0
        self.model_seconds = 0.0
        self._prompt: Tensor | None = None
        self._seq_len = 0

    def _set_allowed_tokens(self, allowed_tokens: Tensor | list[int] | None, V: int) -> None:
        """``allowed_tokens`` checked (1-D integer ids in [0, V)), sorted and deduplicated, the
        mask of the others (None when every id is allowed) and their contiguous range if any."""
        if allowed_tokens is None:
            self.allowed_tokens = torch.arange(V, device=self.device)
            self._disallowed = None
        else:
            allowed = torch.as_tensor(allowed_tokens)
            if allowed.numel() == 0:
                raise ValueError("allowed_tokens is empty")
            if allowed.is_floating_point() or allowed.dtype == torch.bool or allowed.ndim != 1:
                raise ValueError("allowed_tokens must be a 1-D sequence of integer token ids")
            if allowed.min() < 0 or allowed.max() >= V:
                raise ValueError(
                    f"allowed_tokens has ids out of range [0, {V}): min {allowed.min().item()}, "
                    f"max {allowed.max().item()}"
                )
            allowed = torch.unique(allowed.long()).to(self.device)  # sorted, no duplicates
            self.allowed_tokens = allowed
            disallowed = torch.ones(V, dtype=torch.bool, device=self.device)
            disallowed[allowed] = False
            self._disallowed = disallowed if bool(disallowed.any()) else None
        # Allowed ids forming one contiguous run [lo, hi) (image codes usually do): processing
        # then works on a column slice (a view) instead of gathering and masking the columns.
        first, last = int(self.allowed_tokens[0]), int(self.allowed_tokens[-1])
        contiguous = last - first + 1 == self.allowed_tokens.numel()
        self._allowed_range = (first, last + 1) if contiguous else None

    def set_compute_dtype(self, dtype: torch.dtype) -> None:
        """Cast the model in place to the floating ``dtype`` (float64: ``cast_model_float64``).

        Ends the current sequence (call ``start`` again)."""
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"compute_dtype must be a floating torch.dtype, got {dtype!r}")
        if dtype == torch.float64:
            from .float64 import cast_model_float64

            cast_model_float64(self.model)
        else:
            self.model.to(dtype)
        # A cache of the old dtype cannot be extended: the next forward needs start() again.
        self.cache, self._prompt, self._seq_len = None, None, 0

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype of the model's parameters (the forward's dtype)."""
        return next(self.model.parameters()).dtype

    # ---- properties -------------------------------------------------------------------

    @staticmethod
    def _infer_vocab_size(model: Any) -> int:
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if head is not None and getattr(head, "weight", None) is not None:
            return int(head.weight.shape[0])
        size = getattr(getattr(model, "config", None), "vocab_size", None)
        if size is None:
            raise ValueError(
                "cannot tell the model's vocabulary size "
                "(no output embeddings, no config.vocab_size)"
            )
        return int(size)

    @property
    def embeddings(self) -> Tensor:
        """Input-embedding rows [V_in, D] (detached), for GSD's embedding-distance filter."""
        return self.model.get_input_embeddings().weight.detach()

    def code_content(self) -> Tensor | None:
        """The decoded content of each image code, float [K, D]: row i is the content of token
        ``allowed_tokens[i]`` (K = ``allowed_tokens.numel()``), the ground space of the
        similarity-aware distortion (``accounting.transport``: distances between rows). None here:
        a plain adapter does not know what its codes decode to; the stand-in (codebook patches in
        pixel space), Lumina-mGPT (VQGAN codebook vectors) and the tiny random model override it."""
        return None

    @property
    def seq_len(self) -> int:
        """Logical positions (prompt + generated tokens) held in the cache."""
        return self._seq_len

    @property
    def prompt(self) -> Tensor:
        """The current prompt [P] (int64, on ``device``)."""
        if self._prompt is None:
            raise ValueError("call start(prompt_ids) first")
        return self._prompt

    @property
    def prompt_len(self) -> int:
        return int(self.prompt.shape[0])

    @property
    def uses_cfg(self) -> bool:
        return self.cfg_scale is not None

    # ---- sequence management ----------------------------------------------------------

    def _check_prompt(self, ids: Any, name: str) -> Tensor:
        ids = torch.as_tensor(ids)
        if ids.numel() == 0:
            raise ValueError(f"{name} is empty: the model needs at least one prompt token")
        if ids.is_floating_point() or ids.dtype == torch.bool or ids.ndim != 1:
            raise ValueError(f"{name} must be a 1-D sequence of integer token ids (batch size 1)")
        if ids.min() < 0 or ids.max() >= self.model_vocab_size:
            raise ValueError(f"{name} has ids out of range [0, {self.model_vocab_size})")
        return ids.long().to(self.device)

    @property
    def model_vocab_size(self) -> int:
        """Number of input ids the model accepts (its input-embedding rows)."""
        return int(self.model.get_input_embeddings().weight.shape[0])

    def start(self, prompt_ids: Any, uncond_prompt_ids: Any = None) -> None:
        """Reset the cache and set the prompt (and, with CFG, the unconditional prompt)."""
        prompt = self._check_prompt(prompt_ids, "prompt_ids")
        if self.uses_cfg:
            if uncond_prompt_ids is None:
                raise ValueError(
                    "cfg_scale is set: start() needs uncond_prompt_ids for the unconditional row"
                )
            uncond = self._check_prompt(uncond_prompt_ids, "uncond_prompt_ids")
            width = max(prompt.numel(), uncond.numel())
            rows, mask = [], []
            for ids in (prompt, uncond):
                pad = width - ids.numel()
                # Padding reuses the row's first id (any valid id: it is masked out of attention).
                rows.append(torch.cat([ids[:1].expand(pad), ids]))
                zeros = torch.zeros(pad, dtype=torch.long)
                mask.append(torch.cat([zeros, torch.ones(ids.numel(), dtype=torch.long)]))
            self._batch_prompt = torch.stack(rows)
            self._prompt_mask = torch.stack(mask).to(self.device)
            self._padded = bool((self._prompt_mask == 0).any())
        else:
            if uncond_prompt_ids is not None:
                raise ValueError(
                    "uncond_prompt_ids given but cfg_scale is None (no classifier-free guidance)"
                )
            self._batch_prompt = prompt.unsqueeze(0)
            self._prompt_mask = torch.ones_like(self._batch_prompt)
            self._padded = False
        self._prompt = prompt
        self._seq_len = 0
        # Attention mask of the cached positions (kept for padded CFG prompts only).
        self._mask = self._prompt_mask[:, :0]
        self.cache = self._new_cache()

    @property
    def has_own_cache(self) -> bool:
        """Whether the model brings its own KV cache (``model.new_cache()``, e.g.
        ``gsd_lab.standin.llama_forward``) instead of using ``transformers``' cache classes."""
        return callable(getattr(self.model, "new_cache", None))

    def require_transformers_cache(self, runner: str) -> None:
        """ValueError unless the model takes ``transformers``' cache classes (the batched and
        static runners build their own caches from them)."""
        if self.has_own_cache:
            raise ValueError(
                f"{runner} needs a transformers model (its cache classes); "
                f"{type(self.model).__name__} brings its own cache and runs eagerly only "
                "(load the stand-in without fast_forward)"
            )

    def _new_cache(self) -> Any:
        """A fresh KV cache: the model's own when it offers one (``has_own_cache``), else a
        ``transformers`` ``DynamicCache``."""
        if self.has_own_cache:
            return self.model.new_cache()
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _cache_length(self) -> int:
        return int(self.cache.get_seq_length())

    def crop(self, length: int) -> None:
        """Keep the first ``length`` logical positions in the cache (both CFG rows).

        P <= length <= seq_len."""
        check_crop(length, self.prompt_len, self._seq_len)
        removed = self._seq_len - length
        if removed == 0:
            return
        self.cache.crop(-removed)
        self._seq_len = length
        if self._padded:
            self._mask = self._mask[:, : self._mask.shape[1] - removed]

    # ---- forward ----------------------------------------------------------------------

    def forward(
        self, input_ids: Tensor, num_rows: int | None = None, *, with_support: bool = False
    ) -> Tensor | tuple[Tensor, Tensor | None]:
        """Append ``input_ids`` [T] and return the processed next-token distributions [R, V]
        (float64) of its last R = ``num_rows`` (default T) positions. See docs/adapter-contract.md.

        with_support: return (probs, support) instead, support [R, K] int64 holding every id
        with p > 0 of its row once (``kept_ids``, ``forced_support``), or None (non-CPU device,
        or a row keeps all V ids)."""
        if self._prompt is None:
            raise ValueError("call start(prompt_ids) before forward()")
        input_ids, num_rows = self._checked_input(input_ids, num_rows)
        T = input_ids.numel()
        batch_ids, mask, positions = self._layout(input_ids)
        logits = self._timed_logits(batch_ids, mask, positions, num_rows)
        if self._padded:
            self._mask = mask
        first_row = self._seq_len + T - num_rows
        self._seq_len += T
        # Row j predicts logical position first_row + j + 1 = generated position (that - P).
        offset = first_row + 1 - self.prompt_len
        generated = torch.arange(offset, offset + num_rows, device=self.device)
        return self._process(logits, generated, with_support=with_support)

    def _layout(self, input_ids: Tensor) -> tuple[Tensor, Tensor | None, Tensor]:
        """What a forward appending ``input_ids`` [T] feeds the model: batch ids [B, W] (the
        padded prompts first at the prefill), the 2-D attention mask [B, cache + W] (padded CFG
        prompts only, else None) and position ids [B, W] (counting each row's real tokens)."""
        batch_size = self._batch_prompt.shape[0]
        if self._seq_len == 0:
            batch_ids = self._prefill_batch(input_ids)
        else:
            batch_ids = input_ids.unsqueeze(0).expand(batch_size, -1)
        cache_before = self._cache_length()
        width = batch_ids.shape[1]
        if self._padded:
            # Position ids count the real tokens of each row; padding is masked out.
            new_mask = (
                torch.ones_like(batch_ids)
                if self._seq_len
                else torch.cat(
                    [
                        self._prompt_mask,
                        torch.ones_like(batch_ids[:, self._prompt_mask.shape[1] :]),
                    ],
                    1,
                )
            )
            mask = torch.cat([self._mask, new_mask], 1)
            positions = (mask.cumsum(1) - 1).clamp(min=0)[:, -width:]
        else:
            mask = None
            positions = torch.arange(cache_before, cache_before + width, device=self.device)
            positions = positions.unsqueeze(0).expand(batch_size, -1)
        return batch_ids, mask, positions

    def _timed_logits(
        self, batch_ids: Tensor, mask: Tensor | None, positions: Tensor, num_rows: int
    ) -> Tensor:
        """``compute_logits`` as one forward pass: timed into ``model_seconds``
        (CUDA-synchronised), counted in ``num_forwards``; ValueError unless the cache grew by
        the batch's width W (batch_ids [B, W])."""
        cache_before, width = self._cache_length(), batch_ids.shape[1]
        logits, seconds = timed(
            self.device, lambda: self.compute_logits(batch_ids, mask, positions, num_rows)
        )
        self.model_seconds += seconds
        self.num_forwards += 1
        if self._cache_length() != cache_before + width:
            raise ValueError(
                f"{type(self.model).__name__} did not extend the KV cache (expected "
                f"{cache_before + width} positions, found {self._cache_length()}); "
                "decoding needs a model that uses the cache it is given"
            )
        return logits

    def _checked_input(self, input_ids: Any, num_rows: int | None) -> tuple[Tensor, int]:
        """``forward``'s arguments checked: (input_ids [T] on the device, num_rows in [1, T])."""
        input_ids = torch.as_tensor(input_ids, device=self.device)
        if input_ids.ndim != 1 or input_ids.numel() == 0:
            raise ValueError("input_ids must be a non-empty 1-D tensor of token ids (batch size 1)")
        T = input_ids.numel()
        num_rows = T if num_rows is None else num_rows
        if not 1 <= num_rows <= T:
            raise ValueError(f"num_rows must be in [1, {T}], got {num_rows}")
        return input_ids, num_rows

    def _prefill_batch(self, input_ids: Tensor) -> Tensor:
        """The first forward's batch ids [B, W]: each row's (padded) prompt, then the tokens of
        ``input_ids`` [T] after the prompt, which it must begin with."""
        P = self.prompt_len
        if input_ids.numel() < P or not torch.equal(input_ids[:P], self._prompt):
            raise ValueError("the first forward() after start() must begin with the prompt")
        tail = input_ids[P:].unsqueeze(0).expand(self._batch_prompt.shape[0], -1)
        return torch.cat([self._batch_prompt, tail], 1)

    def compute_logits(
        self, input_ids: Tensor, attention_mask: Tensor | None, position_ids: Tensor, num_rows: int
    ) -> Tensor:
        """Run the model on ``input_ids`` [B, T] with ``self.cache``; return logits [B, num_rows, V]
        of the last ``num_rows`` positions. attention_mask: [B, cache + T] or None (no padding)."""
        kwargs = {self._cache_kwarg: self.cache, "use_cache": True}
        if self._has_logits_to_keep:
            kwargs["logits_to_keep"] = num_rows
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs
        )
        return out.logits[:, -num_rows:, :]

    # ---- processing -------------------------------------------------------------------

    def _process(
        self,
        logits: Tensor,
        generated_positions: Tensor,
        *,
        with_support: bool = False,
        sync_free: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor | None]:
        """Logits [B, R, V] -> probs [R, V] (docs/adapter-contract.md, Processing, steps 1-4); with
        ``with_support``, (probs, support [R, K] or None) as in ``forward``.

        sync_free: no host read (for a captured or compiled forward, ``gsd_lab.models.static``):
        forced rows are set without first asking whether any row is forced (the same values)."""
        owned = logits.dtype != torch.float64  # .to() below makes a fresh tensor
        logits = logits.to(torch.float64)
        if self.uses_cfg:
            logits = self.combine_guidance(logits[0], logits[1], generated_positions)
        else:
            # A copy only when the model's own float64 output would be modified in place below.
            logits = logits[0] if owned else logits[0].clone()
        logits = self.process_logits(logits, generated_positions)
        # From the final logits (after any subclass's hooks): p > 0 only where they are not -inf.
        support = kept_ids(logits) if with_support and _numpy_ok(logits) else None
        probs = torch.softmax(logits, dim=-1)
        forced = self.forced_tokens(generated_positions)
        if forced is not None and sync_free:
            one_hot = one_hot_rows(forced.clamp(min=0), self.vocab_size)
            probs = torch.where((forced >= 0).unsqueeze(-1), one_hot, probs)
            if support is not None:
                support = forced_support(support, forced, self.vocab_size)
        elif forced is not None:
            is_forced = forced >= 0
            if bool(is_forced.any()):
                one_hot = torch.nn.functional.one_hot(forced.clamp(min=0), self.vocab_size)
                one_hot = one_hot.to(probs.dtype)
                probs = torch.where(is_forced.unsqueeze(-1), one_hot, probs)
                if support is not None:
                    support = forced_support(support, forced, self.vocab_size)
        return (probs, support) if with_support else probs

    def combine_guidance(self, cond: Tensor, uncond: Tensor, generated_positions: Tensor) -> Tensor:
        """Classifier-free guidance on logits [T, V]: u + s (c - u)."""
        # In place on the fresh difference: one allocation, the same value bit for bit.
        return (cond - uncond).mul_(self.cfg_scale).add_(uncond)

    def process_logits(self, logits: Tensor, generated_positions: Tensor) -> Tensor:
        """Allowed-token mask, top-k, temperature on float64 logits [T, V] (returns logits).

        Works in place on ``logits`` (``_process`` passes a tensor it owns) and returns it.
        Top-k keeps x >= t, t the k-th largest allowed logit of the row (ties with it kept, as
        Hugging Face's TopKLogitsWarper); a NaN logit is never masked (x < t is False), so it
        reaches the distribution and the decoder's finiteness check."""
        candidates = logits
        if self._allowed_range is not None:
            lo, hi = self._allowed_range
            logits[..., :lo] = -torch.inf
            logits[..., hi:] = -torch.inf
            if 2 * (hi - lo) < logits.shape[-1]:  # a narrow run (Lumina: 8192 of 65536)
                candidates = logits[..., lo:hi]
        elif self._disallowed is not None:
            logits.masked_fill_(self._disallowed, -torch.inf)
            if self.top_k is not None:  # the gather (a copy) only serves top-k
                candidates = logits[..., self.allowed_tokens]
        if self.top_k is not None:
            k = min(self.top_k, int(self.allowed_tokens.numel()))
            # The k-th largest allowed logit; over the whole row when the allowed run is most of
            # it (the same value: the other columns are -inf now and k <= the allowed count).
            mask_below_(logits, kth_largest(candidates, k))
        if self.temperature != 1.0:
            logits.div_(self.temperature)
        return logits

    def forced_tokens(self, generated_positions: Tensor) -> Tensor | None:
        """Token forced at each generated position [T] (-1 where free), or None: nothing forced."""
        return None

    def random_tokens(
        self,
        generated_positions: Tensor,
        generator: torch.Generator | None,
        *,
        respect_forced: bool = True,
    ) -> Tensor:
        """Uniform draws over ``allowed_tokens`` at generated positions [T]; forced where forced
        (``respect_forced=False``: uniform there too, the same draws)."""
        count = generated_positions.numel()
        index = torch.randint(
            self.allowed_tokens.numel(), (count,), generator=generator, device=self.device
        )
        tokens = self.allowed_tokens[index]
        if not respect_forced:
            return tokens
        forced = self.forced_tokens(generated_positions)
        if forced is not None:
            tokens = torch.where(forced >= 0, forced, tokens)
        return tokens
