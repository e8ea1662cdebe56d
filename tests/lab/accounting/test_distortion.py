"""gsd_lab.accounting.distortion: exact TV(one-step output law, p) per verified position, for every method."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from gsd_core import (
    Amplify,
    DynamicClusters,
    Lantern,
    LatentNeighbourhoods,
    RankBinnedClusters,
    acceptance_rate,
    latent_neighbourhoods,
    output_distribution,
)
from gsd_lab.accounting.distortion import emitted_distortion, exact_distortion, one_step_output_laws

VOCAB, ROWS = 12, 16


def _rows(seed: int, vocab: int = VOCAB, rows: int = ROWS, one_hot_q: bool = False):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(2 * torch.randn(rows, vocab, generator=g, dtype=torch.float64), -1)
    if one_hot_q:  # Jacobi's first drafts: one-hot rows
        q = torch.nn.functional.one_hot(torch.randint(vocab, (rows,), generator=g), vocab).double()
    else:
        q = torch.softmax(2 * torch.randn(rows, vocab, generator=g, dtype=torch.float64), -1)
    return p, q, torch.randn(vocab, 3, generator=g, dtype=torch.float64)


def _methods(embeddings: torch.Tensor) -> dict[str, object]:
    return {
        "sd": None,
        "gsd": DynamicClusters(4),
        "gsd_filters": DynamicClusters(6, 2.0, 0.15, embeddings),
        "rank_bins_token": RankBinnedClusters(3),
        "rank_bins_cluster": RankBinnedClusters(3, "cluster"),
        "amplify": Amplify(2.0),
        "gsd_amplify": Amplify(1.5, DynamicClusters(4)),
        "lantern": Lantern(latent_neighbourhoods(embeddings, 4), 0.2),
        "lantern_amplify": Amplify(1.5, Lantern(latent_neighbourhoods(embeddings, 4), 0.2)),
    }


@pytest.mark.parametrize("one_hot_q", [False, True])
def test_standard_sd_has_zero_distortion(one_hot_q):
    p, q, _ = _rows(0, one_hot_q=one_hot_q)
    tv = exact_distortion(p, q)
    assert tv.shape == (ROWS,) and tv.dtype == torch.float64
    assert float(tv.abs().max()) <= 1e-12
    # float32 rows (a model's softmax) are computed in float64 and stay lossless.
    assert float(exact_distortion(p.float(), q.float()).abs().max()) <= 1e-12


@pytest.mark.parametrize("name", list(_methods(torch.zeros(VOCAB, 3))))
@pytest.mark.parametrize("one_hot_q", [False, True])
def test_matches_output_distribution_row_by_row(name, one_hot_q):
    p, q, emb = _rows(1, one_hot_q=one_hot_q)
    rule = _methods(emb)[name]
    got = exact_distortion(p, q, rule)
    laws = one_step_output_laws(p, q, rule)
    for i in range(ROWS):  # each row alone, through the core's exact law
        out = output_distribution(p[i], q[i], rule)
        assert torch.allclose(laws[i], out, atol=1e-14, rtol=0)
        assert float(got[i]) == pytest.approx(0.5 * float((out - p[i]).abs().sum()), abs=1e-14)
    if name != "sd":
        assert float(got.max()) > 1e-3  # lossy methods do distort these rows


def test_row_chunks_give_the_same_numbers():
    p, q, emb = _rows(2, rows=23)
    for rule in _methods(emb).values():
        whole = exact_distortion(p, q, rule)
        chunked = exact_distortion(p, q, rule, max_elements=5 * VOCAB)  # chunks of 5 rows
        assert torch.equal(whole, chunked)


def test_dynamic_counterexample_of_proofs_04_distorts_by_the_exact_amount():
    """p = (5,4,3,2,1)/15, q = (5,5,3,2,0)/15, G = 3: a = (9/10, 12/13, 9/10, 1, 1),
    alpha = 898/975, r = the point mass on token 4 (proofs/04). out = q a + (1 - alpha) r."""
    p_f = [Fraction(w, 15) for w in (5, 4, 3, 2, 1)]
    q_f = [Fraction(w, 15) for w in (5, 5, 3, 2, 0)]
    accept = [Fraction(9, 10), Fraction(12, 13), Fraction(9, 10), Fraction(1), Fraction(1)]
    alpha = sum(qx * a for qx, a in zip(q_f, accept))
    assert alpha == Fraction(898, 975)
    out = [qx * a for qx, a in zip(q_f, accept)]
    out[4] += 1 - alpha
    want = sum(abs(o - px) for o, px in zip(out, p_f)) / 2
    assert want > 0
    p = torch.tensor([float(x) for x in p_f], dtype=torch.float64).unsqueeze(0)
    q = torch.tensor([float(x) for x in q_f], dtype=torch.float64).unsqueeze(0)
    got = exact_distortion(p, q, DynamicClusters(3))
    assert float(got[0]) == pytest.approx(float(want), abs=1e-14)
    assert float(exact_distortion(p, q)[0]) <= 1e-15  # SD on the same row: none


def test_lantern_distortion_is_its_acceptance_gain():
    p, q, emb = _rows(3)
    rule = Lantern(latent_neighbourhoods(emb, 5), 0.3)
    gain = acceptance_rate(p, q, rule) - acceptance_rate(p, q)
    assert torch.allclose(exact_distortion(p, q, rule), gain, atol=1e-14, rtol=0)


def test_large_vocabulary_stays_within_v_times_g_memory():
    """V = 2^15: an O(V^2) path would need 2^30 entries per row; these run in O(V G)."""
    vocab = 1 << 15
    p, q, _ = _rows(4, vocab=vocab, rows=2)
    shifts = torch.arange(4)
    hood = LatentNeighbourhoods((torch.arange(vocab).unsqueeze(-1) + shifts) % vocab,
                                torch.ones(vocab, 4, dtype=torch.bool))
    for rule in (DynamicClusters(5), RankBinnedClusters(64, "cluster"), Lantern(hood, 0.01)):
        tv = exact_distortion(p, q, rule)
        assert tv.shape == (2,) and bool(((tv >= 0) & (tv <= 1)).all())


def test_emitted_distortion_covers_each_emitted_token():
    p, q, emb = _rows(5, rows=6)  # a window of L = 5 drafts and a bonus row
    window, rule = 5, DynamicClusters(4)
    rows = exact_distortion(p[:window], q[:window], rule)
    for accepted in range(window):
        got = emitted_distortion(p, q[:window], accepted, rule)
        assert torch.equal(got, rows[: accepted + 1])
    everything = emitted_distortion(p, q[:window], window, rule)
    assert torch.equal(everything, torch.cat([rows, rows.new_zeros(1)]))  # the bonus is exact
    no_bonus = emitted_distortion(p[:window], q[:window], window, rule)
    assert torch.equal(no_bonus, rows)


def test_bad_arguments_raise_clear_errors():
    p, q, emb = _rows(6)
    with pytest.raises(ValueError, match="rule must be"):
        exact_distortion(p, q, "dynamic")
    with pytest.raises(ValueError, match="one shape"):
        exact_distortion(p, q[:-1])
    with pytest.raises(ValueError, match="num_accepted"):
        emitted_distortion(p[:4], q[:3], 4)
    with pytest.raises(ValueError, match="rows must sum to 1"):
        exact_distortion(p * 2, q)


@pytest.mark.parametrize("one_hot_q", [False, True])
@pytest.mark.parametrize("rule_kind", ["plain", "gap", "distance", "both", "rank_q", "g1"])
def test_dynamic_support_law_is_gsd_cores_law(rule_kind, one_hot_q):
    """The support-only law with the tabled embedding filter equals gsd_core.output_distribution
    bit for bit: integer embeddings put many pairs exactly on the threshold (the recomputed band),
    top-k-truncated rows put ties at 0 and a support narrower than V."""
    from gsd_lab.accounting.distortion import embedding_adjacency, support_output_laws

    vocab = 40
    g = torch.Generator().manual_seed(11)
    p, q, _ = _rows(3, vocab=vocab, rows=9, one_hot_q=one_hot_q)
    p = torch.where(p >= p.topk(25, -1).values[:, -1:], p, 0.0)
    p = p / p.sum(-1, keepdim=True)
    if not one_hot_q:
        q = torch.where(q >= q.topk(12, -1).values[:, -1:], q, 0.0)
        q = q / q.sum(-1, keepdim=True)
    emb = torch.randint(-2, 3, (vocab + 3, 4), generator=g).double()  # 3 rows past the vocabulary
    rule = {"plain": DynamicClusters(8), "gap": DynamicClusters(8, max_prob_gap=0.05),
            "distance": DynamicClusters(10, 4.0, None, emb), "both": DynamicClusters(10, 4.0, 0.08, emb),
            "rank_q": DynamicClusters(6, 5.0, None, emb, rank_by="q"), "g1": DynamicClusters(1)}[rule_kind]
    for rule in (rule, Amplify(2.5, rule)):
        slow = output_distribution(p, q, rule)
        fast = support_output_laws(p, q, rule)
        assert torch.equal(fast, slow)  # the same ops as gsd_core's: bit for bit
        # Without the table (a vocabulary too large for it), in chunks of a few tokens.
        untabled = support_output_laws(p, q, rule, max_table=0, chunk_elements=500)
        assert torch.equal(untabled, slow)
        # Member tables bounded to a few entries: one row at a time, the same law.
        one_row_at_a_time = support_output_laws(p, q, rule, chunk_elements=1)
        assert torch.equal(one_row_at_a_time, slow)
    table = embedding_adjacency(emb, 4.0, vocab)
    direct = (emb[:vocab, None, :] - emb[None, :vocab, :]).square().sum(-1) <= 4.0
    assert torch.equal(table, direct) and bool(table.diagonal().all())
    assert embedding_adjacency(emb.clone(), 4.0, vocab) is table  # cached by value


def test_embedding_adjacency_recomputes_pairs_at_the_threshold():
    from gsd_lab.accounting.distortion import embedding_adjacency

    # Pairs at squared distance 0.1 + 0.2 (not exactly 0.3 in floating point): the expansion and
    # the direct formula may round differently; the table must follow the direct formula.
    emb = torch.tensor([[0.0, 0.0], [0.1 ** 0.5, 0.2 ** 0.5], [1e3, 1e3], [1e3 + 0.3 ** 0.5, 1e3]], dtype=torch.float64)
    for threshold in (0.3, 0.30000000000000004, 0.29999999999999993):
        table = embedding_adjacency(emb, threshold, 4)
        direct = (emb[None, :, :] - emb[:, None, :]).square().sum(-1) <= threshold
        assert torch.equal(table, direct)


@pytest.mark.parametrize("block", [1, 3, 64])
@pytest.mark.parametrize("k, delta, max_distance", [(1, 0.3, None), (5, 0.0, None), (6, 0.15, None),
                                                    (12, 0.4, None), (12, 1.0, None), (8, 0.3, 1.5)])
def test_lantern_distortion_walks_blocks_to_the_exact_tv(block, k, delta, max_distance):
    """proofs/08's identity, walked in blocks with early exits, equals TV(law, p) of the law."""
    from gsd_lab.rules.lantern import lantern_distortion

    for seed, one_hot_q in ((4, False), (5, True)):
        p, q, emb = _rows(seed, vocab=20, rows=10, one_hot_q=one_hot_q)
        rule = Lantern(latent_neighbourhoods(emb, k, max_distance), delta)
        law = output_distribution(p, q, rule)
        expected = 0.5 * (law - p).abs().sum(-1)
        got = lantern_distortion(p, q, rule, block=block)
        assert got.shape == (10,) and torch.allclose(got, expected, rtol=0, atol=1e-14)
        assert torch.allclose(exact_distortion(p, q, rule), expected, rtol=0, atol=1e-14)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 51, 64, 65, 1000])
