"""The exact law of whole decodes with block verification and with multiple drafts, against the
exact AR joint, on table models whose rows have a support larger than the candidates
(proofs/14, claim 2; proofs/15).

Why enumeration and not sampling, and why these models: with two tokens and k >= 2 candidates
the candidates cover the support, so a wrongly declared row for c_2..c_k leaves the joint
unchanged; a wrongly coupled first candidate does not (with k = 2 over two tokens recursive
rejection is SD on c_1 exactly), but a chi-square test through ``generate`` sees it only where
the bias exceeds its sampling noise, while an exact law sees any bias above rounding. Here V = 3
or 4, rows of full support: k = 2 (V = 3) and k = 3 (V = 4) leave tokens out.

What is enumerated, and through which code. ``decode_law`` is ``gsd_lab.decode.loop``'s
``generate`` transcribed step for step (``window_size``, ``refill``, ``forward`` or
``tree_step``, ``commit``, ``redraft``) on a table model p(y | prefix), with every random
read replaced by an exact enumeration of its outcomes: fresh drafts uniform over the V tokens
(one-hot q); every function that consumes uniforms is the package's own, called with the
midpoint of every cell of the uniforms' cell grid (``cells``) and weighted by the cell's
volume. Those functions are ``gsd_core.verify`` (the window token-wise, the branch of a tree
pass, and the maximal coupling, which ``decode.coupling.maximal_coupling`` runs as ``verify``
on windows of one draft), ``gsd_core.verify_block``, ``gsd_core.draw`` (independent re-drafts,
as ``DraftChain.redraft``), ``gsd_core.draw_without_replacement``,
``gsd_core.without_replacement_rows``, ``gsd_core.one_hot`` and
``gsd_core.recursive_rejection`` (``tree_step``'s candidates, declared rows and verdict). The
cell boundaries are the outcomes' thresholds: each test uniform's acceptance probability (read
from the function's own ``accept_probs``) and the CDF breaks of every row a draw may use. So a
wrong threshold, residual, declared row or draw inside those functions changes the enumerated
law; what is transcribed, not called, is the loop's bookkeeping (which rows, which drafts).

Arithmetic: float64, the package's own (its functions are float64 torch code; a Fraction
transcription would test the transcription, not them). Every enumerated weight is a product of
float64 cell volumes and rows, summed over at most a few thousand paths. The decoders that
proofs/14 and 15 prove exact match the AR joint to 9.7e-17 at most (measured; ``ROUNDING``,
1e-15, asserted), while each control leaves it by 7.7e-4 or more (pinned to 1e-12).

Only the loop's bookkeeping is transcribed here; test_decode_loop_exact.py runs ``generate``
itself with every random read enumerated, on smaller models.
"""

from __future__ import annotations

import collections
import functools
import itertools
import math

import pytest
import torch

from gsd_core import (
    draw, draw_without_replacement, one_hot, recursive_rejection, verify,
    verify_block, without_replacement_rows,
)
from gsd_core.block_verification import block_residual, block_weights
from gsd_core.multidraft import normalised
from gsd_core.rules import token_residual

pytestmark = pytest.mark.usefixtures("one_thread")

ROUNDING = 1e-15  # asserted for the exact decoders; the measured maximum is 9.7e-17
Row = tuple[float, ...]


def table_model(seed: int, vocab: int, length: int) -> dict[tuple[int, ...], torch.Tensor]:
    """p(. | prefix) for every prefix shorter than ``length``: weights 1..4, full support."""
    generator = torch.Generator().manual_seed(seed)
    return {prefix: (w := torch.randint(1, 5, (vocab,), generator=generator).double()) / w.sum()
            for n in range(length) for prefix in itertools.product(range(vocab), repeat=n)}


def ar_joint(model: dict, vocab: int, length: int) -> dict[tuple[int, ...], float]:
    """prod_k p(z_k | z_{<k}) for every z in V^N."""
    return {z: math.prod(float(model[z[:k]][z[k]]) for k in range(length))
            for z in itertools.product(range(vocab), repeat=length)}


def deviation(law: dict, joint: dict) -> float:
    """max_z |law(z) - joint(z)|."""
    return max(abs(law.get(z, 0.0) - joint[z]) for z in joint)


# --- enumerating the uniforms of one call -----------------------------------------------------

def cdf_breaks(row: torch.Tensor) -> list[float]:
    """The u where ``draw(row, u)`` may change: cumsum(row) / sum(row) [V]."""
    cdf = row.cumsum(-1)
    return (cdf / cdf[-1]).tolist() if row.numel() and float(cdf[-1]) > 0 else []


