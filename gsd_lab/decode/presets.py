"""Decoding presets: the package's own exact variant (``default``) and the GSD release's
settings (``release``), so that numbers can be set beside the paper's.

``default`` (the package's own, exact where the method is): the window is ``MethodSpec.window``
(16 drafts), Jacobi drafting from the first image code to the last token, fresh random drafts
take the forced token where the adapter forces one (row ends: always accepted), and GSD's
distance filter compares float64 squared distances ||e_y - e_x||^2 <= d of the input embeddings
(``gsd_core.DynamicClusters``); CLIP scores the image as decoded.

``release`` follows junhyukso/GSD's ``test_GSD.py`` with its Jacobi sampler, and SJD's evaluation:
its window, its Jacobi interval (``RELEASE_EXTRA_FORWARDS``: the forwards the release spends
outside it), random drafts over the image codes at every position, GSD's window and filters as the
release computes them (``ReleaseDistanceClusters``) and CLIP on resized images; each setting,
and what is not reproduced, in docs/lumina-mgpt.md, section 8.
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
