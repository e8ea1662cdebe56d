"""gsd_lab.decode.batch / gsd_lab.models.batched: images decoded together, one forward per step,
each exactly as ``generate`` decodes it alone.

- the batched forward gives every image its own distributions (CFG prompts of other lengths,
  windows of other widths, images in prefill beside images in decode), to rounding;
- mixed batches (AR, SJD, GSD with dynamic filters, rank bins, LANTERN, coupled drafts, repeat-row
  drafts, the release preset with forced tokens; lengths and prompts differing), with and without
  continuous batching: tokens, NFE, accepted / drafted counts equal to ``generate``'s, token for
  token; exact distortion and top-1 within 1e-12;
- finished images leave the forward; the joint law of a batched decode is AR's (chi-square against
  the exact enumeration on a tiny Llama), and a batch that forgets a rollback fails that test;
- bad input.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import gsd_lab.models.batched as batched  # noqa: E402
from gsd_lab.decode.loop import generate  # noqa: E402
from gsd_lab.decode.batch import DecodeRequest, generate_batch  # noqa: E402
from gsd_lab.decode.methods import DecodingMethod, FilterSettings  # noqa: E402
from gsd_lab.decode.methods import AmplifyAcceptance, BudgetAcceptance, ClusterAcceptance, LanternAcceptance, RelaxationAcceptance, TransportAcceptance
from gsd_lab.models import CausalLMAdapter  # noqa: E402
from gsd_lab.models.batched import BatchRunner, ForwardCall  # noqa: E402

VOCAB = 16
ALLOWED = list(range(2, 14))

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=256, initializer_range=0.5)
    return LlamaForCausalLM(config).eval()


class ForcedAdapter(CausalLMAdapter):
    """Token 15 (not an allowed id) forced at every generated position 6 mod 7, as Lumina-mGPT
    forces its row ends; a plain adapter otherwise."""

    def forced_tokens(self, generated_positions):
        return torch.where(generated_positions % 7 == 6, 15, -1)


@pytest.fixture(scope="module")
def adapter() -> CausalLMAdapter:
    return ForcedAdapter(tiny_llama(), ALLOWED, cfg_scale=2.0, top_k=6, temperature=0.9,
                         row_length=7, compute_dtype=torch.float64)


PROMPTS = [(torch.tensor([0, 15]), torch.tensor([14])),
           (torch.tensor([1]), torch.tensor([14, 1, 1])),
           (torch.tensor([0, 15, 3, 4]), torch.tensor([14]))]
FILTERS = FilterSettings(max_prob_gap=0.3, max_embedding_distance=3.0)
METHODS = {
    "ar": DecodingMethod("ar"),
    "sjd": DecodingMethod("sjd", window=4),
    "sjd-repeat-row": DecodingMethod("sjd", window=5, init="repeat_row"),
    "gsd-dynamic": DecodingMethod("gsd", window=6, acceptance=ClusterAcceptance(group_size=3),
                                  filters=FILTERS),
    "gsd-rank-binned": DecodingMethod("gsd", window=3, acceptance=ClusterAcceptance(clusters="rank-binned", group_size=4),
                                      residual="cluster"),
    "amplify": DecodingMethod("sjd", window=4, acceptance=AmplifyAcceptance(scale=2.0)),
    "lantern": DecodingMethod("sjd", window=4, acceptance=LanternAcceptance(k=3, delta=0.2)),
    "maximal": DecodingMethod("sjd", window=3, draft="maximal"),
    "gumbel": DecodingMethod("gsd", window=5, draft="gumbel", init="repeat_row",
                             acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=2)),
    "release-sjd": DecodingMethod("sjd", window=15, preset="release"),
    "release-gsd": DecodingMethod("gsd", window=15, acceptance=ClusterAcceptance(group_size=3),
                                  filters=FILTERS, preset="release"),
    "relaxation": DecodingMethod("sjd", window=4, acceptance=RelaxationAcceptance(delta=0.1)),
    "dial": DecodingMethod("sjd", window=5, acceptance=BudgetAcceptance(budget=0.5, policy="sure", cap=0.3)),
}
LENGTHS = (9, 23, 31, 40)


def requests(count: int, seed: int = 0) -> list[DecodeRequest]:
    """Image i: method i mod |METHODS|, length LENGTHS[i mod 4], prompt pair i mod 3, seed + i."""
    methods = list(METHODS.values())
    out = []
    for i in range(count):
        prompt, uncond = PROMPTS[i % len(PROMPTS)]
        out.append(DecodeRequest(prompt, methods[i % len(methods)], LENGTHS[i % len(LENGTHS)],
                                 torch.Generator().manual_seed(seed + i), uncond))
    return out


def alone(adapter, request: DecodeRequest, seed: int, **kwargs):
    return generate(adapter, request.prompt_ids, request.method, num_tokens=request.num_tokens,
                    generator=torch.Generator().manual_seed(seed),
                    uncond_prompt_ids=request.uncond_prompt_ids, **kwargs)


def test_the_batched_forward_gives_each_image_its_own_distributions(adapter):
    """Three images in one forward: one in prefill (other prompt lengths, a padded CFG row)
    beside two in decode with windows of 1 and 5 tokens, after rollbacks of different lengths;
    each image's rows against ``adapter.forward`` on that image alone."""
    runner = BatchRunner(adapter)
    tails = [torch.tensor([2, 3, 4, 5, 6, 7]), torch.tensor([8, 9, 10]), torch.tensor([11, 12])]
    sequences = [runner.add(*PROMPTS[i]) for i in range(2)]
    prefills = [torch.cat([PROMPTS[i][0], tails[i]]) for i in range(2)]
    runner.forward([ForwardCall(s, ids, 3) for s, ids in zip(sequences, prefills)])
    sequences[0].crop(PROMPTS[0][0].numel() + 2)  # keeps 2 of its 6 new tokens
    sequences[1].crop(PROMPTS[1][0].numel() + 3)  # keeps all 3
    third = runner.add(*PROMPTS[2])
    windows = [torch.tensor([5, 9, 9, 2, 13]), torch.tensor([4]),
               torch.cat([PROMPTS[2][0], tails[2]])]
    rows = [5, 1, 2]
    got = runner.forward([ForwardCall(s, ids, r, with_support=True)
                          for s, ids, r in zip(sequences + [third], windows, rows)])
    histories = [[prefills[0][: PROMPTS[0][0].numel() + 2]], [prefills[1]], []]
    largest = 0.0
    for i in range(3):
        adapter.start(*PROMPTS[i])
        if histories[i]:
            adapter.forward(histories[i][0], num_rows=1)
        p, support = adapter.forward(windows[i], num_rows=rows[i], with_support=True)
        assert got[i][0].shape == p.shape and torch.equal(got[i][1], support)
        largest = max(largest, float((got[i][0] - p).abs().max()))
    print(f"largest |p batched - p alone|: {largest:.3g}")
    assert largest <= 1e-12
    assert runner.num_forwards == 2


