"""``verify`` against a plain per-position reference loop fed the same uniforms, and edge cases."""

from __future__ import annotations

import math
import zlib

import pytest
import torch

from gsd_core import (
    Amplify,
    DynamicClusters,
    FixedPartition,
    RankBinnedClusters,
    accept_probability,
    sample_categorical,
    verify,
)

VOCAB, WINDOW, BATCH = 8, 5, 60


def _cluster(rule, p_row: torch.Tensor, q_row: torch.Tensor, x: int) -> list[int]:
    """C(x) by definition, with a plain sort (ties: smaller id first)."""
    if rule is None:
        return [x]
    if isinstance(rule, FixedPartition):
        return [y for y in range(len(p_row)) if rule.labels[y] == rule.labels[x]]
    ranking = q_row if getattr(rule, "rank_by", "p") == "q" else p_row
    order = sorted(range(len(ranking)), key=lambda y: (-ranking[y].item(), y))
    r = order.index(x)
    if isinstance(rule, RankBinnedClusters):
        start = r - r % rule.group_size
        return order[start : start + rule.group_size]
    size = rule.group_size  # G tokens: (G-1)//2 ranks above x, G//2 below
    members = order[max(0, r - (size - 1) // 2) : r + size // 2 + 1]
    if rule.max_prob_gap is not None:
        members = [y for y in members if abs(p_row[y] - p_row[x]) <= rule.max_prob_gap]
    return members


def _residual(rule, p_row, q_row):
    excess = [max(0.0, a - b) for a, b in zip(p_row.tolist(), q_row.tolist())]
    if getattr(rule, "residual", "token") == "cluster":
        size = len(p_row)
        labels = [min(_cluster(rule, p_row, q_row, y)) for y in range(size)]  # cluster id = its smallest member
        pc = {c: sum(p_row[y].item() for y in range(size) if labels[y] == c) for c in set(labels)}
        qc = {c: sum(q_row[y].item() for y in range(size) if labels[y] == c) for c in set(labels)}
        ex = {c: max(0.0, pc[c] - qc[c]) for c in pc}
        mass = sum(ex.values())
        if mass <= 2.2e-16:
            return p_row.tolist()
        return [ex[labels[y]] / mass * p_row[y].item() / pc[labels[y]] if pc[labels[y]] > 0 else 0.0
                for y in range(size)]
    mass = sum(excess)
    return [e / mass for e in excess] if mass > 2.2e-16 else p_row.tolist()


def _draw(weights: list[float], u: float) -> int:
    total = math.fsum(weights)
    acc = 0.0
    for y, w in enumerate(weights):
        acc += w
        if u * total < acc:
            return y
    return max(y for y, w in enumerate(weights) if w > 0)


def reference_verify(p, q, drafts, uniforms, rule=None, scale=1.0):
    """One window, position by position: the textbook loop (``rule`` inside ``Amplify(scale)``)."""
    window = q.shape[0]
    out = []
    for i in range(window):
        x = int(drafts[i])
        c = _cluster(rule, p[i], q[i], x)
        qc, pc = sum(q[i, y].item() for y in c), sum(p[i, y].item() for y in c)
        ratio = min(1.0, scale * pc / qc) if qc > 0 else 0.0
        if uniforms[i].item() < ratio:
            out.append(x)
            continue
        out.append(_draw(_residual(rule, p[i], q[i]), uniforms[window].item()))
        return i, out
    if p.shape[0] > window:
        out.append(_draw(p[window].tolist(), uniforms[window].item()))
    return window, out


def _case(seed: int, bonus: bool = True):
    gen = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(BATCH, WINDOW + 1, VOCAB, generator=gen, dtype=torch.float64)
    logits[logits < -1.5] = -torch.inf  # exact zeros, as after top-k
    p = torch.softmax(logits, -1)
    q = torch.softmax(2.0 * torch.randn(BATCH, WINDOW, VOCAB, generator=gen, dtype=torch.float64), -1)
    drafts = torch.multinomial(q.reshape(-1, VOCAB), 1, generator=gen).reshape(BATCH, WINDOW)
    one_hot = torch.rand(BATCH, WINDOW, generator=gen) < 0.3  # random initialisation: q one-hot
    drafts = torch.where(one_hot, torch.randint(0, VOCAB, (BATCH, WINDOW), generator=gen), drafts)
    q = torch.where(one_hot.unsqueeze(-1), torch.nn.functional.one_hot(drafts, VOCAB).double(), q)
    u = torch.rand(BATCH, WINDOW + 1, generator=gen, dtype=torch.float64)
    return (p if bonus else p[:, :WINDOW]), q, drafts, u


RULES = [
    ("sd", None),
    ("dynamic", DynamicClusters(5)),
    ("dynamic-even", DynamicClusters(4)),
    ("dynamic-gap", DynamicClusters(6, max_prob_gap=0.1)),
    ("dynamic-by-q", DynamicClusters(4, rank_by="q")),
    ("rank-bins", RankBinnedClusters(3)),
    ("rank-bins-exact", RankBinnedClusters(3, "cluster")),
    ("labels-exact", FixedPartition(torch.tensor([0, 0, 1, 1, 1, 2, 3, 3]), "cluster")),
]


@pytest.mark.parametrize("name,rule", RULES, ids=[r[0] for r in RULES])
@pytest.mark.parametrize("bonus", [True, False])
@pytest.mark.parametrize("scale", [1.0, 2.5])
def test_verify_matches_the_reference_loop(name, rule, bonus, scale):
    p, q, drafts, u = _case(seed=zlib.crc32(f"{name}-{bonus}-{scale}".encode()) % 1000, bonus=bonus)
    result = verify(p, q, drafts, rule if scale == 1.0 else Amplify(scale, rule), uniforms=u)
    for b in range(BATCH):
        accepted, tokens = reference_verify(p[b], q[b], drafts[b], u[b], rule, scale)
        assert int(result.num_accepted[b]) == accepted, (name, b)
        assert result.tokens[b, : len(tokens)].tolist() == tokens, (name, b)
        assert bool((result.tokens[b, len(tokens) :] == -1).all())
        assert int(result.num_emitted[b]) == len(tokens)


def test_p_equal_q_always_accepts_without_nan():
    gen = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(20, 5, 6, generator=gen, dtype=torch.float64), -1)
    drafts = torch.multinomial(p[:, :4].reshape(-1, 6), 1, generator=gen).reshape(20, 4)
    for rule in (None, DynamicClusters(4), RankBinnedClusters(2)):
        result = verify(p, p[:, :4], drafts, rule, generator=gen)
        assert bool((result.num_accepted == 4).all())
        assert torch.equal(result.accept_probs, torch.ones_like(result.accept_probs))
        assert bool((result.tokens[:, 4] >= 0).all())  # bonus token drawn


def test_zero_residual_mass_after_a_forced_rejection_resamples_from_p():
    p = torch.tensor([[0.25, 0.25, 0.5, 0.0]], dtype=torch.float64)
    u = torch.tensor([0.9, 0.6], dtype=torch.float64)  # s = 1/2: accept w.p. 1/2, u = 0.9 rejects
    result = verify(p, p, torch.tensor([2]), Amplify(0.5), uniforms=u)
    assert int(result.num_accepted) == 0 and result.tokens.tolist() == [2, -1]  # u = 0.6 -> token 2 of p


def test_drafted_token_with_zero_target_probability_is_rejected():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]], dtype=torch.float64)
    q = torch.tensor([[0.0, 0.0, 1.0], [0.2, 0.2, 0.6]], dtype=torch.float64)
    u = torch.zeros(3, dtype=torch.float64)  # even u = 0 must reject: 0 < 0 is false
    result = verify(p, q, torch.tensor([2, 2]), uniforms=u)
    assert result.accept_probs[0].item() == 0.0 and int(result.num_accepted) == 0
    assert result.tokens[0].item() in (0, 1)


