"""CausalLMAdapter: KV-cache rollback, CFG / top-k / temperature / allowed-token processing
checked against a direct computation, random drafts, and clear errors on bad input."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from gsd_lab.models import CausalLMAdapter  # noqa: E402
from gsd_lab.models.adapter import (  # noqa: E402
    cache_kwarg,
    forced_support,
    kept_ids,
    kth_largest,
    kth_largest_topk,
    mask_below_,
)

VOCAB = 12


def tiny_llama(vocab: int = VOCAB, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                         initializer_range=0.5)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    return tiny_llama()


def direct_logits(model, ids: list[int]) -> torch.Tensor:
    """Logits [len(ids), V] of one uncached forward pass over the whole sequence, float64."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].double()


def test_forward_matches_uncached_model(model):
    adapter = CausalLMAdapter(model)
    prompt = [0, 5, 7]
    adapter.start(torch.tensor(prompt))
    probs = adapter.forward(torch.tensor(prompt + [3, 4]))
    assert probs.shape == (5, VOCAB) and probs.dtype == torch.float64
    expected = torch.softmax(direct_logits(model, prompt + [3, 4]), -1)
    torch.testing.assert_close(probs, expected, atol=1e-6, rtol=0)
    assert adapter.seq_len == 5 and adapter.num_forwards == 1


def test_rollback_gives_the_same_logits_as_recomputing(model):
    adapter = CausalLMAdapter(model)
    prompt = [1, 2]
    adapter.start(torch.tensor(prompt))
    adapter.forward(torch.tensor(prompt + [3, 4, 5, 6, 7, 8]))
    adapter.crop(4)  # keep the prompt and tokens 3, 4
    assert adapter.seq_len == 4 and adapter.cache.get_seq_length() == 4
    rolled = adapter.forward(torch.tensor([9, 10, 11]))
    adapter.crop(5)  # roll back again, into the middle of the new tokens
    rolled_again = adapter.forward(torch.tensor([2]))
    expected = torch.softmax(direct_logits(model, prompt + [3, 4, 9, 10, 11]), -1)
    torch.testing.assert_close(rolled, expected[-3:], atol=1e-6, rtol=0)
    expected_again = torch.softmax(direct_logits(model, prompt + [3, 4, 9, 2]), -1)
    torch.testing.assert_close(rolled_again, expected_again[-1:], atol=1e-6, rtol=0)
    # Without the rollback the same tokens would see another context: the crop really acted.
    unrolled = torch.softmax(direct_logits(model, prompt + [3, 4, 5, 6, 7, 8, 9, 10, 11]), -1)
    assert not torch.allclose(rolled, unrolled[-3:], atol=1e-3)


