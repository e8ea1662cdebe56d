"""The smallest decode where block verification with coupled drafts leaves the AR joint, in
rational arithmetic (proofs/14, claim 4 and "Where coupled drafts break it").

Model: V = 2, N = 4 tokens, window 2; every row uniform except p(. | x_0 = 1) = (0, 1) and
p(. | x_0 = 0, x_1 = 1) = (2/3, 1/3). ``decode_law`` transcribes ``gsd_lab.decode.loop`` (window
L = min(2, N - n - 1); fresh drafts uniform, one-hot q; the window verified token-wise or by
block verification, Sun et al.'s Algorithm 2 written out in its weights w, residual masses rho
and stop probabilities h; the positions after the stop re-drafted from this pass's rows,
independently, by maximal coupling to the draft held, or by Gumbel-max with the position's noise,
which for V = 2 is one uniform U per position, the draft 0 iff U < Q(0), so that given the past
drafts U is uniform on an interval carried with the position). Every random choice is a branch
with its exact ``Fraction`` weight, so the laws below are exact rationals: no tolerance. The
transcription is checked against the package's float64 functions decode by decode:
``test_the_transcription_is_the_packages_float64_decode`` runs the same model through
test_decode_laws_exact.py's ``decode_law`` (gsd_core's ``verify``, ``verify_block``, ``draw``)
for block and token-wise verification with independent and maximal drafts, every sequence's
probability to 1e-12.

What it shows: with maximal or Gumbel coupled drafts Pr[x_{0:3} = 000] = 11/96 and
Pr[x_{0:3} = 001] = 13/96 against the AR joint's 12/96 each. On this model every window of two
drafts has the product of its declared rows as its law given the blocks emitted before it and
its declared rows ((B1) holds there); the bias is in the pass after: pass 2 (n = 1, drafts
(1, d_2)) rejects position 1 with probability 1 - w_2, which depends on d_2; the coupling
carries d_2 into pass 3 (n = 2, one draft), whose draft then has law (5/9, 4/9) given the
blocks emitted, against its declared row (2/3, 1/3). Either ingredient alone is exact: block
verification with independent drafts and token-wise verification with either coupling give the
AR joint. (B1) given the blocks is sufficient, not necessary: on a V = 2, N = 5 model with rows
of full support, token-wise verification with maximal drafts is exact while a pass's drafts
leave their declared law given the blocks and declared rows (a later row reveals an old draft).
"""

from __future__ import annotations

import collections
import itertools
from fractions import Fraction

import pytest

V, N, WINDOW = 2, 4, 2
Row = tuple[Fraction, ...]
HALF: Row = (Fraction(1, 2), Fraction(1, 2))


def model(prefix: tuple[int, ...]) -> Row:
    """p(. | prefix): uniform except after x_0 = 1 and after (x_0, x_1) = (0, 1)."""
    return {(1,): (Fraction(0), Fraction(1)),
            (0, 1): (Fraction(2, 3), Fraction(1, 3))}.get(prefix, HALF)


def ar_joint(rows=model, length: int = N) -> dict[tuple[int, ...], Fraction]:
    joint = {}
    for z in itertools.product(range(V), repeat=length):
        joint[z] = Fraction(1)
        for k in range(length):
            joint[z] *= rows(z[:k])[z[k]]
    return joint


def _plus(t: Fraction) -> Fraction:
    return max(t, Fraction(0))


def _normalised(weights: list[Fraction]) -> Row:
    total = sum(weights)
    return tuple(w / total for w in weights)


def token_window(p: list[Row], q: list[Row], x: tuple[int, ...]):
    """[(a, y, probability)] of token-wise verification (SD): accept x_i with min(1, p/q), the
    first rejection draws from norm((p_i - q_i)_+), a full acceptance from the bonus row."""
    out, reach = [], Fraction(1)
    for i, token in enumerate(x):
        accept = min(Fraction(1), p[i][token] / q[i][token]) if q[i][token] else Fraction(0)
        if reach * (1 - accept):
            residual = _normalised([_plus(p[i][y] - q[i][y]) for y in range(V)])
            out += [(i, y, reach * (1 - accept) * r) for y, r in enumerate(residual) if r]
        reach *= accept
    return out + [(len(x), y, reach * r) for y, r in enumerate(p[len(x)]) if reach * r]


