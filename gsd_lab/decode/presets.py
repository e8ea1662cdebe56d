"""Decoding presets: the package's own exact variant (``default``) and the GSD release's
settings (``release``), so that numbers can be set beside the paper's.

``default`` (the package's own, exact where the method is): the window is ``MethodSpec.window``
(16 drafts), Jacobi drafting from the first image code to the last token, fresh random drafts
take the forced token where the adapter forces one (row ends: always accepted), and GSD's
distance filter compares float64 squared distances ||e_y - e_x||^2 <= d of the input embeddings
(``gsd_core.DynamicClusters``); CLIP scores the image as decoded.

``release`` (junhyukso/GSD ``test_GSD.py`` with its Jacobi sampler, and SJD's evaluation):

- window: ``max_num_new_tokens = 16`` input tokens, i.e. 15 drafts after the last committed one;
- Jacobi only between generated positions ``jacobi_loop_interval_l = 3`` and
  ``jacobi_loop_interval_r = side^2 + side - 10`` (768 px: 2342), counted from the first
  generated token of the release, which samples the image start and both size tokens itself
  (here they are in the prompt): here E = N - 13 for N image tokens. The release sizes each
  forward's input from ``cur_len`` *before the previous forward* (``_sample`` sets
  ``output_token_num = min(16, r - cur_len)`` after a forward and updates ``cur_len`` only at
  the end of the loop body), so with n' the position committed before the previous forward
  (-1 before the first): drafts = min(15, E - n' - 1) while 0 <= n' < E, else none. Hence the
  first code comes from the prefill alone (AR), drafting starts one forward later, goes on for
  one forward past E, and that last window may reach past E; the last tokens are AR. Windows
  are also capped at the image's last token (the release's, rarely, would reach the image end).
  The release also spends forwards on the image start, the two size tokens, the image end and
  the end of turn: its NFE is this preset's plus 5 (``RELEASE_EXTRA_FORWARDS``; 4 when its last
  window reached the image end);
- random drafts uniform over the image codes at every position, row ends included (there the
  release's rule finds p(C) = 0 and rejects; a rule that would accept a p = 0 draft at a forced
  position, one without the gap filter, is overruled the same way: ``generate``'s
  ``forced_drafts=False``);
- the distance filter as the release computes it (``ReleaseDistanceClusters``): the table
  |a|^2 + |b|^2 - 2 a.b over ``embed_tokens[:10000]`` in bfloat16, kept where < d (strict), the
  gap filter |p(y) - p(x)| < 0.15 (strict), and no distance filter for a window holding an id
  outside the table (the release's ``max() <= 10000`` test);
- CLIP on images resized to 299 x 299 (bilinear) first, as SJD's evaluation script does.

Not reproduced: the release drops a drafted token from its own cluster when its bfloat16
self-distance |a|^2 + |a|^2 - 2 a.a rounds to >= d (here the token always stays in its
cluster), and falls back to the plain ratio p(x)/q(x) when a window holds id 10000 exactly
(an indexing error it catches).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gsd_core import DynamicClusters, member_masses

from ..engine.capabilities import rows_of, shared_rows

RELEASE_TABLE_ROWS = 10_000  # embed_tokens[:10000]
RELEASE_EXTRA_FORWARDS = 5  # image start, two size tokens, image end, end of turn


@dataclass(frozen=True)
class DecodingPreset:
    """What a preset sets (module docstring). window: drafts per forward (None: the spec's);
    jacobi_tail: drafting stops N tokens before the image's end (None: drafts everywhere);
    lagged_window: the Jacobi interval and window bound read the position committed before the
    previous forward, not the current one (the release's loop, module docstring); forced_drafts:
    fresh random drafts take the forced token where one is forced; release_distance: GSD's
    filters as ``ReleaseDistanceClusters``; clip_resize: side in pixels images are resized to
    before CLIP (None: as decoded)."""

    name: str
    window: int | None = None
    jacobi_tail: int | None = None
    lagged_window: bool = False
    forced_drafts: bool = True
    release_distance: bool = False
    clip_resize: int | None = None

    def jacobi_positions(self, num_tokens: int) -> tuple[int, int] | None:
        """``generate``'s (start, end) for an image of ``num_tokens`` tokens."""
        return None if self.jacobi_tail is None else (0, max(0, num_tokens - self.jacobi_tail))


PRESETS = {
    "default": DecodingPreset("default"),
    "release": DecodingPreset(
        "release",
        window=15,
        jacobi_tail=13,
        lagged_window=True,
        forced_drafts=False,
        release_distance=True,
        clip_resize=299,
    ),
}


def preset(name: str) -> DecodingPreset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; expected one of {tuple(PRESETS)}")
    return PRESETS[name]


def release_distance_table(
    embeddings: Tensor, max_distance: float, rows: int = RELEASE_TABLE_ROWS
) -> Tensor:
    """bool [R, R], R = min(rows, V): (|a|^2 + |b|^2 - 2 a.b) < max_distance over the first R
    embedding rows, every operation in bfloat16 as the release (its weights are bfloat16)."""
    a = embeddings[:rows].detach().to(torch.bfloat16)
    squares = (a**2).sum(-1, keepdim=True)
    return (squares + squares.T - 2 * a @ a.T) < max_distance


@dataclass(frozen=True)
class ReleaseDistanceClusters:
    """GSD's dynamic clusters with the release's filters (module docstring): the rank window of
    ``DynamicClusters(group_size)`` (by p), then |p(y) - p(x)| < max_prob_gap and, when every
    window member lies in the table, ``adjacency[x, y]``. The drafted token is always a member.

    adjacency: ``release_distance_table(embed_tokens, d)``. A ``gsd_core`` rule (``masses``,
    ``residual_weights``: the token residual), token-dependent and overlapping like
    ``DynamicClusters``."""

    group_size: int
    adjacency: Tensor
    max_prob_gap: float | None = 0.15

    def members(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """C(x) for tokens x [..., T]: ids [..., T, M] and keep [..., T, M], as
        ``DynamicClusters.members``."""
        index, valid = DynamicClusters(self.group_size).members(p, q, x)
        token = x.unsqueeze(-1)
        keep = valid
        if self.max_prob_gap is not None:
            p_x = p.gather(-1, x).unsqueeze(-1)
            p_y = p.gather(-1, index.flatten(-2)).view(index.shape)
            keep = keep & ((p_y - p_x).abs() < self.max_prob_gap)
        rows = self.adjacency.shape[0]
        near = self.adjacency.to(p.device)[token.clamp(max=rows - 1), index.clamp(max=rows - 1)] & (
            token < rows
        )
        in_table = ((index < rows) | ~valid).all(
            -1, keepdim=True
        )  # the release's max() <= 10000 test
        keep = torch.where(in_table, keep & near, keep)
        return index, keep | (index == token)

    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """(p(C(x)), q(C(x))) for tokens x [..., T]: [..., T] each, summed over these members
        as gsd_core's ``DynamicClusters`` sums its own (``member_masses``)."""
        return member_masses(p, q, *self.members(p, q, x))

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        return DynamicClusters(self.group_size).residual_weights(p, q)  # the token residual


rows_of.register(ReleaseDistanceClusters, shared_rows)  # adjacency [R, R]: the vocabulary's
