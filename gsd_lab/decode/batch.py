"""Batched decoding: several images decoded together, one forward pass per step for all of them.

``generate_batch(adapter, requests)`` decodes each ``DecodeRequest`` (its prompt, method, number
of tokens and generator) exactly as ``gsd_lab.decode.loop.generate`` decodes it alone: each image
runs ``generate``'s own loop (``gsd_lab.decode.loop.DecodeLoop``: window, refill, emit, commit,
redraft) with its own generator, rule and stopping; only the forward is shared. A step is

    for each active image i: L_i = window size, refill its window (draws from generator i);
    one batched forward of every image's window ([last committed, drafts], the prompt at first)
        on ``gsd_lab.models.batched.BatchRunner`` (per-row cache lengths, rollback, padding);
    for each image i: verify / sample (draws from generator i), commit (crop its rows), redraft.

Acceptance is ragged: every image commits its own a_i + 1 tokens per step. An image that has
its ``num_tokens`` leaves the batch (its cache rows are dropped at the next step); with
``batch_size`` set, the next waiting request takes its place in the same step (continuous
batching: it prefills while the others decode). Methods may differ between images (AR, SJD,
GSD, LANTERN, coupled drafts, the release preset); windows and prompt lengths may too.

Why the tokens are those of ``generate``, timing, runners and callers: docs/decoding.md.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from ..accounting.transport import DEFAULT_DRAWS
from ..models.adapter import CausalLMAdapter
from ..models.batched import BatchRunner, ForwardCall, ImageSequence
from .loop import (
    DecodeLoop,
    DecodeResult,
    check_call,
    check_w1,
    max_window,
    resolve_method,
    w1_log_for,
)
from .methods import DecodingMethod, ResolvedMethod


@dataclass(frozen=True)
class DecodeRequest:
    """One image of a batch: the arguments ``generate`` takes for it. generator None: seeded
    from the OS (as ``generate``); uncond_prompt_ids: the unconditional prompt under CFG."""

    prompt_ids: Tensor
    method: DecodingMethod | ResolvedMethod
    num_tokens: int
    generator: torch.Generator | None = None
    uncond_prompt_ids: Tensor | None = None


@dataclass
class _Image:
    """An image in flight: its request's index, loop, sequence and clocks."""

    index: int
    loop: DecodeLoop
    sequence: ImageSequence
    wall: float = 0.0
    model: float = 0.0
    window: int = 0  # L of the current step

    def accounting(self) -> float:
        return self.loop.accounting_seconds()