def cells(breaks: list[list[float]], at: float = 0.5):
    """(point [m] float64, volume) of every cell of the grid [0, 1)^m cut at ``breaks[i]`` in
    coordinate i, the point at ``at`` of the cell's side in every coordinate (the midpoint by
    default; the same order for every ``at``). A function of m uniforms that is constant between
    the breaks (each outcome a comparison u_i < threshold, the thresholds among the breaks) has,
    at the midpoint, its value on the whole cell; every caller checks that constancy at
    ``INTERIOR``, 1/3 and 2/3 of every cell, against the midpoint."""
    axes = []
    for cuts in breaks:
        points = sorted({0.0, 1.0, *(min(max(c, 0.0), 1.0) for c in cuts)})
        axes.append([(a + (b - a) * at, b - a) for a, b in zip(points, points[1:]) if b > a])
    for combo in itertools.product(*axes):
        yield (torch.tensor([m for m, _ in combo], dtype=torch.float64),
               math.prod(v for _, v in combo))


INTERIOR = (1 / 3, 2 / 3)


def interior_cells(breaks: list[list[float]]):
    """(midpoint, volume, [the points at 1/3 and 2/3]) of every cell (``cells``)."""
    others = [list(cells(breaks, at)) for at in INTERIOR]
    for c, (u, volume) in enumerate(cells(breaks)):
        yield u, volume, [other[c][0] for other in others]


def draws(row: torch.Tensor):
    """(token, probability) of ``gsd_core.draw(row, u)``, u uniform."""
    return _draws(tuple(row.tolist()))


@functools.lru_cache(maxsize=None)
def _draws(values: Row):
    row = torch.tensor(values, dtype=torch.float64)
    out = collections.Counter()
    for u, volume, points in interior_cells([cdf_breaks(row)]):
        token = int(draw(row, u[None]).squeeze())
        assert all(int(draw(row, x[None]).squeeze()) == token for x in points)
        out[token] += volume
    return tuple(out.items())


def _key(*tensors: torch.Tensor) -> tuple:
    return tuple((t.dtype, tuple(t.shape), t.numpy().tobytes()) for t in tensors)


def two_level(call, thresholds, residual_of):
    """{(accepted, emitted tokens): probability} of ``call(u)`` over its uniforms
    u = (tests, draw): the tests over the cells cut at ``thresholds`` (the draw at 1/2), then,
    given the accepted count a they give, the draw over the cells cut at the CDF breaks of
    ``residual_of(a)``, the row it draws from. ``call`` takes a batch u [C, m + 1] (the
    functions called are vectorised over batch dimensions) and returns num_accepted [C] and
    tokens [C, *]."""
    tests = list(interior_cells(thresholds))
    C = len(tests)
    grid = torch.stack([u for u, _, _ in tests] + [x[f] for f in range(2) for _, _, x in tests])
    half = torch.full((3 * C, 1), 0.5, dtype=torch.float64)
    first = call(torch.cat([grid, half], -1)).num_accepted.tolist()
    assert first[:C] == first[C : 2 * C] == first[2 * C :]  # constant on every cell
    rows, volumes, others = [], [], ([], [])
    for (u, volume, points), a in zip(tests, first):
        for v, inner, inner_points in interior_cells([cdf_breaks(residual_of(a))]):
            rows.append(torch.cat([u, v]))
            volumes.append(volume * inner)
            for f in range(2):
                others[f].append(torch.cat([points[f], inner_points[f]]))
    R = len(rows)
    everything = call(torch.stack(rows + others[0] + others[1]))
    taken_all, tokens_all = everything.num_accepted.tolist(), everything.tokens.tolist()
    outcomes = [(t, tuple(y[: t + 1])) for t, y in zip(taken_all, tokens_all)]
    assert outcomes[:R] == outcomes[R : 2 * R] == outcomes[2 * R :]  # constant on every cell
    out = collections.Counter()
    for outcome, volume in zip(outcomes[:R], volumes):
        out[outcome] += volume
    return out


_WINDOWS: dict = {}


