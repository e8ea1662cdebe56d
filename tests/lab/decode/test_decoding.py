"""gsd_lab.decode.loop: nfe accounting, determinism, gsd(group_size 1) == sjd, the verified
distributions are the sampled ones, repeat-row drafts, top-1 recording, bad input."""

from __future__ import annotations

import time

import pytest
import torch

pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import gsd_lab.decode.loop as decoding  # noqa: E402
from gsd_lab.decode.loop import _repeat_row_drafts, generate  # noqa: E402
from gsd_lab.decode.methods import DecodingMethod, ResolvedMethod  # noqa: E402
from gsd_lab.decode.methods import AmplifyAcceptance, ClusterAcceptance, LanternAcceptance
from gsd_lab.models import CausalLMAdapter  # noqa: E402

VOCAB = 16
ALLOWED = list(range(2, 14))
PROMPT = torch.tensor([0, 15])


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         initializer_range=0.5)
    return LlamaForCausalLM(config).eval()


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    return tiny_llama()


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_ar_one_token_per_forward_and_deterministic(model):
    adapter = CausalLMAdapter(model, ALLOWED)
    first = generate(adapter, PROMPT, DecodingMethod("ar"), num_tokens=20, generator=gen(3))
    again = generate(adapter, PROMPT, DecodingMethod("ar"), num_tokens=20, generator=gen(3))
    other = generate(adapter, PROMPT, DecodingMethod("ar"), num_tokens=20, generator=gen(4))
    assert first.nfe == 20 and first.tokens.shape == (20,)
    assert first.acceptance_rate is None and first.accepted == [0] * 20
    assert torch.equal(first.tokens, again.tokens)
    assert not torch.equal(first.tokens, other.tokens)
    assert set(first.tokens.tolist()) <= set(ALLOWED)
    assert first.wall_seconds >= first.model_seconds > 0


@pytest.mark.parametrize("window", [1, 3, 16, 100])
def test_sjd_accounting(model, window):
    adapter = CausalLMAdapter(model, ALLOWED)
    result = generate(adapter, PROMPT, DecodingMethod("sjd", window=window), num_tokens=40, generator=gen(window))
    assert result.nfe <= 40 and result.nfe == len(result.accepted)
    assert sum(result.accepted) + result.nfe == 40  # every forward commits accepted + 1 tokens
    assert all(d <= window for d in result.drafted)
    assert result.acceptance_rate == pytest.approx(sum(result.accepted) / sum(result.drafted))
    assert set(result.tokens.tolist()) <= set(ALLOWED)
    again = generate(adapter, PROMPT, DecodingMethod("sjd", window=window), num_tokens=40, generator=gen(window))
    assert torch.equal(result.tokens, again.tokens) and result.accepted == again.accepted


class ContextFreeAdapter(CausalLMAdapter):
    """Runs the model (so the cache is real) but predicts the same peaked distribution at
    every position: the extreme of a predictable model, where Jacobi drafts always match."""

    def compute_logits(self, input_ids, attention_mask, position_ids, num_rows):
        logits = super().compute_logits(input_ids, attention_mask, position_ids, num_rows)
        fixed = torch.full((VOCAB,), -2.0)
        fixed[7] = 4.0
        return fixed.expand_as(logits)


def test_jacobi_drafts_are_accepted_when_the_target_does_not_change(model):
    adapter = ContextFreeAdapter(model, ALLOWED, row_length=1)
    result = generate(adapter, PROMPT, DecodingMethod("sjd", window=8), num_tokens=60, generator=gen(0))
    # A re-draft's q is exactly this pass's p, so p/q = 1: every re-draft is accepted and only
    # fresh random drafts (accepted with probability p(x)) can stop a window.
    acc, drafted = result.accepted, result.drafted
    for k in range(1, result.nfe):
        redrafts = min(drafted[k], drafted[k - 1] - acc[k - 1])
        assert acc[k] >= redrafts
    assert result.nfe <= 20
    # Drafting the token one row up (the previous token) hits the mode p(7) = 0.95 mostly.
    repeat = generate(adapter, PROMPT, DecodingMethod("sjd", window=8, init="repeat_row"), num_tokens=60,
                      generator=gen(0))
    assert repeat.nfe <= 12 and repeat.acceptance_rate > 0.7
    ar = generate(adapter, PROMPT, DecodingMethod("ar"), num_tokens=60, generator=gen(0))
    assert ar.nfe == 60


