"""Autoregressive (AR), Speculative Jacobi (SJD, arXiv 2410.01699) and Grouped Speculative
(GSD, arXiv 2508.07747) decoding over a ``CausalLMAdapter``, batch size 1 (as the papers measure
latency; ``decode.batch.generate_batch``: many images per forward, each as it is here).

One loop serves all three; a method (kind, acceptance rule, residual, drafting, window, preset)
is one ``decode.methods.DecodingMethod``. State: the committed tokens x_0..x_{n-1} (the cache
holds the prompt and all but the last) and a window of L drafts d_0..d_{L-1} for positions
n..n+L-1, each with the law q_i it was drawn from.

Each iteration is one forward over [x_{n-1}, d_0, ..., d_{L-1}], rows p_0..p_L; ``engine.verify``
accepts a prefix d_0..d_{a-1} (position i with probability min(1, p_i(C)/q_i(C)), C = {d_i} for
SJD, the GSD cluster otherwise) and emits one more token (residual of row a, or bonus row p_L):
a + 1 >= 1 tokens a forward. Positions a+1..L are re-drafted from this pass's p_j. AR is L = 0.
The iteration in full, drafting, exactness, host syncs, token trees (``tree_step``) and
``runner="static"``: docs/decoding.md.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from gsd_core import (
    draw_without_replacement, level_tree, one_hot, spine_tree, verify_block, verify_tree,
    without_replacement_rows,
)

from .. import rules  # noqa: F401 (the rules' engine paths, registered on import)
from ..accounting.distortion import DistortionLog
from ..accounting.transport import DEFAULT_DRAWS, W1Estimate, W1Log
from ..engine import draw, uses_support, verify
from ..engine.capabilities import rows_of
from ..models.adapter import CausalLMAdapter
from ..models.adapter import one_hot_rows as _one_hot
from ..models.static import StaticEngine, runner_for
from ..models.tree import check_tree_adapter, forward_nodes, keep_nodes
from .coupling import DraftChain
from .methods import DecodingMethod, ResolvedMethod
from .presets import preset


@dataclass
class DecodeResult:
    """Outcome of one ``generate`` call.

    tokens: [num_tokens] generated ids (CPU, int64). nfe: forward passes (a CFG pair is one;
    the prefill is one). accepted / drafted: per forward pass, drafts accepted and drafts
    verified (both 0 for AR steps; on a token tree, the positions of the walk's branch: L, or
    fewer on a spine tree's side branch, whose later drafts no test read).
    acceptance_rate = sum(accepted) / sum(drafted): the share of verified drafts accepted (None
    when nothing was drafted, e.g. AR). Every forward commits accepted + 1 tokens, so
    num_tokens = sum(accepted) + nfe. wall_seconds: whole call; model_seconds: inside the
    model's forward
    (``CausalLMAdapter.compute_logits``); everything else (logits processing, verification,
    bookkeeping) is overhead. top1: [num_tokens] float64 max_y p(y) of the row each token was
    emitted from (its target distribution), when ``record_top1``. distortion: [num_tokens]
    float64 exact TV(one-step output law, p) of each emitted token (0 for SJD, AR steps and bonus
    tokens; ``gsd_lab.accounting.distortion``), when ``record_distortion``; w1: the similarity-aware
    distortion, W1(one-step output law, p) with the codes' content distance as ground cost, its
    mean per emitted token exact or estimated (``gsd_lab.accounting.transport.W1Estimate``), when
    ``record_w1``; accounting_seconds: the time both took (and an ``on_window`` hook's), excluded
    from wall_seconds (a measurement, not part of the method). budget_spent: with a budget
    (``gsd_lab.decode.budget``), the sum of the emitted tokens' certified charges (at most the
    budget). tokens_processed: with a token tree (candidates > 1 or ``tree``), the input tokens of
    each forward pass (1 + the tree's nodes, k L for k candidates; the first the prompt instead of
    1); None otherwise (there it is
    drafted + 1, the first forward drafted + the prompt). verifier: the method's ("token", or
    "block": a prefix decided jointly).
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
    draft: str = "independent"
    w1: W1Estimate | None = None
    budget_spent: float | None = None
    tokens_processed: list[int] | None = None
    verifier: str = "token"

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


