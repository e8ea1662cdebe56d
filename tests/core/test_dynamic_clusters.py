"""The paper's dynamic clusters: membership, bounds, filters, exactness of the rank window
under ties, the SD limit, and the pinned counterexample to Theorem 1 (proofs/04)."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from core_strategies import prob_pairs, prob_vectors
from hypothesis import given
from hypothesis import strategies as st

import gsd_core.grouping as grouping
from gsd_core import (
    DynamicClusters,
    FixedPartition,
    RankBinnedClusters,
    acceptance_rate,
    cluster_mask,
    dynamic_cluster,
    output_distribution,
    rank_window,
    uses_support,
    verify,
)

TOL = 1e-12


def sorted_window(ranking: torch.Tensor, token: int, n_before: int, n_after: int) -> set[int]:
    """Reference: one stable descending sort (ties: smaller id first), then a slice."""
    order = torch.sort(ranking, descending=True, stable=True).indices.tolist()
    r = order.index(token)
    return set(order[max(0, r - n_before) : r + n_after + 1])


@given(prob_vectors(), st.data(), st.integers(0, 12))
def test_dynamic_cluster_is_the_rank_window_and_contains_the_token(p, data, group_size):
    token = data.draw(st.integers(0, p.shape[-1] - 1), label="token")
    mask = dynamic_cluster(p, token, group_size)
    members = set(mask.nonzero().flatten().tolist())
    assert token in members
    half = group_size // 2
    assert members == sorted_window(p, token, half, half)
    assert len(members) <= 2 * half + 1


@given(prob_vectors(), st.data(), st.integers(0, 12), st.floats(0.0, 0.5))
def test_probability_gap_filter(p, data, group_size, gap):
    token = data.draw(st.integers(0, p.shape[-1] - 1), label="token")
    members = set(dynamic_cluster(p, token, group_size, max_prob_gap=gap).nonzero().flatten().tolist())
    window = sorted_window(p, token, group_size // 2, group_size // 2)
    assert members == {y for y in window if abs(p[y].item() - p[token].item()) <= gap}
    assert token in members


@given(prob_vectors(), st.data(), st.integers(0, 12), st.floats(0.0, 3.0))
def test_embedding_distance_filter(p, data, group_size, radius):
    vocab = p.shape[-1]
    token = data.draw(st.integers(0, vocab - 1), label="token")
    emb = torch.tensor(data.draw(st.lists(st.lists(st.integers(-2, 2), min_size=2, max_size=2),
                                          min_size=vocab, max_size=vocab), label="emb"), dtype=torch.float32)
    members = set(dynamic_cluster(p, token, group_size, embeddings=emb, max_embedding_distance=radius)
                  .nonzero().flatten().tolist())
    window = sorted_window(p, token, group_size // 2, group_size // 2)
    expected = {y for y in window if (emb[y] - emb[token]).square().sum().item() <= radius}
    assert members == expected and token in members


@given(prob_pairs())
def test_group_size_zero_is_standard_sd(pq):
    p, q = pq
    rule = DynamicClusters(0)
    assert acceptance_rate(p, q, rule).item() == acceptance_rate(p, q).item()
    assert torch.equal(output_distribution(p, q, rule), output_distribution(p, q))


def test_group_size_zero_verify_takes_sd_decisions():
    gen = torch.Generator().manual_seed(3)
    p = torch.softmax(3 * torch.randn(64, 5, 7, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(3 * torch.randn(64, 4, 7, generator=gen, dtype=torch.float64), -1)
    drafts = torch.randint(0, 7, (64, 4), generator=gen)
    u = torch.rand(64, 5, generator=gen, dtype=torch.float64)
    a, b = verify(p, q, drafts, DynamicClusters(0), uniforms=u), verify(p, q, drafts, None, uniforms=u)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.accept_probs, b.accept_probs)


# --- exactness of the rank window (one sort of the support) under heavy ties ---------------


def _check_windows(p: torch.Tensor, tokens: torch.Tensor, n_before: torch.Tensor, n_after: torch.Tensor) -> None:
    index, valid = grouping.rank_window_members(p, tokens, n_before, n_after)
    for i in range(p.shape[0]):
        chosen = index[i][valid[i]].tolist()
        assert len(chosen) == len(set(chosen)), "a member is listed twice"
        expected = sorted_window(p[i], int(tokens[i]), int(n_before[i]), int(n_after[i]))
        assert set(chosen) == expected, (p[i].tolist(), int(tokens[i]), int(n_before[i]), int(n_after[i]))


def test_rank_window_matches_sorted_reference_with_many_ties():
    gen = torch.Generator().manual_seed(11)
    for _ in range(150):
        vocab = int(torch.randint(1, 40, (1,), generator=gen))
        levels = int(torch.randint(1, 5, (1,), generator=gen))  # few distinct values: many ties
        w = torch.randint(0, levels, (6, vocab), generator=gen).double()
        w[w.sum(-1) == 0, 0] = 1
        p = w / w.sum(-1, keepdim=True)
        _check_windows(p, torch.randint(0, vocab, (6,), generator=gen),
                       torch.randint(0, 9, (6,), generator=gen), torch.randint(0, 9, (6,), generator=gen))


def test_rank_window_matches_sorted_reference_on_sparse_rows():
    """Large V with small support (p after top-k): ties among the positive entries, zero-
    probability tokens (ranked by id after the support) and windows that run into the zeros."""
    gen = torch.Generator().manual_seed(12)
    for trial in range(60):
        vocab = int(torch.randint(200, 2500, (1,), generator=gen))
        support = int(torch.randint(1, vocab // 10, (1,), generator=gen))
        w = torch.zeros(6, vocab, dtype=torch.float64)
        for i in range(6):
            where = torch.randperm(vocab, generator=gen)[:support]
            if trial % 3 == 0:  # support at one end: zeros far from x, or all zeros before it
                where = torch.arange(vocab - support, vocab) if trial % 2 else torch.arange(support)
            elif trial % 3 == 1:  # support scattered inside a region (image tokens after top-k)
                region = min(vocab, 3 * support)
                start = int(torch.randint(0, vocab - region + 1, (1,), generator=gen))
                where = start + torch.randperm(region, generator=gen)[:support]
            w[i, where] = torch.randint(1, 4, (support,), generator=gen).double()
        p = w / w.sum(-1, keepdim=True)
        in_support = torch.multinomial(p, 1, generator=gen).squeeze(-1)
        anywhere = torch.randint(0, vocab, (6,), generator=gen)
        tokens = torch.where(torch.rand(6, generator=gen) < 0.6, in_support, anywhere)
        _check_windows(p, tokens, torch.randint(0, 9, (6,), generator=gen), torch.randint(0, 9, (6,), generator=gen))


def _members_set(index: torch.Tensor, valid: torch.Tensor) -> set[int]:
    chosen = index[valid].tolist()
    assert len(chosen) == len(set(chosen)), "a member is listed twice"
    return set(chosen)


def _tied_rows(gen: torch.Generator, rows: int, vocab: int) -> torch.Tensor:
    """Integer-weight distributions with few distinct values: many ties and exact zeros."""
    levels = int(torch.randint(1, 5, (1,), generator=gen))
    w = torch.randint(0, levels, (rows, vocab), generator=gen).double()
    w[w.sum(-1) == 0, 0] = 1
    return w / w.sum(-1, keepdim=True)


def test_rule_members_match_a_brute_force_sort_under_heavy_ties():
    """Members of DynamicClusters ranking by p and by q, with both filters, and of
    RankBinnedClusters (which must also match its partition labels), against a brute-force
    sorted reference, on rows with many ties and zeros."""
    gen = torch.Generator().manual_seed(21)
    for trial in range(80):
        vocab = int(torch.randint(1, 30, (1,), generator=gen))
        p, q = _tied_rows(gen, 5, vocab), _tied_rows(gen, 5, vocab)
        tokens = torch.randint(0, vocab, (5,), generator=gen)
        emb = torch.randint(-2, 3, (vocab, 2), generator=gen).float()
        group = int(torch.randint(0, 9, (1,), generator=gen))
        rules = [
            DynamicClusters(group),
            DynamicClusters(group, rank_by="q"),
            DynamicClusters(group, max_embedding_distance=2.0, max_prob_gap=0.1, embeddings=emb),
            DynamicClusters(group, max_prob_gap=0.05, rank_by="q"),
            RankBinnedClusters(max(group, 1)),
        ]
        for rule in rules:
            index, keep = rule.members(p, tokens, q=q)
            for i in range(5):
                got = _members_set(index[i], keep[i])
                x = int(tokens[i])
                if isinstance(rule, RankBinnedClusters):
                    labels = rule.partition_labels(p[i])
                    expected = set((labels == labels[x]).nonzero().flatten().tolist())
                else:
                    half = group // 2
                    window = sorted_window(q[i] if rule.rank_by == "q" else p[i], x, half, half)
                    expected = {y for y in window
                                if (rule.max_prob_gap is None or abs(p[i, y] - p[i, x]) <= rule.max_prob_gap)
                                and (rule.embeddings is None
                                     or (emb[y] - emb[x]).square().sum() <= rule.max_embedding_distance)}
                assert got == expected and x in expected, (trial, rule, i)


def test_rank_window_boundary_tie_is_resolved_by_id():
    p = torch.tensor([0.1, 0.3, 0.3, 0.3], dtype=torch.float64)
    assert rank_window(p, torch.tensor(0), 1, 0).nonzero().flatten().tolist() == [0, 3]
    p = torch.tensor([0.6, 0.1, 0.1, 0.1, 0.1], dtype=torch.float64)
    assert rank_window(p, torch.tensor(0), 0, 2).nonzero().flatten().tolist() == [0, 1, 2]


def test_rank_window_lumina_sized_rows_with_zero_probability_drafts():
    gen = torch.Generator().manual_seed(13)
    vocab = 65536
    logits = torch.full((4, vocab), -torch.inf, dtype=torch.float64)
    logits[:, 4:8196] = torch.randn(4, 8192, generator=gen, dtype=torch.float64)  # image tokens
    kth = torch.topk(logits, 2000, dim=-1).values[:, -1:]
    p = torch.softmax(logits.masked_fill(logits < kth, -torch.inf), -1)
    smallest_positive = torch.where(p[3] > 0, p[3], torch.inf).argmin()
    tokens = torch.tensor([5, 65535, int(p[2].argmax()), int(smallest_positive)])
    _check_windows(p, tokens, torch.full((4,), 7), torch.full((4,), 7))
    _check_windows(p, torch.multinomial(p, 1, generator=gen).squeeze(-1), torch.full((4,), 7), torch.full((4,), 7))


# --- ranking by the draft (Table 2, row B) ---------------------------------------------------


@given(prob_pairs(), st.data(), st.integers(0, 10))
def test_rank_by_q_uses_the_draft_ranking(pq, data, group_size):
    p, q = pq
    token = data.draw(st.integers(0, p.shape[-1] - 1), label="token")
    mask = dynamic_cluster(p, token, group_size, rank_by="q", q=q)
    half = group_size // 2
    assert set(mask.nonzero().flatten().tolist()) == sorted_window(q, token, half, half)


def test_rank_by_q_needs_q_and_a_known_ranking():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    with pytest.raises(ValueError, match="rank_by"):
        DynamicClusters(2, rank_by="logits")
    with pytest.raises(ValueError, match="q"):
        cluster_mask(DynamicClusters(2, rank_by="q"), p, torch.tensor(0))
    q = torch.tensor([0.1, 0.2, 0.7], dtype=torch.float64)
    by_q, by_p = DynamicClusters(2, rank_by="q"), DynamicClusters(2)
    assert acceptance_rate(p, q, by_q).item() == pytest.approx(_rate_by_windows(p, q, q, 1), abs=TOL)
    assert acceptance_rate(p, q, by_p).item() == pytest.approx(_rate_by_windows(p, q, p, 1), abs=TOL)


def _rate_by_windows(p, q, ranking, half):
    total = 0.0
    for x in range(p.shape[-1]):
        c = list(sorted_window(ranking, x, half, half))
        qc = q[c].sum().item()
        total += q[x].item() * (min(1.0, p[c].sum().item() / qc) if qc > 0 else 0.0)
    return total


def test_rank_by_q_in_verify_matches_per_position_masks():
    gen = torch.Generator().manual_seed(5)
    p = torch.softmax(2 * torch.randn(8, 6, 9, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(8, 6, 9, generator=gen, dtype=torch.float64), -1)
    drafts = torch.multinomial(q.reshape(-1, 9), 1, generator=gen).reshape(8, 6)
    rule = DynamicClusters(4, rank_by="q")
    result = verify(p, q, drafts, rule, generator=gen)
    for b in range(8):
        for i in range(6):
            c = list(sorted_window(q[b, i], int(drafts[b, i]), 2, 2))
            expected = min(1.0, p[b, i, c].sum().item() / q[b, i, c].sum().item())
            assert result.accept_probs[b, i].item() == pytest.approx(expected, abs=TOL)


def test_rules_with_the_older_two_argument_members_still_work():
    class Pairs:
        is_partition = False

        def members(self, p, token):  # no q argument
            return FixedPartition(torch.arange(p.shape[-1]) // 2).members(p, token)

    p = torch.tensor([0.4, 0.1, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.1, 0.4, 0.2, 0.3], dtype=torch.float64)
    assert acceptance_rate(p, q, Pairs()).item() == pytest.approx(
        acceptance_rate(p, q, torch.tensor([0, 0, 1, 1])).item(), abs=TOL)


# --- Theorem 1 does not extend to dynamic clusters -----------------------------------------

# proofs/04_dynamic_counterexample.md: V = 5, group_size 2 (one rank on each side), all
# probabilities distinct in p so the ranking has no ties: p = (5,4,3,2,1)/15, q = (5,5,3,2,0)/15.
COUNTER_P = [5, 4, 3, 2, 1]
COUNTER_Q = [5, 5, 3, 2, 0]


def test_dynamic_counterexample_exact_numbers():
    p = [Fraction(w, 15) for w in COUNTER_P]
    q = [Fraction(w, 15) for w in COUNTER_Q]
    sd = sum(min(a, b) for a, b in zip(p, q))
    clusters = [[0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4]]  # ranks = ids here
    dyn = sum(q[x] * min(Fraction(1), sum(p[y] for y in c) / sum(q[y] for y in c))
              for x, c in enumerate(clusters) if q[x] > 0)
    assert sd == Fraction(14, 15)
    assert dyn == Fraction(3, 10) + Fraction(4, 13) + Fraction(9, 50) + Fraction(2, 15) == Fraction(898, 975)
    assert sd - dyn == Fraction(4, 325)

    pt = torch.tensor(COUNTER_P, dtype=torch.float64) / 15
    qt = torch.tensor(COUNTER_Q, dtype=torch.float64) / 15
    for x, c in enumerate(clusters):
        assert dynamic_cluster(pt, x, 2).nonzero().flatten().tolist() == c
    got_sd = acceptance_rate(pt, qt).item()
    got_dyn = acceptance_rate(pt, qt, DynamicClusters(2)).item()
    assert got_sd == pytest.approx(14 / 15, abs=TOL)
    assert got_dyn == pytest.approx(898 / 975, abs=TOL)
    assert got_dyn < got_sd - 0.012  # below standard SD by 4/325 = 0.0123


def test_dynamic_counterexample_is_not_an_artifact_of_tie_breaking():
    p = torch.tensor(COUNTER_P, dtype=torch.float64) / 15
    assert len(set(p.tolist())) == 5  # no ties in the ranking
    # Same numbers with the vocabulary shuffled: ranks follow p, not ids.
    perm = torch.tensor([3, 0, 4, 1, 2])
    q = torch.tensor(COUNTER_Q, dtype=torch.float64) / 15
    assert acceptance_rate(p[perm], q[perm], DynamicClusters(2)).item() == pytest.approx(898 / 975, abs=TOL)


def _sparse_rows(seed: int, vocab: int, rows: int, keep: int) -> torch.Tensor:
    """Softmax rows truncated to their top ``keep`` entries (ties at 0, support narrower than V)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.softmax(2 * torch.randn(rows, vocab, generator=g, dtype=torch.float64), -1)
    x = torch.where(x >= x.topk(keep, -1).values[:, -1:], x, 0.0)
    return x / x.sum(-1, keepdim=True)


