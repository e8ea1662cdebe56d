"""SJD with block verification (``DecodingMethod(verifier="block")``, ``gsd_core.verify_block``,
proofs/14): the exact law of the whole decode by enumeration (``decode_law``) is the AR joint with
independent drafts, not with maximal or Gumbel coupled drafts, which are therefore refused. The
recorded distortion is 0, as SD's per-token formula is for this rule by construction (it would be
0 for the lossy coupled combination too): a check of the accounting, not of losslessness, which
is this file's enumeration, test_decode_laws_exact.py's and test_decode_loop_exact.py's. (The
chi-square against the exact AR joint through ``generate`` and its biased control are
test_decoding_lossless.py's, parametrized by verifier.)"""

from __future__ import annotations

import collections
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from gsd_core.block_verification import block_accepted_law, block_weights, token_accepted_law
from gsd_lab.decode.batch import DecodeRequest, generate_batch
from gsd_lab.decode.loop import generate
from gsd_lab.decode.methods import AmplifyAcceptance, ClusterAcceptance, DecodingMethod, RelaxationAcceptance

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def adapter():
    pytest.importorskip("transformers")
    from gsd_lab.experiments.lossless import ALLOWED, tiny_model
    from gsd_lab.models import CausalLMAdapter

    return CausalLMAdapter(tiny_model(0), ALLOWED)


def test_block_records_zero_distortion_and_at_least_one_token_per_forward(adapter):
    result = generate(adapter, torch.tensor([1, 2]), DecodingMethod("sjd", window=8,
                      verifier="block"), num_tokens=3, generator=torch.Generator().manual_seed(0),
                      record_distortion=True)
    assert result.distortion.abs().max() <= 1e-12
    assert result.tokens.numel() == sum(result.accepted) + result.nfe


def test_block_verifier_is_refused_where_it_is_not_proved(adapter):
    for kwargs in (dict(draft="maximal"), dict(draft="gumbel"),
                   dict(acceptance=AmplifyAcceptance(2.0)),
                   dict(acceptance=RelaxationAcceptance(0.1))):
        with pytest.raises(ValueError, match="block"):
            DecodingMethod("sjd", verifier="block", **kwargs)
    with pytest.raises(ValueError, match="block"):
        DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=3), verifier="block")
    with pytest.raises(ValueError, match="verifier"):
        DecodingMethod("sjd", verifier="joint")
    request = DecodeRequest(torch.tensor([1, 2]), DecodingMethod("sjd", verifier="block"), 3)
    with pytest.raises(ValueError, match="one image at a time"):
        generate_batch(adapter, [request])


def test_the_verifier_is_part_of_the_method_key():
    assert DecodingMethod("sjd").to_dict()["verifier"] == "token"
    block = DecodingMethod("sjd", verifier="block")
    assert DecodingMethod.from_dict(block.to_dict()) == block


# The exact law of the whole decode, by enumeration (an exact transcription of the loop).
#
# ``decode_law`` follows ``gsd_lab.decode.loop`` on a table model p(y | prefix) over V tokens:
# window L = min(w, N - n - 1); fresh drafts uniform with one-hot q; the window verified token-wise
# or by block verification (their exact laws given the drafts, ``gsd_core.block_verification``);
# the positions after the stop re-drafted from this pass's rows, independently, by maximal
# coupling to the draft they held, or by Gumbel-max with the position's noise (V = 2: the draft is
# 0 iff U < Q(0), U = sigmoid(g_1 - g_0) uniform, so given the past drafts U is uniform on an
# interval, carried with the position). Every random choice is a branch with its exact weight.


