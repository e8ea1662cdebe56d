"""``verify(..., support=ids)``: the caller's support (e.g. the top-k ids the target was
restricted to) gives exactly the result of the default call, and is checked under ``validate``."""

from __future__ import annotations

import zlib

import pytest
import torch

from gsd_core import DynamicClusters, RankBinnedClusters, verify
from gsd_core.grouping import rank_window_members

FIELDS = ("num_accepted", "tokens", "num_emitted", "accept_probs")


def _same(a, b) -> None:
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert torch.equal(torch.nan_to_num(x, nan=-7.0), torch.nan_to_num(y, nan=-7.0)), name


def _sparse_window(gen: torch.Generator, vocab: int, window: int, support_size: int, levels: int | None,
                   batch: tuple[int, ...] = (), bonus: bool = True, zero_drafts: bool = False):
    """p [*batch, L(+1), V] with support_size positive entries per row (few distinct values when
    ``levels``: many ties), q, drafts (some with p(x) = 0 when ``zero_drafts``), uniforms, and
    a support [*batch, L, K]: the positive ids plus a few zero ids, shuffled."""
    rows = window + 1 if bonus else window
    scores = torch.rand(*batch, rows, vocab, generator=gen, dtype=torch.float64)
    keep = scores.topk(support_size, dim=-1).indices
    if levels is None:
        w = torch.rand(*batch, rows, support_size, generator=gen, dtype=torch.float64) + 0.01
    else:
        w = torch.randint(1, levels + 1, (*batch, rows, support_size), generator=gen).double()
    p = torch.zeros(*batch, rows, vocab, dtype=torch.float64).scatter_(-1, keep, w)
    p = p / p.sum(-1, keepdim=True)
    q = torch.softmax(torch.randn(*batch, window, vocab, generator=gen, dtype=torch.float64), -1)
    if zero_drafts:
        drafts = torch.randint(0, vocab, (*batch, window), generator=gen)
    else:
        drafts = torch.multinomial(p[..., :window, :].reshape(-1, vocab), 1, generator=gen).view(*batch, window)
    extra = torch.randint(0, vocab, (*batch, window, 3), generator=gen)
    zero_id = (p[..., :window, :] == 0).int().argmax(-1, keepdim=True)  # an id with p = 0 in each row
    extra = torch.where(p[..., :window, :].gather(-1, extra) > 0, zero_id, extra)  # zero ids only (may repeat)
    support = torch.cat([keep[..., :window, :], extra], -1)
    order = torch.rand(support.shape, generator=gen).argsort(-1)
    support = support.gather(-1, order)
    u = torch.rand(*batch, window + 1, generator=gen, dtype=torch.float64)
    return p, q, drafts, u, support


@pytest.mark.parametrize("levels", [None, 2], ids=["distinct", "ties"])
@pytest.mark.parametrize("zero_drafts", [False, True], ids=["sampled", "zero-prob"])
@pytest.mark.parametrize("bonus", [True, False])
@pytest.mark.parametrize("validate", [True, False])
def test_support_gives_the_default_result(levels, zero_drafts, bonus, validate):
    # A fixed seed per case (hash(None) differs between interpreter runs).
    case = repr((levels, zero_drafts, bonus, validate)).encode()
    gen = torch.Generator().manual_seed(zlib.crc32(case))
    for group in (0, 2, 6, 14):
        rule = DynamicClusters(group)
        for _ in range(6):
            p, q, d, u, s = _sparse_window(gen, 96, 6, 11, levels, bonus=bonus, zero_drafts=zero_drafts)
            # scale 2.5 accepts more often, so windows end at many positions (and in the bonus row)
            for scale in (1.0, 2.5):
                plain = verify(p, q, d, rule, uniforms=u, acceptance_scale=scale, validate=validate)
                given = verify(p, q, d, rule, uniforms=u, acceptance_scale=scale, validate=validate, support=s)
                _same(plain, given)


