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
- GSD's window and filters as the release computes them (``ReleaseDistanceClusters``): the 14
  ids around x in one ascending stable sort of p, so that of tied tokens the larger id ranks
  higher (PyTorch's CUDA sort is stable for rows of more than 4096 entries, its
  ``should_use_small_sort``, as the release's 65,536 logits, although its ``sort(dim=-1)`` asks
  for no stability); the table |a|^2 + |b|^2 - 2 a.b over ``embed_tokens[:10000]`` in bfloat16,
  kept where < d (strict); the gap filter |p(y) - p(x)| < 0.15 (strict); no distance filter for a
  window holding an id above 10000 (the release's ``max() <= 10000`` test); and the plain ratio
  p(x)/q(x) where the release's ``try`` fails and it falls back to that ratio: x itself in
  [R, 10000], R = 10000 the table's rows, i.e. x = 10000 (``head_img_sims[cls_idx]`` indexes
  with a 0-d tensor, a bounds check on the host: an IndexError, caught), or an empty window (x
  among the 7 tokens lowest in the sort: the slice's start is negative);
- CLIP on images resized to 299 x 299 (bilinear) first, as SJD's evaluation script does.

Not reproduced: the release sorts its float32 logits (float32 classifier-free guidance), this
rule the float64 p = softmax(l) of float64 guidance l = u + s (c - u) (``gsd_lab.models.adapter``),
so their orders differ where float32 rounding ties or swaps values that float64 keeps apart; the
release drops a drafted token from its own cluster when its bfloat16 self-distance
|a|^2 + |a|^2 - 2 a.a rounds to >= d (here the token always stays in its cluster; the release's
ratio then divides by q(C) = 0 where q is one-hot); and where x < R <= max W(x) <= 10000 (a
window holding id 10000 around a lower x) the release's next step ``[logit_sort_idx]`` gathers
past the table's row on its GPU, a device-side assert and no Python exception: the release
aborts, with no output. This rule takes the plain ratio there, what the release computes on a
CPU (where that gather raises an IndexError). Neither this nor the caught x = 10000 occurs in the
release's image generation: its drafts are image codes (random ones from its image vocabulary) or
its own samples at image positions, ids <= 8803, and its ``MultiTokensVLLogitsProcessor`` sets
every id outside the image codes to -inf there (the row end's 8803 and the image end's 8196
excepted where forced), so in the stable sort a window holds only ids <= 8809 or reaches into
the top of the -inf run, 65535 downwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gsd_core import DynamicClusters, check_count, member_masses

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
    """GSD's dynamic clusters as the release computes them (junhyukso/GSD
    ``scheduler/jacobi_iteration_lumina_mgpt.py``, ``SpeculativeSampler.__call__``). With
    ``ascending`` the ids of p [..., V] in one stable ascending sort and c the position of x:

        W(x) = ascending[c - G//2 : c + G - G//2]     (empty where c < G//2: the start is < 0)
        C(x) = {x} | {y in W(x) : |p(y) - p(x)| < max_prob_gap, adjacency[x, y]}

    Ties: of tokens with equal p the larger id ranks higher (``DynamicClusters``: the smaller).
    The distance filter applies where max W(x) < R (``adjacency`` [R, R]), none where
    max W(x) > ``id_bound`` (the release's ``max() <= 10000``; no table: none anywhere), and
    C(x) = {x}, the plain ratio p(x) / q(x), where R <= max W(x) <= id_bound: the release raises
    an IndexError and falls back to that ratio where R <= x (x = 10000 exactly), and aborts on its
    GPU where x < R (module docstring, not reproduced); and where W(x) is empty (the release's
    ``.max()`` of nothing raises). Members in slot order, ascending. V >= G (the release: 65,536
    ids, G = 14).

    adjacency: ``release_distance_table(embed_tokens, d)``. A ``gsd_core`` rule (``masses``,
    ``residual_weights``: the token residual), token-dependent and overlapping like
    ``DynamicClusters``."""

    group_size: int
    adjacency: Tensor | None
    max_prob_gap: float | None = 0.15
    id_bound: int = RELEASE_TABLE_ROWS

    def __post_init__(self) -> None:
        """G an int >= 1, ``adjacency`` a square bool tensor or None, ``id_bound`` an int."""
        check_count(self.group_size, "group_size (G, tokens per cluster)")
        table = self.adjacency
        if table is not None and not (
            isinstance(table, Tensor)
            and table.dtype == torch.bool
            and table.dim() == 2
            and table.shape[0] == table.shape[1]
        ):
            tensor = isinstance(table, Tensor)
            got = f"{table.dtype} {tuple(table.shape)}" if tensor else repr(table)
            raise ValueError(f"adjacency must be a square bool tensor [R, R] or None, got {got}")
        if isinstance(self.id_bound, bool) or not isinstance(self.id_bound, int):
            raise ValueError(f"id_bound must be an int, got {self.id_bound!r}")

    def members(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """C(x) for tokens x [..., T]: ids [..., T, G] and keep [..., T, G]."""
        vocab, size = p.shape[-1], self.group_size
        if vocab < size:
            raise ValueError(f"the release's window needs V >= G, got V = {vocab}, G = {size}")
        ascending = torch.sort(p, dim=-1, stable=True).indices  # the release's logit_sort
        ranks = torch.arange(vocab, device=p.device).expand_as(ascending)
        rank = torch.empty_like(ascending).scatter_(-1, ascending, ranks)  # the inverse permutation
        start = rank.gather(-1, x) - size // 2  # [..., T]
        slots = start.unsqueeze(-1) + torch.arange(size, device=p.device)  # [..., T, G]
        # A negative start wraps past the stop (V >= G): the release's slice is empty.
        in_slice = (start >= 0).unsqueeze(-1) & (slots < vocab)
        index = ascending.gather(-1, slots.clamp(0, vocab - 1).flatten(-2)).view(slots.shape)
        token = x.unsqueeze(-1)
        keep = in_slice
        if self.max_prob_gap is not None:
            p_x = p.gather(-1, x).unsqueeze(-1)
            p_y = p.gather(-1, index.flatten(-2)).view(index.shape)
            keep = keep & ((p_y - p_x).abs() < self.max_prob_gap)
        fallback = ~in_slice.any(-1, keepdim=True)
        if self.adjacency is not None:
            rows = self.adjacency.shape[0]
            largest = torch.where(in_slice, index, -1).amax(-1, keepdim=True)
            filtered = largest <= self.id_bound
            # The release: an IndexError where x >= R, an abort on its GPU where x < R (the
            # module docstring); the plain ratio in both.
            missing = filtered & (largest >= rows)
            table = self.adjacency.to(p.device)
            near = table[token.clamp(max=rows - 1), index.clamp(max=rows - 1)]
            keep = torch.where(filtered & ~missing, keep & near, keep)
            fallback = fallback | missing
        keep = keep | (in_slice & (index == token))  # x stays (module docstring)
        first = torch.arange(size, device=p.device) == 0
        return torch.where(fallback & first, token, index), torch.where(fallback, first, keep)

    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """(p(C(x)), q(C(x))) for tokens x [..., T]: [..., T] each (``member_masses``)."""
        return member_masses(p, q, *self.members(p, q, x))

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        return DynamicClusters(self.group_size).residual_weights(p, q)  # the token residual


rows_of.register(ReleaseDistanceClusters, shared_rows)  # adjacency [R, R]: the vocabulary's