def test_fixed_order_sum_is_the_pairwise_tree(n):
    """The accounting's sums (gsd_core.exact.fixed_order_sum): a pairwise tree over the entries
    padded with zeros to a power of two, in that order exactly, along any dim."""
    from gsd_core.exact import fixed_order_sum

    g = torch.Generator().manual_seed(n)
    x = torch.rand(3, n, 2, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-9, 1, (3, n, 2), generator=g)

    def tree(values: list[float]) -> float:
        width = 1 << max(0, len(values) - 1).bit_length()
        values = values + [0.0] * (width - len(values))
        while len(values) > 1:
            half = len(values) // 2
            values = [values[i] + values[i + half] for i in range(half)]
        return values[0] if values else 0.0

    got = fixed_order_sum(x, dim=1)
    assert got.shape == (3, 2) and fixed_order_sum(x, dim=1, keepdim=True).shape == (3, 1, 2)
    want = torch.tensor([[tree(x[r, :, c].tolist()) for c in range(2)] for r in range(3)], dtype=torch.float64)
    assert torch.equal(got, want)
    assert torch.equal(fixed_order_sum(x.transpose(0, 1).contiguous(), dim=0), got)
    assert torch.allclose(got, x.sum(1), rtol=1e-14, atol=0)


def test_exact_distortion_chunks_a_per_row_rule_by_its_rows():
    """A rule with one parameter per row (the relaxation's delta) is cut with the rows: chunked
    and unchunked give the same distortions (it used to hand every chunk the whole rule)."""
    from gsd_core import OptimalRelaxation

    gen = torch.Generator().manual_seed(3)
    p = torch.rand(5, 7, generator=gen, dtype=torch.float64)
    q = torch.rand(5, 7, generator=gen, dtype=torch.float64)
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    rule = OptimalRelaxation(torch.tensor([0.0, 0.05, 0.1, 0.2, 1.0], dtype=torch.float64))
    whole = exact_distortion(p, q, rule)
    chunked = exact_distortion(p, q, rule, max_elements=14)  # 2 rows a chunk
    assert torch.equal(whole, chunked)
    totals = 0.5 * (p - q).abs().sum(-1)
    assert torch.allclose(whole, torch.minimum(rule.delta, totals), atol=1e-12)