@pytest.mark.parametrize("batch_size", [None, 4])
def test_a_mixed_batch_decodes_every_image_as_alone(adapter, batch_size):
    """Every method of METHODS in one batch (twice over, other lengths and prompts): tokens,
    NFE, accepted / drafted per forward equal to ``generate``'s; distortion and top-1 to 1e-12.
    batch_size 4: continuous batching, images joining as others finish."""
    batch = requests(2 * len(METHODS), seed=10)
    results = generate_batch(adapter, batch, batch_size=batch_size, record_distortion=True,
                             record_top1=True)
    largest = 0.0
    for i, (request, result) in enumerate(zip(batch, results)):
        single = alone(adapter, request, 10 + i, record_distortion=True, record_top1=True)
        name = list(METHODS)[i % len(METHODS)]
        assert torch.equal(result.tokens, single.tokens), name
        assert result.nfe == single.nfe, name
        assert (result.accepted, result.drafted) == (single.accepted, single.drafted), name
        assert result.acceptance_rate == single.acceptance_rate and result.method == single.method
        assert result.window == single.window and result.draft == single.draft
        assert (result.budget_spent is None) == (single.budget_spent is None), name
        if single.budget_spent is not None:
            largest = max(largest, abs(result.budget_spent - single.budget_spent))
        largest = max(largest, float((result.distortion - single.distortion).abs().max()),
                      float((result.top1 - single.top1).abs().max()))
        assert result.wall_seconds >= result.model_seconds > 0
    print(f"largest distortion / top-1 difference: {largest:.3g}")
    assert largest <= 1e-12
    assert any(float(r.distortion.max()) > 0 for r in results)  # the lossy rules did distort
    assert any((r.tokens == 15).any() for r in results)  # forced tokens were emitted
    assert any(r.budget_spent for r in results)  # the dial spent some of its budget