def test_support_with_batch_dimensions_and_a_shared_support():
    gen = torch.Generator().manual_seed(5)
    rule = DynamicClusters(6)
    p, q, d, u, s = _sparse_window(gen, 64, 4, 9, 3, batch=(3, 2))
    _same(verify(p, q, d, rule, uniforms=u), verify(p, q, d, rule, uniforms=u, support=s))
    # One support [L, K] for every batch entry: the union of the batch's supports (+ zeros).
    union = (p[..., :4, :] > 0).any(0).any(0)  # [L, V]
    width = int(union.sum(-1).max())
    shared = torch.topk(union.double() + torch.rand(union.shape, generator=gen) * 1e-3, width, -1).indices
    _same(verify(p, q, d, rule, uniforms=u), verify(p, q, d, rule, uniforms=u, support=shared))


def test_support_on_a_lumina_sized_window():
    gen = torch.Generator().manual_seed(8)
    vocab, window, k = 65536, 16, 2000
    logits = torch.full((window + 1, vocab), -torch.inf, dtype=torch.float64)
    logits[:, 4:8196] = 2.0 * torch.randn(window + 1, 8192, generator=gen, dtype=torch.float64)
    top = torch.topk(logits, k, dim=-1)
    p = torch.softmax(logits.masked_fill(logits < top.values[:, -1:], -torch.inf), -1)
    drafts = torch.randint(4, 8196, (window,), generator=gen)
    q = torch.nn.functional.one_hot(drafts, vocab).double()
    u = torch.rand(window + 1, generator=gen, dtype=torch.float64)
    rule = DynamicClusters(14)
    _same(verify(p, q, drafts, rule, uniforms=u), verify(p, q, drafts, rule, uniforms=u, support=top.indices[:window]))


def test_other_rules_ignore_the_support():
    gen = torch.Generator().manual_seed(9)
    p, q, d, u, s = _sparse_window(gen, 48, 5, 7, 2)
    for rule in (None, RankBinnedClusters(4), DynamicClusters(6, rank_by="q")):
        _same(verify(p, q, d, rule, uniforms=u), verify(p, q, d, rule, uniforms=u, support=s))


def test_rank_window_members_with_a_support_matches_without():
    gen = torch.Generator().manual_seed(10)
    p, _, d, _, s = _sparse_window(gen, 80, 8, 10, 2, bonus=False, zero_drafts=True)
    before = torch.randint(0, 9, (8,), generator=gen)
    after = torch.randint(0, 9, (8,), generator=gen)
    for n_before, n_after in ((7, 7), (before, after), (0, 80)):
        a = rank_window_members(p, d, n_before, n_after)
        b = rank_window_members(p, d, n_before, n_after, support=s)
        assert torch.equal(a[1], b[1]) and torch.equal(a[0][a[1]], b[0][b[1]])


def _bad(support, match):
    gen = torch.Generator().manual_seed(11)
    p, q, d, u, s = _sparse_window(gen, 40, 3, 5, None)
    with pytest.raises(ValueError, match=match):
        verify(p, q, d, DynamicClusters(4), uniforms=u, support=support(p, s))


def test_support_out_of_range_is_rejected():
    _bad(lambda p, s: torch.cat([s, torch.full_like(s[..., :1], 40)], -1), "support has ids out of range")
    _bad(lambda p, s: torch.cat([s, torch.full_like(s[..., :1], -1)], -1), "support has ids out of range")


def test_support_id_v_is_rejected_beside_bfloat16_rows():
    """bfloat16 holds integers exactly only up to 256: the id 257 = V, read back with p's
    bfloat16 row sums, must not round to 256 (in range) and pass, to fail later in a gather."""
    p = torch.zeros(2, 257, dtype=torch.bfloat16)
    p[:, 256] = 1
    with pytest.raises(ValueError, match="support has ids out of range"):
        verify(p, p[:1], torch.tensor([256]), DynamicClusters(3),
               generator=torch.Generator().manual_seed(0), support=torch.tensor([[257]]))


def test_support_must_not_widen_the_batch():
    """A support [3, L, K] broadcasts with an unbatched window but would make it a batch of 3
    (likewise [2, 2, L, K] with a batch of 2): refused with the shapes named, with or without
    validate."""
    gen = torch.Generator().manual_seed(16)
    p, q, d, u, s = _sparse_window(gen, 40, 3, 5, None)
    pb, qb, db, ub, sb = _sparse_window(gen, 40, 3, 5, None, batch=(2,))
    rule = DynamicClusters(4)
    for validate in (True, False):
        with pytest.raises(ValueError, match=r"support's batch shape \(3,\) does not broadcast "
                                             r"to the batch shape \(\)"):
            verify(p, q, d, rule, uniforms=u, support=s.expand(3, *s.shape), validate=validate)
        with pytest.raises(ValueError, match=r"\(2, 2\) does not broadcast to the batch shape "
                                             r"\(2,\)"):
            verify(pb, qb, db, rule, uniforms=ub, support=sb.expand(2, *sb.shape),
                   validate=validate)


