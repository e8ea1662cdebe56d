"""gsd_lab.decode.coupling: each coupled draft has law q_new; maximal coupling agrees with the previous
draft with probability 1 - TV(q_old, q_new); the maximal re-draft of a window position is coupled
to that position's own previous draft; the Gumbel noise follows its position through the window;
generate runs every scheme for SJD and GSD and checks its argument.

Laws are checked on many independent rows at once (the functions are batched): chi-square of
the new drafts' counts against q_new, a binomial z-score for the agreement rate; a wrong
residual must fail the same check."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

scipy_stats = pytest.importorskip("scipy.stats")

import gsd_lab.decode.coupling as coupling  # noqa: E402
from gsd_core import sample_categorical, tv_distance  # noqa: E402
from gsd_lab.decode.coupling import DraftChain, gumbel_argmax, gumbel_noise, maximal_coupling  # noqa: E402
from gsd_lab.decode.methods import ClusterAcceptance, DecodingMethod  # noqa: E402

ROWS = 200_000
SIGNIFICANCE = 1e-3
Q_OLD = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0], dtype=torch.float64)
Q_NEW = torch.tensor([0.2, 0.35, 0.05, 0.1, 0.3], dtype=torch.float64)


def chi_square_pvalue(tokens: torch.Tensor, law: torch.Tensor) -> float:
    counts = torch.bincount(tokens, minlength=law.numel()).to(torch.float64)
    if counts[law == 0].sum() > 0:
        return 0.0
    keep = law > 0
    return float(scipy_stats.chisquare(counts[keep].numpy(), (law[keep] * tokens.numel()).numpy()).pvalue)


def previous_drafts(generator: torch.Generator) -> torch.Tensor:
    return sample_categorical(Q_OLD.expand(ROWS, -1), torch.rand(ROWS, generator=generator, dtype=torch.float64))


def test_maximal_coupling_has_law_q_new_and_maximal_agreement():
    generator = torch.Generator().manual_seed(0)
    previous = previous_drafts(generator)
    new = maximal_coupling(previous, Q_OLD.expand(ROWS, -1), Q_NEW.expand(ROWS, -1), generator)
    assert chi_square_pvalue(new, Q_NEW) > SIGNIFICANCE
    agree = 1 - float(tv_distance(Q_OLD, Q_NEW))  # = sum min(q_old, q_new) = 0.6
    rate = float((new == previous).double().mean())
    assert abs(rate - agree) < 4 * math.sqrt(agree * (1 - agree) / ROWS)
    # Kept exactly where min(q_old, q_new) puts it: P(new = previous = y) = min(q_old(y), q_new(y)).
    kept = new[new == previous]
    assert chi_square_pvalue(kept, torch.minimum(Q_OLD, Q_NEW) / agree) > SIGNIFICANCE


def test_a_residual_from_q_new_fails_the_same_check():
    """Negative control: redrawing from q_new (not norm((q_new - q_old)+)) after a rejection."""
    generator = torch.Generator().manual_seed(0)
    previous = previous_drafts(generator)
    keep = torch.rand(ROWS, generator=generator, dtype=torch.float64) * Q_OLD[previous] < Q_NEW[previous]
    redraw = sample_categorical(Q_NEW.expand(ROWS, -1), torch.rand(ROWS, generator=generator, dtype=torch.float64))
    assert chi_square_pvalue(torch.where(keep, previous, redraw), Q_NEW) < SIGNIFICANCE


def test_maximal_coupling_without_a_previous_draft_draws_from_q():
    generator = torch.Generator().manual_seed(1)
    new = maximal_coupling(torch.zeros(ROWS, dtype=torch.long), torch.zeros(ROWS, 5, dtype=torch.float64),
                           Q_NEW.expand(ROWS, -1), generator)
    assert chi_square_pvalue(new, Q_NEW) > SIGNIFICANCE


def test_maximal_coupling_keeps_a_draft_whose_probability_did_not_drop():
    previous = torch.tensor([1, 0, 1])
    old = torch.stack([Q_OLD, Q_OLD, Q_NEW])
    new = maximal_coupling(previous, old, torch.stack([Q_NEW, Q_NEW, Q_NEW]), torch.Generator().manual_seed(2))
    assert new[0] == 1 and new[2] == 1  # q_new(1) >= q_old(1), or q_new = q_old: kept with probability 1


def test_gumbel_argmax_has_law_q_and_shared_noise_couples():
    generator = torch.Generator().manual_seed(3)
    noise = gumbel_noise(ROWS, 5, generator, torch.device("cpu"))
    assert noise.dtype == torch.float64 and torch.isfinite(noise).all()
    first, second = gumbel_argmax(Q_OLD.expand(ROWS, -1), noise), gumbel_argmax(Q_NEW.expand(ROWS, -1), noise)
    assert chi_square_pvalue(first, Q_OLD) > SIGNIFICANCE and chi_square_pvalue(second, Q_NEW) > SIGNIFICANCE
    rate = float((first == second).double().mean())
    fresh = gumbel_argmax(Q_NEW.expand(ROWS, -1), gumbel_noise(ROWS, 5, generator, torch.device("cpu")))
    independent = float((first == fresh).double().mean())
    # Shared noise agrees far more often than independent draws (sum q_old q_new = 0.2175), never
    # more than the maximal coupling's 1 - TV = 0.6.
    assert independent == pytest.approx(float((Q_OLD * Q_NEW).sum()), abs=0.01)
    assert 0.4 < rate <= 0.6 + 0.01


def test_gumbel_noise_follows_its_position_through_the_window():
    generator = torch.Generator().manual_seed(4)
    chain = DraftChain("gumbel", 5, torch.device("cpu"), generator)
    chain.extend(4)  # window positions n..n+3
    before = chain._noise.clone()
    rows = Q_NEW.expand(3, -1)  # accepted 1 of 4: positions n+2, n+3 re-drafted, n+4 enters
    drafts, q = chain.redraft(torch.tensor([1, 2, 3, 0]), Q_OLD.expand(4, -1), rows, 1)
    assert torch.equal(chain._noise[:2], before[2:]) and not torch.equal(chain._noise[2], before[0])
    assert torch.equal(drafts, gumbel_argmax(rows, chain._noise)) and torch.equal(q, rows)
    chain.truncate(2)
    assert chain._noise.shape == (2, 5)
    chain.clear()
    assert chain._noise.shape == (0, 5)


@pytest.mark.parametrize("accepted", [0, 1, 3])
def test_maximal_redraft_couples_each_position_to_its_own_previous_draft(monkeypatch, accepted):
    """Row j re-drafts window position a + 1 + j: it is coupled to drafts[a + 1 + j] drawn from
    q[a + 1 + j] (not to the rejected drafts[a + j]); the position after the window has none."""
    seen = []

    def spy(previous, previous_q, q, generator):
        seen.append((previous, previous_q, q))
        return maximal_coupling(previous, previous_q, q, generator)

    monkeypatch.setattr(coupling, "maximal_coupling", spy)
    window, vocab = 4, 5
    q = torch.softmax(torch.randn(window, vocab, generator=torch.Generator().manual_seed(7), dtype=torch.float64), -1)
    rows = torch.softmax(torch.randn(window - accepted, vocab, dtype=torch.float64,
                                     generator=torch.Generator().manual_seed(8)), -1)
    drafts = torch.tensor([1, 2, 3, 4])
    chain = DraftChain("maximal", vocab, torch.device("cpu"), torch.Generator().manual_seed(9))
    new, new_q = chain.redraft(drafts, q, rows, accepted)
    (previous, previous_q, coupled_to), = seen
    assert torch.equal(previous, torch.cat([drafts[accepted + 1:], torch.zeros(1, dtype=torch.long)]))
    assert torch.equal(previous_q, torch.cat([q[accepted + 1:], torch.zeros(1, vocab, dtype=torch.float64)]))
    assert coupled_to is rows and new_q is rows and new.shape == (window - accepted,)


def test_maximal_redraft_keeps_every_draft_whose_row_did_not_move():
    """Behaviour, no spy: when this pass's rows are the drafts' own q (plus a bonus row), the
    maximal coupling keeps every previous draft with probability 1."""
    generator = torch.Generator().manual_seed(10)
    window, vocab = 4, 5
    for trial in range(50):
        accepted = trial % window
        q = torch.softmax(3 * torch.randn(window, vocab, generator=generator, dtype=torch.float64), -1)
        drafts = sample_categorical(q, torch.rand(window, generator=generator, dtype=torch.float64))
        bonus = torch.softmax(torch.randn(1, vocab, generator=generator, dtype=torch.float64), -1)
        chain = DraftChain("maximal", vocab, torch.device("cpu"), generator)
        new, _ = chain.redraft(drafts, q, torch.cat([q[accepted + 1:], bonus]), accepted)
        assert torch.equal(new[:-1], drafts[accepted + 1:]), (trial, accepted)


def test_independent_redraft_is_one_inverse_cdf_draw_per_row():
    rows = torch.stack([Q_OLD, Q_NEW])
    chain = DraftChain("independent", 5, torch.device("cpu"), torch.Generator().manual_seed(5))
    drafts, q = chain.redraft(torch.tensor([0, 1, 2]), Q_OLD.expand(3, -1), rows, 1)
    uniforms = torch.rand(2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert torch.equal(drafts, sample_categorical(rows, uniforms)) and torch.equal(q, rows)


def test_unknown_scheme():
    with pytest.raises(ValueError, match="unknown draft 'coupled'"):
        DraftChain("coupled", 5, torch.device("cpu"), None)
    assert coupling.DRAFTS == ("independent", "maximal", "gumbel")


# --- through generate ------------------------------------------------------------------------

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def adapter():
    from transformers import LlamaConfig, LlamaForCausalLM

    from gsd_lab.models import CausalLMAdapter

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                         initializer_range=0.5)
    return CausalLMAdapter(LlamaForCausalLM(config).eval(), list(range(2, 14)), row_length=4)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("draft", coupling.DRAFTS)
@pytest.mark.parametrize("kind", ["sjd", "gsd"])
def test_generate_runs_every_scheme_deterministically(adapter, draft, kind):
    from gsd_lab.decode.loop import generate

    clusters = dict(acceptance=ClusterAcceptance("dynamic-nofilter", 3)) if kind == "gsd" else {}
    method = DecodingMethod(kind, window=5, draft=draft, init="repeat_row", **clusters)
    first = generate(adapter, torch.tensor([0, 15]), method, num_tokens=24, generator=torch.Generator().manual_seed(6))
    again = generate(adapter, torch.tensor([0, 15]), method, num_tokens=24, generator=torch.Generator().manual_seed(6))
    assert torch.equal(first.tokens, again.tokens) and first.nfe == again.nfe and first.draft == draft
    assert sum(first.accepted) + first.nfe == 24 and set(first.tokens.tolist()) <= set(range(2, 14))


def test_the_spec_checks_the_draft():
    assert DecodingMethod.from_dict(DecodingMethod("sjd", draft="gumbel").to_dict()).draft == "gumbel"
    with pytest.raises(ValueError, match="unknown draft 'shared'"):
        DecodingMethod("sjd", draft="shared")
    with pytest.raises(ValueError, match="methods 'sjd' and 'gsd' only"):
        DecodingMethod("ar", draft="maximal")


# --- the numbers of proofs/09's "What breaks it", in exact fractions ---------------------------

def _verified(pairs, target):
    """Law of the emitted token when each (draft y, declared q, probability w) of ``pairs`` is
    verified against ``target`` with an independent uniform (02's step)."""
    out = [Fraction(0)] * len(target)
    for y, q, w in pairs:
        accept = min(Fraction(1), target[y] / q[y])
        out[y] += w * accept
        excess = [max(t - s, Fraction(0)) for t, s in zip(target, q)]
        for z, e in enumerate(excess):
            out[z] += w * (1 - accept) * e / sum(excess) if sum(excess) else 0
    return out


def _maximal(q_old, q_new, keep, redraw):
    """(new draft, kept?, probability) of one re-draft: d ~ q_old kept with probability keep(d),
    else drawn from ``redraw`` (a law)."""
    for d, w in enumerate(q_old):
        if w:
            yield d, True, w * keep(d)
            for z, r in enumerate(redraw):
                if r:
                    yield z, False, w * (1 - keep(d)) * r


def _ratio(q_old, q_new):
    return lambda d: min(Fraction(1), q_new[d] / q_old[d])


def _residual(q_old, q_new):
    excess = [max(a - b, Fraction(0)) for a, b in zip(q_new, q_old)]
    return [e / sum(excess) for e in excess]


def test_proof_09_counterexamples():
    half, quarter = [Fraction(1, 2)] * 2, [Fraction(3, 4), Fraction(1, 4)]
    ratio, residual = _ratio, _residual
    # Maximal coupling with the declared q_new is exact: the output is the target.
    right = [(y, quarter, w) for y, _, w in _maximal(half, quarter, ratio(half, quarter), residual(half, quarter))]
    assert _verified(right, quarter) == quarter
    # 1a: residual from q_new.
    pairs = [(y, quarter, w) for y, _, w in _maximal(half, quarter, ratio(half, quarter), quarter)]
    assert _verified(pairs, quarter) == [Fraction(11, 16), Fraction(5, 16)]
    # 1b: keep with probability min(1, q_new(d)); the row did not move (residual 0: q_new).
    pairs = [(y, quarter, w) for y, _, w in _maximal(quarter, quarter, lambda d: quarter[d], quarter)]
    assert _verified(pairs, quarter) == [Fraction(27, 32), Fraction(5, 32)]
    # 1c: a kept draft declared with q_old (SCD's released code).
    pairs = [(y, half if kept else quarter, w)
             for y, kept, w in _maximal(half, quarter, ratio(half, quarter), residual(half, quarter))]
    assert _verified(pairs, quarter) == [Fraction(7, 8), Fraction(1, 8)]
    # 2: one uniform u for the keep test and the later acceptance test; target (1/4, 3/4).
    target = quarter[::-1]
    # d = 0 (1/2) is always kept and accepted iff u < 1/3; d = 1 (1/2) is kept iff u < 1/2 and
    # then accepted; otherwise redrawn as 0, whose acceptance needs u < 1/3 < 1/2: never.
    emitted_zero = Fraction(1, 2) * min(Fraction(1), target[0] / quarter[0])
    assert emitted_zero == Fraction(1, 6) and _verified(right, target)[0] == Fraction(1, 4)
    # 3: one Gumbel vector for two positions drafted from equal rows: always equal, vs sum P^2.
    assert sum(x * x for x in quarter) == Fraction(5, 8)
