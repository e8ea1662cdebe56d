"""Autoregressive (AR), Speculative Jacobi (SJD, arXiv 2410.01699) and Grouped Speculative
(GSD, arXiv 2508.07747) decoding over a ``CausalLMAdapter``, batch size 1.

One loop serves all three. State: the committed tokens x_0..x_{n-1} (the cache holds the
prompt and every committed token except the last) and a window of L drafts d_0..d_{L-1} for
generated positions n..n+L-1, each with the distribution q_i it was drawn from.

Each iteration is one forward pass over [x_{n-1}, d_0, ..., d_{L-1}] (the first iteration
feeds [prompt, d_0, ...]: the prefill is part of it and counted in nfe). Its L + 1 output rows
p_0..p_L are the target distributions of positions n..n+L given the drafts before them.
``gsd_lab.engine.verify(p, q, d, rule)`` (gsd_core.verify's result, bit for bit) accepts a
prefix d_0..d_{a-1} (position i accepts with probability min(1, p_i(C)/q_i(C)), C = {d_i} for
SJD, the GSD cluster otherwise; the rule is ``method_rule`` of generate's arguments)
and emits one more token: drawn from the residual of row a at a rejection, or from the bonus
row p_L when all L are accepted. So every forward commits a + 1 >= 1 tokens. The cache is
cropped to the accepted length. The positions after a rejection keep Jacobi drafts: for
j = a+1..L a new draft is sampled from this iteration's p_j and that row becomes its q (the
bonus row p_L drafts position n+L); fresh drafts refill the window: uniform over the allowed
tokens with one-hot q (``init="random"``), or the committed/drafted token one image row up
(``init="repeat_row"``; one-hot q, random while no row is above).

With clusters=None (SJD) each committed token is an exact draw from the AR distribution
(standard speculative sampling; a draft's q is exactly the distribution it was drawn from,
and drafts are independent of the current iteration's uniforms). GSD's dynamic clusters are
lossy by design (see gsd_core). ``method="ar"`` is the same loop with L = 0: one token per
forward, sampled from p_0. The window is capped at the tokens still needed minus one (the
bonus row supplies the last), so L = 0 steps can occur at the very end of SJD/GSD too.

All randomness comes from ``generator`` (on the adapter's device). Batch size 1 only, as the
papers measure latency at batch 1. Each forward pass is followed by one status read of the
device (the accepted count and the sum of p); a non-finite distribution (NaN or inf from the
model) raises ``FloatingPointError`` naming the forward pass and the generated positions,
at the step it appears. verify adds one read per step (L > 0) only for ``DynamicClusters``
ranking by p without the adapter's support of p (the adapter computes one on CPU only): the
widest support it ranks (``gsd_lab.engine``); every other rule adds none (measured:
tests/lab/test_engine_costs.py).

``engine="static"`` runs the same loop on ``gsd_lab.models.static.StaticEngine`` (a static KV
cache rolled back by cache position, fixed window shapes, the forward captured as a CUDA graph
on a GPU): same draws, same tokens where the arithmetic is the same (that module's docstring),
and the step's status read stays its only host sync, GSD's ``DynamicClusters`` included.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from gsd_core import Amplify, Lantern
from gsd_core.rules import Partition, Rule, as_rule

from .distortion import DistortionLog
from .engine import draw, uses_support, verify
from .transport import DEFAULT_DRAWS, W1Estimate, W1Log

from .models.adapter import CausalLMAdapter
from .models.adapter import one_hot_rows as _one_hot
from .models.static import StaticEngine, runner_for

METHODS = ("ar", "sjd", "gsd")
INITS = ("random", "repeat_row")


@dataclass
class DecodeResult:
    """Outcome of one ``generate`` call.

    tokens: [num_tokens] generated ids (CPU, int64). nfe: forward passes (a CFG pair is one;
    the prefill is one). accepted / drafted: per forward pass, drafts accepted and drafts
    verified (both 0 for AR steps). acceptance_rate = sum(accepted) / sum(drafted): the share
    of verified drafts accepted (None when nothing was drafted, e.g. AR). Every forward commits
    accepted + 1 tokens, so num_tokens = sum(accepted) + nfe. wall_seconds: whole call;
    model_seconds: inside the model's forward
    (``CausalLMAdapter.compute_logits``); everything else (logits processing, verification,
    bookkeeping) is overhead. top1: [num_tokens] float64 max_y p(y) of the row each token was
    emitted from (its target distribution), when ``record_top1``. distortion: [num_tokens]
    float64 exact TV(one-step output law, p) of each emitted token (0 for SJD, AR steps and bonus
    tokens; ``gsd_lab.distortion``), when ``record_distortion``; w1: the similarity-aware
    distortion, W1(one-step output law, p) with the codes' content distance as ground cost, its
    mean per emitted token exact or estimated (``gsd_lab.transport.W1Estimate``), when
    ``record_w1``; accounting_seconds: the time both took, excluded from wall_seconds (a
    measurement, not part of the method).
    """

    tokens: Tensor
    nfe: int
    accepted: list[int]
    drafted: list[int]
    acceptance_rate: float | None
    wall_seconds: float
    model_seconds: float
    method: str
    window: int
    top1: Tensor | None = None
    distortion: Tensor | None = None
    accounting_seconds: float = 0.0
    w1: W1Estimate | None = None

    @property
    def overhead_seconds(self) -> float:
        return self.wall_seconds - self.model_seconds

    @property
    def overhead_share(self) -> float:
        """Share of wall time spent outside the model's forward pass."""
        return self.overhead_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens.numel() / self.nfe