@dataclass(frozen=True)
class VerifiedWindow:
    """One forward pass as ``generate``'s ``on_window`` hook sees it, after its tokens are
    emitted: ``start`` the first position it emits; p [L + 1, V] its rows (targets of positions
    start .. start + L); q [L, V] the window's draft laws (L = 0: an AR step); ``accepted`` the
    drafts accepted (accepted + 1 tokens emitted); tv [accepted + 1] their exact TVs with
    ``record_distortion``, what ``DecodeResult.distortion`` holds for those tokens (forced
    positions' correction included), else None (None at L = 0 too). A token-tree pass
    (``tree_step``) adds its tree, ``parent`` [N] (-1: a child of the root), and the walk's
    ``path``: the nodes accepted, root first (``accepted`` of them); both None otherwise. The
    tensors are the loop's own; it never writes them in place, so they stay valid after the
    call: read or keep them, never write."""

    start: int
    p: Tensor
    q: Tensor
    accepted: int
    tv: Tensor | None
    parent: Tensor | None = None
    path: Tensor | None = None


WindowHook = Callable[[VerifiedWindow], None]


def _overrule_at_forced(
    adapter: CausalLMAdapter, done: int, accepted: int, tokens: Tensor
) -> tuple[int, Tensor | None]:
    """With random drafts at forced positions (``forced_drafts=False``): a draft accepted where
    another token is forced (p(draft) = 0; a rule without the gap filter can cluster it with the
    forced token) counts as rejected there, and the forced token is emitted, as the GSD release's
    rule does. Returns the accepted count and the forced ids of positions done .. done + accepted
    as given (-1 where free; None when the adapter forces nothing), a prefix of which covers the
    emitted tokens; writes the forced token into ``tokens``. One host read."""
    positions = torch.arange(done, done + accepted + 1, device=tokens.device)
    forced = adapter.forced_tokens(positions)
    if forced is None:
        return accepted, None
    wrong = ((forced >= 0) & (tokens[: accepted + 1] != forced)).nonzero().flatten().tolist()
    if not wrong:
        return accepted, forced
    first = wrong[0]
    tokens[first] = forced[first]
    return first, forced


def resolve_method(
    adapter: CausalLMAdapter, method: DecodingMethod | ResolvedMethod
) -> ResolvedMethod:
    """``method`` resolved for ``adapter`` (a ``ResolvedMethod`` as given)."""
    if not isinstance(adapter, CausalLMAdapter):
        raise ValueError(f"adapter must be a CausalLMAdapter, got {type(adapter).__name__}")
    if isinstance(method, ResolvedMethod):
        return method
    if isinstance(method, DecodingMethod):
        return method.resolve(adapter)
    raise ValueError(
        f"method must be a gsd_lab.decode.methods.DecodingMethod or ResolvedMethod, got {method!r}"
    )


def check_call(
    adapter: CausalLMAdapter,
    num_tokens: int,
    resolved: ResolvedMethod,
    generator: torch.Generator | None,
) -> None:
    """What the method spec cannot know alone: its fit to this adapter and call."""
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 1:
        raise ValueError(f"num_tokens must be an int >= 1, got {num_tokens!r}")
    if resolved.method.init == "repeat_row" and adapter.row_length is None:
        raise ValueError("init='repeat_row' needs an adapter that knows its row_length")
    if generator is not None and torch.device(generator.device).type != adapter.device.type:
        raise ValueError(
            f"generator is on {generator.device} but the adapter's model is on {adapter.device}"
        )
    lantern = resolved.lantern
    if lantern is not None and lantern.neighbourhoods.vocab_size != adapter.vocab_size:
        raise ValueError(
            f"lantern's neighbourhoods cover {lantern.neighbourhoods.vocab_size} tokens but the "
            f"model's vocabulary has {adapter.vocab_size}"
        )


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
        chunk = positions[offset : offset + row_length]
        source = chunk - row_length
        has_source = source >= 0
        seq[chunk] = torch.where(has_source, seq[source.clamp(min=0)], seq[chunk])
    drafts = seq[start:]
    forced = adapter.forced_tokens(positions)
    if forced is not None:
        drafts = torch.where(forced >= 0, forced, drafts)
    return drafts


