"""``--preset release`` (the GSD release's window, Jacobi interval, random drafts at row ends,
bf16 distance filter, CLIP resize) against the package's default, on the tiny release-layout
checkpoint: what each part does, and the difference it makes (NFE and tokens, printed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.functional import softmax

from gsd_lab.cli.common import PRESET_CHOICES, PRESET_WINDOWS
from gsd_lab.experiments.runs import generate_one
from gsd_lab.decode.methods import DecodingMethod, ClusterAcceptance
from gsd_lab.decode.presets import PRESETS
from gsd_lab.rules.clusters import ReleaseDistanceClusters, release_distance_table

MODEL = "lumina-mgpt-7b-512"  # 32 x 33 = 1056 tokens per image


@pytest.fixture(scope="module")
def model(tiny_release_set):
    from gsd_lab.experiments.image_model import load_image_model

    return load_image_model(MODEL, weights=str(tiny_release_set.weights), vqgan=str(tiny_release_set.vqgan),
                            device="cpu")


def _method(kind: str, preset: str, clusters: str | None = None, group_size: int = 0) -> DecodingMethod:
    rule = None if clusters is None else ClusterAcceptance(clusters, group_size)
    return DecodingMethod(kind, acceptance=rule, window=PRESETS[preset].window or 16, preset=preset)


def test_the_cli_spells_the_presets_as_the_module():
    assert PRESET_CHOICES == tuple(PRESETS)
    assert PRESET_WINDOWS == {k: v.window for k, v in PRESETS.items() if v.window is not None}
    with pytest.raises(ValueError, match="fixes the window at 15"):
        DecodingMethod("sjd", window=16, preset="release")


def test_the_distance_table_is_the_releases_bf16_expression(model):
    embeddings = model.embeddings
    a = embeddings[:10000].to(torch.bfloat16)  # the release: model.embed_tokens.weight[:10000] in bf16
    release = (torch.sum(a ** 2, dim=-1, keepdim=True) + torch.sum(a.T ** 2, dim=0, keepdim=True)) - 2 * a @ a.T
    assert torch.equal(release_distance_table(embeddings, 0.5), release < 0.5)
    # Not the float64 rule: bf16 rounding moves pairs across the threshold.
    exact = torch.cdist(embeddings.double(), embeddings.double()).square() <= 0.5
    assert (release < 0.5).sum() > 0 and not torch.equal(release < 0.5, exact)


def test_release_clusters_filter_as_the_release_loop():
    generator = torch.Generator().manual_seed(0)
    vocab = rows = 40  # the table holds every id (the release's: 10000 of 65,536, below)
    p = softmax(3 * torch.randn(vocab, generator=generator, dtype=torch.float64), -1)
    q = softmax(torch.randn(vocab, generator=generator, dtype=torch.float64), -1)
    table = torch.rand(rows, rows, generator=generator) < 0.5
    token = p.argsort()[5:6]
    rule = ReleaseDistanceClusters(8, table, 0.15)
    index, keep = rule.members(p, q, token)
    members, window = set(index[0][keep[0]].tolist()), set(index[0].tolist())
    x = token.item()
    assert x in members and len(window) == 8
    for y in window - {x}:
        expected = abs(p[y] - p[x]) < 0.15 and bool(table[x, y])
        assert (y in members) == expected, y
    credited, charged = rule.masses(p, q, token)
    assert credited.item() == pytest.approx(float(p[sorted(members)].sum()))
    assert charged.item() == pytest.approx(float(q[sorted(members)].sum()))
    # A window past the table's rows: no distance filter where it holds an id above the bound
    # (the release's max() <= 10000), the plain ratio, C(x) = {x}, where its ids stop at the
    # bound or below (the release: an IndexError where x >= R, an abort on its GPU where x < R).
    table = torch.zeros(5, 5, dtype=torch.bool)
    index, keep = ReleaseDistanceClusters(8, table, None, id_bound=5).members(p, q, token)
    assert max(window) > 5 and bool(keep[index != x].all())
    index, keep = ReleaseDistanceClusters(8, table, None).members(p, q, token)
    assert index[0][keep[0]].tolist() == [x]


def _release_schedule(accepted: list[int], num_tokens: int) -> list[int]:
    """The drafts per forward of junhyukso/GSD's ``_sample`` for these acceptances, with its
    positions shifted by the 3 tokens it generates before the first code: the input of the next
    forward is ``min(16, r - cur_len)`` tokens while l <= cur_len < r, else 1, with ``cur_len``
    the length before the forward just run (l = 3, r = side^2 + side - 10 = N - 13 + 3 here),
    one committed token and the rest drafts, no draft past the image's last token."""
    cur_len, before, drafts = 0, -1, []  # generated codes committed; before the previous forward
    end = num_tokens - 13
    for a in accepted:
        drafts.append(min(16, end - before) - 1 if 0 <= before < end else 0)
        drafts[-1] = min(drafts[-1], num_tokens - cur_len - 1)
        before, cur_len = cur_len, cur_len + a + 1
    return drafts


def test_release_preset_against_default_on_the_tiny_checkpoint(model, capsys, one_thread):
    prompt, lines = model.default_prompts[0], []
    for method, clusters, group in (("sjd", None, 0), ("gsd", "dynamic", 14), ("gsd", "rank-binned", 50)):
        results = {}
        for preset in ("default", "release"):
            result, image = generate_one(model, _method(method, preset, clusters, group), prompt, 0)
            results[preset] = result
            assert image.shape == (64, 64, 3)  # row ends in place: the image decodes
        default, release = results["default"], results["release"]
        assert max(default.drafted) == 16 and max(release.drafted) == 15
        assert release.drafted == _release_schedule(release.accepted, model.num_tokens)
        assert release.drafted[0] == 0 and release.drafted[-1] == 0  # the first code and the last by AR
        changed = float((default.tokens != release.tokens).double().mean())
        lines.append(f"{method} {clusters or ''} G={group}: NFE default {default.nfe}, release {release.nfe} "
                     f"(the release's own count adds 5); tokens differing {changed:.1%}")
        assert default.nfe != release.nfe or changed > 0
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def test_clip_resize_scores_the_resized_image(tiny_release_set):
    from gsd_lab.quality.clip_score import clip_scores, load_clip, resized

    clip_model, processor = load_clip(tiny_release_set.clip)
    images = [np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)]
    direct = clip_scores(images, ["a red cat"], clip_model, processor, resize=299)
    assert torch.equal(direct, clip_scores(resized(images, 299), ["a red cat"], clip_model, processor))
    assert resized(images, 299)[0].shape == (299, 299, 3)