def _overrule_at_forced(adapter: CausalLMAdapter, done: int, accepted: int, tokens: Tensor) -> int:
    """With random drafts at forced positions (``forced_drafts=False``): a draft accepted where
    another token is forced (p(draft) = 0; a rule without the gap filter can cluster it with the
    forced token) counts as rejected there, and the forced token is emitted, as the GSD release's
    rule does. Returns the accepted count; writes the forced token into ``tokens``. One host read."""
    positions = torch.arange(done, done + accepted + 1, device=tokens.device)
    forced = adapter.forced_tokens(positions)
    if forced is None:
        return accepted
    wrong = ((forced >= 0) & (tokens[: accepted + 1] != forced)).nonzero().flatten().tolist()
    if not wrong:
        return accepted
    first = wrong[0]
    tokens[first] = forced[first]
    return first


def _check_args(
    adapter, num_tokens, method, window, clusters, init, generator, acceptance_scale
) -> None:
    if not isinstance(adapter, CausalLMAdapter):
        raise ValueError(f"adapter must be a CausalLMAdapter, got {type(adapter).__name__}")
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 1:
        raise ValueError(f"num_tokens must be an int >= 1, got {num_tokens!r}")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    if method == "sjd" and clusters is not None:
        raise ValueError(
            "method 'sjd' verifies token by token; pass clusters only with method 'gsd'"
        )
    if method == "gsd" and clusters is None:
        raise ValueError(
            "method 'gsd' needs clusters (e.g. gsd_core.DynamicClusters(group_size=...))"
        )
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}; expected one of {INITS}")
    if init == "repeat_row" and adapter.row_length is None:
        raise ValueError("init='repeat_row' needs an adapter that knows its row_length")
    if generator is not None and torch.device(generator.device).type != adapter.device.type:
        raise ValueError(
            f"generator is on {generator.device} but the adapter's model is on {adapter.device}"
        )
    if not acceptance_scale > 0:
        raise ValueError(f"acceptance_scale must be > 0, got {acceptance_scale!r}")


def _check_lantern(adapter, method, residual, acceptance_scale, lantern) -> None:
    if lantern is None:
        return
    if not isinstance(lantern, Lantern):
        raise ValueError(f"lantern must be a gsd_core.Lantern or None, got {type(lantern).__name__}")
    if method != "sjd" or residual != "token" or acceptance_scale != 1.0:
        raise ValueError(
            "lantern replaces SJD's acceptance test: use method 'sjd' with residual 'token' and "
            f"acceptance_scale 1 (got method {method!r}, residual {residual!r}, "
            f"acceptance_scale {acceptance_scale!r})"
        )
    if lantern.neighbourhoods.vocab_size != adapter.vocab_size:
        raise ValueError(
            f"lantern's neighbourhoods cover {lantern.neighbourhoods.vocab_size} tokens but the "
            f"model's vocabulary has {adapter.vocab_size}"
        )