def test_finished_images_leave_the_forward(adapter, monkeypatch):
    """Model rows per forward (2 per image under CFG): never more than 2 x batch_size, and down
    to one image's 2 once the others are done."""
    widths = []
    real = adapter.compute_logits

    def spy(input_ids, *args):
        widths.append(input_ids.shape[0])
        return real(input_ids, *args)

    monkeypatch.setattr(adapter, "compute_logits", spy)
    methods = [DecodingMethod("ar"), DecodingMethod("sjd", window=3), DecodingMethod("ar")]
    batch = [DecodeRequest(PROMPTS[i][0], methods[i], n, torch.Generator().manual_seed(i),
                           PROMPTS[i][1]) for i, n in enumerate((3, 30, 5))]
    from tqdm.auto import tqdm

    class Bar(tqdm):  # a caller's bar (tqdm compares bars by ==), counting finished images
        done = 0

        def update(self, n=1):
            Bar.done += n

    bar = Bar(total=3, disable=True)
    results = generate_batch(adapter, batch, batch_size=2, progress=bar)
    assert Bar.done == 3
    assert max(widths) == 4 and widths[-1] == 2
    # The third image takes the first's place.
    assert widths[:3] == [4, 4, 4] and results[0].nfe == 3
    assert len(widths) == max(results[0].nfe + results[2].nfe, results[1].nfe)


def test_a_runner_given_counts_the_batched_forwards(adapter):
    """``runner=BatchRunner(adapter)``: the same results as "eager"; its counters hold the
    batched forwards (one per image's forward at batch 1, fewer at batch 3) and the model
    time the results share out."""
    for size in (1, 3):
        runner = BatchRunner(adapter)
        given = generate_batch(adapter, requests(4, seed=7), batch_size=size, runner=runner)
        named = generate_batch(adapter, requests(4, seed=7), batch_size=size)
        assert [(r.tokens.tolist(), r.nfe) for r in given] == [
            (r.tokens.tolist(), r.nfe) for r in named]
        nfe = [r.nfe for r in given]
        if size == 1:
            assert runner.num_forwards == sum(nfe)
        else:
            assert max(nfe) <= runner.num_forwards < sum(nfe)
        assert runner.model_seconds == pytest.approx(sum(r.model_seconds for r in given))
    other = CausalLMAdapter(tiny_llama(1), ALLOWED, top_k=8)
    with pytest.raises(ValueError, match="another adapter"):
        generate_batch(adapter, requests(1), runner=BatchRunner(other))