def test_support_missing_a_positive_id_is_rejected():
    def drop_first_positive(p, s):
        positive = p[:3].gather(-1, s) > 0
        first = positive.int().argmax(-1, keepdim=True)
        zero_id = (p[:3] == 0).int().argmax(-1, keepdim=True)  # some id with p = 0 in each row
        return s.scatter(-1, first, zero_id)
    _bad(drop_first_positive, "every token id with p > 0 .* a row misses one")


def test_support_repeating_a_positive_id_is_rejected_but_repeated_zeros_are_fine():
    def repeat_positive(p, s):
        positive = p[:3].gather(-1, s) > 0
        return torch.cat([s, s.gather(-1, positive.int().argmax(-1, keepdim=True))], -1)
    _bad(repeat_positive, "each token id with p > 0 once: a row repeats one")
    gen = torch.Generator().manual_seed(12)
    p, q, d, u, s = _sparse_window(gen, 40, 3, 5, None)
    zero_id = (p[:3] == 0).int().argmax(-1, keepdim=True)
    twice = torch.cat([s, zero_id, zero_id], -1)
    _same(verify(p, q, d, DynamicClusters(4), uniforms=u), verify(p, q, d, DynamicClusters(4), uniforms=u, support=twice))


@pytest.mark.parametrize("support,match", [
    (lambda s: s[:, :2], "support must be a tensor of token ids"),
    (lambda s: s[..., :0], "support must be a tensor of token ids"),
    (lambda s: s[0, 0], "support must be a tensor of token ids"),
    (lambda s: s.double(), "support must hold integer token ids"),
    (lambda s: s[:1].expand(3, *s.shape[1:]), "does not broadcast"),
    (lambda s: [1, 2], "support must be a tensor of token ids"),
])
def test_support_shape_and_dtype_are_checked_without_validate(support, match):
    gen = torch.Generator().manual_seed(13)
    p, q, d, u, s = _sparse_window(gen, 40, 3, 5, None, batch=(2,))
    with pytest.raises(ValueError, match=match):
        verify(p, q, d, DynamicClusters(4), uniforms=u, support=support(s), validate=False)


def test_support_with_an_empty_window_or_an_empty_batch():
    gen = torch.Generator().manual_seed(14)
    p, q, d, u, s = _sparse_window(gen, 32, 3, 4, None, batch=(2,))
    rule = DynamicClusters(4)
    _same(verify(p[:, :1], q[:, :0], d[:, :0], rule, uniforms=u[:, :1]),
          verify(p[:, :1], q[:, :0], d[:, :0], rule, uniforms=u[:, :1], support=s[:, :0]))
    _same(verify(p[:0], q[:0], d[:0], rule, uniforms=u[:0]), verify(p[:0], q[:0], d[:0], rule, uniforms=u[:0], support=s[:0]))
    _same(verify(p[:0], q[:0], d[:0], rule, uniforms=u[:0]), verify(p[:0], q[:0], d[:0], rule, uniforms=u[:0], support=s[0]))


def test_validated_call_reads_the_support_sizes_with_the_validation_and_agrees():
    """The default call reads K = max support size in its validation read-back (one sync);
    validate=False counts it itself: same results, also with p broadcast over the batch."""
    gen = torch.Generator().manual_seed(15)
    rule = DynamicClusters(14)
    for levels in (None, 2):
        p, q, d, u, _ = _sparse_window(gen, 96, 6, 11, levels, batch=(4,), zero_drafts=True)
        _same(verify(p, q, d, rule, uniforms=u), verify(p, q, d, rule, uniforms=u, validate=False))
        shared = verify(p[0], q, d, rule, uniforms=u)
        _same(shared, verify(p[0].expand_as(p), q, d, rule, uniforms=u, validate=False))