@pytest.mark.parametrize("init", ["random", "repeat_row"])
def test_gsd_group_size_one_equals_sjd(model, init):
    adapter = CausalLMAdapter(model, ALLOWED, cfg_scale=2.0, top_k=6, temperature=0.9, row_length=5)
    kwargs = dict(num_tokens=30, uncond_prompt_ids=torch.tensor([14]))
    sjd = generate(adapter, PROMPT, DecodingMethod("sjd", window=6, init=init), generator=gen(7), **kwargs)
    gsd_method = DecodingMethod("gsd", window=6, init=init, acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=1))
    gsd = generate(adapter, PROMPT, gsd_method, generator=gen(7), **kwargs)
    assert torch.equal(sjd.tokens, gsd.tokens)
    assert sjd.nfe == gsd.nfe and sjd.accepted == gsd.accepted


def test_gsd_accepts_at_least_as_often_in_expectation(model):
    """Grouping raises the acceptance probability of every draft (Theorem 1 and its dynamic
    analogue: C(x) contains x), so over many positions GSD accepts more than SJD."""
    adapter = CausalLMAdapter(model, ALLOWED)
    sjd_rates, gsd_rates = [], []
    for seed in range(3):
        sjd_rates.append(generate(adapter, PROMPT, DecodingMethod("sjd", window=8), num_tokens=40,
                                  generator=gen(seed)).acceptance_rate)
        rank_bins = DecodingMethod("gsd", window=8, acceptance=ClusterAcceptance(clusters="rank-binned", group_size=6), residual="cluster")
        gsd = generate(adapter, PROMPT, rank_bins, num_tokens=40, generator=gen(seed))
        gsd_rates.append(gsd.acceptance_rate)
    assert sum(gsd_rates) > sum(sjd_rates)


def test_acceptance_scale_relaxes_acceptance(model):
    """The lossy "Amplify" rule min(1, k p/q): with a huge k every draft of positive target
    probability is accepted, so windows stop only at drafts outside the top-k."""
    adapter = CausalLMAdapter(model, ALLOWED, top_k=4)
    exact = generate(adapter, PROMPT, DecodingMethod("sjd", window=8), num_tokens=40, generator=gen(1))
    relaxed = generate(adapter, PROMPT, DecodingMethod("sjd", window=8, acceptance=AmplifyAcceptance(scale=1e9)), num_tokens=40,
                       generator=gen(1))
    assert relaxed.acceptance_rate > exact.acceptance_rate and relaxed.nfe < exact.nfe


def test_verification_sees_exactly_the_sampled_distributions(model, monkeypatch):
    """p handed to verify is the adapter's processed output; every q row is either one-hot on
    its draft (fresh random draft) or exactly the row of the previous pass it was sampled from."""
    adapter = CausalLMAdapter(model, ALLOWED, cfg_scale=3.0, top_k=5, temperature=1.3)
    forwards, calls = [], []
    real_forward, real_verify = adapter.forward, decoding.verify

    def spy_forward(input_ids, num_rows=None):
        out = real_forward(input_ids, num_rows)
        forwards.append(out)
        return out

    def spy_verify(p, q, drafts, *args, **kwargs):
        result = real_verify(p, q, drafts, *args, **kwargs)
        calls.append((p, q, drafts, int(result.num_accepted)))
        return result

    monkeypatch.setattr(adapter, "forward", spy_forward)
    monkeypatch.setattr(decoding, "verify", spy_verify)
    generate(adapter, PROMPT, DecodingMethod("sjd", window=6), num_tokens=40, generator=gen(2),
             uncond_prompt_ids=torch.tensor([14, 14, 14, 14]))
    assert len(calls) >= 2
    redrafted = 0
    for k, (p, q, drafts, accepted) in enumerate(calls):
        assert p is forwards[k]
        one_hot = torch.nn.functional.one_hot(drafts, VOCAB).double()
        if k == 0:
            assert torch.equal(q, one_hot)
            continue
        prev_p, _, _, prev_accepted = calls[k - 1]
        carried = prev_p[prev_accepted + 1:][: q.shape[0]]  # rows a+1..L of the previous pass
        n = carried.shape[0]
        assert torch.equal(q[:n], carried)
        assert (carried.gather(-1, drafts[:n, None]) > 0).all()  # drafts were drawn from those rows
        assert torch.equal(q[n:], one_hot[n:])
        redrafted += n
    assert redrafted > 0