def test_batched_decoding_is_lossless_on_the_exact_joint(monkeypatch):
    """SJD decoded in batches (independent, maximal and gumbel drafts, random and repeat-row
    init, windows 1-3, mixed in every batch; CFG with prompts of two lengths) against AR's exact
    joint law over 27 sequences (``gsd_lab.experiments.lossless``): chi-square p > 1e-3. A
    batch whose images forget their rollback (rejected drafts stay in the cache) fails it."""
    from gsd_lab.experiments import lossless

    adapter = CausalLMAdapter(lossless.tiny_model(), list(lossless.ALLOWED), cfg_scale=1.5,
                              row_length=lossless.ROW_LENGTH, compute_dtype=torch.float64)
    uncond = torch.tensor([5, 4, 3])
    joint = lossless.exact_joint(adapter, uncond)
    methods = [DecodingMethod("sjd", window=w, init=init, draft=draft)
               for w, init, draft in ((2, "repeat_row", "independent"), (3, "random", "maximal"),
                                      (2, "repeat_row", "gumbel"), (1, "random", "independent"))]

    def pvalue() -> float:
        batch = [DecodeRequest(torch.tensor(lossless.PROMPT), methods[i % len(methods)],
                               lossless.NUM_TOKENS, torch.Generator().manual_seed(5000 + i), uncond)
                 for i in range(1200)]
        counts = np.zeros(len(lossless.SEQUENCES))
        index = {seq: i for i, seq in enumerate(lossless.SEQUENCES)}
        for result in generate_batch(adapter, batch, batch_size=300):
            counts[index[tuple(result.tokens.tolist())]] += 1
        return lossless.chi_square_pvalue(counts, joint)

    assert pvalue() > lossless.SIGNIFICANCE

    def forgetful_crop(self, length):
        self._seq_len = length  # the rows keep the rejected drafts' keys

    monkeypatch.setattr(batched.ImageSequence, "crop", forgetful_crop)
    assert pvalue() < lossless.SIGNIFICANCE


def test_cache_relayout_copies_the_slots_gather_would():
    """``_gather_rows`` (one index_select over [R * H * S, D]) against ``torch.gather`` along the
    slots: equal bit for bit, for kept row subsets, left padding (clamped slots) and a
    non-contiguous cache; a wrong row offset would pick another row's slots."""
    generator = torch.Generator().manual_seed(0)
    for trial in range(40):
        R, H, S, D = (int(torch.randint(1, n, (1,), generator=generator)) for n in (7, 4, 30, 6))
        states = torch.randn(R, H, S, D, dtype=torch.float64, generator=generator)
        if trial % 3 == 2:  # the same values, not contiguous
            states = states.transpose(1, 2).contiguous().transpose(1, 2)
        count = int(torch.randint(1, R + 1, (1,), generator=generator))
        kept = torch.randperm(R, generator=generator)[:count].sort().values
        rows = None if trial % 2 else kept
        n = R if rows is None else count
        length = int(torch.randint(1, S + 1, (1,), generator=generator))
        ends = torch.randint(1, S + 1, (n,), generator=generator)
        slots = (ends.unsqueeze(1) - length + torch.arange(length)).clamp(min=0)
        picked = states if rows is None else states.index_select(0, rows)
        expected = picked.gather(2, slots.view(n, 1, length, 1).expand(-1, H, -1, D))
        assert torch.equal(batched._gather_rows(states, rows, slots), expected), trial


def test_bad_input(adapter):
    good = requests(1)[0]
    with pytest.raises(ValueError, match="batch_size"):
        generate_batch(adapter, [good], batch_size=0)
    with pytest.raises(ValueError, match="DecodeRequest"):
        generate_batch(adapter, [good, (good.prompt_ids, good.method)])
    with pytest.raises(ValueError, match="num_tokens"):
        generate_batch(adapter, [DecodeRequest(good.prompt_ids, good.method, 0, None,
                                               good.uncond_prompt_ids)])
    with pytest.raises(ValueError, match="uncond_prompt_ids"):
        generate_batch(adapter, [DecodeRequest(good.prompt_ids, good.method, 5)])
    shared = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="share one generator"):
        generate_batch(adapter, [DecodeRequest(good.prompt_ids, good.method, 5, shared,
                                               good.uncond_prompt_ids)] * 2)
    with pytest.raises(ValueError, match="record_w1"):
        generate_batch(adapter, [good], record_w1=True)
    assert generate_batch(adapter, []) == []
    runner = BatchRunner(adapter)
    sequence = runner.add(*PROMPTS[0])
    with pytest.raises(ValueError, match="one call per active sequence"):
        runner.forward([])
    with pytest.raises(ValueError, match="begin with its prompt"):
        runner.forward([ForwardCall(sequence, torch.tensor([3, 4]), 1)])