def window_outcomes(p, q, drafts, verifier):
    """[(accepted a, emitted tokens, probability)] of ``verify`` / ``verify_block`` on one
    window, p [L + 1, V], q [L, V], drafts [L], over its L + 1 uniforms."""
    key = (verifier, *_key(p, q, drafts))
    if key not in _WINDOWS:
        L = drafts.numel()
        zeros = torch.zeros(L + 1, dtype=torch.float64)
        if verifier == "block":
            probe = verify_block(p, q, drafts, uniforms=zeros)
            weights, _ = block_weights(p, q, drafts)
            q_pad = torch.cat([q, torch.zeros_like(p[:1])])

            def residual_of(a):
                return block_residual(p[a], q_pad[a], weights[a : a + 1])

            def call(u):
                batch = u.shape[0]
                return verify_block(p.expand(batch, *p.shape), q.expand(batch, *q.shape),
                                    drafts.expand(batch, L), uniforms=u)
        else:
            probe = verify(p, q, drafts, uniforms=zeros)

            def residual_of(a):
                return token_residual(p[a], q[a]) if a < L else p[L]

            def call(u):
                batch = u.shape[0]
                return verify(p.expand(batch, *p.shape), q.expand(batch, *q.shape),
                              drafts.expand(batch, L), uniforms=u)
        out = two_level(call, [[float(a)] for a in probe.accept_probs], residual_of)
        _WINDOWS[key] = [(a, tokens, prob) for (a, tokens), prob in out.items() if prob > 0]
    return _WINDOWS[key]


def maximal_options(row, previous, previous_q):
    """((new draft, kept), probability) of the maximal coupling of ``previous`` ~ ``previous_q``
    with ``row`` (``decode.coupling.maximal_coupling``: ``verify`` with target row, draft
    previous_q, no bonus row), over its 2 uniforms; kept: the old draft passed the test."""
    p, q, d = row[None], previous_q[None], torch.tensor([previous])
    probe = verify(p, q, d, uniforms=torch.zeros(2, dtype=torch.float64))
    breaks = [[float(probe.accept_probs[0])],
              sorted(set(cdf_breaks(token_residual(row, previous_q))))]
    out = collections.Counter()
    for u, volume, points in interior_cells(breaks):
        outcomes = set()
        for x in (u, *points):
            result = verify(p, q, d, uniforms=x)
            outcomes.add((int(result.tokens[0]), int(result.num_accepted) == 1))
        assert len(outcomes) == 1
        out[outcomes.pop()] += volume
    return out.items()


@functools.lru_cache(maxsize=None)
def _candidate_options(source: Row, first: int, k: int):
    return candidate_options(torch.tensor(source, dtype=torch.float64), first, k)


def candidate_options(source, first, k):
    """[(candidates [k], probability)] of ``draw_without_replacement(source, first, k, u)`` over
    its k - 1 uniforms, one at a time: the j-th cut at the CDF breaks of what the first j
    candidates (as the function drew them) left of ``source``."""
    first = torch.tensor(first)

    def extend(uniforms, chance):
        j = uniforms.numel() + 1
        drawn = draw_without_replacement(source, first, j, uniforms)
        if j == k:
            return [(tuple(drawn.tolist()), chance)]
        rest = source.clone()
        rest[drawn] = 0
        options = []
        for u, volume, points in interior_cells([cdf_breaks(rest)]):
            picks = {tuple(draw_without_replacement(source, first, j + 1,
                                                    torch.cat([uniforms, x])).tolist())
                     for x in (u, *points)}
            assert len(picks) == 1
            options += extend(torch.cat([uniforms, u]), chance * volume)
        return options

    out = collections.Counter()
    for candidates, chance in extend(torch.zeros(0, dtype=torch.float64), 1.0):
        out[candidates] += chance
    return list(out.items())


_VERDICTS: dict = {}


def rrs_outcomes(p0, declared, candidates):
    """[(accepted index J, emitted token, probability)] of ``recursive_rejection`` over its
    k + 1 uniforms (the k tests, then the draw from the last residual r_{k+1})."""
    key = _key(p0, declared, candidates)
    if key not in _VERDICTS:
        _VERDICTS[key] = _rrs_outcomes(p0, declared, candidates)
    return _VERDICTS[key]


def _rrs_outcomes(p0, declared, candidates):
    k = candidates.numel()
    probe = recursive_rejection(p0, declared, candidates,
                                torch.zeros(k + 1, dtype=torch.float64))
    residual = p0
    for j in range(k):
        residual = normalised(token_residual(residual, declared[j]))

    class Verdict:  # ``two_level`` reads the accepted index and the emitted token
        def __init__(self, u):
            batch = u.shape[0]
            verdict = recursive_rejection(p0.expand(batch, -1), declared.expand(batch, -1, -1),
                                          candidates.expand(batch, -1), u)
            self.num_accepted, self.tokens = verdict.accepted, verdict.token[:, None]

    out = two_level(Verdict,
                    [[float(a)] for a in probe.accept_probs],
                    lambda J: residual if J == k else p0.new_zeros(0))
    return [(J, tokens[0], prob) for (J, tokens), prob in out.items() if prob > 0]