def block_window(p: list[Row], q: list[Row], x: tuple[int, ...]):
    """[(tau, y, probability)] of block verification (Sun et al., Algorithm 2; proofs/14):
    w_0 = 1, w_{i+1} = min(1, w_i p_i(x_i)/q_i(x_i)); rho_i = sum_y (w_i p_i(y) - q_i(y))_+;
    h_i = rho_i / (rho_i + 1 - w_i) (0 if 0/0), h_L = w_L; Pr[tau = i] = h_i prod_{j>i} (1 - h_j)
    (h_0 = 1); y ~ norm((w_tau p_tau - q_tau)_+), q_L = 0."""
    L = len(x)
    w = [Fraction(1)]
    for i, token in enumerate(x):
        w.append(min(Fraction(1), w[i] * p[i][token] / q[i][token]) if q[i][token] else 0)
    rho = [sum(_plus(w[i] * p[i][y] - q[i][y]) for y in range(V)) for i in range(L)]
    h = [Fraction(1)] + [rho[i] / (rho[i] + 1 - w[i]) if rho[i] + 1 - w[i] else Fraction(0)
                         for i in range(1, L)] + [w[L]]
    out = []
    for tau in range(L + 1):
        chance = h[tau]
        for j in range(tau + 1, L + 1):
            chance *= 1 - h[j]
        if not chance:
            continue
        q_tau = q[tau] if tau < L else (Fraction(0),) * V
        residual = _normalised([_plus(w[tau] * p[tau][y] - q_tau[y]) for y in range(V)])
        out += [(tau, y, chance * r) for y, r in enumerate(residual) if r]
    return out


def redraft_options(row: Row, old: int | None, old_q: Row | None, interval, draft: str):
    """[(new draft, its noise interval, probability)] for one re-drafted position."""
    if draft == "gumbel":
        low, high = interval
        parts = [(0, (low, min(high, row[0]))), (1, (max(low, row[0]), high))]
        return [(y, (a, b), (b - a) / (high - low)) for y, (a, b) in parts if b > a]
    if draft == "maximal" and old is not None:
        keep = min(Fraction(1), row[old] / old_q[old]) if old_q[old] else Fraction(0)
        residual = [_plus(row[y] - old_q[y]) for y in range(V)]
        options = collections.Counter({old: keep})
        for y in range(V):
            if residual[y]:
                options[y] += (1 - keep) * residual[y] / sum(residual)
        return [(y, interval, c) for y, c in options.items() if c]
    return [(y, interval, row[y]) for y in range(V) if row[y]]


def decode_law(verifier: str, draft: str, watch=None, rows=model,
               length: int = N) -> dict[tuple[int, ...], Fraction]:
    """{z: Pr[the decode emits z]} of ``length`` tokens over the model ``rows``.
    ``watch(weight, committed, drafts, q, blocks)`` sees every pass before it verifies: the
    probability of reaching it with these drafts, and the blocks (start, accepted count) emitted
    before it."""
    law: dict[tuple[int, ...], Fraction] = collections.Counter()
    unit = (Fraction(0), Fraction(1))

    def step(prob, committed, drafts, qs, noise, blocks):
        n = len(committed)
        if n >= length:
            law[committed] += prob
            return
        L = min(WINDOW, length - n - 1)
        drafts, qs, noise = drafts[:L], qs[:L], noise[:L]
        missing = L - len(drafts)
        for fresh in itertools.product(range(V), repeat=missing):
            d = drafts + fresh
            q = qs + tuple(tuple(Fraction(int(y == t)) for y in range(V)) for t in fresh)
            intervals = noise + (unit,) * missing
            p = [rows(committed + d[:j]) for j in range(L + 1)]
            weight = prob / V**missing
            if watch is not None:
                watch(weight, committed, d, q, blocks)
            window = block_window if verifier == "block" else token_window
            for a, y, chance in window(p, q, d):
                options = [redraft_options(p[j], d[j] if j < L else None,
                                           q[j] if j < L else None,
                                           intervals[j] if j < L else unit, draft)
                           for j in range(a + 1, L + 1)]
                for combo in itertools.product(*options):
                    again = Fraction(1)
                    for _, _, c in combo:
                        again *= c
                    step(weight * chance * again, committed + d[:a] + (y,),
                         tuple(t for t, _, _ in combo), tuple(p[a + 1 :]),
                         tuple(i for _, i, _ in combo), blocks + ((n, a),))

    step(Fraction(1), (), (), (), (), ())
    return dict(law)


def first_three(law: dict) -> dict[tuple[int, ...], Fraction]:
    out = collections.Counter()
    for z, prob in law.items():
        out[z[:3]] += prob
    return out


@pytest.mark.parametrize("draft", ["maximal", "gumbel"])
def test_coupled_block_verification_moves_a_96th(draft):
    law = decode_law("block", draft)
    assert sum(law.values()) == 1
    marginal, target = first_three(law), first_three(ar_joint())
    assert target[(0, 0, 0)] == target[(0, 0, 1)] == Fraction(12, 96)
    assert marginal[(0, 0, 0)] == Fraction(11, 96)
    assert marginal[(0, 0, 1)] == Fraction(13, 96)
    assert {z: marginal[z] for z in target if z[:2] != (0, 0)} == \
        {z: target[z] for z in target if z[:2] != (0, 0)}


@pytest.mark.parametrize("verifier, draft", [("block", "independent"), ("token", "maximal"),
                                             ("token", "gumbel"), ("token", "independent")])
def test_each_ingredient_alone_is_exact(verifier, draft):
    assert decode_law(verifier, draft) == {z: c for z, c in ar_joint().items() if c}