def method_rule(clusters: object = None, residual: str = "token", acceptance_scale: float = 1.0,
                lantern: Lantern | None = None) -> Rule:
    """The gsd_core rule of ``generate``'s method arguments: ``lantern`` or ``clusters`` (None,
    partition labels [V] or a rule), with the cluster-exact residual for residual="cluster"
    (partitions only; SD's singletons keep the token residual, which is the same), wrapped in
    ``Amplify(acceptance_scale)`` when the scale is not 1."""
    rule = as_rule(lantern if lantern is not None else clusters)
    if residual == "cluster" and not isinstance(rule, Partition) and clusters is not None:
        raise ValueError(f"the cluster-exact residual needs a partition; {type(rule).__name__} is not one "
                         "(use residual='token', or a partition such as RankBinnedClusters or labels)")
    if residual == "cluster" and isinstance(rule, Partition):
        rule = dataclasses.replace(rule, residual="cluster")
    elif residual not in ("token", "cluster"):
        raise ValueError(f"unknown residual mode {residual!r}; expected 'token' or 'cluster'")
    return rule if acceptance_scale == 1.0 else Amplify(acceptance_scale, rule)


def _repeat_row_drafts(
    history: Tensor,
    start: int,
    count: int,
    row_length: int,
    adapter: CausalLMAdapter,
    generator: torch.Generator | None,
) -> Tensor:
    """Drafts for generated positions start..start+count-1: the token ``row_length`` positions
    earlier (``history`` holds positions 0..start-1, committed then drafted), random where no
    row is above; forced tokens where forced."""
    positions = torch.arange(start, start + count, device=adapter.device)
    tokens = adapter.random_tokens(positions, generator)
    seq = torch.cat([history, tokens])
    # Each pass fills at most one row's worth of positions whose source is already final.
    for offset in range(0, count, row_length):
        chunk = positions[offset: offset + row_length]
        source = chunk - row_length
        has_source = source >= 0
        seq[chunk] = torch.where(has_source, seq[source.clamp(min=0)], seq[chunk])
    drafts = seq[start:]
    forced = adapter.forced_tokens(positions)
    if forced is not None:
        drafts = torch.where(forced >= 0, forced, drafts)
    return drafts


