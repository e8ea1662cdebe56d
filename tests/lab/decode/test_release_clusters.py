"""``ReleaseDistanceClusters`` against a transcription of the release's verification step.

``release_ratio`` follows junhyukso/GSD ``scheduler/jacobi_iteration_lumina_mgpt.py``,
``SpeculativeSampler.__call__`` (the body of its loop over draft positions, from ``logit_sort``
to ``final_p``), statement by statement, for one draft: the ascending sort of the target's
logits, the slice ``[cur_idx - 7 : cur_idx + 7]``, the gap and distance masks, the ``max() <=
10000`` test, and the ``except`` branch's plain ratio. Its liberties, each stated where taken:

- the sort is asked to be stable (the release's rows of 65,536 logits sort stably on CUDA, see
  ``gsd_lab.decode.presets``; a CPU sort of this size is not);
- G, the thresholds and the bound are arguments (the release's 7 + 7, 0.15, 0.5 and 10000 are
  the defaults);
- ``head_img_sims is not None`` guards the distance mask (the release always has its table), and
  ``p_thr=None`` drops the gap mask (the release always applies it);
- the ``except`` names the two exceptions the ``try`` can raise, each its own branch (the
  release: ``except Exception``);
- the gather ``head_img_sims[cls_idx][logit_sort_idx]`` has the release's CUDA semantics, not a
  CPU tensor's: ``head_img_sims[cls_idx]`` (a 0-d tensor index: checked on the host) raises an
  IndexError, which the release catches, but an id >= R in ``logit_sort_idx`` is read on the
  device, a device-side assert: ``ReleaseAborts``, raised past the ``except``.
"""

from __future__ import annotations

import pytest
import torch

from gsd_core import DynamicClusters, accept_probability
from gsd_lab.rules.clusters import ReleaseDistanceClusters

BRANCHES = ("normal", "empty", "index", "abort")


class ReleaseAborts(Exception):
    """The release's CUDA gather past its table's row: a device-side assert, no output."""


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
) -> tuple[float, list[int], str]:
    """(final_p, the ids whose p and q it summed, the branch) for draft ``cls_idx`` against rows
    [V]: the release's statements with b and the position indices dropped. ``head_img_sims``:
    the release's distance table [R, R] (None: no distance mask, the gap mask alone); p_thr None:
    no gap mask. Branches: "normal" (the ``try`` ran through), "empty" (the window is empty:
    ``.max()`` of nothing, a RuntimeError) and "index" (cls_idx >= R: an IndexError), both caught
    with the ids [cls_idx]; raises ``ReleaseAborts`` where cls_idx < R and a window id is >= R."""
    sampled_advanced_prob = advanced_prob[cls_idx]
    sampled_draft_prob = draft_prob[cls_idx]
    logit_sort = advanced_logits.sort(dim=-1, stable=True).indices  # release: .sort(dim=-1)
    cur_idx = torch.nonzero(logit_sort == cls_idx)
    logit_sort_idx = logit_sort[cur_idx - below : cur_idx + above]  # logit-based
    branch = "normal"
    try:
        adv_super_prob = advanced_prob[logit_sort_idx]
        draft_super_prob = draft_prob[logit_sort_idx]
        if p_thr is not None:
            is_in_p_thr = ((adv_super_prob - advanced_prob[cls_idx]).abs() < p_thr).float()
        else:
            is_in_p_thr = torch.ones_like(adv_super_prob)
        if logit_sort_idx.max().item() <= bound and head_img_sims is not None:
            row = head_img_sims[torch.tensor(cls_idx)]  # a 0-d index: a host-side IndexError
            if logit_sort_idx.max().item() >= row.shape[0]:  # CUDA: a device-side assert
                raise ReleaseAborts(f"draft {cls_idx}: window id >= R = {row.shape[0]}")
            is_in_d_thr = (row[logit_sort_idx] < d_thr).float()
        else:
            is_in_d_thr = 1.0
        final_mask = (is_in_p_thr * is_in_d_thr).float()
        adv_super_prob = (adv_super_prob * final_mask).sum()
        draft_super_prob = (draft_super_prob * final_mask).sum()
        final_p = (adv_super_prob / draft_super_prob).clamp(max=1)
        summed = logit_sort_idx[final_mask > 0].tolist()
    except (RuntimeError, IndexError) as error:  # release: except Exception
        # RuntimeError: .max() of an empty window; IndexError: head_img_sims[cls_idx], cls_idx >= R
        branch = "empty" if isinstance(error, RuntimeError) else "index"
        final_p = (sampled_advanced_prob / sampled_draft_prob).clamp(max=1)
        summed = [cls_idx]
    return float(final_p), sorted(summed), branch


def release_or_abort(*args: object, **kwargs: object) -> tuple[float, list[int], str]:
    """``release_ratio``, with an abort read as what the release computes on a CPU, where the
    gather raises an IndexError: the plain ratio (the package's choice, not reproduced)."""
    try:
        return release_ratio(*args, **kwargs)
    except ReleaseAborts:
        _, p, q, x = args[:4]
        return float((p[x] / q[x]).clamp(max=1)), [x], "abort"


def package_ratio(
    rule: object, p: torch.Tensor, q: torch.Tensor, x: int
) -> tuple[float, list[int]]:
    """(a(x), the kept members) of a rule with ``members``, for one draft against rows [V]."""
    index, keep = rule.members(p, q, torch.tensor([x]))
    a = float(accept_probability(p, q, torch.tensor(x), rule))
    return a, sorted(index[0][keep[0]].tolist())