def test_num_rows_returns_the_last_rows(model):
    adapter = CausalLMAdapter(model)
    adapter.start(torch.tensor([0, 1, 2]))
    probs = adapter.forward(torch.tensor([0, 1, 2, 3, 4]), num_rows=3)
    expected = torch.softmax(direct_logits(model, [0, 1, 2, 3, 4]), -1)[-3:]
    torch.testing.assert_close(probs, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("uncond", [[11], [4, 5, 6, 8, 9]], ids=["shorter", "longer"])
def test_cfg_topk_temperature_match_a_direct_computation(model, uncond):
    """The verified distribution is the sampled one: CFG, allowed mask, top-k, temperature and
    softmax recomputed here from two separate uncached forward passes."""
    allowed = [2, 3, 4, 5, 6, 7, 8]
    scale, top_k, temperature = 2.5, 4, 0.7
    adapter = CausalLMAdapter(model, allowed, cfg_scale=scale, top_k=top_k, temperature=temperature)
    prompt, generated = [0, 1, 10], [3, 5, 7, 2]
    adapter.start(torch.tensor(prompt), torch.tensor(uncond))
    first = adapter.forward(torch.tensor(prompt + generated[:2]), num_rows=3)
    adapter.crop(len(prompt) + 1)  # roll back token 5 in both rows
    second = adapter.forward(torch.tensor(generated[1:]))
    probs = torch.cat([first[:2], second])  # rows predicting generated positions 0..4

    cond = direct_logits(model, prompt + generated)[len(prompt) - 1:]
    unc = direct_logits(model, uncond + generated)[len(uncond) - 1:]
    logits = unc + scale * (cond - unc)
    mask = torch.ones(VOCAB, dtype=torch.bool)
    mask[allowed] = False
    logits = logits.masked_fill(mask, -torch.inf)
    kth = logits.topk(top_k, -1).values[:, -1:]
    expected = torch.softmax(logits.masked_fill(logits < kth, -torch.inf) / temperature, -1)
    torch.testing.assert_close(probs, expected, atol=1e-5, rtol=0)
    assert ((probs > 0).sum(-1) == top_k).all()
    assert probs[:, mask].sum() == 0
    # Guidance changes the result (the unconditional row is really used).
    plain = torch.softmax(cond.masked_fill(mask, -torch.inf), -1)
    assert not torch.allclose(probs, plain, atol=1e-3)


def test_cfg_scale_one_equals_the_conditional_model(model):
    adapter = CausalLMAdapter(model, cfg_scale=1.0)
    adapter.start(torch.tensor([0, 1]), torch.tensor([7]))
    probs = adapter.forward(torch.tensor([0, 1, 5, 6]))
    torch.testing.assert_close(probs, torch.softmax(direct_logits(model, [0, 1, 5, 6]), -1), atol=1e-6, rtol=0)


class RowEndAdapter(CausalLMAdapter):
    """Forces token 11 at the end of every row of 3 (generated positions 2, 5, ...)."""

    def forced_tokens(self, generated_positions):
        return torch.where(generated_positions % 3 == 2, 11, -1)


def test_forced_tokens_are_one_hot_and_drafted(model):
    adapter = RowEndAdapter(model, allowed_tokens=[2, 3, 4], row_length=3)
    adapter.start(torch.tensor([0]))
    probs = adapter.forward(torch.tensor([0, 2, 3, 11, 4]))
    assert probs[2, 11] == 1 and probs[2].sum() == 1
    assert probs[[0, 1, 3, 4]][:, 11].sum() == 0
    tokens = adapter.random_tokens(torch.arange(12), torch.Generator().manual_seed(0))
    assert (tokens[2::3] == 11).all()
    free = torch.cat([tokens[0::3], tokens[1::3]])
    assert set(free.tolist()) <= {2, 3, 4}


def test_random_tokens_are_uniform_over_allowed(model):
    adapter = CausalLMAdapter(model, allowed_tokens=[9, 2, 5])
    tokens = adapter.random_tokens(torch.arange(3000), torch.Generator().manual_seed(1))
    counts = torch.bincount(tokens, minlength=VOCAB)
    assert set(torch.nonzero(counts).flatten().tolist()) == {2, 5, 9}
    assert (counts[[2, 5, 9]] - 1000).abs().max() < 100  # 4+ standard deviations
    again = adapter.random_tokens(torch.arange(3000), torch.Generator().manual_seed(1))
    assert torch.equal(tokens, again)


def test_properties(model):
    adapter = CausalLMAdapter(model, row_length=4)
    assert adapter.vocab_size == VOCAB
    assert adapter.embeddings.shape == (VOCAB, 16)
    assert adapter.row_length == 4


class NoCacheModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, input_ids):
        return self.linear(input_ids)


