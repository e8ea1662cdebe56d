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
release computes them (``rules.clusters.ReleaseDistanceClusters``) and CLIP on resized images;
each setting, and what is not reproduced, in docs/lumina-mgpt.md, section 8.
"""

from __future__ import annotations

from dataclasses import dataclass

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