@pytest.mark.parametrize("rule_kind", ["plain", "gap", "distance", "both", "rank_q"])
def test_all_token_masses_at_given_tokens_and_with_a_table_equal_the_plain_masses(rule_kind):
    """``tokens=`` (masses at some ids per row) and ``adjacency=`` (the embedding filter read
    from a bool [V, V] table) give the plain all-token masses bit for bit, in any chunking."""
    vocab, rows = 40, 7
    p, q = _sparse_rows(0, vocab, rows, 25), _sparse_rows(1, vocab, rows, 12)
    emb = torch.randint(-2, 3, (vocab, 4), generator=torch.Generator().manual_seed(2)).double()
    rule = {"plain": DynamicClusters(8), "gap": DynamicClusters(8, max_prob_gap=0.05),
            "distance": DynamicClusters(10, 4.0, None, emb), "both": DynamicClusters(10, 4.0, 0.08, emb),
            "rank_q": DynamicClusters(6, 5.0, 0.1, emb, rank_by="q")}[rule_kind]
    p_all, q_all = rule.all_token_masses(p, q)
    assert p_all.shape == q_all.shape == (rows, vocab)
    distance = rule.max_embedding_distance  # table[x, y]: ||e_y - e_x||^2 <= d, as the filter computes it
    table = None if distance is None else (emb[None, :, :] - emb[:, None, :]).square().sum(-1) <= distance
    tokens = torch.stack([torch.randperm(vocab, generator=torch.Generator().manual_seed(i))[:9] for i in range(rows)])
    for chunk in (1 << 24, 50):  # one chunk, and a few tokens at a time
        for adjacency in (None, table):
            p_at, q_at = rule.all_token_masses(p, q, chunk, tokens=tokens, adjacency=adjacency)
            assert torch.equal(p_at, p_all.gather(-1, tokens)) and torch.equal(q_at, q_all.gather(-1, tokens))
            p_every, q_every = rule.all_token_masses(p, q, chunk, adjacency=adjacency)
            assert torch.equal(p_every, p_all) and torch.equal(q_every, q_all)
    # The masses are those of the clusters ``members`` gives, token by token.
    for x in range(0, vocab, 7):
        mask = cluster_mask(rule, p, torch.full((rows,), x), q)
        assert torch.allclose(p_all[:, x], (p * mask).sum(-1), rtol=0, atol=1e-15)