@pytest.mark.parametrize("draws", [None, 3])
def test_w1_accounting_is_the_same_batched(draws):
    """record_w1 (exact for every row, or estimated from reservoirs seeded by the image's
    generator): each image's W1 and substitution estimates equal ``generate``'s to 1e-12; with
    the rules that change every step too (the TV and W1 dials, the transport relaxation, with
    independent and coupled drafts), whose tokens, NFE and budget_spent are each image's alone."""
    from gsd_lab.experiments.image_model import tiny_random_model

    model = tiny_random_model(top_k=20)
    adapter = model.adapter
    methods = [DecodingMethod("gsd", window=4, acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=4)),
               DecodingMethod("sjd", window=4, acceptance=AmplifyAcceptance(scale=3.0)), DecodingMethod("ar"),
               DecodingMethod("sjd", window=4, acceptance=BudgetAcceptance(budget=0.5, cap=0.2)),
               DecodingMethod("sjd", window=5, acceptance=TransportAcceptance(eps=0.05, k=4)),
               DecodingMethod("sjd", window=4, acceptance=TransportAcceptance(eps=0.05, k=4), draft="maximal"),
               DecodingMethod("sjd", window=4, acceptance=BudgetAcceptance(budget=0.4, measure="w1", cap=0.1, k=4)),
               DecodingMethod("sjd", window=5, acceptance=BudgetAcceptance(budget=0.4, measure="w1", policy="sure", k=4), draft="maximal")]
    batch = []
    for i in range(2 * len(methods)):
        prompt, uncond = model.encode(str(i % 4))
        batch.append(DecodeRequest(prompt, methods[i % len(methods)], 20 + 5 * (i % 6),
                                   torch.Generator().manual_seed(i), uncond))
    results = generate_batch(adapter, batch, batch_size=4, record_distortion=True, record_w1=True,
                             w1_draws=draws)
    for i, (request, result) in enumerate(zip(batch, results)):
        single = alone(adapter, request, i, record_distortion=True, record_w1=True, w1_draws=draws)
        assert torch.equal(result.tokens, single.tokens) and result.nfe == single.nfe
        assert result.budget_spent == single.budget_spent
        if isinstance(request.method.acceptance, BudgetAcceptance):
            assert result.budget_spent <= request.method.acceptance.budget + 1e-12
        for field in ("mean", "sem", "substitution", "substitution_sem"):
            a, b = getattr(result.w1, field), getattr(single.w1, field)
            assert (a is None) == (b is None) and (a is None or abs(a - b) <= 1e-12), field
    assert any(r.w1.mean > 0 for r in results)
    w1_dial = [getattr(q.method.acceptance, "measure", None) == "w1" for q in batch]
    assert any(r.budget_spent for r, dial in zip(results, w1_dial) if dial)


def test_lumina_prompts_of_other_lengths_and_forced_row_ends(tiny_release_set):
    """The tiny Lumina-mGPT checkpoint: text prompts of different lengths (so the conditional
    rows of the images differ in length), the release's unconditional prompt (one token: every
    image's CFG pair padded), forced row ends, the release preset beside the default: tokens
    and NFE as ``generate``'s."""
    from gsd_lab.experiments.image_model import load_image_model

    model = load_image_model("lumina-mgpt-7b-512", weights=str(tiny_release_set.weights),
                             vqgan=str(tiny_release_set.vqgan), device="cpu")
    adapter = model.adapter
    texts = ["a red brick wall", "cat", "a very small house beside a long winding river at dusk"]
    methods = [DecodingMethod("gsd", window=15, acceptance=ClusterAcceptance(group_size=5), preset="release"),
               DecodingMethod("sjd", window=16), DecodingMethod("sjd", window=15, preset="release")]
    batch = []
    for i, text in enumerate(texts * 2):
        prompt, uncond = model.encode(text)
        batch.append(DecodeRequest(prompt, methods[i % 3], 70 + 11 * i,
                                   torch.Generator().manual_seed(i), uncond))
    assert len({r.prompt_ids.numel() for r in batch}) == 3
    results = generate_batch(adapter, batch, batch_size=4)
    for i, (request, result) in enumerate(zip(batch, results)):
        single = alone(adapter, request, i)
        assert torch.equal(result.tokens, single.tokens), i
        assert (result.nfe, result.accepted) == (single.nfe, single.accepted), i
        assert (result.tokens[32::33] == adapter.layout.row_end).all()


