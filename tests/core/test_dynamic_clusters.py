"""The paper's dynamic clusters: G tokens per window ((G-1)//2 ranks above the draft, G//2
below), filters, exactness under ties, the SD limit (G = 1), and the pinned counterexample to
Theorem 1 (proofs/04)."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from core_strategies import prob_pairs, prob_vectors
from hypothesis import given
from hypothesis import strategies as st

from gsd_core import (
    DynamicClusters,
    RankBinnedClusters,
    acceptance_rate,
    dynamic_cluster,
    output_distribution,
    verify,
)

TOL = 1e-12


def sorted_window(ranking: torch.Tensor, token: int, group_size: int) -> set[int]:
    """Reference: the order (-p, id) by a plain sort, then the slice of G tokens around x."""
    order = sorted(range(ranking.shape[-1]), key=lambda y: (-ranking[y].item(), y))
    r = order.index(token)
    return set(order[max(0, r - (group_size - 1) // 2) : r + group_size // 2 + 1])


@given(prob_vectors(), st.data(), st.integers(1, 12))
def test_dynamic_cluster_is_the_rank_window_and_contains_the_token(p, data, group_size):
    token = data.draw(st.integers(0, p.shape[-1] - 1), label="token")
    mask = dynamic_cluster(p, token, group_size)
    members = set(mask.nonzero().flatten().tolist())
    assert token in members
    assert members == sorted_window(p, token, group_size)
    assert len(members) <= group_size


def test_a_window_holds_g_tokens_g_minus_1_over_2_above_the_draft():
    """G = tokens per cluster (TEAM.md): away from the ends, C(x) holds exactly G tokens,
    (G-1)//2 more probable than x and G//2 less probable; bins of RankBinnedClusters(G) hold G."""
    p = torch.arange(40, 0, -1, dtype=torch.float64)
    p = p / p.sum()  # rank(y) = y
    for size in range(1, 12):
        members = dynamic_cluster(p, 20, size).nonzero().flatten().tolist()
        assert members == list(range(20 - (size - 1) // 2, 20 + size // 2 + 1)), size
        labels = RankBinnedClusters(size).partition_labels(p)
        assert torch.equal(labels, torch.arange(40) // size)
    assert dynamic_cluster(p, 0, 14).nonzero().flatten().tolist() == list(range(8))  # clipped, not shifted
    with pytest.raises(ValueError, match="G, tokens per cluster"):
        DynamicClusters(0)


@given(prob_vectors(), st.data(), st.integers(1, 12), st.floats(0.0, 0.5))
def test_probability_gap_filter(p, data, group_size, gap):
    token = data.draw(st.integers(0, p.shape[-1] - 1), label="token")
    members = set(dynamic_cluster(p, token, group_size, max_prob_gap=gap).nonzero().flatten().tolist())
    window = sorted_window(p, token, group_size)
    assert members == {y for y in window if abs(p[y].item() - p[token].item()) <= gap}
    assert token in members


@given(prob_vectors(), st.data(), st.integers(1, 12), st.floats(0.0, 3.0))
def test_embedding_distance_filter(p, data, group_size, radius):
    vocab = p.shape[-1]
    token = data.draw(st.integers(0, vocab - 1), label="token")
    emb = torch.tensor(data.draw(st.lists(st.lists(st.integers(-2, 2), min_size=2, max_size=2),
                                          min_size=vocab, max_size=vocab), label="emb"), dtype=torch.float32)
    members = set(dynamic_cluster(p, token, group_size, embeddings=emb, max_embedding_distance=radius)
                  .nonzero().flatten().tolist())
    window = sorted_window(p, token, group_size)
    expected = {y for y in window if (emb[y] - emb[token]).square().sum().item() <= radius}
    assert members == expected and token in members


@given(prob_pairs())
def test_group_size_one_is_standard_sd(pq):
    p, q = pq
    rule = DynamicClusters(1)
    assert acceptance_rate(p, q, rule).item() == acceptance_rate(p, q).item()
    assert torch.equal(output_distribution(p, q, rule), output_distribution(p, q))


def test_group_size_one_verify_takes_sd_decisions():
    gen = torch.Generator().manual_seed(3)
    p = torch.softmax(3 * torch.randn(64, 5, 7, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(3 * torch.randn(64, 4, 7, generator=gen, dtype=torch.float64), -1)
    drafts = torch.randint(0, 7, (64, 4), generator=gen)
    u = torch.rand(64, 5, generator=gen, dtype=torch.float64)
    a, b = verify(p, q, drafts, DynamicClusters(1), uniforms=u), verify(p, q, drafts, None, uniforms=u)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.accept_probs, b.accept_probs)


# --- exactness of the rank window under heavy ties -------------------------------------------


def _tied_rows(gen: torch.Generator, rows: int, vocab: int) -> torch.Tensor:
    """Integer-weight distributions with few distinct values: many ties and exact zeros."""
    levels = int(torch.randint(1, 5, (1,), generator=gen))
    w = torch.randint(0, levels, (rows, vocab), generator=gen).double()
    w[w.sum(-1) == 0, 0] = 1
    return w / w.sum(-1, keepdim=True)


def test_members_match_a_brute_force_sort_under_heavy_ties():
    """Members of DynamicClusters ranking by p and by q, with both filters, against a
    brute-force sorted reference, on rows with many ties and zeros; no member listed twice."""
    gen = torch.Generator().manual_seed(21)
    for trial in range(40):
        vocab = int(torch.randint(1, 30, (1,), generator=gen))
        p, q = _tied_rows(gen, 5, vocab), _tied_rows(gen, 5, vocab)
        tokens = torch.randint(0, vocab, (5, 1), generator=gen)
        emb = torch.randint(-2, 3, (vocab, 2), generator=gen).float()
        group = int(torch.randint(1, 10, (1,), generator=gen))
        rules = [
            DynamicClusters(group),
            DynamicClusters(group, rank_by="q"),
            DynamicClusters(group, max_embedding_distance=2.0, max_prob_gap=0.1, embeddings=emb),
            DynamicClusters(group, max_prob_gap=0.05, rank_by="q"),
        ]
        for rule in rules:
            index, keep = rule.members(p, q, tokens)
            for i in range(5):
                chosen = index[i, 0][keep[i, 0]].tolist()
                x = int(tokens[i])
                window = sorted_window(q[i] if rule.rank_by == "q" else p[i], x, group)
                expected = {y for y in window
                            if (rule.max_prob_gap is None or abs(p[i, y] - p[i, x]) <= rule.max_prob_gap)
                            and (rule.embeddings is None
                                 or (emb[y] - emb[x]).square().sum() <= rule.max_embedding_distance)}
                assert len(chosen) == len(set(chosen)) and set(chosen) == expected and x in expected


def test_window_boundary_ties_are_resolved_by_id():
    p = torch.tensor([0.1, 0.3, 0.3, 0.3], dtype=torch.float64)  # ranking 1, 2, 3, 0
    assert dynamic_cluster(p, 0, 3).nonzero().flatten().tolist() == [0, 3]
    p = torch.tensor([0.6, 0.1, 0.1, 0.1, 0.1], dtype=torch.float64)
    assert dynamic_cluster(p, 0, 5).nonzero().flatten().tolist() == [0, 1, 2]


# --- ranking by the draft (Table 2, row B) ---------------------------------------------------


@given(prob_pairs(), st.data(), st.integers(1, 10))
def test_rank_by_q_uses_the_draft_ranking(pq, data, group_size):
    p, q = pq
    token = data.draw(st.integers(0, p.shape[-1] - 1), label="token")
    mask = dynamic_cluster(p, token, group_size, rank_by="q", q=q)
    assert set(mask.nonzero().flatten().tolist()) == sorted_window(q, token, group_size)


def test_rank_by_q_needs_q_and_a_known_ranking():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    with pytest.raises(ValueError, match="rank_by"):
        DynamicClusters(2, rank_by="logits")
    with pytest.raises(ValueError, match="pass q"):
        dynamic_cluster(p, 0, 3, rank_by="q")
    q = torch.tensor([0.1, 0.2, 0.7], dtype=torch.float64)
    by_q, by_p = DynamicClusters(3, rank_by="q"), DynamicClusters(3)
    assert acceptance_rate(p, q, by_q).item() == pytest.approx(_rate_by_windows(p, q, q, 3), abs=TOL)
    assert acceptance_rate(p, q, by_p).item() == pytest.approx(_rate_by_windows(p, q, p, 3), abs=TOL)


def _rate_by_windows(p, q, ranking, group_size):
    total = 0.0
    for x in range(p.shape[-1]):
        c = list(sorted_window(ranking, x, group_size))
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
            c = list(sorted_window(q[b, i], int(drafts[b, i]), 4))
            expected = min(1.0, p[b, i, c].sum().item() / q[b, i, c].sum().item())
            assert result.accept_probs[b, i].item() == pytest.approx(expected, abs=TOL)


# --- Theorem 1 does not extend to dynamic clusters -----------------------------------------

# proofs/04_dynamic_counterexample.md: V = 5, G = 3 (one rank on each side), all
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
        assert dynamic_cluster(pt, x, 3).nonzero().flatten().tolist() == c
    got_sd = acceptance_rate(pt, qt).item()
    got_dyn = acceptance_rate(pt, qt, DynamicClusters(3)).item()
    assert got_sd == pytest.approx(14 / 15, abs=TOL)
    assert got_dyn == pytest.approx(898 / 975, abs=TOL)
    assert got_dyn < got_sd - 0.012  # below standard SD by 4/325 = 0.0123


def test_dynamic_counterexample_is_not_an_artifact_of_tie_breaking():
    p = torch.tensor(COUNTER_P, dtype=torch.float64) / 15
    assert len(set(p.tolist())) == 5  # no ties in the ranking
    # Same numbers with the vocabulary shuffled: ranks follow p, not ids.
    perm = torch.tensor([3, 0, 4, 1, 2])
    q = torch.tensor(COUNTER_Q, dtype=torch.float64) / 15
    assert acceptance_rate(p[perm], q[perm], DynamicClusters(3)).item() == pytest.approx(898 / 975, abs=TOL)