def test_all_token_masses_rejects_bad_tokens_and_tables():
    p, q = _sparse_rows(3, 10, 2, 6), _sparse_rows(4, 10, 2, 6)
    rule = DynamicClusters(4, 1.0, None, torch.zeros(10, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="tokens must be int64 ids"):
        rule.all_token_masses(p, q, tokens=torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens must be int64 ids"):
        rule.all_token_masses(p, q, tokens=torch.zeros(p.shape[0], 2, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"ids in \[0, V=10\)"):
        rule.all_token_masses(p, q, tokens=torch.full((p.shape[0], 2), 10))
    with pytest.raises(ValueError, match="no max_embedding_distance"):
        DynamicClusters(4).all_token_masses(p, q, adjacency=torch.ones(10, 10, dtype=torch.bool))
    with pytest.raises(ValueError, match="adjacency must be a bool table"):
        rule.all_token_masses(p, q, adjacency=torch.ones(9, 9, dtype=torch.bool))
    with pytest.raises(ValueError, match="adjacency must be a bool table"):
        rule.all_token_masses(p, q, adjacency=torch.ones(10, 10))


def test_all_token_masses_searches_contiguous_tokens(recwarn):
    """torch.searchsorted warns (and copies) on a non-contiguous input; sparse rows take the
    search path (a support narrower than half the vocabulary), by p and by q."""
    p, q = _sparse_rows(5, 30, 3, 6), _sparse_rows(6, 30, 3, 4)
    for rule in (DynamicClusters(4), DynamicClusters(4, rank_by="q")):
        rule.all_token_masses(p, q)
        rule.all_token_masses(p, q, tokens=torch.arange(30).flip(0)[::3].expand(3, -1))
    assert not [w for w in recwarn if "searchsorted" in str(w.message)]


def test_ranks_by_p_says_when_verify_uses_the_support():
    assert DynamicClusters(4).ranks_by_p and not DynamicClusters(4, rank_by="q").ranks_by_p
    assert uses_support(DynamicClusters(4)) and not uses_support(DynamicClusters(4, rank_by="q"))
    assert not any(map(uses_support, (None, torch.arange(12) // 3, RankBinnedClusters(3))))
    # rank_by="q": verify ignores support=, even a wrong one (it would be rejected if used).
    p, q = _sparse_rows(7, 12, 2, 5), _sparse_rows(8, 12, 2, 5)
    draft = q.argmax(-1)
    wrong = torch.zeros(2, 1, dtype=torch.long)
    got = verify(p, q, draft, DynamicClusters(4, rank_by="q"), uniforms=torch.full((3,), 0.5),
                 validate=False, support=wrong)
    want = verify(p, q, draft, DynamicClusters(4, rank_by="q"), uniforms=torch.full((3,), 0.5), validate=False)
    assert torch.equal(got.accept_probs, want.accept_probs) and torch.equal(got.tokens, want.tokens)