def _sims(rows: int, generator: torch.Generator) -> torch.Tensor:
    """A symmetric distance table [rows, rows] with a zero diagonal (every token near itself, as
    the package keeps it), about half the pairs below 0.5 (the release's d)."""
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
    the window's ids (B < R, B = R, B > R: no filter, filter, fallback for ids in [R, B]): the
    same members as the release sums, and a(x) to 1e-12 (sums of <= 14 terms in another
    association; the id sets are compared exactly). Where the release aborts (x < R, a window
    id in [R, B]) the package takes the plain ratio. Every branch of the release is reached:
    with a table all four, without one the normal and the empty window."""
    generator = torch.Generator().manual_seed(1)
    checked = own_differs = 0
    branches = dict.fromkeys(BRANCHES, 0)
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
            want = release_or_abort(logits, p, q, x, sims, below=size // 2,
                                    above=size - size // 2, p_thr=gap, bound=bound)
            got = package_ratio(rule, p, q, x)
            assert got[1] == want[1], (trial, x)
            assert got[0] == pytest.approx(want[0], rel=0, abs=1e-12), (trial, x)
            checked += 1
            branches[want[2]] += 1
            if want[2] in ("index", "abort"):  # caught where x >= R, an abort where x < R
                assert (want[2] == "index") == (x >= rows), (trial, x)
            if gap is None and not distance:  # the negative control: DynamicClusters' own order
                own_differs += package_ratio(DynamicClusters(size), p, q, x)[1] != want[1]
    assert checked > 500
    reached = {name for name, count in branches.items() if count}
    assert reached == (set(BRANCHES) if distance else {"normal", "empty"}), branches
    assert own_differs > 0 or gap is not None or distance


def _tie_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """V = 16, logits 16, 15, ..., 1 with logits[8] = logits[7]; q uniform."""
    logits = torch.arange(16, 0, -1, dtype=torch.float64)
    logits[8] = logits[7]
    return logits, torch.softmax(logits, -1), torch.full((16,), 1 / 16, dtype=torch.float64)


def test_tied_tokens_rank_as_in_the_release_and_not_as_dynamic_clusters():
    """The tie: with a stable sort, as at the release's 65,536 logits, token 8 ranks above token
    7, so 7's window is ranks 2 .. 15 (a(7) = 0.1550) and 8's ranks 1 .. 14 (0.4207);
    DynamicClusters ranks 7 first: the mirror image, which fails the release's ratio (the
    negative control)."""
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
    """The release's sizes: a 10,000-row table, V = 10,016, windows set by hand (every other
    token's p far below). Largest window id 9999: the distance filter; 10001: none; the draft
    x = 10000 itself, no id above it: the release's IndexError, caught (the plain ratio
    p(x)/q(x)); id 10000 in the window of a lower x: the release aborts on its GPU, the package
    takes the plain ratio (its documented choice)."""
    vocab, rows = 10_016, 10_000
    generator = torch.Generator().manual_seed(2)
    sims = torch.ones(rows, rows, dtype=torch.bfloat16)  # every pair far (>= d) but the diagonal
    sims.fill_diagonal_(0.0)
    near = torch.randint(0, rows, (40, 2), generator=generator)
    sims[near[:, 0], near[:, 1]] = 0.0
    table = sims < 0.5
    rule = ReleaseDistanceClusters(14, table, 0.15)
    seen = set()
    for case, special, slot in (("filter", 9_999, 13), ("none", 10_001, 13),
                                ("caught", 10_000, 7), ("abort", 10_000, 13)):
        others = torch.randperm(rows - 20, generator=generator)[:13]
        ids = torch.cat([others[:slot], torch.tensor([special]), others[slot:]])
        logits = torch.full((vocab,), -torch.inf, dtype=torch.float64)
        logits[ids] = torch.linspace(1.0, 1.5, 14, dtype=torch.float64)  # W(x) = ids for x = ids[7]
        logits[vocab - 1] = 4.0  # the top token, outside every window here
        p = torch.softmax(logits, -1)
        q = torch.zeros(vocab, dtype=torch.float64)
        q[ids] = torch.rand(14, generator=generator, dtype=torch.float64) + 0.1
        q /= q.sum()
        x = int(ids[7])
        if x < rows:
            sims[x, ids[:4]] = 0.0  # some members near x
            table[x, ids[:4]] = True
        if case == "abort":
            with pytest.raises(ReleaseAborts):
                release_ratio(logits, p, q, x, sims)
        want = release_or_abort(logits, p, q, x, sims)
        got = package_ratio(rule, p, q, x)
        assert got[1] == want[1] and got[0] == pytest.approx(want[0], rel=0, abs=1e-12)
        plain = float((p[x] / q[x]).clamp(max=1))
        seen.add((case, want[2], got[1] == [x] and got[0] == pytest.approx(plain, abs=1e-12)))
    assert seen == {("filter", "normal", False), ("none", "normal", False),
                    ("caught", "index", True), ("abort", "abort", True)}


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


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((0, None), "group_size"),
        ((14.0, None), "group_size"),
        ((True, None), "group_size"),
        ((14, torch.zeros(3, 3)), "square bool tensor"),
        ((14, torch.zeros(3, 4, dtype=torch.bool)), "square bool tensor"),
        ((14, torch.zeros(3, dtype=torch.bool)), "square bool tensor"),
        ((14, [[True]]), "square bool tensor"),
        ((14, None, 0.15, 10000.0), "id_bound"),
        ((14, None, 0.15, None), "id_bound"),
    ],
)
def test_bad_arguments_are_refused(arguments, message):
    with pytest.raises(ValueError, match=message):
        ReleaseDistanceClusters(*arguments)