def test_top1_is_the_target_top1_of_each_emitted_token(model):
    """The row that emits token i is the target conditional given the committed prefix, so its
    top-1 equals the top-1 of an uncached forward over the final sequence."""
    adapter = CausalLMAdapter(model, ALLOWED, top_k=7)
    for method in ("ar", "sjd"):
        result = generate(adapter, PROMPT, DecodingMethod(method, window=5), num_tokens=25, record_top1=True,
                          generator=gen(5))
        adapter.start(PROMPT)
        rows = adapter.forward(torch.cat([PROMPT, result.tokens[:-1]]), num_rows=25)
        torch.testing.assert_close(result.top1, rows.amax(-1), atol=1e-6, rtol=0)
        assert generate(adapter, PROMPT, DecodingMethod(method), num_tokens=5, generator=gen(5)).top1 is None


def test_repeat_row_drafts_copy_the_token_one_row_up(model):
    adapter = CausalLMAdapter(model, ALLOWED, row_length=3)
    history = torch.tensor([2, 3, 4, 5, 6, 7])
    drafts = _repeat_row_drafts(history, 6, 7, 3, adapter, gen(0))
    assert drafts.tolist() == [5, 6, 7, 5, 6, 7, 5]
    early = _repeat_row_drafts(torch.tensor([9]), 1, 5, 3, adapter, gen(0))
    assert set(early[:2].tolist()) <= set(ALLOWED)  # positions 1, 2: no row above, random
    assert early[2] == 9 and early[3] == early[0] and early[4] == early[1]


def test_window_never_exceeds_the_tokens_still_needed(model):
    adapter = CausalLMAdapter(model, ALLOWED)
    result = generate(adapter, PROMPT, DecodingMethod("sjd", window=16), num_tokens=5, generator=gen(0))
    assert result.drafted[0] == 4
    assert result.tokens.shape == (5,)
    single = generate(adapter, PROMPT, DecodingMethod("sjd", window=16), num_tokens=1, generator=gen(0))
    assert single.nfe == 1 and single.drafted == [0] and single.acceptance_rate is None


def test_progress_bar_runs(model, capsys):
    adapter = CausalLMAdapter(model, ALLOWED)
    result = generate(adapter, PROMPT, DecodingMethod("sjd", window=4), num_tokens=10, progress=True, generator=gen(0))
    assert result.tokens.shape == (10,)
    assert "10/10" in capsys.readouterr().err