def generate_batch(
    adapter: CausalLMAdapter,
    requests: list[DecodeRequest],
    *,
    batch_size: int | None = None,
    record_top1: bool = False,
    record_distortion: bool = False,
    record_w1: bool = False,
    w1_draws: int | None = DEFAULT_DRAWS,
    progress: Any = False,
    on_result: Callable[[int, DecodeResult], None] | None = None,
    runner: str | BatchRunner = "eager",
) -> list[DecodeResult]:
    """Decode every request (module docstring); returns their ``DecodeResult``s in order. A
    ``DecodingMethod`` is resolved once for all the requests naming it (``generate`` resolves
    it on every call; the rule objects are the same).

    batch_size: the most images in one forward (None: all at once); the others wait and join as
    images finish. record_top1 / record_distortion / record_w1 / w1_draws: as ``generate``, for
    every image. progress: True for a tqdm bar counting finished images, or an object whose
    ``update(1)`` is called as each image finishes (a bar of the caller's), or False.
    on_result: called as ``on_result(request index, result)`` as each image finishes (e.g. to
    write it to disk at once: ``gsd_lab.experiments.stream``). runner: "eager" (``BatchRunner``,
    a dynamic cache) or "static" (``gsd_lab.models.static_batched.StaticBatchRunner``: a static
    cache, CUDA graphs per (rows, width, length) on a GPU, static-eager on a CPU), or a
    ``BatchRunner`` of ``adapter`` (its ``num_forwards`` and ``model_seconds`` then count the
    batched forwards for the caller). Either runner
    checks each image's prompt with ``adapter.start`` and runs its forwards on its own cache, so
    the adapter is left started at the last image's prompt with an empty cache."""
    requests = list(requests)
    if batch_size is not None and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise ValueError(f"batch_size must be an int >= 1 or None, got {batch_size!r}")
    resolved = _resolve_requests(adapter, requests)
    content = adapter.code_content() if record_w1 else None
    if record_w1:
        check_w1(record_distortion, content)
    limit = len(requests) if batch_size is None else batch_size
    runner = _batch_runner(adapter, runner, requests, resolved, limit)
    waiting = deque(range(len(requests)))
    active: list[_Image] = []
    results: list[DecodeResult | None] = [None] * len(requests)
    if progress is True:
        bar = _progress_bar(len(requests))
    else:  # a bar of the caller's (identity tests: a tqdm bar's == compares bars)
        bar = None if progress is None or progress is False else progress
    while waiting or active:
        began = time.perf_counter()
        while waiting and len(active) < limit:
            index = waiting.popleft()
            active.append(
                _start(
                    runner,
                    requests[index],
                    resolved[index],
                    index,
                    record_top1,
                    record_distortion,
                    record_w1,
                    content,
                    w1_draws,
                )
            )
        accounting = [image.accounting() for image in active]
        model_before = runner.model_seconds
        _step(runner, active)
        spent = sum(image.accounting() - before for image, before in zip(active, accounting))
        share = (time.perf_counter() - began - spent) / len(active)
        model_share = (runner.model_seconds - model_before) / len(active)
        active = _settle(runner, active, (share, model_share), results, on_result, bar)
    if progress is True:
        bar.close()
    return results


def _resolve_requests(
    adapter: CausalLMAdapter, requests: list[DecodeRequest]
) -> list[ResolvedMethod]:
    """Each request's method resolved (once per distinct ``DecodingMethod``: LANTERN's table)
    and checked: token-by-token verification, one candidate, a generator of its own."""
    resolved, memo = [], {}  # one ResolvedMethod per distinct DecodingMethod (LANTERN's table)
    for i, request in enumerate(requests):
        if not isinstance(request, DecodeRequest):
            raise ValueError(f"requests[{i}] must be a DecodeRequest, got {type(request).__name__}")
        if isinstance(request.method, DecodingMethod):
            if request.method not in memo:
                memo[request.method] = resolve_method(adapter, request.method)
            method = memo[request.method]
        else:
            method = resolve_method(adapter, request.method)
        check_call(adapter, request.num_tokens, method, request.generator)
        if method.method.verifier != "token":
            raise ValueError(
                f"requests[{i}]: verifier {method.method.verifier!r} is decoded one image at a "
                "time (gsd_lab.decode.loop.generate); generate_batch verifies token by token only"
            )
        if method.method.branching:
            raise ValueError(
                f"requests[{i}]: candidates > 1 or a tree (a token tree per forward) "
                "runs in generate (eager) only; the batched runners have no tree forward"
            )
        resolved.append(method)
    generators = [id(r.generator) for r in requests if r.generator is not None]
    if len(set(generators)) < len(generators):
        raise ValueError(
            "two requests share one generator: the images would draw from it in turn, "
            "not as each decoded alone; give each request its own torch.Generator"
        )
    return resolved


def _step(runner: Any, active: list[_Image]) -> None:
    """One forward for every active image, then each image's emit, commit and re-draft."""
    outputs = runner.forward([_window_call(image) for image in active])
    for image, output in zip(active, outputs):
        p, support = output if isinstance(output, tuple) else (output, None)
        loop, L = image.loop, image.window
        accepted, forced = loop.emit(p, support, L)
        loop.commit(p, accepted, L, forced)
        loop.redraft(p, accepted, L)


