"""gsd_lab.models.static_batched: ``generate_batch(..., runner="static")`` decodes every image with
the tokens, NFE and accepted counts it gets alone through ``generate(..., runner="static")``
(float64 on a CPU: static-eager), for mixed methods, CFG prompts padded on either row, forced
rows, ragged acceptance, images that finish early and images that join in freed slots; stale
cache slots are ignored, and a mask that let a row see them fails the comparison."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import gsd_lab.models.static_batched as static_batched  # noqa: E402
from gsd_lab.decode.batch import DecodeRequest, generate_batch  # noqa: E402
from gsd_lab.decode.loop import generate  # noqa: E402
from gsd_lab.decode.methods import DecodingMethod  # noqa: E402
from gsd_lab.decode.methods import ClusterAcceptance
from gsd_lab.models import CausalLMAdapter  # noqa: E402
from gsd_lab.models.static_batched import StaticBatchRunner  # noqa: E402

VOCAB = 48
ALLOWED = list(range(2, 42))
ROW_END, ROW = 45, 6

pytestmark = pytest.mark.usefixtures("one_thread")


class RowEndAdapter(CausalLMAdapter):
    """Token 45 (not an allowed code) forced at the end of every row of 6."""

    def forced_tokens(self, generated_positions):
        return torch.where((generated_positions + 1) % ROW == 0, ROW_END, -1)


@pytest.fixture(scope="module")
def adapter() -> RowEndAdapter:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=512, initializer_range=0.3)
    model = LlamaForCausalLM(config).eval()
    return RowEndAdapter(model, ALLOWED, cfg_scale=2.0, top_k=12, row_length=ROW,
                         compute_dtype=torch.float64)


METHODS = [
    DecodingMethod("ar"),
    DecodingMethod("sjd", window=4),
    DecodingMethod("gsd", window=4, acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=5)),
    DecodingMethod("gsd", window=7, acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=5), init="repeat_row"),
]
# Prompts of other lengths; the unconditional row shorter or longer than the conditional one.
PROMPTS = [
    (torch.tensor([0, 44, 3]), torch.tensor([1])),
    (torch.tensor([0, 44, 3, 7, 9]), torch.tensor([1, 2, 3, 4, 5, 6, 7])),
    (torch.tensor([0, 5]), torch.tensor([1, 2, 3])),
]


def requests(count: int) -> list[DecodeRequest]:
    out = []
    for i in range(count):
        prompt, uncond = PROMPTS[i % len(PROMPTS)]
        tokens = (30, 17, 24, 9)[i % 4]  # images finish at other steps
        out.append(DecodeRequest(prompt, METHODS[i % len(METHODS)], tokens,
                                 torch.Generator().manual_seed(100 + i), uncond))
    return out


def alone(adapter, request: DecodeRequest):
    return generate(adapter, request.prompt_ids, request.method, num_tokens=request.num_tokens,
                    generator=torch.Generator().manual_seed(request.generator.initial_seed()),
                    uncond_prompt_ids=request.uncond_prompt_ids, runner="static",
                    record_distortion=True)


@pytest.mark.parametrize("batch_size", [None, 3])
def test_static_batch_decodes_every_image_as_the_static_path_alone(adapter, batch_size):
    """8 images: all at once, or 3 at a time (the others join in freed image slots)."""
    batch = requests(8)
    results = generate_batch(adapter, batch, batch_size=batch_size, runner="static",
                             record_distortion=True)
    rejected = 0
    for i, (request, result) in enumerate(zip(batch, results)):
        reference = alone(adapter, request)
        assert torch.equal(result.tokens, reference.tokens), i
        assert result.nfe == reference.nfe and result.accepted == reference.accepted, i
        assert result.drafted == reference.drafted, i
        assert (result.distortion - reference.distortion).abs().max() <= 1e-12, i
        rejected += sum(d - a for d, a in zip(result.drafted, result.accepted))
    assert rejected > 0  # ragged acceptance: rollbacks happened


def test_stale_slots_are_ignored_and_a_mask_that_sees_them_fails(adapter, monkeypatch):
    batch = requests(4)
    reference = [alone(adapter, r).tokens for r in batch]
    layer = static_batched._row_slot_layer_class()
    original = layer.lazy_initialization

    def garbage(self, key_states, value_states):  # every slot holds large finite values
        original(self, key_states, value_states)
        self.keys.fill_(37.0)
        self.values.fill_(-53.0)

    monkeypatch.setattr(layer, "lazy_initialization", garbage)
    fresh = [DecodeRequest(r.prompt_ids, r.method, r.num_tokens,
                           torch.Generator().manual_seed(r.generator.initial_seed()),
                           r.uncond_prompt_ids) for r in batch]
    results = generate_batch(adapter, fresh, runner="static")
    assert [r.tokens.tolist() for r in results] == [t.tolist() for t in reference]

    def sees_everything(self, ids):  # negative control: every slot up to L visible
        R, T = ids.shape
        slots = self._start[:R].unsqueeze(1) + torch.arange(T)
        mask = torch.ones(R, 1, T, self._attended[0], dtype=torch.bool)
        return self.adapter.compute_logits(ids, mask, slots, T)

    monkeypatch.setattr(StaticBatchRunner, "_model", sees_everything)
    fresh = [DecodeRequest(r.prompt_ids, r.method, r.num_tokens,
                           torch.Generator().manual_seed(r.generator.initial_seed()),
                           r.uncond_prompt_ids) for r in batch]
    broken = generate_batch(adapter, fresh, runner="static")
    assert [r.tokens.tolist() for r in broken] != [t.tolist() for t in reference]


def test_forwards_run_at_fixed_shapes(adapter, monkeypatch):
    """After the prefill every forward is at width 1 or window + 1, on a power-of-two number
    of image slots (at most the batch), at a length bucket."""
    keys = []
    original = StaticBatchRunner._run

    def recorded(self, inputs, starts):
        out = original(self, inputs, starts)
        keys.append(self.last_key)
        return out

    monkeypatch.setattr(StaticBatchRunner, "_run", recorded)
    batch = [DecodeRequest(r.prompt_ids, METHODS[1], r.num_tokens, r.generator,
                           r.uncond_prompt_ids) for r in requests(5)]
    generate_batch(adapter, batch, batch_size=3, runner="static")
    fixed = [k for k in keys if k is not None]
    # Only steps where an image joins (its prefill: prompt + window, wider) run at their own width.
    assert 1 <= len(keys) - len(fixed) <= len(batch)
    assert {width for _, width, _ in fixed} <= {1, 5}
    assert {rows for rows, _, _ in fixed} <= {2, 4, 6}  # CFG pairs x 1, 2, 3 image slots


def test_bad_arguments(adapter):
    with pytest.raises(ValueError, match="unknown runner"):
        generate_batch(adapter, requests(1), runner="graph")
    with pytest.raises(ValueError, match="images must be"):
        StaticBatchRunner(adapter, images=0, new_tokens=4, window=2, max_prompt=3)
    with pytest.raises(ValueError, match="capture 'graph'"):
        StaticBatchRunner(adapter, images=1, new_tokens=4, window=2, max_prompt=3, capture="graph")
    runner = StaticBatchRunner(adapter, images=1, new_tokens=4, window=2, max_prompt=3)
    with pytest.raises(ValueError, match="max_prompt"):
        runner.add(torch.tensor([0, 44, 3, 7, 9]), torch.tensor([1]))


@pytest.mark.parametrize("make", ["engine", "batch runner"])
def test_the_static_paths_share_their_checks(adapter, monkeypatch, make):
    """StaticEngine and StaticBatchRunner refuse the same settings (one helper,
    ``gsd_lab.models.static.static_settings``), the batch runner now also a sliding window."""
    from gsd_lab.models.static import StaticEngine

    def build(**options):
        if make == "engine":
            return StaticEngine(adapter, **options)
        return StaticBatchRunner(adapter, images=1, new_tokens=4, window=2, max_prompt=3, **options)

    build()  # the defaults pass
    for options, message in (
        (dict(capture="replay"), "unknown capture"),
        (dict(capacity_step=True), "capacity_step must be an int >= 1"),
        (dict(length_step=0), "length_step must be an int >= 1 or None"),
    ):
        with pytest.raises(ValueError, match=message):
            build(**options)
    monkeypatch.setattr(adapter.model.config, "sliding_window", 4, raising=False)
    with pytest.raises(ValueError, match="full attention in every layer"):
        build()


def _adapter_state(adapter) -> tuple:
    return (adapter.prompt.tolist(), adapter._batch_prompt.tolist(), adapter._prompt_mask.tolist(),
            adapter.seq_len, int(adapter.cache.get_seq_length()), tuple(adapter._mask.shape))


def test_the_static_batch_leaves_the_adapter_as_the_eager_batch(adapter):
    """Both runners check each image's prompt with ``adapter.start`` (the static one also sizes
    its cache with it first): each returns with the adapter started at the last image's prompt
    and an empty cache, its own forwards on the runner's cache, whatever the adapter held."""
    states = {}
    for runner in ("eager", "static"):
        alone(adapter, requests(2)[1])  # the adapter holds another image's cache
        generate_batch(adapter, requests(5), batch_size=2, runner=runner)
        states[runner] = _adapter_state(adapter)
    assert states["static"] == states["eager"]
    last, _uncond = PROMPTS[4 % len(PROMPTS)]
    assert states["eager"][0] == last.tolist() and states["eager"][4] == 0