def test_bad_input(model):
    adapter = CausalLMAdapter(model, ALLOWED)
    with pytest.raises(ValueError, match="num_tokens"):
        generate(adapter, PROMPT, DecodingMethod("ar"), num_tokens=0)
    with pytest.raises(ValueError, match="window"):
        generate(adapter, PROMPT, DecodingMethod("sjd", window=0), num_tokens=4)
    with pytest.raises(ValueError, match="empty"):
        generate(adapter, torch.tensor([], dtype=torch.long), DecodingMethod("sjd"), num_tokens=4)
    with pytest.raises(ValueError, match="method"):
        generate(adapter, PROMPT, DecodingMethod("beam"), num_tokens=4)
    with pytest.raises(ValueError, match="clusters"):
        generate(adapter, PROMPT, DecodingMethod("sjd", acceptance=ClusterAcceptance("dynamic-nofilter", 3)), num_tokens=4)
    with pytest.raises(ValueError, match="row_length"):
        generate(adapter, PROMPT, DecodingMethod("sjd", init="repeat_row"), num_tokens=4)
    with pytest.raises(ValueError, match="init"):
        generate(adapter, PROMPT, DecodingMethod("sjd", init="zeros"), num_tokens=4)
    with pytest.raises(ValueError, match="Amplify's scale"):
        generate(adapter, PROMPT, DecodingMethod("sjd", acceptance=AmplifyAcceptance(scale=0.0)), num_tokens=4)
    with pytest.raises(ValueError, match="CausalLMAdapter"):
        generate(model, PROMPT, DecodingMethod("ar"), num_tokens=4)
    with pytest.raises(ValueError, match="DecodingMethod or ResolvedMethod, got 'sjd'"):
        generate(adapter, PROMPT, "sjd", num_tokens=4)
    with pytest.raises(ValueError, match="residual"):
        generate(adapter, PROMPT, DecodingMethod("gsd", acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=3), residual="bogus"),
                 num_tokens=8)


class NaNAtForwardAdapter(CausalLMAdapter):
    """The real model, but its logits turn NaN (or +inf) from forward pass ``bad_forward`` on,
    in one row only: what a numerically broken forward (fp16 overflow, bad weights) produces."""

    def __init__(self, *args, bad_forward: int, value: float = float("nan"), **kwargs):
        super().__init__(*args, **kwargs)
        self.bad_forward, self.value = bad_forward, value

    def compute_logits(self, input_ids, attention_mask, position_ids, num_rows):
        logits = super().compute_logits(input_ids, attention_mask, position_ids, num_rows)
        if self.num_forwards + 1 >= self.bad_forward:  # num_forwards counts the passes before this one
            logits = logits.clone()
            logits[:, -1, 3] = self.value
        return logits