class IgnoresCacheModel(torch.nn.Module):
    """Accepts a cache argument but never fills it."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = inner.config

    def get_input_embeddings(self):
        return self.inner.get_input_embeddings()

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=None):
        return self.inner(input_ids=input_ids, use_cache=False)


def test_bad_input(model):
    with pytest.raises(ValueError, match="KV cache"):
        CausalLMAdapter(NoCacheModel())
    with pytest.raises(ValueError, match="torch.nn.Module"):
        CausalLMAdapter(object())
    ignoring = CausalLMAdapter(IgnoresCacheModel(model))
    ignoring.start(torch.tensor([0]))
    with pytest.raises(ValueError, match="KV cache"):
        ignoring.forward(torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="out of range"):
        CausalLMAdapter(model, allowed_tokens=[0, VOCAB])
    with pytest.raises(ValueError, match="out of range"):
        CausalLMAdapter(model, allowed_tokens=[-1, 2])
    with pytest.raises(ValueError, match="empty"):
        CausalLMAdapter(model, allowed_tokens=[])
    with pytest.raises(ValueError, match="integer"):
        CausalLMAdapter(model, allowed_tokens=[0.5, 1.0])
    with pytest.raises(ValueError, match="temperature"):
        CausalLMAdapter(model, temperature=0.0)
    with pytest.raises(ValueError, match="top_k"):
        CausalLMAdapter(model, top_k=0)
    with pytest.raises(ValueError, match="cfg_scale"):
        CausalLMAdapter(model, cfg_scale=float("nan"))
    adapter = CausalLMAdapter(model)
    with pytest.raises(ValueError, match="start"):
        adapter.forward(torch.tensor([0]))
    with pytest.raises(ValueError, match="empty"):
        adapter.start(torch.tensor([], dtype=torch.long))
    with pytest.raises(ValueError, match="out of range"):
        adapter.start(torch.tensor([VOCAB]))
    with pytest.raises(ValueError, match="cfg_scale is None"):
        adapter.start(torch.tensor([0]), torch.tensor([1]))
    adapter.start(torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="begin with the prompt"):
        adapter.forward(torch.tensor([1, 1, 2]))
    adapter.forward(torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="crop length"):
        adapter.crop(1)  # into the prompt
    with pytest.raises(ValueError, match="crop length"):
        adapter.crop(4)  # beyond the sequence
    with pytest.raises(ValueError, match="uncond_prompt_ids"):
        CausalLMAdapter(model, cfg_scale=3.0).start(torch.tensor([0]))


def test_float64_compute_removes_every_float32_step():
    """compute_dtype=float64: parameters, cache and logits in float64; RMSNorm and the rotary
    embedding computed in float64 (HF computes both in float32), so the logits match an
    independent float64 recomputation far below float32 rounding."""
    from gsd_lab.models.float64 import cast_model_float64

    model32 = tiny_llama(seed=3)
    reference = tiny_llama(seed=3).double()
    adapter = CausalLMAdapter(model32, compute_dtype=torch.float64)
    assert adapter.compute_dtype == torch.float64
    ids = [0, 5, 7, 3, 4, 9, 1]
    adapter.start(torch.tensor(ids[:3]))
    probs = torch.cat([adapter.forward(torch.tensor(ids[:5])), adapter.forward(torch.tensor(ids[5:]))])
    assert probs.dtype == torch.float64
    with torch.no_grad():
        exact = torch.softmax(cast_model_float64(reference)(input_ids=torch.tensor([ids])).logits[0], -1)
    assert float((probs - exact).abs().max()) < 1e-13
    norm = reference.model.norm
    x = torch.randn(3, 16, dtype=torch.float64)
    norm.requires_grad_(False)
    expected = norm.weight * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))
    assert float((norm(x) - expected).abs().max()) < 1e-15
    rotary = reference.model.rotary_emb
    positions = torch.arange(200)[None]
    cos, sin = rotary(x, positions)
    dim = reference.config.hidden_size // reference.config.num_attention_heads
    inv_freq = 1.0 / (reference.config.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    angles = positions[0, :, None].double() * inv_freq
    assert cos.dtype == torch.float64
    assert float((cos[0] - torch.cat([angles, angles], -1).cos()).abs().max()) < 1e-15


def test_compute_dtype_errors_and_reset(model):
    with pytest.raises(ValueError, match="compute_dtype"):
        CausalLMAdapter(tiny_llama(seed=4), compute_dtype=torch.int64)
    adapter = CausalLMAdapter(tiny_llama(seed=4))
    adapter.start(torch.tensor([1, 2]))
    adapter.set_compute_dtype(torch.float64)
    with pytest.raises(ValueError, match="start"):
        adapter.forward(torch.tensor([1, 2]))


def reference_processing(adapter: CausalLMAdapter, logits: torch.Tensor) -> torch.Tensor:
    """The processing written out plainly ([2, T, V] CFG logits -> [T, V] probabilities): the
    formula the adapter's faster path must reproduce bit for bit."""
    logits = logits.to(torch.float64)
    combined = (logits[0] - logits[1]).mul_(adapter.cfg_scale).add_(logits[1])
    if adapter._disallowed is not None:
        combined = combined.masked_fill(adapter._disallowed, -torch.inf)
    kth = torch.topk(combined[:, adapter.allowed_tokens], adapter.top_k, dim=-1).values[:, -1:]
    combined = combined.masked_fill(combined < kth, -torch.inf) / adapter.temperature
    return torch.softmax(combined, -1)