def _settle(
    runner: Any,
    active: list[_Image],
    shares: tuple[float, float],
    results: list[DecodeResult | None],
    on_result: Callable[[int, DecodeResult], None] | None,
    bar: Any,
) -> list[_Image]:
    """Add this step's (wall, model) time shares to every active image; finish the images whose
    tokens are all decoded (removed from the runner, result stored, ``on_result`` called, bar
    advanced); return the images still decoding, in order."""
    still = []
    for image in active:
        image.wall += shares[0]
        image.model += shares[1]
        if image.loop.done >= image.loop.num_tokens:
            runner.remove(image.sequence)
            results[image.index] = _result(image)
            if on_result is not None:
                on_result(image.index, results[image.index])
            if bar is not None:
                bar.update(1)
        else:
            still.append(image)
    return still


def _batch_runner(
    adapter: CausalLMAdapter,
    kind: str | BatchRunner,
    requests: list[DecodeRequest],
    resolved: list[ResolvedMethod],
    images: int,
) -> BatchRunner:
    """The batched forwards ``runner`` names: "eager" or "static" (sized for these requests:
    their longest prompt row as ``adapter.start`` completes it, tokens and window), or the
    ``BatchRunner`` given."""
    if isinstance(kind, BatchRunner):
        if kind.adapter is not adapter:
            raise ValueError("the BatchRunner given runs another adapter than the one given")
        return kind
    if kind == "eager":
        return BatchRunner(adapter)
    if kind != "static":
        raise ValueError(f"unknown runner {kind!r}; expected 'eager' or 'static'")
    from ..models.static_batched import StaticBatchRunner

    longest = 1
    for request in requests:
        adapter.start(request.prompt_ids, request.uncond_prompt_ids)
        longest = max(longest, int(adapter._prompt_mask.sum(1).max()))
    return StaticBatchRunner(
        adapter,
        images=max(1, min(images, len(requests))),
        new_tokens=max((r.num_tokens for r in requests), default=1),
        window=max((max_window(m.method) for m in resolved), default=0),
        max_prompt=longest,
    )


def _start(
    runner: BatchRunner,
    request: DecodeRequest,
    resolved: ResolvedMethod,
    index: int,
    record_top1: bool,
    record_distortion: bool,
    record_w1: bool,
    content: Tensor | None,
    w1_draws: int | None,
) -> _Image:
    """An image joins: its sequence in the runner, its loop (as ``generate`` builds them)."""
    generator = request.generator
    adapter = runner.adapter
    if generator is None:
        generator = torch.Generator(device=adapter.device)
        generator.seed()
    num_tokens = request.num_tokens
    w1_log = None
    if record_w1:
        w1_log = w1_log_for(
            content, adapter, num_tokens, resolved, record_distortion, w1_draws, generator
        )
    sequence = runner.add(request.prompt_ids, request.uncond_prompt_ids)
    loop = DecodeLoop(
        sequence, resolved, generator, num_tokens, record_top1, record_distortion, w1_log
    )
    return _Image(index, loop, sequence)


def _window_call(image: _Image) -> ForwardCall:
    """This step's window of ``image`` (``DecodeLoop.forward``'s input): its size, refilled
    drafts."""
    loop = image.loop
    L = image.window = loop.window_size()
    loop.refill(L)
    head = loop.adapter.prompt if loop.done == 0 else loop.out[loop.done - 1 : loop.done]
    ids = torch.cat([head, loop.drafts])
    return ForwardCall(image.sequence, ids, L + 1, loop.wants_support and L > 0)


def _result(image: _Image) -> DecodeResult:
    """The image's ``DecodeResult``, as ``generate`` assembles it (``DecodeLoop.result``)."""
    loop = image.loop
    return loop.result(nfe=len(loop.accepted), wall_seconds=image.wall, model_seconds=image.model)


def _progress_bar(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="img", desc="batch")