@pytest.mark.parametrize("method", ["ar", "sjd", "gsd"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_model_outputs_raise_at_the_step_they_appear(model, method, value):
    adapter = NaNAtForwardAdapter(model, ALLOWED, bad_forward=3, value=value)
    rule = ClusterAcceptance("dynamic-nofilter", 4) if method == "gsd" else None
    with pytest.raises(FloatingPointError, match="forward pass 3 of this call"):
        generate(adapter, PROMPT, DecodingMethod(method, window=4, acceptance=rule), num_tokens=30, generator=gen(0))
    assert adapter.num_forwards == 3  # raised right after the bad forward, not later


# --- exact distortion accounting (record_distortion) and LANTERN decoding ---

def _lantern(adapter: CausalLMAdapter, k: int, delta: float, seed: int = 0, **method) -> ResolvedMethod:
    """SJD with LANTERN's rule over random embeddings (k tokens per neighbourhood, budget delta)."""
    embeddings = torch.randn(VOCAB, 3, generator=gen(seed), dtype=torch.float64)
    return DecodingMethod("sjd", acceptance=LanternAcceptance(k, delta), **method).resolve(adapter, embeddings=embeddings)


@pytest.mark.parametrize("window", [1, 4, 16])
def test_sjd_distortion_is_zero_at_every_position(model, window):
    adapter = CausalLMAdapter(model, ALLOWED, cfg_scale=2.0, top_k=6, temperature=0.9)
    result = generate(adapter, PROMPT, DecodingMethod("sjd", window=window), num_tokens=40, generator=gen(5),
                      uncond_prompt_ids=torch.tensor([14]), record_distortion=True)
    assert result.distortion.shape == (40,) and result.distortion.dtype == torch.float64
    assert float(result.distortion.abs().max()) <= 1e-12
    assert result.accounting_seconds > 0
    ar = generate(adapter, PROMPT, DecodingMethod("ar"), num_tokens=10, generator=gen(5),
                  uncond_prompt_ids=torch.tensor([14]), record_distortion=True)
    assert torch.equal(ar.distortion, torch.zeros(10, dtype=torch.float64))


@pytest.mark.parametrize("kind", ["gsd", "rank_cluster", "amplify", "lantern"])
def test_recorded_distortion_is_exact_distortion_of_the_verified_rows(model, monkeypatch, kind):
    """Spy on the verifier: for every window the recorded per-token distortion equals
    exact_distortion of the same rows p, q (a + 1 verified rows; 0 for a bonus token)."""
    from gsd_lab.accounting.distortion import exact_distortion

    adapter = CausalLMAdapter(model, ALLOWED, top_k=8)
    method = {"gsd": DecodingMethod("gsd", window=6, acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=4)),
              "rank_cluster": DecodingMethod("gsd", window=6, acceptance=ClusterAcceptance(clusters="rank-binned", group_size=3), residual="cluster"),
              "amplify": DecodingMethod("sjd", window=6, acceptance=AmplifyAcceptance(scale=3.0)),
              "lantern": _lantern(adapter, 5, 0.3, window=6)}[kind]
    resolved = method if isinstance(method, ResolvedMethod) else method.resolve(adapter)
    windows = []
    name = "verify"
    real = getattr(decoding, name)

    def spy(p, q, drafts, *args, **kwargs):
        result = real(p, q, drafts, *args, **kwargs)
        windows.append((p.clone(), q.clone(), int(result.num_accepted)))
        return result

    monkeypatch.setattr(decoding, name, spy)
    result = generate(adapter, PROMPT, resolved, num_tokens=40, generator=gen(2), record_distortion=True)
    rule = resolved.rule
    expected = []
    for p, q, a in windows:
        verified = min(a + 1, q.shape[0])
        expected.append(exact_distortion(p[:verified], q[:verified], rule))
        if a == q.shape[0]:
            expected.append(torch.zeros(1, dtype=torch.float64))
    # L = 0 steps at the very end draw from p: 0.
    expected = torch.cat(expected)
    expected = torch.cat([expected, torch.zeros(40 - expected.numel(), dtype=torch.float64)])
    assert torch.allclose(result.distortion, expected, rtol=0, atol=1e-12)
    assert float(result.distortion.max()) > 1e-3  # a lossy rule on a tiny model: some distortion


@pytest.mark.parametrize("kind", ["gsd", "lantern"])
def test_record_distortion_draws_no_randomness(model, kind):
    adapter = CausalLMAdapter(model, ALLOWED, row_length=5)
    method = (DecodingMethod("gsd", window=6, init="repeat_row", acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=5))
              if kind == "gsd" else _lantern(adapter, 4, 0.2, window=6, init="repeat_row"))
    plain = generate(adapter, PROMPT, method, num_tokens=30, generator=gen(9))
    logged = generate(adapter, PROMPT, method, num_tokens=30, generator=gen(9), record_distortion=True)
    assert torch.equal(plain.tokens, logged.tokens) and plain.accepted == logged.accepted
    assert plain.distortion is None and plain.accounting_seconds == 0.0
    assert logged.wall_seconds >= logged.model_seconds


def test_lantern_with_zero_budget_is_sjd_and_a_budget_accepts_more(model):
    adapter = CausalLMAdapter(model, ALLOWED)
    sjd = generate(adapter, PROMPT, DecodingMethod("sjd", window=8), num_tokens=40, generator=gen(4))
    zero = generate(adapter, PROMPT, _lantern(adapter, 6, 0.0, window=8), num_tokens=40, generator=gen(4))
    assert torch.equal(sjd.tokens, zero.tokens) and sjd.accepted == zero.accepted
    sjd_total = lantern_total = 0
    for seed in range(3):
        sjd_total += sum(generate(adapter, PROMPT, DecodingMethod("sjd", window=8), num_tokens=40,
                                  generator=gen(seed)).accepted)
        lantern_total += sum(generate(adapter, PROMPT, _lantern(adapter, VOCAB, 0.5, window=8), num_tokens=40,
                                      generator=gen(seed)).accepted)
    assert lantern_total > sjd_total