@pytest.mark.parametrize("group_size", [1, 2, 7, 39, 40, 100])
@pytest.mark.parametrize("filters", ["none", "gap", "distance", "both"])
@pytest.mark.parametrize("rank_by", ["p", "q"])
def test_ranked_window_masses_are_gsd_cores_masses(group_size, filters, rank_by):
    """rules.clusters' windows of one full ranking: DynamicClusters.masses bit for bit, with
    windows wider than the vocabulary (G = 100 > V = 40: clipped at both ends), in chunks of a
    few tokens, with the distance filter tabled and not; a table that keeps nothing changes the
    masses (the filter is read), and a table of the wrong shape is refused."""
    from gsd_lab.accounting.distortion import embedding_adjacency
    from gsd_lab.rules.clusters import ranked_window_masses

    vocab = 40
    p, q, _ = _rows(7, vocab=vocab, rows=5)
    p = torch.where(p >= p.topk(22, -1).values[:, -1:], p, 0.0)  # zeros: ranked in id order
    p = p / p.sum(-1, keepdim=True)
    q[1] = torch.nn.functional.one_hot(torch.tensor(3), vocab).double()
    emb = torch.randint(-2, 3, (vocab, 3), generator=torch.Generator().manual_seed(2)).double()
    gap = 0.03 if filters in ("gap", "both") else None
    distance = 3.0 if filters in ("distance", "both") else None
    rule = DynamicClusters(group_size, distance, gap, emb if distance else None, rank_by)
    tokens = torch.topk(q, vocab, dim=-1).indices[:, :31]  # every id but a few, in q's order
    want = rule.masses(p, q, tokens)
    table = embedding_adjacency(emb, distance, vocab) if distance else None
    for chunk in (1 << 24, 7 * group_size, 1):
        for adjacency in ({None, table} if distance else {None}):
            got = ranked_window_masses(rule, p, q, tokens, adjacency=adjacency, chunk_elements=chunk)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    if distance and group_size > 1:
        nothing = torch.zeros(vocab, vocab, dtype=torch.bool)
        credited, _ = ranked_window_masses(rule, p, q, tokens, adjacency=nothing)
        assert not torch.equal(credited, want[0])
        with pytest.raises(ValueError, match="bool table"):
            ranked_window_masses(rule, p, q, tokens, adjacency=nothing[1:])
    elif not distance:
        with pytest.raises(ValueError, match="no max_embedding_distance"):
            ranked_window_masses(rule, p, q, tokens, adjacency=torch.ones(vocab, vocab).bool())