# --- the whole decode -------------------------------------------------------------------------

def decode_law(model, vocab, length, window, *, verifier="token", draft="independent",
               candidates=1, declare_iid=False, declare_previous=False):
    """The exact law {z: Pr[generate emits z]} of ``DecodingMethod("sjd", window=window,
    verifier=verifier, draft=draft, candidates=candidates)`` with random fresh drafts, N =
    ``length`` tokens over the table model (module docstring). ``declare_iid``: the control
    that declares every candidate with the row the first was drawn from (q_j = q_n) while
    drawing them without replacement. ``declare_previous``: the control that declares a draft the
    maximal coupling kept with the row it was drawn from before (the q SCD's released code
    stores), not with its law, the new row."""
    rows_of = {prefix: row for prefix, row in model.items()}

    def fresh_q(token: int) -> Row:
        return tuple(float(t == token) for t in range(vocab))

    @functools.lru_cache(maxsize=None)
    def law(committed, drafts, q, row_drafts):
        n = len(committed)
        if n >= length:
            return {committed: 1.0}
        L = min(window, length - n - 1)
        drafts, q, row_drafts = drafts[:L], q[:L], min(row_drafts, L)
        out = collections.Counter()
        missing = L - len(drafts)
        for fresh in itertools.product(range(vocab), repeat=missing):
            d = drafts + fresh
            qq = q + tuple(fresh_q(t) for t in fresh)
            for chance, emitted, p, accepted in step(committed, d, qq, row_drafts, L):
                weight = chance / vocab**missing
                for redraft, again in redrafts(p, d, qq, accepted, L):
                    new_d, new_q, new_rows = redraft
                    for z, c in law(committed + emitted, new_d, new_q, new_rows).items():
                        out[z] += weight * again * c
        return dict(out)

    def step(committed, d, q, row_drafts, L):
        """(probability, emitted tokens, p [L + 1, V] for redraft, accepted count) of one pass."""
        if L == 0:
            p = rows_of[committed][None]
            return [(c, (y,), p, 0) for y, c in draws(p[0])]
        if candidates > 1:
            return tree_pass(committed, d, q, row_drafts, L)
        p = torch.stack([rows_of[committed + d[:j]] for j in range(L + 1)])
        qq = torch.tensor(q, dtype=torch.float64)
        return [(c, tokens, p, a)
                for a, tokens, c in window_outcomes(p, qq, torch.tensor(d), verifier)]

    @functools.lru_cache(maxsize=None)
    def declared_rows(values: Row, tup: tuple[int, ...], from_row: bool) -> torch.Tensor:
        """``tree_step``'s declared rows of the candidates ``tup`` drawn from ``values``."""
        source, cands = torch.tensor(values, dtype=torch.float64), torch.tensor(tup)
        if declare_iid and from_row:
            return source.expand(len(tup), vocab) / source.sum()
        if from_row:
            return without_replacement_rows(source, cands)
        present = without_replacement_rows(source, cands).sum(-1, keepdim=True) > 0
        return one_hot(cands, vocab) * present

    def tree_pass(committed, d, q, row_drafts, L):
        k, out = candidates, []
        if row_drafts > 0:
            source = torch.tensor(q[0], dtype=torch.float64)
        else:
            source = torch.ones(vocab, dtype=torch.float64)
        p0 = rows_of[committed]
        for tup, chance in _candidate_options(tuple(source.tolist()), d[0], k):
            cands = torch.tensor(tup)
            declared = declared_rows(tuple(source.tolist()), tup, row_drafts > 0)
            branch_rows = [torch.stack([rows_of[committed + (c,) + d[1 : 1 + t]]
                                        for t in range(L)]) for c in tup]
            for J, y, c_rrs in rrs_outcomes(p0, declared, cands):
                branch = J if J < k else 0
                p = torch.cat([p0[None], branch_rows[branch]])
                if J == k:
                    out.append((chance * c_rrs, (y,), p, 0))
                    continue
                qq = torch.tensor(q[1:], dtype=torch.float64).reshape(L - 1, vocab)
                for a, tokens, c in window_outcomes(branch_rows[branch], qq,
                                                    torch.tensor(d[1:], dtype=torch.long), "token"):
                    out.append((chance * c_rrs * c, (y, *tokens), p, a + 1))
        return out

    def redrafts(p, d, q, accepted, L):
        """((drafts, q, row_drafts), probability) after ``DraftChain.redraft``."""
        if accepted >= L:
            return [(((), (), 0), 1.0)]
        options = []
        for j, row in enumerate(p[accepted + 1 :]):
            position, declared = accepted + 1 + j, tuple(row.tolist())
            if draft == "maximal" and position < L:
                previous = torch.tensor(q[position], dtype=torch.float64)
                options.append([((t, q[position] if kept and declare_previous else declared), c)
                                for (t, kept), c in maximal_options(row, d[position], previous)])
            else:  # independent, or the position entering through the bonus row
                options.append([((t, declared), c) for t, c in draws(row)])
        return [((tuple(t for (t, _), _ in combo), tuple(r for (_, r), _ in combo),
                  L - accepted), math.prod(c for _, c in combo))
                for combo in itertools.product(*options)]

    return law((), (), (), 0)