def check_w1(record_distortion: bool, content: Tensor | None) -> None:
    """Refuse ``record_w1`` without the distortion log or the adapter's ``code_content()``."""
    if not record_distortion or content is None:
        raise ValueError(
            "record_w1 needs record_distortion=True (its rows are drawn by their TV) and an "
            "adapter whose code_content() gives its codes' decoded content"
        )


def w1_log_for(
    content: Tensor | None,
    adapter: CausalLMAdapter,
    num_tokens: int,
    resolved: ResolvedMethod,
    record_distortion: bool,
    draws: int | None,
    generator: torch.Generator,
) -> W1Log:
    """The W1 log of one decode (``record_w1``): rows drawn by their TV with a generator of its
    own seeded ``generator.initial_seed()``; ``content`` the adapter's ``code_content()``."""
    check_w1(record_distortion, content)
    return W1Log(
        content,
        adapter.allowed_tokens,
        num_tokens + max_window(resolved.method) + 1,
        resolved.rule,
        draws=draws,
        seed=generator.initial_seed(),
    )


def verification(rule: object, p: Tensor) -> tuple[Tensor, object]:
    """The rows and rule ``verify`` takes for a window's rule and its rows p [L + 1, V]: the
    rule's own ``verification(p)`` where it has one (planned targets: SD on the transported
    rows, ``gsd_lab.decode.planned``), else p and the rule."""
    own = getattr(rule, "verification", None)
    return (p, rule) if own is None else own(p)