def _table_model(seed: int, vocab: int, length: int) -> dict[tuple, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    model = {}
    for n in range(length):
        for prefix in itertools.product(range(vocab), repeat=n):
            weights = torch.randint(0, 5, (vocab,), generator=generator).double()
            weights[0] += weights.sum() == 0
            model[prefix] = weights / weights.sum()
    return model


def _window_outcomes(rows, q, drafts, verifier):
    """(accepted a, emitted y, probability) of one window, exact."""
    p, qq, x = torch.stack(rows)[None], torch.stack(q)[None], torch.tensor([drafts])
    if verifier == "block":
        law, weights = block_accepted_law(p, qq, x)[0], block_weights(p, qq, x)[0][0]
    else:
        law, weights = token_accepted_law(p, qq, x)[0], torch.ones(len(rows), dtype=p.dtype)
    for a in torch.nonzero(law > 0).flatten().tolist():
        q_a = q[a] if a < len(drafts) else torch.zeros_like(rows[a])
        residual = (weights[a] * rows[a] - q_a).clamp(min=0)
        residual = residual / residual.sum()
        for y in torch.nonzero(residual > 0).flatten().tolist():
            yield a, y, float(law[a] * residual[y])


def _redraft_options(row, old, old_q, interval, draft):
    """[(new draft, its noise interval, probability)] for one re-drafted position."""
    if draft == "gumbel":
        low, high = interval
        cut = float(row[0])
        parts = [(0, (low, min(high, cut))), (1, (max(low, cut), high))]
        return [(y, (a, b), (b - a) / (high - low)) for y, (a, b) in parts if b > a]
    if draft == "maximal" and old is not None:
        keep = min(1.0, float(row[old] / old_q[old])) if old_q[old] > 0 else 0.0
        residual = (row - old_q).clamp(min=0)
        options = {old: keep}
        for y in torch.nonzero(residual > 0).flatten().tolist():
            options[y] = options.get(y, 0.0) + (1 - keep) * float(residual[y] / residual.sum())
        return [(y, interval, c) for y, c in options.items() if c > 0]
    return [(y, interval, float(row[y])) for y in range(row.numel()) if row[y] > 0]


def decode_law(model, vocab, length, window, verifier, draft):
    law = collections.defaultdict(float)

    def step(prob, committed, drafts, qs, noise):
        n = len(committed)
        if n >= length:
            law[committed] += prob
            return
        L = min(window, length - n - 1)
        drafts, qs, noise = drafts[:L], qs[:L], noise[:L]
        missing = L - len(drafts)
        for fresh in itertools.product(range(vocab), repeat=missing):
            d = drafts + fresh
            q = qs + tuple(F.one_hot(torch.tensor(x), vocab).double() for x in fresh)
            intervals = noise + ((0.0, 1.0),) * missing
            rows = [model[committed + d[:j]] for j in range(L + 1)]
            weight = prob / vocab**missing
            if L == 0:
                for y in range(vocab):
                    step(weight * float(rows[0][y]), committed + (y,), (), (), ())
                continue
            for a, y, p_out in _window_outcomes(rows, q, d, verifier):
                emitted = committed + d[:a] + (y,)
                options = [_redraft_options(rows[j], d[j] if j < L else None,
                                            q[j] if j < L else None,
                                            intervals[j] if j < L else (0.0, 1.0), draft)
                           for j in range(a + 1, L + 1)]
                for combo in itertools.product(*options):
                    chance = math.prod(c for _, _, c in combo)
                    step(weight * p_out * chance, emitted, tuple(y for y, _, _ in combo),
                         tuple(rows[a + 1:]), tuple(i for _, i, _ in combo))

    step(1.0, (), (), (), ())
    return law


def _ar_joint(model, vocab, length):
    return {z: math.prod(float(model[z[:k]][z[k]]) for k in range(length))
            for z in itertools.product(range(vocab), repeat=length)}


def _deviation(law, joint):
    return max(abs(law.get(z, 0.0) - joint[z]) for z in joint)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_whole_decode_is_exact_where_proved(seed):
    """Token-wise with every drafting (proofs/02, 09) and block verification with independent
    drafts (proofs/14): the enumerated law of the 16 sequences is the AR joint to 1e-12."""
    model = _table_model(seed, 2, 4)
    joint = _ar_joint(model, 2, 4)
    for verifier, draft in [("token", "independent"), ("token", "maximal"),
                            ("token", "gumbel"), ("block", "independent")]:
        assert _deviation(decode_law(model, 2, 4, 2, verifier, draft), joint) <= 1e-12


@pytest.mark.parametrize("draft", ["maximal", "gumbel"])
def test_block_verification_with_coupled_drafts_is_not_lossless(draft):
    """proofs/14, claim 4: with maximal or Gumbel coupled drafts block verification leaves the AR
    joint (V = 2, N = 4, window 2), which is why ``DecodingMethod`` refuses the combination."""
    model = _table_model(0, 2, 4)
    joint = _ar_joint(model, 2, 4)
    assert _deviation(decode_law(model, 2, 4, 2, "block", draft), joint) > 1e-3