def test_lantern_bad_arguments(model):
    adapter = CausalLMAdapter(model, ALLOWED)
    kwargs = dict(num_tokens=5, generator=gen(0))
    with pytest.raises(ValueError, match="method 'sjd'"):
        DecodingMethod("gsd", acceptance=LanternAcceptance(k=3, delta=0.1))
    with pytest.raises(ValueError, match="method 'sjd'"):
        DecodingMethod("sjd", acceptance=AmplifyAcceptance(scale=2.0, inner=LanternAcceptance(k=3, delta=0.1)))
    with pytest.raises(ValueError, match="gsd_core.Lantern"):
        ResolvedMethod(DecodingMethod("sjd", acceptance=LanternAcceptance(k=3, delta=0.1)), lantern="lantern")
    from gsd_core import Lantern, latent_neighbourhoods

    small = Lantern(latent_neighbourhoods(torch.randn(VOCAB - 1, 2, dtype=torch.float64), 2), 0.1)
    with pytest.raises(ValueError, match="vocabulary"):
        generate(adapter, PROMPT, ResolvedMethod(DecodingMethod("sjd", acceptance=LanternAcceptance(k=2, delta=0.1)), lantern=small),
                 **kwargs)


class TiedForcedAdapter(CausalLMAdapter):
    """The real model with its logits rounded to halves (ties at the k-th largest value are
    common, so rows keep more than k ids) and token 15 (not an allowed id) forced at every
    generated position 4 mod 5 (one-hot rows)."""

    def compute_logits(self, input_ids, attention_mask, position_ids, num_rows):
        logits = super().compute_logits(input_ids, attention_mask, position_ids, num_rows)
        return (logits * 2).round() / 2

    def forced_tokens(self, generated_positions):
        return torch.where(generated_positions % 5 == 4, 15, -1)


@pytest.mark.parametrize("init", ["random", "repeat_row"])
def test_gsd_with_the_adapters_support_decodes_the_same_tokens(model, monkeypatch, init):
    """GSD (DynamicClusters ranked by p) passes the adapter's top-k support to verify: the same
    tokens, NFE and accepted counts as verify finding the support itself, with tied k-th
    values and forced rows; every support passed is valid (checked by verify's validation)."""
    adapter = TiedForcedAdapter(model, ALLOWED, cfg_scale=2.0, top_k=4, row_length=5)
    method = DecodingMethod("gsd", window=6, acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=3), init=init)
    kwargs = dict(num_tokens=60, uncond_prompt_ids=torch.tensor([14]))
    real_verify = decoding.verify
    seen = []

    def checked_verify(p, q, drafts, *args, support=None, **kw):
        assert support is not None and support.shape[0] == drafts.shape[0]
        kw["validate"] = True  # raises unless support holds every p > 0 id of its row once
        seen.append(((p[: drafts.shape[0]] > 0).sum(-1), support.shape[1]))
        return real_verify(p, q, drafts, *args, support=support, **kw)

    def plain_verify(p, q, drafts, *args, support=None, **kw):
        return real_verify(p, q, drafts, *args, **kw)

    monkeypatch.setattr(decoding, "verify", checked_verify)
    with_support = generate(adapter, PROMPT, method, generator=gen(4), **kwargs)
    monkeypatch.setattr(decoding, "verify", plain_verify)
    without = generate(adapter, PROMPT, method, generator=gen(4), **kwargs)
    assert torch.equal(with_support.tokens, without.tokens)
    assert with_support.nfe == without.nfe and with_support.accepted == without.accepted
    assert (with_support.tokens[4::5] == 15).all()
    widths = torch.tensor([width for _, width in seen])
    positives = torch.cat([count for count, _ in seen])
    assert (widths > 4).any()  # tied k-th values widened some rows
    assert (positives == 1).any() and (positives < widths.max()).any()  # forced rows, padding


@pytest.mark.parametrize("clusters", [{}, dict(acceptance=ClusterAcceptance("rank-binned", 4)),
                                      dict(acceptance=ClusterAcceptance("dynamic-q", 3))],
                         ids=["sjd", "rank-binned", "rank-by-q"])
