"""``ReleaseDistanceClusters`` against a transcription of the release's verification step.

``release_ratio`` follows junhyukso/GSD ``scheduler/jacobi_iteration_lumina_mgpt.py``,
``SpeculativeSampler.__call__`` (the body of its loop over draft positions, from ``logit_sort``
to ``final_p``), statement by statement, for one draft: the ascending sort of the target's
logits, the slice ``[cur_idx - 7 : cur_idx + 7]``, the gap and distance masks, the ``max() <=
10000`` test, and the ``except`` branch's plain ratio. Two liberties, both stated where taken:
the sort is asked to be stable (the release's rows of 65,536 logits sort stably on CUDA, see
``gsd_lab.decode.presets``; a CPU sort of this size is not), and G, the thresholds and the bound
are arguments (the release's 7 + 7, 0.15, 0.5 and 10000 are the defaults).
"""

from __future__ import annotations

import pytest
import torch

from gsd_core import DynamicClusters, accept_probability
from gsd_lab.decode.presets import ReleaseDistanceClusters


def release_ratio(
    advanced_logits: torch.Tensor,
    advanced_prob: torch.Tensor,
    draft_prob: torch.Tensor,
    cls_idx: int,
    head_img_sims: torch.Tensor | None,
    *,
    below: int = 7,
    above: int = 7,
    p_thr: float | None = 0.15,
    d_thr: float = 0.5,
    bound: int = 10000,
) -> tuple[float, list[int]]:
    """(final_p, the ids whose p and q it summed) for draft ``cls_idx`` against rows [V]:
    the release's statements with b and the position indices dropped. ``head_img_sims``:
    the release's distance table [R, R] (None: no distance mask, the gap mask alone); p_thr None:
    no gap mask. In the ``except`` branch the ids are [cls_idx]."""
    sampled_advanced_prob = advanced_prob[cls_idx]
    sampled_draft_prob = draft_prob[cls_idx]
    logit_sort = advanced_logits.sort(dim=-1, stable=True).indices  # release: .sort(dim=-1)
    cur_idx = torch.nonzero(logit_sort == cls_idx)
    logit_sort_idx = logit_sort[cur_idx - below : cur_idx + above]  # logit-based
    try:
        adv_super_prob = advanced_prob[logit_sort_idx]
        draft_super_prob = draft_prob[logit_sort_idx]
        if p_thr is not None:
            is_in_p_thr = ((adv_super_prob - advanced_prob[cls_idx]).abs() < p_thr).float()
        else:
            is_in_p_thr = torch.ones_like(adv_super_prob)
        if logit_sort_idx.max().item() <= bound and head_img_sims is not None:
            is_in_d_thr = (head_img_sims[cls_idx][logit_sort_idx] < d_thr).float()
        else:
            is_in_d_thr = 1.0
        final_mask = (is_in_p_thr * is_in_d_thr).float()
        adv_super_prob = (adv_super_prob * final_mask).sum()
        draft_super_prob = (draft_super_prob * final_mask).sum()
        final_p = (adv_super_prob / draft_super_prob).clamp(max=1)
        summed = logit_sort_idx[final_mask > 0].tolist()
    except (RuntimeError, IndexError):  # release: except Exception
        final_p = (sampled_advanced_prob / sampled_draft_prob).clamp(max=1)
        summed = [cls_idx]
    return float(final_p), sorted(summed)


def package_ratio(
    rule: object, p: torch.Tensor, q: torch.Tensor, x: int
) -> tuple[float, list[int]]:
    """(a(x), the kept members) of a rule with ``members``, for one draft against rows [V]."""
    index, keep = rule.members(p, q, torch.tensor([x]))
    a = float(accept_probability(p, q, torch.tensor(x), rule))
    return a, sorted(index[0][keep[0]].tolist())