def test_ranked_window_masses_keep_a_member_exactly_at_the_gap():
    """The gap filter keeps |p_y - p_x| <= gap, equality included (dyadic values: exact), as
    gsd_core does; a strict < would drop the member at the gap and change P."""
    from gsd_lab.rules.clusters import ranked_window_masses

    p = torch.tensor([[0.5, 0.25, 0.125, 0.125, 0.0, 0.0]], dtype=torch.float64)
    q = torch.full_like(p, 1 / 6)
    rule = DynamicClusters(3, max_prob_gap=0.125)
    tokens = torch.arange(6).unsqueeze(0)
    want = rule.masses(p, q, tokens)
    got = ranked_window_masses(rule, p, q, tokens)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert float(want[0][0, 1]) == 0.25 + 0.125  # token 1's window {0, 1, 2}: 0.5 is 0.25 away


def test_support_law_of_nested_amplify_is_gsd_cores():
    """Amplify of Amplify of dynamic clusters: each scale applied as gsd_core applies it."""
    from gsd_lab.accounting.distortion import support_output_laws

    p, q, emb = _rows(8, vocab=30, rows=6)
    rule = Amplify(1.5, Amplify(2.0, DynamicClusters(5, max_prob_gap=0.05)))
    assert torch.equal(support_output_laws(p, q, rule), output_distribution(p, q, rule))


@pytest.mark.parametrize("vocab", [1, 8, 13])
def test_packed_adjacency_holds_each_pair_in_its_bit(vocab):
    """rules.clusters.packed_adjacency: bit y % 8 of byte [x, y // 8] is table[x, y] (V not a
    multiple of 8 included); cached by the table's identity, a new table packed anew."""
    from gsd_lab.rules.clusters import packed_adjacency

    table = torch.rand(vocab, vocab, generator=torch.Generator().manual_seed(vocab)) < 0.5
    bits = packed_adjacency(table, chunk_rows=3)
    assert bits.shape == (vocab, -(-vocab // 8)) and bits.dtype == torch.uint8
    y = torch.arange(vocab)
    unpacked = (bits[:, y // 8] >> (y % 8).to(torch.uint8)) & 1 != 0
    assert torch.equal(unpacked, table)
    assert packed_adjacency(table) is bits
    flipped = ~table
    assert torch.equal((packed_adjacency(flipped)[:, y // 8] >> (y % 8).to(torch.uint8)) & 1 != 0, flipped)
