"""The engine (gsd_lab.engine) against gsd_core, bit for bit.

Hypothesis draws windows with ties, zeros, sparse supports (the engine's top-K path), one-hot
and equal drafts, batches (and one p broadcast over them), L = 0, bonus rows or none, float64,
float32 and bfloat16 rows, float32 or float64 uniforms, and every rule (SD, dynamic clusters by p
and by q with both filters, the release's distance clusters, rank bins and fixed partitions with
either residual, LANTERN, Amplify of each); the engine, with and without ``support`` and
validation, must return gsd_core.verify's result in every bit given the same uniforms. Then the
accounting's a(x) on the support of q against gsd_core's, the engine's own checks (support,
16-bit read-backs), and its behaviour on NaN rows without validation.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gsd_core
from gsd_core import (
    Amplify,
    DynamicClusters,
    FixedPartition,
    Lantern,
    RankBinnedClusters,
    accept_probability,
    latent_neighbourhoods,
)
from gsd_lab.rules.clusters import ReleaseDistanceClusters
from gsd_lab.engine import support_accept, support_masses, uses_support, verify
from gsd_lab.engine.readback import host_ranges

FIELDS = ("num_accepted", "tokens", "num_emitted", "accept_probs")


def assert_same(got, want) -> None:
    for name in FIELDS:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and torch.equal(a, b), (name, a, b)


@st.composite
def rows(draw: st.DrawFn, count: int, vocab: int) -> torch.Tensor:
    """Probability rows [count, V] from integer weights: ties, zeros, sparse supports, one-hot."""
    out = []
    for _ in range(count):
        kind = draw(st.sampled_from(["weights", "sparse", "one_hot", "uniform"]))
        if kind == "one_hot":
            w = [0] * vocab
            w[draw(st.integers(0, vocab - 1))] = 1
        elif kind == "uniform":
            w = [1] * vocab
        else:
            top = 3 if kind == "weights" else 1
            w = draw(st.lists(st.integers(0, top), min_size=vocab, max_size=vocab))
            if kind == "sparse":  # at most a third of the vocabulary: the engine's top-K path
                keep = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=max(1, vocab // 3)))
                w = [draw(st.integers(1, 3)) if y in keep else 0 for y in range(vocab)]
            if sum(w) == 0:
                w[draw(st.integers(0, vocab - 1))] = 1
        t = torch.tensor(w, dtype=torch.float64)
        out.append(t / t.sum())
    return torch.stack(out) if out else torch.empty(0, vocab, dtype=torch.float64)


@st.composite
def rules(draw: st.DrawFn, vocab: int) -> object:
    emb = torch.tensor(draw(st.lists(st.lists(st.integers(-2, 2), min_size=2, max_size=2), min_size=vocab,
                                     max_size=vocab)), dtype=torch.float64)
    size = draw(st.integers(1, vocab + 2))
    residual = draw(st.sampled_from(["token", "cluster"]))
    kind = draw(st.sampled_from(["sd", "dynamic", "dynamic-filters", "dynamic-q", "bins", "labels",
                                 "lantern", "release"]))
    rule = {
        "sd": lambda: None,
        "dynamic": lambda: DynamicClusters(size),
        "dynamic-filters": lambda: DynamicClusters(size, draw(st.sampled_from([None, 0.0, 2.0])),
                                                   draw(st.sampled_from([None, 0.0, 0.1])), emb),
        "dynamic-q": lambda: DynamicClusters(size, None, draw(st.sampled_from([None, 0.1])), rank_by="q"),
        "bins": lambda: RankBinnedClusters(size, residual),
        "labels": lambda: FixedPartition(torch.tensor(draw(st.lists(st.integers(0, vocab - 1), min_size=vocab,
                                                                    max_size=vocab))), residual),
        "lantern": lambda: Lantern(latent_neighbourhoods(emb, draw(st.integers(1, vocab))),
                                   draw(st.sampled_from([0.0, 0.2, 1.0]))),
        "release": lambda: _release_rule(draw, vocab, min(size, vocab)),
    }[kind]()
    return Amplify(draw(st.sampled_from([0.5, 2.0])), rule) if draw(st.booleans()) else rule


def _release_rule(draw: st.DrawFn, vocab: int, size: int) -> ReleaseDistanceClusters:
    """The release's clusters with a table of R <= V rows (or none) and a bound near R: ties
    ranked the release's way, the plain ratio where a window's ids stop in [R, bound]."""
    rows_ = draw(st.integers(1, vocab))
    table = None
    if draw(st.booleans()):  # a table from a drawn seed: about half the pairs near
        generator = torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))
        table = torch.rand(rows_, rows_, generator=generator) < 0.5
    bound = draw(st.integers(max(0, rows_ - 2), rows_ + 2))
    return ReleaseDistanceClusters(size, table, draw(st.sampled_from([None, 0.0, 0.1])), bound)


@st.composite
def windows(draw: st.DrawFn) -> dict:
    vocab = draw(st.integers(1, 30))
    window = draw(st.integers(0, 4))
    batch = draw(st.sampled_from([(), (2,)]))
    bonus = draw(st.booleans())
    n = int(torch.Size(batch).numel())
    p = draw(rows(n * (window + bonus), vocab)).view(*batch, window + bonus, vocab)
    if draw(st.booleans()):  # Jacobi: drafts from p's own rows
        q = p[..., :window, :].clone()
    else:
        q = draw(rows(n * window, vocab)).view(*batch, window, vocab)
    drafts = torch.tensor(draw(st.lists(st.integers(0, vocab - 1), min_size=n * window, max_size=n * window)),
                          dtype=torch.long).view(*batch, window)
    levels = st.sampled_from([0.0, 0.25, 0.5, 0.999]) | st.floats(0.0, 1.0, exclude_max=True)
    u = torch.tensor(draw(st.lists(levels, min_size=n * (window + 1), max_size=n * (window + 1))),
                     dtype=torch.float64).view(*batch, window + 1)
    return {"p": p, "q": q, "drafts": drafts, "u": u, "rule": draw(rules(vocab))}


def _support(p: torch.Tensor, window: int, seed: int) -> torch.Tensor:
    """Ids [..., L, K] holding every id with p > 0 of the draft rows once (K = the widest
    support; narrower rows add zero ids), shuffled."""
    rows_ = p[..., :window, :]
    ids = torch.topk(rows_, max(1, int((rows_ > 0).sum(-1).max())), dim=-1).indices
    return ids.gather(-1, torch.rand(ids.shape, generator=torch.Generator().manual_seed(seed)).argsort(-1))


DTYPES = st.sampled_from([torch.float64, torch.float32, torch.bfloat16])


@settings(max_examples=150)
@given(windows(), st.booleans(), st.booleans(), DTYPES, DTYPES, st.sampled_from([torch.float64, torch.float32]),
       st.booleans())
def test_engine_verify_is_gsd_core_verify_bit_for_bit(case, validate, with_support, p_dtype, q_dtype, u_dtype,
                                                       shared_p):
    """Also with 16-bit and float32 rows (computed in the working dtype), float32 uniforms, and
    one p for the whole batch (``shared_p``: broadcast over the drafts' batch dimension)."""
    p, q, drafts, u, rule = case["p"], case["q"], case["drafts"], case["u"], case["rule"]
    p, q = p.to(p_dtype), q.to(q_dtype)
    u = u if u_dtype == torch.float64 else u.float().clamp(max=1 - 2**-24)  # below 1 after rounding
    if shared_p and p.ndim == 3:
        p = p[0]
    want = gsd_core.verify(p, q, drafts, rule, uniforms=u)
    window = q.shape[-2]
    support = _support(p, window, 0) if with_support and window else None
    assert_same(verify(p, q, drafts, rule, uniforms=u, validate=validate, support=support), want)


@settings(max_examples=60)
@given(windows(), st.integers(1, 64))
def test_accounting_masses_on_the_support_of_q_are_gsd_cores(case, chunk):
    """``support_masses`` at the support of q (in chunks of ``chunk`` entries) and
    ``support_accept``: gsd_core's masses and a(x) in every bit; 0 off the support."""
    vocab = case["p"].shape[-1]
    p, q, rule = case["p"].reshape(-1, vocab), case["p"].reshape(-1, vocab).roll(1, 0), case["rule"]
    if not p.shape[0]:
        return
    want = gsd_core.rules.as_rule(rule).masses(p, q, torch.arange(vocab).expand(p.shape))
    tokens = torch.topk(q, vocab, dim=-1).indices
    got = support_masses(gsd_core.rules.as_rule(rule), p, q, tokens, chunk_elements=chunk)
    assert torch.equal(got[0], want[0].gather(-1, tokens)) and torch.equal(got[1], want[1].gather(-1, tokens))
    exact = accept_probability(p, q, torch.arange(vocab), rule)
    assert torch.equal(support_accept(rule, p, q, chunk_elements=chunk), torch.where(q > 0, exact, 0.0))


@settings(max_examples=80)
@given(windows(), st.data(), st.booleans())
def test_the_release_clusters_on_verify_and_the_accounting(case, data, validate):
    """``ReleaseDistanceClusters`` (ties, zeros, windows clipped or empty, ids at the bound) on
    the engine's verify, with and without a support, and on the accounting's support of q:
    gsd_core's result and masses in every bit."""
    p, q, drafts, u = case["p"], case["q"], case["drafts"], case["u"]
    vocab = p.shape[-1]
    rule = _release_rule(data.draw, vocab, data.draw(st.integers(1, vocab)))
    want = gsd_core.verify(p, q, drafts, rule, uniforms=u)
    support = _support(p, q.shape[-2], 0) if q.shape[-2] else None
    for ids in (None, support):
        assert_same(verify(p, q, drafts, rule, uniforms=u, validate=validate, support=ids), want)
    rows_p, rows_q = p.reshape(-1, vocab), p.reshape(-1, vocab).roll(1, 0)
    tokens = torch.topk(rows_q, vocab, dim=-1).indices
    masses = rule.masses(rows_p, rows_q, torch.arange(vocab).expand(rows_p.shape))
    got = support_masses(rule, rows_p, rows_q, tokens, chunk_elements=16)
    assert all(torch.equal(g, m.gather(-1, tokens)) for g, m in zip(got, masses))
    exact = accept_probability(rows_p, rows_q, torch.arange(vocab), rule)
    assert torch.equal(support_accept(rule, rows_p, rows_q), torch.where(rows_q > 0, exact, 0.0))


def _sparse_window(gen, vocab, window, support_size, levels, batch=(), bonus=True, zero_drafts=False):
    """p [*batch, L(+1), V] with ``support_size`` positive entries per row (few distinct values
    when ``levels``), softmax q, drafts (some with p(x) = 0 when ``zero_drafts``), uniforms and a
    support [*batch, L, K]: the positive ids plus a few zero ids, shuffled."""
    rows_ = window + 1 if bonus else window
    keep = torch.rand(*batch, rows_, vocab, generator=gen).topk(support_size, dim=-1).indices
    if levels is None:
        w = torch.rand(*batch, rows_, support_size, generator=gen, dtype=torch.float64) + 0.01
    else:
        w = torch.randint(1, levels + 1, (*batch, rows_, support_size), generator=gen).double()
    p = torch.zeros(*batch, rows_, vocab, dtype=torch.float64).scatter_(-1, keep, w)
    p = p / p.sum(-1, keepdim=True)
    q = torch.softmax(torch.randn(*batch, window, vocab, generator=gen, dtype=torch.float64), -1)
    if zero_drafts:
        drafts = torch.randint(0, vocab, (*batch, window), generator=gen)
    else:
        drafts = torch.multinomial(p[..., :window, :].reshape(-1, vocab), 1, generator=gen).view(*batch, window)
    extra = torch.randint(0, vocab, (*batch, window, 3), generator=gen)
    zero_id = (p[..., :window, :] == 0).int().argmax(-1, keepdim=True)
    extra = torch.where(p[..., :window, :].gather(-1, extra) > 0, zero_id, extra)  # zero ids only (may repeat)
    support = torch.cat([keep[..., :window, :], extra], -1)
    support = support.gather(-1, torch.rand(support.shape, generator=gen).argsort(-1))
    return p, q, drafts, torch.rand(*batch, window + 1, generator=gen, dtype=torch.float64), support


@pytest.mark.parametrize("levels", [None, 2], ids=["distinct", "ties"])
def test_sparse_rows_of_a_larger_vocabulary(levels):
    """V in the hundreds with a support of ~10 (the top-K path, zeros ranked by counting, windows
    running into the zeros), drafts with p(x) = 0, batches: bit for bit gsd_core's result."""
    gen = torch.Generator().manual_seed(3 if levels else 4)
    for group in (1, 2, 6, 14, 15):
        for rule in (DynamicClusters(group), Amplify(2.5, DynamicClusters(group, max_prob_gap=0.02))):
            p, q, d, u, s = _sparse_window(gen, 300, 6, 11, levels, batch=(3,), zero_drafts=True)
            want = gsd_core.verify(p, q, d, rule, uniforms=u)
            for support in (None, s):
                for validate in (True, False):
                    assert_same(verify(p, q, d, rule, uniforms=u, support=support, validate=validate), want)


def test_a_lumina_sized_window():
    gen = torch.Generator().manual_seed(8)
    vocab, window, k = 65536, 16, 2000
    logits = torch.full((window + 1, vocab), -torch.inf, dtype=torch.float64)
    logits[:, 4:8196] = 2.0 * torch.randn(window + 1, 8192, generator=gen, dtype=torch.float64)
    top = torch.topk(logits, k, dim=-1)
    p = torch.softmax(logits.masked_fill(logits < top.values[:, -1:], -torch.inf), -1)
    drafts = torch.randint(4, 8196, (window,), generator=gen)
    q = torch.nn.functional.one_hot(drafts, vocab).double()
    u = torch.rand(window + 1, generator=gen, dtype=torch.float64)
    u[:4] = 0.0
    rule = DynamicClusters(14)
    want = gsd_core.verify(p, q, drafts, rule, uniforms=u)
    assert_same(verify(p, q, drafts, rule, uniforms=u), want)
    assert_same(verify(p, q, drafts, rule, uniforms=u, support=top.indices[:window], validate=False), want)


def test_uses_support_only_for_dynamic_clusters_ranked_by_p():
    assert uses_support(DynamicClusters(4)) and uses_support(Amplify(2.0, DynamicClusters(4)))
    assert not any(map(uses_support, (None, torch.arange(12) // 3, RankBinnedClusters(3),
                                      DynamicClusters(4, rank_by="q"))))
    gen = torch.Generator().manual_seed(9)
    p, q, d, u, s = _sparse_window(gen, 48, 5, 7, 2)
    wrong = torch.zeros(5, 1, dtype=torch.long)  # would be refused if used
    for rule in (None, RankBinnedClusters(4), DynamicClusters(6, rank_by="q")):
        assert_same(verify(p, q, d, rule, uniforms=u, support=wrong, validate=False),
                     gsd_core.verify(p, q, d, rule, uniforms=u))


def _bad(support, match):
    gen = torch.Generator().manual_seed(11)
    p, q, d, u, s = _sparse_window(gen, 40, 3, 5, None)
    with pytest.raises(ValueError, match=match):
        verify(p, q, d, DynamicClusters(4), uniforms=u, support=support(p, s))


def test_a_bad_support_is_refused_under_validation():
    _bad(lambda p, s: torch.cat([s, torch.full_like(s[..., :1], 40)], -1), "support has ids out of range")
    _bad(lambda p, s: torch.cat([s, torch.full_like(s[..., :1], -1)], -1), "support has ids out of range")

    def drop_first_positive(p, s):
        first = (p[:3].gather(-1, s) > 0).int().argmax(-1, keepdim=True)
        return s.scatter(-1, first, (p[:3] == 0).int().argmax(-1, keepdim=True))

    _bad(drop_first_positive, "every token id with p > 0 .* a row misses one")

    def repeat_positive(p, s):
        return torch.cat([s, s.gather(-1, (p[:3].gather(-1, s) > 0).int().argmax(-1, keepdim=True))], -1)

    _bad(repeat_positive, "each token id with p > 0 once: a row repeats one")


@pytest.mark.parametrize("support,match", [
    (lambda s: s[:, :2], "support must be a tensor of token ids"),
    (lambda s: s[..., :0], "support must be a tensor of token ids"),
    (lambda s: s.double(), "support must hold integer token ids"),
    (lambda s: s.expand(2, *s.shape), "does not broadcast"),
    (lambda s: [1, 2], "support must be a tensor of token ids"),
])
def test_support_shape_and_dtype_are_checked_without_validation(support, match):
    gen = torch.Generator().manual_seed(13)
    p, q, d, u, s = _sparse_window(gen, 40, 3, 5, None, batch=(2,))
    with pytest.raises(ValueError, match=match):
        verify(p, q, d, DynamicClusters(4), uniforms=u, support=support(s), validate=False)


def test_the_id_v_is_refused_beside_bfloat16_rows():
    """bfloat16 holds integers exactly only up to 256: the id 257 = V, read back beside p's
    bfloat16 row sums, must not round to 256 (in range) and pass."""
    p = torch.zeros(2, 257, dtype=torch.bfloat16)
    p[:, 256] = 1
    with pytest.raises(ValueError, match="support has ids out of range"):
        verify(p, p[:1], torch.tensor([256]), DynamicClusters(3), generator=torch.Generator().manual_seed(0),
               support=torch.tensor([[257]]))
    with pytest.raises(ValueError, match="draft_tokens has ids out of range"):
        verify(p, p[:1], torch.tensor([257]), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_read_back_keeps_integers_exact_beside_narrow_floats(dtype):
    floats = torch.tensor([0.5, 1.0], dtype=dtype)
    ids = torch.tensor([257, 2049, 2**24 + 1])
    sizes = torch.tensor([2049, 257], dtype=torch.int32)
    exact = [(0.5, 1.0), (257, 2**24 + 1), (257, 2049)]
    assert host_ranges([floats, ids, sizes]) == exact  # the few-values path (one cat)
    assert host_ranges([floats.view(1, 2), ids.view(3, 1), sizes]) == exact  # reduced first


@pytest.mark.parametrize("dtype,positives", [(torch.bfloat16, 257), (torch.float16, 2049)])
def test_16_bit_rows_give_the_reference_window(dtype, positives):
    """The support size read back beside 16-bit row sums (more positives than the dtype counts
    exactly) ranks exactly as the reference; V > 2 * positives: the top-K path."""
    vocab = 2 * positives + 300
    gen = torch.Generator().manual_seed(21)
    p = torch.zeros(2, vocab, dtype=torch.float64)
    ids = torch.randperm(vocab, generator=gen)[:positives]
    p[:, ids] = torch.rand(2, positives, generator=gen, dtype=torch.float64) + 0.5
    p = (p / p.sum(-1, keepdim=True)).to(dtype)
    q = (p[:1] > 0).to(dtype) / positives
    drafts = torch.cat([ids[:64], torch.arange(vocab - 4, vocab)]).unsqueeze(-1)
    u = torch.rand(drafts.shape[0], 2, generator=gen, dtype=torch.float64)
    want = gsd_core.verify(p, q, drafts, DynamicClusters(3), uniforms=u)
    assert_same(verify(p, q, drafts, DynamicClusters(3), uniforms=u), want)
    assert bool((want.accept_probs[:64] > 0).all())


def test_nan_rows_without_validation_still_emit_ids_in_range():
    vocab, width = 200, 10
    gen = torch.Generator().manual_seed(0)
    top = torch.topk(torch.randn(4, vocab, generator=gen, dtype=torch.float64), width, dim=-1).indices
    p = torch.zeros(4, vocab, dtype=torch.float64).scatter_(-1, top, 1.0 / width)
    p[1].scatter_(-1, top[1, :4], float("nan"))  # NaN inside row 1's support
    q = torch.roll(p[:3], 1, 0).nan_to_num(0.1)
    for rule in (None, DynamicClusters(8), RankBinnedClusters(4)):
        for support in (None, top[:3]):
            for seed in range(5):
                result = verify(p, q, top[:3, 4], rule, validate=False, support=support,
                                generator=torch.Generator().manual_seed(seed))
                emitted = result.tokens[result.tokens >= 0]
                assert bool((emitted < vocab).all())
    with pytest.raises(ValueError, match="NaN"):
        verify(p, q, top[:3, 4])


def test_per_row_partition_labels_are_refused_as_by_gsd_core():
    """labels [..., V] (one partition per row) serve the exact laws; a window takes one partition."""
    p = torch.full((3, 4), 0.25, dtype=torch.float64)
    per_row = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    for rule in (per_row, Amplify(2.0, FixedPartition(per_row, "cluster"))):
        for check in (gsd_core.verify, verify):
            with pytest.raises(ValueError, match="one partition of the vocabulary"):
                check(p, p[:2], torch.tensor([0, 3]), rule, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("levels", [None, 3])
@pytest.mark.parametrize("support_size", [5, 20, 31])
def test_top_k_support_is_the_whole_rows_ranking_unless_it_overflows(levels, support_size):
    """``top_k_support`` (the static engine's fixed-width support: the K largest of the allowed
    ids): where a row has at most K positive entries (overflow False), verify with it is verify
    without it, bit for bit (ties among the kept values included: levels = 3); the flag is True
    exactly where a row has more."""
    from gsd_lab.engine.ranking import top_k_support

    gen = torch.Generator().manual_seed(support_size)
    vocab, window, width = 48, 6, 24
    p, q, drafts, u, _ = _sparse_window(gen, vocab, window, support_size, levels)
    p[..., :8] = 0.0  # ids 0..7 not allowed
    p = p / p.sum(-1, keepdim=True)
    allowed = torch.arange(8, vocab)
    ids, overflow = top_k_support(p[:window], allowed, width)
    assert torch.equal(overflow, (p[:window] > 0).sum(-1) > width)
    rule = DynamicClusters(5)
    want = verify(p, q, drafts, rule, uniforms=u)
    if not overflow.any():
        assert_same(verify(p, q, drafts, rule, uniforms=u, support=ids), want)
    else:
        assert support_size > width