def _sims(rows: int, generator: torch.Generator, d_thr: float = 0.5) -> torch.Tensor:
    """A symmetric distance table [rows, rows] with a zero diagonal (every token near itself, as
    the package keeps it), about half the pairs below ``d_thr``."""
    sims = torch.rand(rows, rows, generator=generator, dtype=torch.float64)
    sims = (sims + sims.T) / 2
    return sims.fill_diagonal_(0.0)


def _case(generator: torch.Generator, vocab: int, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits [V] (ties and -inf of a top-k for kind "ties") and p = softmax in float64."""
    if kind == "distinct":
        logits = 3 * torch.randn(vocab, generator=generator, dtype=torch.float64)
    else:  # few integer levels: many exact ties; some -inf (outside a top-k), all tied at p = 0
        logits = torch.randint(0, 4, (vocab,), generator=generator).double()
        logits[torch.rand(vocab, generator=generator) < 0.3] = -torch.inf
        logits[int(torch.randint(0, vocab, (1,), generator=generator))] = 5.0
    return logits, torch.softmax(logits, -1)


@pytest.mark.parametrize("kind", ["distinct", "ties"])
@pytest.mark.parametrize("gap", [0.15, None], ids=["gap", "no-gap"])
@pytest.mark.parametrize("distance", [True, False], ids=["table", "no-table"])
def test_release_clusters_are_the_release_ratio(kind, gap, distance):
    """Every draft of random rows, V >= G, G in {14, 5}, a table of R rows and a bound B around
    the window's ids (B < R, B = R, B > R: no filter, filter, IndexError for ids in [R, B]):
    the same members as the release sums, and a(x) to 1e-12 (sums of <= 14 terms in another
    association; the id sets are compared exactly)."""
    generator = torch.Generator().manual_seed(1)
    checked = fallbacks = own_differs = 0
    for trial in range(24):
        vocab = int(torch.randint(14, 40, (1,), generator=generator))
        size = (14, 5)[trial % 2]
        rows = int(torch.randint(vocab // 2, vocab + 1, (1,), generator=generator))
        bound = rows + int(torch.randint(-3, 4, (1,), generator=generator))
        logits, p = _case(generator, vocab, kind)
        q = torch.softmax(torch.randn(vocab, generator=generator, dtype=torch.float64), -1)
        sims = _sims(rows, generator) if distance else None
        table = sims < 0.5 if distance else None
        rule = ReleaseDistanceClusters(size, table, gap, id_bound=bound)
        for x in range(vocab):
            want = release_ratio(logits, p, q, x, sims, below=size // 2, above=size - size // 2,
                                 p_thr=gap, bound=bound)
            got = package_ratio(rule, p, q, x)
            assert got[1] == want[1], (trial, x)
            assert got[0] == pytest.approx(want[0], rel=0, abs=1e-12), (trial, x)
            checked += 1
            fallbacks += want[1] == [x]
            if gap is None and not distance:  # the negative control: DynamicClusters' own order
                own_differs += package_ratio(DynamicClusters(size), p, q, x)[1] != want[1]
    assert checked > 500 and 0 < fallbacks < checked
    assert own_differs > 0 or gap is not None or distance


def _tie_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """V = 16, logits 16, 15, ..., 1 with logits[8] = logits[7]; q uniform."""
    logits = torch.arange(16, 0, -1, dtype=torch.float64)
    logits[8] = logits[7]
    return logits, torch.softmax(logits, -1), torch.full((16,), 1 / 16, dtype=torch.float64)


def test_tied_tokens_rank_as_in_the_release_and_not_as_dynamic_clusters():
    """The tie: the release ranks token 8 above token 7, so 7's window is ranks 2 .. 15 (a(7) =
    0.1550) and 8's ranks 1 .. 14 (0.4207); DynamicClusters ranks 7 first: the mirror image, which
    fails the release's ratio (the negative control)."""
    logits, p, q = _tie_case()
    rule, own = ReleaseDistanceClusters(14, None, None), DynamicClusters(14)
    for x, release in ((7, 0.1550), (8, 0.4207)):
        want = release_ratio(logits, p, q, x, None, p_thr=None)
        assert want[0] == pytest.approx(release, abs=5e-5)
        got = package_ratio(rule, p, q, x)
        assert got[1] == want[1] and got[0] == pytest.approx(want[0], rel=0, abs=1e-12)
        ours = package_ratio(own, p, q, x)
        assert ours[1] != want[1] and abs(ours[0] - want[0]) > 0.25
    assert package_ratio(own, p, q, 7)[0] == pytest.approx(release_ratio(logits, p, q, 8, None,
                                                                         p_thr=None)[0], abs=1e-12)