def test_draft_token_with_zero_draft_probability_is_rejected_not_nan():
    p = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    result = verify(p, q, torch.tensor([1]), uniforms=torch.zeros(2, dtype=torch.float64))
    assert result.accept_probs.tolist() == [0.0] and int(result.num_accepted) == 0


def test_one_hot_draft_accepts_with_the_target_mass_of_the_cluster():
    p = torch.tensor([[0.1, 0.4, 0.3, 0.2]], dtype=torch.float64)
    q = torch.tensor([[0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    u = torch.tensor([0.5, 0.5], dtype=torch.float64)
    assert verify(p, q, torch.tensor([2]), uniforms=u).accept_probs.item() == 0.3
    # DynamicClusters(3): ranking 1, 2, 3, 0; C(2) = {1, 2, 3}: p(C) = 0.9, q(C) = 1.
    grouped = verify(p, q, torch.tensor([2]), DynamicClusters(3), uniforms=u).accept_probs.item()
    assert grouped == pytest.approx(0.9, abs=1e-15)


def test_vocabulary_of_one_token():
    p = torch.ones(3, 4, 1, dtype=torch.float64)
    result = verify(p, p[:, :3], torch.zeros(3, 3, dtype=torch.long), DynamicClusters(14),
                    generator=torch.Generator().manual_seed(0))
    assert result.tokens.tolist() == [[0, 0, 0, 0]] * 3
    assert result.num_emitted.tolist() == [4, 4, 4]


def test_lumina_sized_vocabulary_matches_the_reference_loop():
    gen = torch.Generator().manual_seed(2)
    vocab, window = 65536, 6
    logits = 2.0 * torch.randn(window + 1, vocab, generator=gen, dtype=torch.float64)
    kth = torch.topk(logits, 2000, dim=-1).values[:, -1:]
    p = torch.softmax(logits.masked_fill(logits < kth, -torch.inf), -1)
    q = torch.softmax((logits[:window] + torch.randn(window, vocab, generator=gen, dtype=torch.float64))
                      .masked_fill(logits[:window] < kth[:window], -torch.inf), -1)
    drafts = torch.multinomial(q, 1, generator=gen).squeeze(-1)
    drafts[3] = 7 if p[3, 7] == 0 else int(p[3].argmin())  # a zero-probability draft
    rule = DynamicClusters(14)
    for seed in range(2):
        u = torch.rand(window + 1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        u[:3] = 0.0  # force the first three acceptances where p(C) > 0
        result = verify(p, q, drafts, rule, uniforms=u)
        accepted, tokens = _fast_reference(p, q, drafts, u, 6, 7)
        assert int(result.num_accepted) == accepted
        assert result.tokens[: len(tokens)].tolist() == tokens


def _fast_reference(p, q, drafts, u, above, below):
    """The reference loop, vectorised only inside a position (a sort per row), for V = 65536."""
    window = q.shape[0]
    for i in range(window):
        order = torch.sort(p[i], descending=True, stable=True).indices
        r = int((order == drafts[i]).nonzero()[0, 0])
        c = order[max(0, r - above) : r + below + 1]
        ratio = min(1.0, (p[i, c].sum() / q[i, c].sum()).item()) if q[i, c].sum() > 0 else 0.0
        if u[i].item() >= ratio:
            excess = (p[i] - q[i]).clamp(min=0)
            return i, drafts[:i].tolist() + [int(sample_categorical(excess, u[window]))]
    return window, drafts.tolist() + [int(sample_categorical(p[window], u[window]))]


def test_generator_makes_results_reproducible():
    p, q, drafts, _ = _case(seed=3)
    a = verify(p, q, drafts, DynamicClusters(4), generator=torch.Generator().manual_seed(5))
    b = verify(p, q, drafts, DynamicClusters(4), generator=torch.Generator().manual_seed(5))
    c = verify(p, q, drafts, DynamicClusters(4), generator=torch.Generator().manual_seed(6))
    assert torch.equal(a.tokens, b.tokens)
    assert not torch.equal(a.tokens, c.tokens)


def test_batch_broadcasting_of_a_shared_target():
    p, q, drafts, u = _case(seed=4)
    shared = p[0]  # [L + 1, V] broadcast over the batch
    batched = verify(shared.expand_as(p), q, drafts, uniforms=u)
    broadcast = verify(shared, q, drafts, uniforms=u)
    assert torch.equal(batched.tokens, broadcast.tokens)


def test_accept_probability_of_each_rule_and_the_amplify_scale():
    p = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    q = torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64)
    assert accept_probability(p, q, 0).item() == 0.5
    assert accept_probability(p, q, 0, Amplify(1.5)).item() == pytest.approx(0.75, abs=1e-15)
    assert accept_probability(p, q, 0, Amplify(3.0)).item() == 1.0
    pairs = torch.tensor([0, 0, 1])  # C(0) = {0, 1}: p(C) = 0.7, q(C) = 0.8
    assert accept_probability(p, q, 0, Amplify(0.5, pairs)).item() == pytest.approx(0.4375, abs=1e-15)
    assert torch.equal(accept_probability(p, q, torch.arange(3), Amplify(2.0)),
                       torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="Amplify scale"):
        Amplify(0.0)