class DecodeLoop:
    """The state of one ``generate`` call (module docstring) and its steps, one job each: the
    ``window_size`` of this step, ``refill`` the window with fresh drafts, ``forward`` it,
    ``emit`` (verify or sample, one status read), ``commit`` the emitted tokens, ``redraft``
    the rejected positions. ``adapter``: what runs the forwards (the adapter or its engine)."""

    def __init__(
        self,
        adapter: CausalLMAdapter | StaticEngine,
        resolved: ResolvedMethod,
        generator: torch.Generator,
        num_tokens: int,
        record_top1: bool,
        record_distortion: bool,
        w1_log: W1Log | None = None,
        on_window: WindowHook | None = None,
    ) -> None:
        method = resolved.method
        self.adapter, self.method, self.generator = adapter, method, generator
        self.rule = resolved.rule
        self.device, self.vocab = adapter.device, adapter.vocab_size
        self.num_tokens, self.prompt_len = (
            num_tokens,
            adapter.prompt.numel(),
        )  # the runner has started
        self.max_window = max_window(method)
        settings = preset(method.preset)
        self.jacobi_positions = settings.jacobi_positions(num_tokens)
        self.lagged_window = settings.lagged_window
        self.previous_done = -1  # committed before the previous forward (-1: no forward yet)
        self.forced_drafts = settings.forced_drafts
        # The adapter's kept ids spare verify the count and the selection over all V.
        self.wants_support = uses_support(self.rule)
        capacity = num_tokens + self.max_window + 1
        self.out = torch.empty(capacity, dtype=torch.long, device=self.device)
        self.top1 = (
            torch.empty(capacity, dtype=torch.float64, device=self.device) if record_top1 else None
        )
        self.log = DistortionLog(capacity, self.device, self.rule) if record_distortion else None
        self.w1_log = w1_log
        self.on_window = on_window
        self.hook_seconds = 0.0
        self.drafts = torch.empty(0, dtype=torch.long, device=self.device)
        self.q = torch.empty(0, self.vocab, dtype=torch.float64, device=self.device)
        self.chain = DraftChain(method.draft, self.vocab, self.device, generator)
        # A rule whose targets change per window (the certified dial, gsd_lab.decode.budget; the
        # transport relaxation's plans, solved once per step): its windows of this decode.
        self.windows = method.acceptance.windows(resolved)
        self.step_rule = self.rule
        self.accepted: list[int] = []
        self.drafted: list[int] = []
        self.done = 0
        # A token tree (``DecodingMethod.tree_shape``, ``tree_step``): how many of the window's
        # leading drafts were drawn from a model row (the rest are fresh, one-hot q).
        self.shape, self.branching = method.tree_shape, method.branching
        self.row_drafts = 0
        self.processed: list[int] = []
        self.walk: tuple[Tensor, Tensor] | None = None  # this pass's (parent, path), a tree's
        self.held: tuple[Tensor, Tensor, int] | None = None  # past a side branch: drafts, q, rows

    def window_size(self) -> int:
        """L: the window, capped at the tokens still needed minus one; with the preset's Jacobi
        interval (start, end) drafts only while start <= n < end, at most end - n - 1, where n
        is the committed count (``lagged_window``: the one before the previous forward, as the
        release's loop reads it; ``gsd_lab.decode.presets``)."""
        L = min(self.max_window, self.num_tokens - self.done - 1)
        if self.jacobi_positions is not None:
            start, end = self.jacobi_positions
            n = self.previous_done if self.lagged_window else self.done
            L = min(L, end - n - 1) if start <= n < end else 0
        return L

    def refill(self, L: int) -> None:
        """Keep the first L drafts; draw fresh ones (one-hot q) for the positions still empty."""
        self.drafts, self.q = self.drafts[:L], self.q[:L]
        self.chain.truncate(L)
        self.row_drafts = min(self.row_drafts, L)
        missing = L - self.drafts.numel()
        if missing <= 0:
            return
        start = self.done + self.drafts.numel()
        if self.method.init == "repeat_row":
            history = torch.cat([self.out[: self.done], self.drafts])
            fresh = _repeat_row_drafts(
                history, start, missing, self.adapter.row_length, self.adapter, self.generator
            )
        else:
            positions = torch.arange(start, start + missing, device=self.device)
            fresh = self.adapter.random_tokens(
                positions, self.generator, respect_forced=self.forced_drafts
            )
        self.drafts = torch.cat([self.drafts, fresh])
        self.q = torch.cat([self.q, _one_hot(fresh, self.vocab)])
        self.chain.extend(missing)

    def forward(self, L: int) -> tuple[Tensor, Tensor | None]:
        """p [L + 1, V] over [last committed (the prompt at first), drafts], and the support."""
        head = self.adapter.prompt if self.done == 0 else self.out[self.done - 1 : self.done]
        window_ids = torch.cat([head, self.drafts])
        if self.wants_support and L > 0:
            return self.adapter.forward(window_ids, num_rows=L + 1, with_support=True)
        return self.adapter.forward(window_ids, num_rows=L + 1), None

    def emit(self, p: Tensor, support: Tensor | None, L: int) -> tuple[int, Tensor | None]:
        """Verify the L drafts against p (L = 0: sample p_0), read this step's status (the
        accepted count a and the sum of p, whose finiteness tells whether the model produced
        NaN or inf here), write the a + 1 emitted tokens; returns a and the forced ids read by
        ``_overrule_at_forced`` (None if none were read or none are forced), for ``commit``.
        verify may sync once more (module docstring): DynamicClusters ranking by p without
        ``support`` (off CPU) does."""
        done = self.done
        if L == 0:
            uniform = torch.rand(
                1, generator=self.generator, dtype=torch.float64, device=self.device
            )
            self.out[done : done + 1] = draw(p[0], uniform)
            status = p.sum().view(1)
        else:
            self.step_rule = self._step_rule(p)
            rows, rule = verification(self.step_rule, p)
            # A static engine's fixed-width top-k support may miss ids tied at the top-k value
            # (gsd_lab.models.static): its device flag is read with the status.
            overflow = None if support is None else getattr(self.adapter, "support_overflow", None)
            state = None if overflow is None else self.generator.get_state()
            if self.method.verifier == "block":  # the prefix decided jointly (proofs/14)
                result = verify_block(p, self.q, self.drafts, generator=self.generator)
            else:  # the adapter guarantees valid rows (validate=False; NaN rows caught below)
                result = verify(
                    rows,
                    self.q,
                    self.drafts,
                    rule,
                    generator=self.generator,
                    validate=False,
                    support=None if support is None else support[:L],
                )
            p_total = p.sum()
            parts = [p_total, result.num_accepted.to(p_total.dtype)]
            if overflow is not None:
                parts.append(overflow.to(p_total.dtype))
            status = torch.stack(parts)
        values = status.tolist()
        if not math.isfinite(values[0]):
            raise FloatingPointError(
                "the model's next-token distributions are not finite (NaN or inf) at forward pass "
                f"{len(self.accepted) + 1} of this call, generated positions {done}..{done + L}: "
                "check the model's logits (dtype overflow, bad weights) before decoding"
            )
        if L == 0:
            return 0, None
        if len(values) > 2 and values[2]:  # rare: the same verify on whole rows, the same uniforms
            self.generator.set_state(state)
            result = verify(
                rows, self.q, self.drafts, rule, generator=self.generator, validate=False
            )
            values[1] = int(result.num_accepted)
        accepted, forced = int(values[1]), None
        if not self.forced_drafts:
            accepted, forced = _overrule_at_forced(self.adapter, done, accepted, result.tokens)
        if self.windows is not None:  # a forced position was allotted 0 (_step_rule): spends 0
            self.windows.charge(accepted)
        self.out[done : done + accepted + 1] = result.tokens[: accepted + 1]
        return accepted, forced

    def _step_rule(self, p: Tensor) -> object:
        """The rule of this window: the method's, or its windows' (the dial's allowances, the
        transport relaxation's planned targets: ``AcceptanceSpec.windows``)."""
        if self.windows is not None:
            return self.windows.for_window(p, self.q, self._random_forced_rows())
        return self.rule

    def _random_forced_rows(self) -> Tensor | None:
        """With random drafts at forced positions (``forced_drafts=False``): bool [L], the
        window's positions whose token is forced (the dial allots them 0: the token emitted
        there is the forced one whatever the rule does); else None (a forced draft has T = 0)."""
        if self.forced_drafts:
            return None
        window = self.q.shape[0]
        positions = torch.arange(self.done, self.done + window, device=self.device)
        forced = self.adapter.forced_tokens(positions)
        return None if forced is None else forced >= 0

    def commit(self, p: Tensor, accepted: int, L: int, forced: Tensor | None) -> None:
        """Record the step (top-1, the logs, then the ``on_window`` hook's call, timed) and crop
        the cache to the committed tokens (all but the last); ``forced``: what ``emit`` returned
        beside the accepted count."""
        if self.top1 is not None:
            self.top1[self.done : self.done + accepted + 1] = p[: accepted + 1].amax(-1)
        tv = None
        if self.log is not None:
            # The rule of the rows the logs read, 0 .. min(a, L - 1): this step's, restricted.
            rule = rows_of(self.step_rule, slice(0, min(accepted + 1, L))) if L > 0 else self.rule
            self.log.rule = rule
            tv = self.log.add(self.done, p, self.q, accepted)
            if tv is not None and forced is not None:
                tv = self._forced_rows_exact(tv, forced)
            if self.w1_log is not None and tv is not None:
                self.w1_log.add(self.done, p, self.q, tv, rule)
        if self.on_window is not None:
            began = time.perf_counter()
            self.on_window(VerifiedWindow(self.done, p, self.q, accepted, tv, *(self.walk or ())))
            self.hook_seconds += time.perf_counter() - began
        self.walk = None
        self.accepted.append(accepted)
        self.drafted.append(L)
        self.previous_done = self.done
        self.done += accepted + 1
        self.adapter.crop(self.prompt_len + self.done - 1)

    def _forced_rows_exact(self, tv: Tensor, forced: Tensor) -> Tensor:
        """With random drafts at forced positions the token emitted there is the forced one, the
        only token of p (``_overrule_at_forced``, whose ``forced`` ids start at this step's first
        position): its law is p, distortion 0, whatever the rule's TV said of a draft it would
        have accepted. Writes and returns the corrected [E] TVs."""
        tv = torch.where(forced[: tv.numel()] >= 0, torch.zeros_like(tv), tv)
        self.log.values[self.done : self.done + tv.numel()] = tv
        return tv

    def accounting_seconds(self) -> float:
        """The time spent in the distortion and W1 logs and the ``on_window`` hook so far (a
        measurement, not decoding)."""
        log, w1 = self.log, self.w1_log
        logs = (log.seconds if log is not None else 0.0) + (w1.seconds if w1 is not None else 0.0)
        return logs + self.hook_seconds

    def result(self, *, nfe: int, wall_seconds: float, model_seconds: float) -> DecodeResult:
        """The ``DecodeResult`` of a finished decode, given its forwards and clocks (the W1
        estimate is finished here, after the caller's clock: accounting)."""
        num_tokens = self.num_tokens
        w1 = self.w1_log.finish(num_tokens) if self.w1_log is not None else None
        drafted_total = sum(self.drafted)
        log_seconds = self.log.seconds if self.log is not None else 0.0
        return DecodeResult(
            tokens=self.out[:num_tokens].cpu(),
            nfe=nfe,
            accepted=self.accepted,
            drafted=self.drafted,
            acceptance_rate=sum(self.accepted) / drafted_total if drafted_total else None,
            wall_seconds=wall_seconds,
            model_seconds=model_seconds,
            method=self.method.kind,
            window=self.max_window,
            top1=self.top1[:num_tokens].cpu() if self.top1 is not None else None,
            distortion=self.log.result(num_tokens) if self.log is not None else None,
            accounting_seconds=(
                log_seconds + self.hook_seconds + (w1.seconds if w1 is not None else 0.0)
            ),
            draft=self.method.draft,
            verifier=self.method.verifier,
            w1=w1,
            budget_spent=self.windows.spent if self.windows is not None else None,
            tokens_processed=self.processed if self.branching else None,
        )

    def redraft(self, p: Tensor, accepted: int, L: int) -> None:
        """Jacobi re-drafts: rows a+1..L of this pass, each token's law its row (that row
        becomes its q), drawn as the method's ``draft`` says (``gsd_lab.decode.coupling``); nothing
        left after a fully accepted window; then the drafts ``tree_step`` held past a side
        branch, with their q (no test read them), and fresh Gumbel noise for them."""
        if accepted < L:
            self.drafts, self.q = self.chain.redraft(
                self.drafts, self.q, p[accepted + 1 :], accepted
            )
            self.row_drafts = L - accepted
        else:
            self.drafts, self.q = self.drafts[:0], self.q[:0]
            self.chain.clear()
            self.row_drafts = 0
        if self.held is not None:  # after a side branch: its unread drafts follow, as they were
            drafts, q, rows = self.held
            self.drafts, self.q = torch.cat([self.drafts, drafts]), torch.cat([self.q, q])
            self.chain.extend(drafts.numel())
            self.row_drafts += rows
            self.held = None

    def tree_step(self, L: int) -> tuple[Tensor, int]:
        """One forward over a token tree (L >= 1), proofs/16: shape (k_1 .. k_D) =
        ``tree_shape`` cut to L depths. Depth d's candidates (position n + d - 1): x_1 the
        window's draft d_{d-1}; x_2 .. x_k drawn without replacement from the row d_{d-1} was
        drawn from (declared: that row with x_1 .. x_{j-1} removed, renormalised) or, for a fresh
        d_{d-1} (one-hot q), uniformly without replacement from the allowed tokens and declared
        one-hot (given candidates); the same set under every node of depth d - 1
        (``gsd_core.level_tree``). Under every deepest node, the window's other drafts with their
        q. One forward over the tree (``gsd_lab.models.tree.forward_nodes``), then
        ``gsd_core.verify_tree``: recursive rejection at every node from the root, the bonus row
        at a leaf. The cache keeps the walk's branch (its path, then first children: the
        window's drafts), whose rows re-draft the positions after the stop. Writes the emitted
        tokens; returns (p [B + 1, V]: p_0 and the branch's B rows, for ``commit`` and
        ``redraft``; the accepted count). With ``side_tail`` the tree is ``gsd_core.spine_tree``:
        a side branch has B < L nodes; the window is cut to them, and the drafts of positions
        B + 1 .. L - 1, which no test read, are held for ``redraft`` to put back.
        Host reads: the rows' status, then one per node the walk visits."""
        shape, gen = self.shape[:L], self.generator
        depth_count = len(shape)
        allowed = None
        level_tokens, level_rows = [], []
        for d, k in enumerate(shape):
            first = self.drafts[d]
            extra = torch.rand(k - 1, generator=gen, dtype=torch.float64, device=self.device)
            if d < self.row_drafts:
                source = self.q[d]
                candidates = draw_without_replacement(source, first, k, extra)
                declared = without_replacement_rows(source, candidates)
            else:
                if allowed is None:
                    allowed = torch.zeros(self.vocab, dtype=torch.float64, device=self.device)
                    allowed[self.adapter.allowed_tokens] = 1.0
                candidates = draw_without_replacement(allowed, first, k, extra)
                # Given candidates: one-hot q_j; an absent one (allowed tokens exhausted) q_j = 0.
                present = without_replacement_rows(allowed, candidates).sum(-1, keepdim=True) > 0
                declared = one_hot(candidates, self.vocab) * present
            level_tokens.append(candidates)
            level_rows.append(declared)
        level_tokens.append(self.drafts[depth_count:])
        level_rows.append(self.q[depth_count:])
        side_tail = self.method.side_tail
        parent, depth, rank = (
            level_tree(shape, L - depth_count) if side_tail is None
            else spine_tree(shape, L, side_tail)
        )
        widths = torch.tensor([*shape, 1])
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), widths.cumsum(0)[:-1]])
        # Tail nodes (depth > D) index the window's drafts after the tree's levels.
        slot = torch.where(
            depth <= depth_count, offsets[(depth - 1).clamp(max=depth_count)] + rank,
            offsets[depth_count] + depth - 1 - depth_count,
        ).to(self.device)
        tokens = torch.cat(level_tokens)[slot]
        declared = torch.cat(level_rows)[slot]
        parent = parent.to(self.device)
        done = self.done
        head = self.adapter.prompt if done == 0 else self.out[done - 1 : done]
        p0, rows = forward_nodes(self.adapter, head, tokens, parent)
        self.processed.append(head.numel() + tokens.numel())
        total = float(p0.sum() + rows.sum())
        if not math.isfinite(total):
            keep_nodes(self.adapter, [])
            raise FloatingPointError(
                "the model's next-token distributions are not finite (NaN or inf) at forward pass "
                f"{len(self.accepted) + 1} of this call, generated positions {done}..{done + L}"
            )
        targets = torch.cat([p0.unsqueeze(0), rows])
        uniforms = torch.rand(
            tokens.numel() + 1, generator=gen, dtype=torch.float64, device=self.device
        )
        walk = verify_tree(targets, declared, tokens, parent, uniforms)
        keep_nodes(self.adapter, walk.branch)
        cut = len(walk.branch)
        if cut < L:  # a spine tree's side branch: the drafts past its rows wait (``redraft``)
            rows_held = max(0, self.row_drafts - cut - 1)
            self.held = (self.drafts[cut + 1 :], self.q[cut + 1 :], rows_held)
            self.drafts, self.q = self.drafts[:cut], self.q[:cut]
            self.chain.truncate(cut)
            self.row_drafts = min(self.row_drafts, cut)
        self.walk = (parent, walk.path)
        accepted = walk.path.numel()
        self.out[done : done + accepted + 1] = walk.tokens
        return torch.cat([p0.unsqueeze(0), rows[walk.branch]]), accepted