def test_a_window_holding_id_10000_takes_the_plain_ratio():
    """The release's sizes: a 10,000-row table, V = 10,016. A window whose largest id is 10000
    raises in the release (plain ratio p(x)/q(x)); 9999: the distance filter; 10001: none.
    Here every other token's p is far below x's window, so each window is set by hand."""
    vocab, rows = 10_016, 10_000
    generator = torch.Generator().manual_seed(2)
    sims = torch.ones(rows, rows, dtype=torch.bfloat16)  # every pair far (>= d) but the diagonal
    sims.fill_diagonal_(0.0)
    near = torch.randint(0, rows, (40, 2), generator=generator)
    sims[near[:, 0], near[:, 1]] = 0.0
    table = sims < 0.5
    rule = ReleaseDistanceClusters(14, table, 0.15)
    seen = set()
    for largest in (9_999, 10_000, 10_001):
        others = torch.randperm(rows - 20, generator=generator)[:13]
        ids = torch.cat([others, torch.tensor([largest])])
        logits = torch.full((vocab,), -torch.inf, dtype=torch.float64)
        logits[ids] = torch.linspace(1.0, 1.5, 14, dtype=torch.float64)  # W(x) = ids for x = ids[7]
        logits[vocab - 1] = 4.0  # the top token, outside every window here
        p = torch.softmax(logits, -1)
        q = torch.zeros(vocab, dtype=torch.float64)
        q[ids] = torch.rand(14, generator=generator, dtype=torch.float64) + 0.1
        q /= q.sum()
        x = int(ids[7])
        sims[x, ids[:4]] = 0.0  # some members near x
        table[x, ids[:4]] = True
        want = release_ratio(logits, p, q, x, sims)
        got = package_ratio(rule, p, q, x)
        assert got[1] == want[1] and got[0] == pytest.approx(want[0], rel=0, abs=1e-12)
        plain = float((p[x] / q[x]).clamp(max=1))
        seen.add((largest, want[1] == [x], got[0] == pytest.approx(plain, rel=0, abs=1e-12)))
    assert seen == {(9_999, False, False), (10_000, True, True), (10_001, False, False)}


def test_the_drafted_token_stays_where_the_release_drops_it():
    """The one difference kept (``gsd_lab.decode.presets``): a self-distance >= d drops x from
    the release's sums; here x stays in C(x)."""
    generator = torch.Generator().manual_seed(3)
    logits, p = _case(generator, 20, "distinct")
    q = torch.softmax(torch.randn(20, generator=generator, dtype=torch.float64), -1)
    sims = _sims(20, generator)
    x = int(logits.argsort()[10])
    sims[x, x] = 1.0
    want = release_ratio(logits, p, q, x, sims)
    got = package_ratio(ReleaseDistanceClusters(14, sims < 0.5, 0.15), p, q, x)
    assert x not in want[1] and got[1] == sorted(want[1] + [x])


def test_a_vocabulary_smaller_than_the_window_is_refused():
    p = torch.full((5,), 0.2, dtype=torch.float64)
    with pytest.raises(ValueError, match="V >= G"):
        ReleaseDistanceClusters(14, None, None).masses(p, p, torch.tensor([0]))