# --- the tests --------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1])
def test_block_verification_with_independent_drafts_is_the_ar_joint(seed):
    """proofs/14, claim 2: V = 3, N = 4, window 2, rows of full support."""
    model = table_model(seed, 3, 4)
    law = decode_law(model, 3, 4, 2, verifier="block")
    assert deviation(law, ar_joint(model, 3, 4)) <= ROUNDING


def test_token_wise_verification_with_maximal_drafts_is_the_ar_joint():
    """proofs/09: the coupling alone, with token-wise verification, is exact (V = 3, N = 4)."""
    model = table_model(0, 3, 4)
    law = decode_law(model, 3, 4, 2, draft="maximal")
    assert deviation(law, ar_joint(model, 3, 4)) <= ROUNDING


def test_control_block_verification_with_coupled_drafts_is_caught():
    """The same enumeration sees the bias of block verification with maximal coupled drafts
    (proofs/14, claim 4), which ``DecodingMethod`` refuses: 1.196e-3 in one sequence."""
    model = table_model(0, 3, 4)
    joint = ar_joint(model, 3, 4)
    law = decode_law(model, 3, 4, 2, verifier="block", draft="maximal")
    assert deviation(law, joint) == pytest.approx(0.0011961175963121906, abs=1e-12)


@pytest.mark.parametrize("candidates, vocab, length, draft", [
    (2, 3, 3, "independent"), (2, 3, 3, "maximal"), (2, 3, 4, "independent"),
    (2, 3, 4, "maximal"), (3, 4, 3, "independent"), (3, 4, 3, "maximal"),
])
def test_multidraft_decode_is_the_ar_joint(candidates, vocab, length, draft):
    """proofs/15: k = 2 over V = 3 (N = 3, 4), the first candidate drawn independently or maximal
    coupled (at N = 4 a model-row draft is coupled twice before it is a candidate), and k = 3
    over V = 4 (N = 3) likewise; rows of full support, so the candidates never cover it;
    window 2."""
    model = table_model(candidates, vocab, length)
    law = decode_law(model, vocab, length, 2, draft=draft, candidates=candidates)
    assert deviation(law, ar_joint(model, vocab, length)) <= ROUNDING


@pytest.mark.parametrize("candidates, vocab, measured", [(2, 3, 0.006802721088435326),
                                                          (3, 4, 0.0019170177503510244)])
def test_control_candidates_declared_iid_are_caught(candidates, vocab, measured):
    """proofs/15, "What breaks it" 2: candidates drawn without replacement but declared with the
    row of the first (q_j = q_n) leave the AR joint of the whole decode: by 6.80e-3 (k = 2) and
    1.92e-3 (k = 3) in one sequence."""
    model = table_model(candidates, vocab, 3)
    law = decode_law(model, vocab, 3, 2, candidates=candidates, declare_iid=True)
    assert deviation(law, ar_joint(model, vocab, 3)) == pytest.approx(measured, abs=1e-12)


def test_control_a_kept_draft_declared_with_its_previous_row_is_caught():
    """proofs/09, "What breaks it": a draft the maximal coupling kept, declared with the row it
    was drawn from before (the q SCD's released code stores) instead of its law, the new row,
    leaves the AR joint of the whole decode with k = 2 (V = 3, N = 4: a model-row draft is
    coupled twice, where the control bites; a kept fresh draft's one-hot q is exact): by
    7.66e-4 in one sequence."""
    model = table_model(2, 3, 4)
    law = decode_law(model, 3, 4, 2, draft="maximal", candidates=2, declare_previous=True)
    assert deviation(law, ar_joint(model, 3, 4)) == pytest.approx(0.0007663231187536763,
                                                                   abs=1e-12)