def generate(
    adapter: CausalLMAdapter,
    prompt_ids: Tensor,
    method: DecodingMethod | ResolvedMethod,
    *,
    num_tokens: int,
    generator: torch.Generator | None = None,
    uncond_prompt_ids: Tensor | None = None,
    record_top1: bool = False,
    record_distortion: bool = False,
    progress: bool = False,
    runner: str | StaticEngine = "eager",
    record_w1: bool = False,
    w1_draws: int | None = DEFAULT_DRAWS,
    on_window: WindowHook | None = None,
) -> DecodeResult:
    """Generate ``num_tokens`` tokens after ``prompt_ids`` by ``method`` (module docstring).

    adapter: a ``CausalLMAdapter`` (its processing defines the target distribution).
    prompt_ids: [P] prompt; uncond_prompt_ids: the unconditional prompt when the adapter uses
    CFG. method: a ``decode.methods.DecodingMethod`` (resolved here for ``adapter``: its rule
    objects are built on every call) or its ``ResolvedMethod`` (built once, e.g. LANTERN's
    table). generator: all randomness (seeded from the OS when None). record_top1: fill
    ``DecodeResult.top1``. record_distortion: fill ``DecodeResult.distortion`` (exact, no
    randomness drawn: the same tokens either way; its time is ``accounting_seconds``, not in
    wall_seconds). progress: a tqdm bar.
    runner: where the forwards run, an execution option (the same method either way): "eager"
    (the adapter, a dynamic cache), "static" (the adapter's ``gsd_lab.models.static.StaticEngine``:
    static cache, fixed window shapes, CUDA graphs on a GPU) or a ``StaticEngine``.
    record_w1 (needs record_distortion and the adapter's ``code_content()``): fill
    ``DecodeResult.w1``, W1(law, p) per emitted token, exact for every token when ``w1_draws`` is
    None, else estimated from ``w1_draws`` rows drawn in proportion to their TV by a generator of
    its own seeded with ``generator.initial_seed()`` (``gsd_lab.accounting.transport``; no draw from
    ``generator``, so again the same tokens). on_window: called with each forward pass's
    ``VerifiedWindow`` after its tokens are emitted (L = 0 steps included), to measure what a
    window held; the loop draws nothing for it, so the same tokens and NFE, and its time counts
    in ``accounting_seconds``, not in wall_seconds (on a GPU only its host time: device work it
    queues may be waited for later, inside wall_seconds). Batch size 1.
    """
    resolved = resolve_method(adapter, method)
    check_call(adapter, num_tokens, resolved, generator)
    if generator is None:
        generator = torch.Generator(device=adapter.device)
        generator.seed()
    window = max_window(resolved.method)
    w1_log = None
    if record_w1:
        content = adapter.code_content()
        w1_log = w1_log_for(
            content, adapter, num_tokens, resolved, record_distortion, w1_draws, generator
        )
    if resolved.method.branching:
        if runner != "eager":
            raise ValueError(
                "candidates > 1 or a tree (a token tree per forward) runs on the eager runner "
                f"only; the static runner has fixed window shapes (got runner={runner!r})"
            )
        check_tree_adapter(adapter)
    # Where the forwards run: the adapter itself, or a StaticEngine standing in for it.
    adapter = runner_for(adapter, runner, new_tokens=num_tokens + window + 1, window=window)

    wall_start = time.perf_counter()
    model_seconds_before = adapter.model_seconds
    forwards_before = adapter.num_forwards
    adapter.start(prompt_ids, uncond_prompt_ids)
    loop = DecodeLoop(
        adapter, resolved, generator, num_tokens, record_top1, record_distortion, w1_log,
        on_window,
    )
    bar = _progress_bar(num_tokens, resolved.method.kind) if progress else None
    while loop.done < num_tokens:
        L = loop.window_size()
        loop.refill(L)
        if loop.branching and L > 0:
            (p, accepted), forced = loop.tree_step(L), None
            L = p.shape[0] - 1  # the branch's length: L, or less on a spine tree's side branch
        else:
            p, support = loop.forward(L)
            accepted, forced = loop.emit(p, support, L)
            if loop.branching:  # an AR step (L = 0): the head alone
                loop.processed.append(adapter.prompt.numel() if loop.done == 0 else 1)
        loop.commit(p, accepted, L, forced)
        loop.redraft(p, accepted, L)
        if bar is not None:
            bar.update(min(accepted + 1, bar.total - bar.n))
    if bar is not None:
        bar.close()
    wall_seconds = time.perf_counter() - wall_start - loop.accounting_seconds()
    return loop.result(
        nfe=adapter.num_forwards - forwards_before,
        wall_seconds=wall_seconds,
        model_seconds=adapter.model_seconds - model_seconds_before,
    )


def max_window(method: DecodingMethod) -> int:
    """Drafts per forward: the method's window, 0 for AR."""
    return 0 if method.kind == "ar" else method.window


def _progress_bar(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="tok", desc=desc)