def test_run_cache_batched_keeps_every_configurations_records(monkeypatch):
    """``RunCache(batch_size=3)`` (what ``figures --batch-size 3`` uses) against batch 1 on the
    tiny random model, configurations of the kinds the figures decode (AR on another seed set,
    GSD, LANTERN, coupled drafts), with and without guidance: the same records in the same
    order (prompt, seed, tokens, NFE, acceptance, image), distortion and top-1 to 1e-12. Batch
    3 decodes each configuration in a stream of its own (``prefetch``, as ``figures`` does), on
    2 threads against batch 1's one (the CLI's default threads are every core);
    ``mix_configurations`` decodes them all in one stream, with the same records."""
    from gsd_lab.experiments.image_model import tiny_random_model
    import gsd_lab.decode.batch as decoding_batch
    from gsd_lab.experiments.runs import MethodSpec, Recording, RunCache

    model = tiny_random_model(top_k=20)
    specs = [MethodSpec("AR other seeds", DecodingMethod("ar"), seed_offset=100),
             MethodSpec("GSD", DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=10))),
             MethodSpec("LANTERN", DecodingMethod("sjd", acceptance=LanternAcceptance(k=5, delta=0.1))),
             MethodSpec("MC-SJD", DecodingMethod("sjd", draft="maximal"))]
    # W1 is checked in test_w1_accounting_is_the_same_batched.
    prompts = ["0", "1", "2", "3"]
    caches = {name: RunCache(model, prompts, [0], FilterSettings(), mix_configurations=mixed,
                             recording=Recording(top1=True, distortion=True, batch_size=size))
              for name, size, mixed in (("one", 1, False), ("own", 3, False),
                                        ("mixed", 3, True))}
    calls = []
    original = decoding_batch.generate_batch

    def counted(adapter, requests, **kwargs):
        calls.append(len(requests))
        return original(adapter, requests, **kwargs)

    monkeypatch.setattr(decoding_batch, "generate_batch", counted)
    torch.set_num_threads(2)  # restored by the one_thread fixture
    caches["own"].prefetch(specs)  # one stream of batches per configuration
    assert calls == [len(prompts)] * len(specs) and len(caches["own"].decoded()) == len(specs)
    torch.set_num_threads(1)
    caches["mixed"].prefetch(specs)  # every configuration in one stream
    assert calls[len(specs):] == [len(specs) * len(prompts)]
    for spec in specs:
        one = caches["one"].records(spec)
        for name in ("own", "mixed"):
            many = caches[name].records(spec)
            assert [(r.prompt, r.seed, r.nfe, r.acceptance_rate) for r in one] == \
                [(r.prompt, r.seed, r.nfe, r.acceptance_rate) for r in many], (spec.label, name)
            for a, b in zip(one, many):
                assert torch.equal(a.tokens, b.tokens) and np.array_equal(a.image, b.image)
                assert torch.allclose(a.top1, b.top1, rtol=0, atol=1e-12)
                assert (a.distortion is None) == (b.distortion is None)
                assert a.distortion is None or abs(a.distortion - b.distortion) <= 1e-12
    unguided = {name: cache.detail_records(specs[0], 2, guided=False)
                for name, cache in caches.items()}
    assert [r.tokens.tolist() for r in unguided["one"]] == \
        [r.tokens.tolist() for r in unguided["own"]]
    with pytest.raises(ValueError, match="batch_size"):
        Recording(batch_size=0)


def test_figures_batch_size_flag_is_checked(capsys, tmp_path):
    from gsd_lab.cli import main

    for argv, message in ((["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
                          (["--batch-size", "-4", "--paper"], "--batch-size must be >= 1, got -4")):
        with pytest.raises(SystemExit) as caught:
            main(["figures", "--model", "tiny-random", "--out", str(tmp_path / "f"), *argv])
        assert caught.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "f").exists()