def test_the_support_is_computed_only_for_dynamic_clusters_ranked_by_p(model, monkeypatch, clusters):
    adapter = CausalLMAdapter(model, ALLOWED, top_k=4)
    real_forward = adapter.forward
    asked = []

    def spy_forward(input_ids, num_rows=None, **kw):
        asked.append(kw.get("with_support", False))
        return real_forward(input_ids, num_rows, **kw)

    monkeypatch.setattr(adapter, "forward", spy_forward)
    method = "gsd" if clusters else "sjd"
    generate(adapter, PROMPT, DecodingMethod(method, window=4, **clusters), num_tokens=20, generator=gen(0))
    assert asked and not any(asked)
    asked.clear()
    generate(adapter, PROMPT, DecodingMethod("gsd", window=4, acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=3)),
             num_tokens=20, generator=gen(0))
    assert any(asked)


@pytest.mark.parametrize("kind", ["sjd", "gsd", "tree", "ar"])
def test_on_window_sees_every_forward_and_changes_nothing(model, kind):
    """The hook is called once per forward pass, in order, with the loop's rows, counts, TVs
    and a tree's walk; with and without it the same tokens, NFE and distortions."""
    adapter = CausalLMAdapter(model, ALLOWED, top_k=8)
    method = {"sjd": DecodingMethod("sjd", window=5),
              "gsd": DecodingMethod("gsd", window=5, acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=4)),
              "tree": DecodingMethod("sjd", window=4, draft="maximal", candidates=3),
              "ar": DecodingMethod("ar")}[kind]
    seen = []
    plain = generate(adapter, PROMPT, method, num_tokens=30, generator=gen(4), record_distortion=True)
    hooked = generate(adapter, PROMPT, method, num_tokens=30, generator=gen(4), record_distortion=True,
                      record_top1=True, on_window=seen.append)
    assert torch.equal(plain.tokens, hooked.tokens) and plain.nfe == hooked.nfe
    assert torch.equal(plain.distortion, hooked.distortion) and plain.accepted == hooked.accepted
    assert len(seen) == hooked.nfe
    assert [w.accepted for w in seen] == hooked.accepted
    assert [w.q.shape[0] for w in seen] == hooked.drafted
    assert [w.start for w in seen] == [sum(a + 1 for a in hooked.accepted[:i]) for i in range(len(seen))]
    for window in seen:  # kept past their calls: the loop never writes them in place
        assert window.p.shape == (window.q.shape[0] + 1, VOCAB)
        emitted_rows = window.p[: window.accepted + 1]  # the emitted tokens' targets
        assert torch.equal(emitted_rows.amax(-1),
                           hooked.top1[window.start : window.start + window.accepted + 1])
        if window.q.shape[0] == 0:
            assert window.tv is None
        else:
            emitted = hooked.distortion[window.start : window.start + window.accepted + 1]
            assert torch.equal(window.tv, emitted)
        if kind == "tree" and window.q.shape[0] > 0:  # the walk: a chain from the root
            path = window.path.tolist()
            assert len(path) == window.accepted
            assert [int(window.parent[node]) for node in path] == [-1, *path][: len(path)]
        else:
            assert window.parent is None and window.path is None


def test_on_window_time_counts_as_accounting_not_wall(model):
    """A hook's time goes to accounting_seconds and is taken out of wall_seconds."""
    adapter = CausalLMAdapter(model, ALLOWED, top_k=8)
    method = DecodingMethod("sjd", window=5)
    plain = generate(adapter, PROMPT, method, num_tokens=30, generator=gen(4))
    began = time.perf_counter()
    hooked = generate(adapter, PROMPT, method, num_tokens=30, generator=gen(4),
                      on_window=lambda window: time.sleep(0.01))
    elapsed = time.perf_counter() - began
    assert plain.accounting_seconds == 0.0  # no logs recorded
    assert hooked.accounting_seconds - plain.accounting_seconds >= 0.01 * hooked.nfe
    # wall and accounting both fit in the call's time: the sleeps are not also in wall_seconds.
    assert hooked.wall_seconds + hooked.accounting_seconds <= elapsed