def generate(
    adapter: CausalLMAdapter,
    prompt_ids: Tensor,
    *,
    num_tokens: int,
    method: str,
    window: int = 16,
    clusters: object = None,
    residual: str = "token",
    init: str = "random",
    generator: torch.Generator | None = None,
    acceptance_scale: float = 1.0,
    record_top1: bool = False,
    progress: bool = False,
    uncond_prompt_ids: Tensor | None = None,
    record_distortion: bool = False,
    lantern: Lantern | None = None,
    jacobi_positions: tuple[int, int] | None = None,
    forced_drafts: bool = True,
    engine: str | StaticEngine = "eager",
    record_w1: bool = False,
    w1_draws: int | None = DEFAULT_DRAWS,
) -> DecodeResult:
    """Generate ``num_tokens`` tokens after ``prompt_ids`` by AR, SJD or GSD (module docstring).

    adapter: a ``CausalLMAdapter`` (its processing defines the target distribution).
    prompt_ids: [P] prompt; uncond_prompt_ids: the unconditional prompt when the adapter uses
    CFG. method: "ar", "sjd" or "gsd" (gsd needs ``clusters``: a gsd_core rule or partition
    labels [V]; ``residual`` "token" or "cluster" as in gsd_core.verify). window: drafts L per
    forward (ignored by AR). acceptance_scale k > 1: the lossy "Amplify" relaxation
    min(1, k p(C)/q(C)) of gsd_core.verify (1: exact). lantern: LANTERN's relaxed acceptance
    (gsd_core's ``Lantern`` rule) instead of SJD's test; method "sjd" only, residual "token",
    acceptance_scale 1. record_distortion: fill ``DecodeResult.distortion`` (exact, no randomness
    drawn: the same tokens either way; its time is ``accounting_seconds``, not in wall_seconds).
    jacobi_positions (start, end): drafts only while start <= n < end (n tokens committed), and
    never past end (L <= end - n - 1); one AR step per forward elsewhere (the GSD release's
    ``jacobi_loop_interval``). forced_drafts=False: fresh random drafts are uniform over the
    allowed tokens even where the adapter forces a token (the release's random init; such a
    draft is rejected there).
    engine: where the forwards run, an execution option (the same method either way): "eager"
    (the adapter, a dynamic cache), "static" (the adapter's ``gsd_lab.models.static.StaticEngine``:
    static cache, fixed window shapes, CUDA graphs on a GPU) or a ``StaticEngine``.
    record_w1 (needs record_distortion and the adapter's ``code_content()``): fill
    ``DecodeResult.w1``, W1(law, p) per emitted token, exact for every token when ``w1_draws`` is
    None, else estimated from ``w1_draws`` rows drawn in proportion to their TV by a generator of
    its own seeded with ``generator.initial_seed()`` (``gsd_lab.transport``; no draw from
    ``generator``, so again the same tokens). Batch size 1.
    """
    _check_args(adapter, num_tokens, method, window, clusters, init, generator, acceptance_scale)
    _check_lantern(adapter, method, residual, acceptance_scale, lantern)
    if jacobi_positions is not None and not (0 <= jacobi_positions[0] <= jacobi_positions[1]):
        raise ValueError(f"jacobi_positions must be (start, end) with 0 <= start <= end, got {jacobi_positions!r}")
    if generator is None:
        generator = torch.Generator(device=adapter.device)
        generator.seed()
    device, vocab = adapter.device, adapter.vocab_size
    max_window = 0 if method == "ar" else window
    rule = method_rule(clusters, residual, acceptance_scale, lantern)
    # The adapter's kept ids spare verify the count and the selection over all V.
    wants_support = uses_support(rule)

    # Where the forwards run: the adapter itself, or a StaticEngine standing in for it.
    adapter = runner_for(adapter, engine, new_tokens=num_tokens + max_window + 1, window=max_window)

    wall_start = time.perf_counter()
    model_seconds_before = adapter.model_seconds
    forwards_before = adapter.num_forwards
    adapter.start(prompt_ids, uncond_prompt_ids)
    prompt = adapter.prompt
    prompt_len = prompt.numel()

    out = torch.empty(num_tokens + max_window + 1, dtype=torch.long, device=device)
    top1 = None
    if record_top1:
        top1 = torch.empty(num_tokens + max_window + 1, dtype=torch.float64, device=device)
    log = None
    if record_distortion:
        log = DistortionLog(num_tokens + max_window + 1, device, rule)
    w1_log = None
    if record_w1:
        content = adapter.code_content()
        if not record_distortion or content is None:
            raise ValueError("record_w1 needs record_distortion=True (its rows are drawn by their TV) and an "
                             "adapter whose code_content() gives its codes' decoded content")
        w1_log = W1Log(content, adapter.allowed_tokens, num_tokens + max_window + 1, rule, draws=w1_draws,
                       seed=generator.initial_seed())
    drafts = torch.empty(0, dtype=torch.long, device=device)
    q = torch.empty(0, vocab, dtype=torch.float64, device=device)
    accepted_log: list[int] = []
    drafted_log: list[int] = []
    done = 0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_tokens, unit="tok", desc=method)

    while done < num_tokens:
        L = min(max_window, num_tokens - done - 1)
        if jacobi_positions is not None:
            start, end = jacobi_positions
            L = min(L, end - done - 1) if start <= done < end else 0
        drafts, q = drafts[:L], q[:L]
        missing = L - drafts.numel()
        if missing > 0:
            start = done + drafts.numel()
            if init == "repeat_row":
                fresh = _repeat_row_drafts(torch.cat([out[:done], drafts]), start, missing,
                                           adapter.row_length, adapter, generator)
            else:
                positions = torch.arange(start, start + missing, device=device)
                fresh = adapter.random_tokens(positions, generator, respect_forced=forced_drafts)
            drafts = torch.cat([drafts, fresh])
            q = torch.cat([q, _one_hot(fresh, vocab)])

        head = prompt if done == 0 else out[done - 1: done]
        window_ids = torch.cat([head, drafts])
        if wants_support and L > 0:
            p, support = adapter.forward(window_ids, num_rows=L + 1, with_support=True)
        else:
            p, support = adapter.forward(window_ids, num_rows=L + 1), None

        # This step's status read: the accepted count (the cache is cropped to it) and the sum
        # of p, whose finiteness tells whether the model produced NaN or inf at this step.
        # verify may sync once more (module docstring): DynamicClusters ranking by p without
        # ``support`` (off CPU) does.
        if L == 0:
            uniform = torch.rand(1, generator=generator, dtype=torch.float64, device=device)
            out[done: done + 1] = draw(p[0], uniform)
            p_total = p.sum()
            status = p_total.view(1)
        else:
            # The adapter guarantees valid rows (validate=False; a NaN row is caught below).
            result = verify(p, q, drafts, rule, generator=generator, validate=False,
                            support=None if support is None else support[:L])
            p_total = p.sum()
            status = torch.stack([p_total, result.num_accepted.to(p_total.dtype)])
        values = status.tolist()
        if not math.isfinite(values[0]):
            raise FloatingPointError(
                f"the model's next-token distributions are not finite (NaN or inf) at forward "
                f"pass {len(accepted_log) + 1} of this call, generated positions {done}..{done + L}: "
                "check the model's logits (dtype overflow, bad weights) before decoding"
            )
        accepted = 0 if L == 0 else int(values[1])
        if L > 0 and not forced_drafts:
            accepted = _overrule_at_forced(adapter, done, accepted, result.tokens)
        if L > 0:
            out[done: done + accepted + 1] = result.tokens[: accepted + 1]
        if record_top1:
            top1[done: done + accepted + 1] = p[: accepted + 1].amax(-1)
        if log is not None:
            tv = log.add(done, p, q, accepted)
            if w1_log is not None and tv is not None:
                w1_log.add(done, p, q, tv)
        accepted_log.append(accepted)
        drafted_log.append(L)
        done += accepted + 1
        # The cache keeps the prompt and all committed tokens but the last.
        adapter.crop(prompt_len + done - 1)
        if accepted < L:
            # Jacobi re-drafts: rows a+1..L of this pass, each token drawn from its row.
            q = p[accepted + 1:]
            uniforms = torch.rand(
                q.shape[0], generator=generator, dtype=torch.float64, device=device
            )
            drafts = draw(q, uniforms)
        else:
            drafts, q = drafts[:0], q[:0]
        if bar is not None:
            bar.update(min(accepted + 1, bar.total - bar.n))

    if bar is not None:
        bar.close()
    drafted_total = sum(drafted_log)
    accounting = (log.seconds if log is not None else 0.0) + (w1_log.seconds if w1_log is not None else 0.0)
    wall_seconds = time.perf_counter() - wall_start - accounting
    w1 = w1_log.finish(num_tokens) if w1_log is not None else None  # after the clock: accounting
    return DecodeResult(
        tokens=out[:num_tokens].cpu(),
        nfe=adapter.num_forwards - forwards_before,
        accepted=accepted_log,
        drafted=drafted_log,
        acceptance_rate=sum(accepted_log) / drafted_total if drafted_total else None,
        wall_seconds=wall_seconds,
        model_seconds=adapter.model_seconds - model_seconds_before,
        method=method,
        window=max_window,
        top1=top1[:num_tokens].cpu() if record_top1 else None,
        distortion=log.result(num_tokens) if log is not None else None,
        accounting_seconds=(log.seconds if log is not None else 0.0) + (w1.seconds if w1 is not None else 0.0),
        w1=w1,
    )