def _laws_given_blocks(verifier: str, draft: str, width: int, **model_args):
    """{(committed, declared rows, blocks): law of the drafts} over the passes with ``width``
    drafts: the drafts' law given the blocks emitted before the pass and its declared rows."""
    groups = collections.defaultdict(collections.Counter)

    def watch(weight, committed, drafts, q, blocks):
        if len(drafts) == width:
            groups[(committed, q, blocks)][drafts] += weight

    decode_law(verifier, draft, watch, **model_args)
    return {key: {d: c / sum(counts.values()) for d, c in counts.items()}
            for key, counts in groups.items()}


def _declared(q: tuple[Row, ...]) -> dict[tuple[int, ...], Fraction]:
    law = {}
    for d in itertools.product(range(V), repeat=len(q)):
        law[d] = Fraction(1)
        for row, token in zip(q, d):
            law[d] *= row[token]
    return {d: c for d, c in law.items() if c}


@pytest.mark.parametrize("draft", ["maximal", "gumbel"])
def test_the_bias_enters_the_next_window(draft):
    """On this model (B1) holds in every window of two drafts; the one-draft pass at n = 2 after
    blocks (0, 0) and (1, 0) has its draft with law (5/9, 4/9) against its declared (2/3, 1/3).
    With token-wise verification, on this model, every pass's drafts have their declared law
    given the blocks (not in general: ``test_token_wise_coupled_drafts_are_exact_without_b1``)."""
    for (_, q, _), law in _laws_given_blocks("block", draft, 2).items():
        assert law == _declared(q)
    declared = ((Fraction(2, 3), Fraction(1, 3)),)
    wrong = {key: law for key, law in _laws_given_blocks("block", draft, 1).items()
             if law != _declared(key[1])}
    assert wrong == {((0, 0), declared, ((0, 0), (1, 0))): {(0,): Fraction(5, 9),
                                                             (1,): Fraction(4, 9)}}
    for width in (1, 2):
        for (_, q, _), law in _laws_given_blocks("token", draft, width).items():
            assert law == _declared(q)


@pytest.mark.parametrize("verifier, draft", [("block", "independent"), ("block", "maximal"),
                                             ("token", "maximal"), ("token", "independent")])
def test_the_transcription_is_the_packages_float64_decode(verifier, draft):
    """The rational transcription against ``test_decode_laws_exact.decode_law`` on the same
    model, which enumerates the same decode through gsd_core's float64 ``verify``,
    ``verify_block`` and ``draw`` (so 11/96 also comes out of ``verify_block``): every sequence's
    probability agrees to 1e-12. (Gumbel drafts have no float64 enumeration there.)"""
    import torch
    from test_decode_laws_exact import decode_law as float_decode_law

    rows = {prefix: torch.tensor([float(c) for c in model(prefix)], dtype=torch.float64)
            for n in range(N) for prefix in itertools.product(range(V), repeat=n)}
    exact = decode_law(verifier, draft)
    floats = float_decode_law(rows, V, N, WINDOW, verifier=verifier, draft=draft)
    assert max(abs(floats.get(z, 0.0) - float(exact.get(z, 0)))
               for z in itertools.product(range(V), repeat=N)) <= 1e-12
    if (verifier, draft) == ("block", "maximal"):
        assert abs(sum(c for z, c in floats.items() if z[:3] == (0, 0, 0)) - 11 / 96) <= 1e-12


def full_support(prefix: tuple[int, ...]) -> Row:
    """A V = 2 model with rows of full support: p(0 | prefix) in {1/4, 1/2, 3/4}."""
    first = Fraction(1 + (sum((2 * i + 1) * x for i, x in enumerate(prefix)) + len(prefix)) % 3, 4)
    return (first, 1 - first)


def test_token_wise_coupled_drafts_are_exact_without_b1():
    """(B1) given the blocks and declared rows is sufficient, not necessary (proofs/14, "Where
    coupled drafts break it"). Token-wise verification with maximal drafts over ``full_support``
    is exact at N = 4 and 5, yet at N = 5 a pass's drafts, given the blocks and their declared
    rows, leave their declared law: pass 3 (n = 2) declares for position 3 pass 2's row
    p(. | x_0, d_1, d_2), a function of position 2's old draft, to which its re-draft is coupled.
    At N = 4 no pass's drafts do."""
    for length in (4, 5):
        law = decode_law("token", "maximal", rows=full_support, length=length)
        assert law == ar_joint(full_support, length)
    for width in (1, 2):
        for key, law in _laws_given_blocks("token", "maximal", width, rows=full_support,
                                           length=4).items():
            assert law == _declared(key[1])
    wrong = {key: law for width in (1, 2)
             for key, law in _laws_given_blocks("token", "maximal", width, rows=full_support,
                                                length=5).items()
             if law != _declared(key[1])}
    assert wrong and all(key[2][:2] == ((0, 0), (1, 0)) and len(key[1]) == 2 for key in wrong)
    quarter = (Fraction(1, 4), Fraction(3, 4))
    key = ((1, 0), (quarter, HALF), ((0, 0), (1, 0)))
    assert wrong[key] == {(0, 0): Fraction(1, 6), (0, 1): Fraction(1, 6),
                          (1, 0): Fraction(1, 3), (1, 1): Fraction(1, 3)}