@pytest.mark.parametrize("allowed", [list(range(3, 503)), list(range(0, 1000, 2))],
                         ids=["contiguous", "scattered"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_processing_is_bitwise_the_reference_formula(allowed, temperature):
    """Same probabilities to the last bit (so the same tokens for a seed), ties at the k-th
    largest logit included (all tied values kept), for a contiguous and a scattered image
    vocabulary; the input logits are left untouched."""
    adapter = CausalLMAdapter(tiny_llama(vocab=1024), allowed, cfg_scale=3.0, top_k=100,
                              temperature=temperature)
    assert (adapter._allowed_range is not None) == (allowed[1] - allowed[0] == 1)
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 5, 1024, dtype=torch.float64, generator=generator)
    logits[:, :, allowed[10:20]] = logits[:, :, allowed[9:10]]  # ten-way ties high up
    logits = (logits * 8).round() / 8  # many more ties, the k-th included
    before = logits.clone()
    probs = adapter._process(logits, torch.arange(5))
    expected = reference_processing(adapter, logits)
    assert torch.equal(logits, before)
    assert torch.equal(probs, expected)
    assert ((probs > 0).sum(-1) >= 100).all() and ((probs > 0).sum(-1) > 100).any()  # ties kept


def test_processing_propagates_nan_logits():
    """A NaN logit is never masked away by top-k: it reaches the distribution (the decoder's
    finiteness check then raises)."""
    adapter = CausalLMAdapter(tiny_llama(vocab=64), list(range(8, 40)), top_k=4)
    logits = torch.randn(1, 2, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    logits[0, 0, 20] = torch.nan
    probs = adapter._process(logits, torch.arange(2))
    assert torch.isnan(probs[0]).all() and torch.isfinite(probs[1]).all()


def test_kth_largest_topk_is_not_nan_when_a_nan_is_among_the_top_k():
    """A NaN among a row's k largest counts as the largest: the k-th value is the (k-1)-th
    largest number, as numpy's selection gives on CPU (an ``amin`` over the top k gives NaN)."""
    values = torch.tensor([[1.0, torch.nan, 3.0, 2.0, 0.0]], dtype=torch.float64)
    for k, expected in ((1, torch.nan), (2, 3.0), (3, 2.0), (5, 0.0)):
        topk_form, cpu_form = kth_largest_topk(values, k), kth_largest(values, k)
        assert topk_form.shape == (1, 1)
        if k == 1:
            assert torch.isnan(topk_form).all() and torch.isnan(cpu_form).all()
        else:
            assert topk_form.item() == expected == cpu_form.item()


@pytest.mark.parametrize("top_k", [None, 8])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_processing_without_cfg_leaves_the_model_logits_untouched(top_k, dtype):
    """Without CFG the model's own float64 logits must not be modified in place by top-k or
    temperature (``_process`` copies them; float32 logits are converted, a fresh tensor); the
    probabilities are the plain formula's, for a scattered vocabulary with and without top-k."""
    allowed = list(range(0, 64, 2))
    adapter = CausalLMAdapter(tiny_llama(vocab=64), allowed, top_k=top_k, temperature=0.7)
    assert not adapter.uses_cfg and adapter._disallowed is not None
    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(1, 3, 64, dtype=torch.float64, generator=generator).to(dtype)
    before = logits.clone()
    probs = adapter._process(logits, torch.arange(3))
    assert torch.equal(logits, before)
    expected = logits[0].to(torch.float64).masked_fill(adapter._disallowed, -torch.inf)
    if top_k is not None:
        kth = torch.topk(expected[:, allowed], top_k, dim=-1).values[:, -1:]
        expected = expected.masked_fill(expected < kth, -torch.inf)
    assert torch.equal(probs, torch.softmax(expected / 0.7, -1))


def test_processing_of_a_narrow_allowed_run_is_bitwise_the_reference_formula():
    """A contiguous image vocabulary that is a small part of the model's (Lumina-mGPT: 8192 of
    65536) takes the column-slice path; the probabilities are still the reference ones."""
    adapter = CausalLMAdapter(tiny_llama(vocab=1024), list(range(100, 300)), cfg_scale=3.0,
                              top_k=50)
    generator = torch.Generator().manual_seed(3)
    logits = (torch.randn(2, 4, 1024, dtype=torch.float64, generator=generator) * 8).round() / 8
    probs = adapter._process(logits, torch.arange(4))
    assert torch.equal(probs, reference_processing(adapter, logits))


def test_mask_below_and_kth_largest_are_the_plain_torch_forms_bit_for_bit():
    """The CPU fast forms against masked_fill_ / topk: ties with the threshold kept, NaN kept
    (and counted as the largest), -0.0 kept with its sign, +-inf handled."""
    generator = torch.Generator().manual_seed(4)
    values = (torch.randn(6, 300, dtype=torch.float64, generator=generator) * 4).round() / 4
    values[0, 3], values[1, 5] = torch.nan, -0.0
    values[2, 7], values[3, 11] = torch.inf, -torch.inf
    values[4] = torch.where(values[4] > 0, -0.0, values[4])
    for k in (1, 7, 75, 300):
        threshold = kth_largest(values, k)
        reference = values.topk(k, -1).values[:, -1:]
        assert torch.equal(threshold.nan_to_num(9.0), reference.nan_to_num(9.0))
        # The non-CPU form (run here on CPU) gives the same k-th value, NaN rows included.
        assert torch.equal(kth_largest_topk(values, k).nan_to_num(9.0), threshold.nan_to_num(9.0))
        expected = values.clone().masked_fill_(values < threshold, -torch.inf)
        masked = mask_below_(values.clone(), threshold)
        assert torch.equal(masked.view(torch.int64), expected.view(torch.int64))


def assert_support_invariant(probs: torch.Tensor, support: torch.Tensor) -> None:
    """verify(support=)'s contract, checked against p directly: every id with p > 0 of a row
    appears in its support row exactly once; every other entry is an in-range id with p = 0."""
    assert support.dtype == torch.int64 and support.shape[0] == probs.shape[0]
    assert support.min() >= 0 and support.max() < probs.shape[-1]
    counts = torch.zeros(probs.shape, dtype=torch.int64).scatter_add_(
        1, support, torch.ones_like(support))
    positive = probs > 0
    assert (counts[positive] == 1).all()  # each positive id once
    assert (probs.gather(1, support)[counts.gather(1, support) > 1] == 0).all()  # repeats: p = 0
    assert (probs.gather(1, support) >= 0).all()


def test_kept_ids_are_the_finite_logits_of_each_row_padded_with_a_dropped_id():
    logits = torch.tensor([[0.5, -torch.inf, 2.0, -torch.inf, 1.0],
                           [-torch.inf, 3.0, -torch.inf, -torch.inf, -torch.inf],
                           [1.0, 1.0, 1.0, -torch.inf, torch.nan]], dtype=torch.float64)
    ids = kept_ids(logits)
    assert ids.tolist() == [[0, 2, 4, 1], [1, 0, 0, 0], [0, 1, 2, 4]]
    equal_rows = torch.tensor([[0.0, -torch.inf, 1.0], [-torch.inf, 2.0, 2.0]], dtype=torch.float64)
    assert kept_ids(equal_rows).tolist() == [[0, 2], [1, 2]]  # the reshape path
    assert kept_ids(torch.zeros(3, 5, dtype=torch.float64)) is None  # nothing dropped anywhere
    forced = forced_support(ids, torch.tensor([-1, 4, -1]), vocab=5)
    assert forced.tolist() == [[0, 2, 4, 1], [4, 0, 0, 0], [0, 1, 2, 4]]


@pytest.mark.parametrize("allowed", [list(range(3, 503)), list(range(0, 1000, 2)), None],
                         ids=["contiguous", "scattered", "all"])
def test_support_holds_every_positive_id_once_under_ties_and_minus_inf(allowed):
    """Random CFG logits with ties at the k-th value (rows wider than k) and -inf logits from the
    model (a row with fewer finite allowed logits than k, one with only 3): the support covers
    p exactly as verify(support=) needs, and p is bit for bit the plain forward's."""
    adapter = CausalLMAdapter(tiny_llama(vocab=1024), allowed, cfg_scale=3.0, top_k=100,
                              temperature=0.7)
    generator = torch.Generator().manual_seed(5)
    logits = (torch.randn(2, 6, 1024, dtype=torch.float64, generator=generator) * 8).round() / 8
    # -inf in the conditional logits only (u + s (c - u) stays -inf; -inf in both would be NaN).
    logits[0, 1, 40:] = -torch.inf  # under 100 finite allowed logits: the threshold is -inf
    logits[0, 2, :] = -torch.inf
    logits[0, 2, [4, 10, 300]] = 1.0  # three finite (allowed) logits
    probs, support = adapter._process(logits, torch.arange(6), with_support=True)
    assert torch.equal(probs, adapter._process(logits, torch.arange(6)))
    assert torch.isfinite(probs).all()
    assert_support_invariant(probs, support)
    positives = (probs > 0).sum(-1)
    assert support.shape[1] == positives.max() and (positives[[0, 3, 4, 5]] >= 100).all()
    assert (positives > 100).any() and (positives < support.shape[1]).any()  # ties, padding
    for j in range(6):  # the positive ids first, in increasing order
        assert torch.equal(support[j, : positives[j]], torch.nonzero(probs[j] > 0).flatten())


def test_forward_with_support_forced_rows_and_default_return(model):
    """forward(with_support=True) returns the same p as forward() (its default return type is
    unchanged); a forced row lists only its forced id (11, outside the allowed ids) as positive."""
    adapter = RowEndAdapter(model, allowed_tokens=[2, 3, 4, 5, 6, 7], top_k=3, row_length=3)
    ids = torch.tensor([0, 2, 3, 11, 4, 5, 11])
    adapter.start(ids[:1])
    plain = adapter.forward(ids)
    assert isinstance(plain, torch.Tensor)
    adapter.start(ids[:1])
    probs, support = adapter.forward(ids, with_support=True)
    assert torch.equal(probs, plain)
    assert_support_invariant(probs, support)
    assert support.shape == (7, 3)
    assert support[2].tolist() == [11, 0, 0] and support[5].tolist() == [11, 0, 0]
    no_top_k = CausalLMAdapter(model)  # every id kept: nothing to restrict
    no_top_k.start(ids[:1])
    assert no_top_k.forward(ids, with_support=True)[1] is None


class _CacheNamed(torch.nn.Module):
    def forward(self, input_ids, cache=None, use_cache=False):  # transformers >= 5.2x
        return input_ids


class _PastKeyValuesNamed(torch.nn.Module):
    def forward(self, input_ids, past_key_values=None, use_cache=False, **kwargs):  # 5.1x
        return input_ids


class _NoCache(torch.nn.Module):
    def forward(self, input_ids, **kwargs):
        return input_ids


class _NoCacheNoKeywords(torch.nn.Module):
    def forward(self, input_ids, attention_mask=None):
        return input_ids


def test_cache_keyword_follows_the_model_signature():
    """transformers 5.17 (the GPU image's) names the cache ``past_key_values`` and drops an unknown
    ``cache=`` into **kwargs: the adapters must pass it under the name the model declares."""
    assert cache_kwarg(_CacheNamed()) == "cache"
    assert cache_kwarg(_PastKeyValuesNamed()) == "past_key_values"
    with pytest.raises(ValueError, match="takes no KV cache"):
        cache_kwarg(_NoCacheNoKeywords())
    assert cache_kwarg(_NoCache()) == "past_key_values"  # a wrapper's forward(**kwargs)


def test_support_rows_list_their_positive_ids_ascending_then_the_pads():
    """kept_ids / forward(with_support=True) hand verify rows already in the order it sorts them
    into: the ids with p > 0 strictly ascending, every p = 0 entry (padding) after them; so
    replacing the pads by V + K (as verify does) leaves each row sorted. Ties at the k-th value
    (unequal row widths: the padded path), a row with fewer finite logits than k, and forced
    one-hot rows are covered."""
    vocab, k = 1024, 100

    class ForcedEvery3(CausalLMAdapter):
        def forced_tokens(self, generated_positions):
            return torch.where(generated_positions % 3 == 2, 1023, -1)  # not an allowed id

    adapter = ForcedEvery3(tiny_llama(vocab=vocab), list(range(0, 1000, 3)), cfg_scale=3.0,
                           top_k=k)
    generator = torch.Generator().manual_seed(7)
    logits = (torch.randn(2, 9, vocab, dtype=torch.float64, generator=generator) * 8).round() / 8
    logits[0, 4, 30:] = -torch.inf  # 10 finite allowed logits: the threshold is -inf
    probs, support = adapter._process(logits, torch.arange(9), with_support=True)
    assert_support_invariant(probs, support)
    positive = probs.gather(1, support) > 0
    counts = positive.sum(-1)
    assert len(set(counts.tolist())) > 2  # ties, the short row and forced rows: unequal widths
    for row, count in zip(support, counts):
        ids = row[:count]
        assert (ids[1:] > ids[:-1]).all()  # strictly ascending
    assert torch.equal(positive, torch.arange(support.shape[1]) < counts.unsqueeze(1))  # pads last
    ready = torch.where(positive, support, vocab + support.shape[1])
    assert torch.equal(ready, ready.sort(-1).values)
