"""``verify`` shaped for an accelerator: gsd_core's rule, a fixed number of ops, host syncs counted.

The result is gsd_core.verify's bit for bit, given the same uniforms
(tests/lab/engine/test_engine.py): the accept probabilities come from the same ops (gsd_core's
own rules, or a rule's registered fast path, ``capabilities.window_masses``: for dynamic
clusters ranked by p ``rules.clusters.dynamic_masses``), and the stop row, residual and draw
are gsd_core's ``resolve_window``. What differs is the cost (top-level aten ops and host
syncs on a window of the decoding loop's shape, tests/lab/engine/test_engine_costs.py):

- ``validate=True``: the values of every argument are reduced on the device and read back in
  one host sync (reference: a few syncs per argument); ``validate=False`` skips them, for a
  caller that guarantees valid rows (a NaN row then still emits an id in [0, V));
- ``DynamicClusters`` ranking by p sorts only the support of each row (``SupportRanking``),
  whose size it reads in one host sync, or in the validation's sync, or not at all when the
  caller passes ``support`` (ids [..., L, K] holding every id with p > 0 once; checked under
  ``validate``);
- every other rule (SD, rank bins, fixed partitions, LANTERN, dynamic clusters ranked by q,
  Amplify of any of them) runs gsd_core's own ops, with no host sync.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from gsd_core import VerifyResult, mass_ratio, resolve_window, window_rule

from .capabilities import uses_support, window_masses
from .checks import (
    broadcast_shapes,
    check_randomness,
    check_token_tensor,
    check_uniform_tensor,
    judge_probabilities,
    judge_tokens,
    judge_uniforms,
    window_shapes,
    working_dtype,
)
from .ranking import SupportSize
from .readback import flat, host_ranges, judge_support, probability_parts, support_parts


def _check_support(support: object, batch: torch.Size, window: int, device: torch.device) -> Tensor:
    if (
        not isinstance(support, Tensor)
        or support.ndim < 2
        or support.shape[-2] != window
        or support.shape[-1] < 1
    ):
        got = tuple(support.shape) if isinstance(support, Tensor) else type(support).__name__
        raise ValueError(
            f"support must be a tensor of token ids [..., L={window}, K >= 1] "
            f"(one row per draft), got {got}"
        )
    support = check_token_tensor(support, device, "support")
    try:
        fits = broadcast_shapes(support.shape[:-2], batch) == batch
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"support's batch shape {tuple(support.shape[:-2])} does not broadcast to "
            f"the batch shape {tuple(batch)} of p, q and draft_tokens"
        )
    return support if support.shape[:-2] == batch else support.expand(*batch, *support.shape[-2:])


def verify(
    p: Tensor,
    q: Tensor,
    draft_tokens: Tensor,
    rule: object = None,
    *,
    uniforms: Tensor | None = None,
    generator: torch.Generator | None = None,
    support: Tensor | None = None,
    validate: bool = True,
) -> VerifyResult:
    """gsd_core.verify's window (same arguments, same result), with ``support`` and ``validate``
    (module docstring). Uniforms drawn from ``generator`` are float64, as gsd_core draws them."""
    batch, window = window_shapes(p, q, draft_tokens)
    if uniforms is not None:
        check_uniform_tensor(uniforms, (*batch, window + 1), p.device)
    check_randomness(uniforms, generator, p.device)
    rule = window_rule(rule)
    vocab = p.shape[-1]
    if support is not None:
        support = _check_support(support, batch, window, p.device)
    # What gsd_core's check_window does, with no op where nothing changes (each op is a launch);
    # the checks below read the arguments as given (tolerances follow their dtypes).
    given_p, given_q, dtype = p, q, working_dtype(p, q)
    p, q = (x if x.dtype == dtype else x.to(dtype) for x in (p, q))
    p = p if p.shape[:-2] == batch else p.expand(*batch, *p.shape[-2:])
    q = q if q.shape[:-2] == batch else q.expand(*batch, window, vocab)
    draft_rows = p[..., :window, :]
    if validate:
        support = _validate(given_p, given_q, draft_tokens, draft_rows, support, uniforms, rule)
    draft_tokens = draft_tokens if draft_tokens.dtype == torch.int64 else draft_tokens.long()
    draft_tokens = (
        draft_tokens if draft_tokens.shape[:-1] == batch else draft_tokens.expand(*batch, window)
    )
    if uniforms is None:
        uniforms = torch.rand(
            *batch, window + 1, generator=generator, dtype=torch.float64, device=p.device
        )
    if window == 0:
        accept = p.new_empty(*batch, 0)
    else:
        accept = mass_ratio(*window_masses(rule, draft_rows, q, draft_tokens, support))
        accept = accept if accept.ndim == draft_tokens.ndim else accept.squeeze(-1)
    return resolve_window(p, q, draft_tokens, accept, uniforms, rule)


def _validate(
    given_p: Tensor,
    given_q: Tensor,
    draft_tokens: Tensor,
    draft_rows: Tensor,
    support: Tensor | None,
    uniforms: Tensor | None,
    rule: object,
) -> Any:
    """The window's checks with one host sync (``host_ranges``): p and q are distributions, the
    drafts and ``support`` ids in range, the uniforms in [0, 1). Returns ``support``, or where
    the rule uses support sizes and none was given, the ``SupportSize`` measured with them."""
    window, vocab = draft_rows.shape[-2], draft_rows.shape[-1]
    parts = probability_parts(given_p) + probability_parts(given_q) + [flat(draft_tokens)]
    sizes = None
    if support is not None:
        parts += support_parts(draft_rows, support)
    elif window > 0 and uses_support(rule):  # the support sizes travel with the checks
        sizes = (draft_rows > 0).sum(-1, dtype=torch.int32)
        parts.append(flat(sizes))
    ranges = host_ranges(parts + ([] if uniforms is None else [flat(uniforms)]))  # the one sync
    for name, x, (sums, minima) in (("p", given_p, ranges[0:2]), ("q", given_q, ranges[2:4])):
        if sums is not None:
            judge_probabilities(name, x.dtype, *sums, minima[0])
    if ranges[4] is not None:
        judge_tokens("draft_tokens", vocab, *ranges[4])
    if support is not None:
        judge_support(ranges[5:8], vocab)
    elif sizes is not None:
        support = SupportSize(sizes, int(ranges[5][1]) if ranges[5] is not None else 0)
    if uniforms is not None and ranges[-1] is not None:
        judge_uniforms(*ranges[-1])
    return support
