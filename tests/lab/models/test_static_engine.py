"""gsd_lab.models.static: the static-cache engine decodes the tokens of the dynamic-cache path
(float64, AR / SJD / GSD, CFG padding on either row, forced rows, rejections, rollbacks and the
padded tail), ignores whatever its stale and padding slots hold, compiles to one graph per window
width with no recompiles, and reads the host once per step."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import gsd_lab.models.adapter as adapter_module  # noqa: E402
from gsd_lab.decode.loop import generate  # noqa: E402
from gsd_lab.decode.methods import DecodingMethod  # noqa: E402
from gsd_lab.decode.methods import ClusterAcceptance
from gsd_lab.models import CausalLMAdapter  # noqa: E402
from gsd_lab.models.static import StaticEngine, static_engine  # noqa: E402
from gsd_lab.engine.profiling import ops_and_syncs  # noqa: E402

VOCAB = 48
ALLOWED = list(range(2, 42))
ROW_END, ROW = 45, 6
PROMPT = torch.tensor([0, 44, 3])

pytestmark = pytest.mark.usefixtures("one_thread")


class RowEndAdapter(CausalLMAdapter):
    """Token 45 (not an allowed code) forced at the end of every row of 6."""

    def forced_tokens(self, generated_positions):
        return torch.where((generated_positions + 1) % ROW == 0, ROW_END, -1)


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         initializer_range=0.3)
    return LlamaForCausalLM(config).eval()


def make_adapter(model, cfg_scale: float | None = 2.0) -> RowEndAdapter:
    return RowEndAdapter(model, ALLOWED, cfg_scale=cfg_scale, top_k=12, row_length=ROW,
                         compute_dtype=torch.float64)


METHODS = {
    "ar": DecodingMethod("ar"),
    "sjd": DecodingMethod("sjd", window=4),
    "gsd": DecodingMethod("gsd", window=4, acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=5)),
    "gsd-repeat-row": DecodingMethod("gsd", window=7, acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=5), init="repeat_row"),
}
# The shorter CFG prompt is left-padded: the unconditional row here, the conditional row there.
UNCONDITIONAL = {"uncond-padded": torch.tensor([1]), "cond-padded": torch.tensor([1, 2, 3, 4, 5])}


def decode(adapter, method, uncond, runner="eager", num_tokens=41, seed=5):
    return generate(adapter, PROMPT, method, num_tokens=num_tokens, generator=torch.Generator().manual_seed(seed),
                    uncond_prompt_ids=uncond, runner=runner)


def assert_same_run(a, b):
    assert torch.equal(a.tokens, b.tokens)
    assert (a.nfe, a.accepted, a.drafted) == (b.nfe, b.accepted, b.drafted)


@pytest.mark.parametrize("uncond", list(UNCONDITIONAL))
@pytest.mark.parametrize("name", list(METHODS))
def test_static_engine_decodes_the_tokens_of_the_dynamic_cache(model, name, uncond):
    adapter = make_adapter(model)
    method, uncond_ids = METHODS[name], UNCONDITIONAL[uncond]
    eager = decode(adapter, method, uncond_ids)
    static = decode(adapter, method, uncond_ids, runner="static")
    assert_same_run(eager, static)
    assert (static.tokens[ROW - 1::ROW] == ROW_END).all()
    if name != "ar":  # rejections, rollbacks of accepted drafts, and the padded tail all occurred
        assert 0 < sum(static.accepted) < sum(static.drafted)
        tail = [d for d in static.drafted if 0 < d < method.window]
        assert tail and static.drafted[-1] < method.window
    # The engine is kept on the adapter: a second call reuses its cache (stale slots and all).
    assert static_engine(adapter) is static_engine(adapter)
    assert_same_run(static, decode(adapter, method, uncond_ids, runner="static"))


def test_forward_matches_the_adapter_to_rounding(model):
    """Distributions of the same windows, with a rollback and a padded window between them,
    agree with the dynamic cache's to float64 rounding."""
    adapter = make_adapter(model)
    engine = StaticEngine(adapter)
    engine.reserve(40, window=6)
    ids = torch.tensor([7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27])
    uncond = UNCONDITIONAL["uncond-padded"]
    outputs = []
    for runner in (adapter, engine):
        runner.start(PROMPT, uncond)
        out = [runner.forward(torch.cat([PROMPT, ids[:3]]), num_rows=4)]
        out.append(runner.forward(ids[3:10]))  # the full width, 7 tokens
        runner.crop(runner.seq_len - 5)
        out.append(runner.forward(ids[5:8]))  # a padded window after a rollback
        out.append(runner.forward(ids[8:9]))
        outputs.append(out)
        assert runner.seq_len == PROMPT.numel() + 3 + 7 - 5 + 3 + 1
    for expected, got in zip(*outputs):
        assert expected.shape == got.shape
        assert torch.allclose(expected, got, rtol=0, atol=1e-14)


def test_support_holds_every_positive_id_once(model, monkeypatch):
    """Static-eager on a CPU hands verify the adapter's kept ids; the captured forms (here: the
    torch forms forced, as under compilation) the allowed ids of the top-k + 16 largest entries
    (no tie overflows here); both list every id with p > 0 exactly once, forced rows the forced
    id first, and the distributions are the same."""
    adapter = make_adapter(model)
    engine = StaticEngine(adapter)
    engine.reserve(20, window=6)
    results = []
    for numpy_forms in (True, False):
        monkeypatch.setattr(adapter_module, "_numpy_ok", lambda values, ok=numpy_forms: ok)
        engine.start(PROMPT, UNCONDITIONAL["uncond-padded"])
        engine.forward(torch.cat([PROMPT, torch.tensor([7, 9])]))
        results.append(engine.forward(torch.tensor([9, 11, 13, 15, 17]), with_support=True))
        assert (engine.support_overflow is None) == numpy_forms
    assert not engine.support_overflow
    (kept_probs, kept), (probs, allowed) = results
    assert torch.equal(kept_probs, probs)
    assert kept.shape[1] < allowed.shape[1] < len(ALLOWED) and allowed.shape == (5, 12 + 16)
    for support in (kept, allowed):
        forced_rows = 0
        for row, ids_row, g in zip(probs, support, range(3, 8)):  # row j predicts generated 3 + j
            listed = ids_row[row[ids_row] > 0]
            assert sorted(listed.tolist()) == torch.nonzero(row > 0).flatten().tolist()
            if (g + 1) % ROW == 0:
                assert ids_row[0] == ROW_END and row[ROW_END] == 1
                forced_rows += 1
        assert forced_rows == 1


class GarbageEngine(StaticEngine):
    """Before every forward, overwrites each slot it must never read with large random values:
    the stale slots after the valid ones and the CFG row's left padding."""

    def forward(self, input_ids, num_rows=None, *, with_support=False):
        layers = [] if self._cache is None else self._cache.layers
        generator = torch.Generator().manual_seed(self.num_forwards)
        for layer in layers:
            if not layer.is_initialized:
                continue
            for states in (layer.keys, layer.values):
                stale = states[:, :, self._slots:]
                stale.copy_(1e4 * torch.randn(stale.shape, generator=generator, dtype=stale.dtype))
                if self._slots:
                    for row, pad in enumerate(self._pad.flatten().tolist()):
                        states[row, :, :pad] = -1e4
        return super().forward(input_ids, num_rows, with_support=with_support)


@pytest.mark.parametrize("name", ["ar", "gsd"])
def test_garbage_in_stale_and_padding_slots_changes_nothing(model, name):
    adapter = make_adapter(model)
    garbage = GarbageEngine(adapter)
    for uncond in UNCONDITIONAL.values():
        eager = decode(adapter, METHODS[name], uncond)
        assert_same_run(eager, decode(adapter, METHODS[name], uncond, runner=garbage))
    assert garbage._pad.flatten().tolist() == [2, 0]  # the last call padded the conditional row


def test_compiled_forward_is_one_graph_per_width_with_no_recompiles(model):
    """fullgraph=True (no graph break: processing and support are traced too), dynamic=False:
    one frame for the window width and one for single tokens, and none after that for other
    prompt lengths, methods and lengths. The backend only counts (inductor's C++ build takes
    minutes on a CPU); the traced graph runs as traced, so the tokens are static-eager's."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    adapter = make_adapter(model)
    engine = StaticEngine(adapter, capture="compile", compile_options=dict(backend=counter))
    assert engine._compile_options == dict(fullgraph=True, dynamic=False, backend=counter)  # a break raises
    uncond = UNCONDITIONAL["uncond-padded"]
    # Warm-up: AR compiles the 1-token width, SJD the window width.
    for name in ("ar", "sjd"):
        assert_same_run(decode(adapter, METHODS[name], uncond, num_tokens=20),
                        decode(adapter, METHODS[name], uncond, runner=engine, num_tokens=20))
    assert counter.frame_count == 2
    for name, uncond_ids, seed in (("gsd", UNCONDITIONAL["cond-padded"], 6), ("sjd", uncond, 7)):
        static = decode(adapter, METHODS[name], uncond_ids, runner="static", seed=seed)
        assert_same_run(static, decode(adapter, METHODS[name], uncond_ids, runner=engine, seed=seed))
    assert counter.frame_count == 2
    assert engine.capture_seconds > 0
    # The model alone compiled, the processing eager after it (capture_processing=False).
    model_only = CompileCounter()
    engine = StaticEngine(adapter, capture="compile", compile_options=dict(backend=model_only),
                          capture_processing=False)
    static = decode(adapter, METHODS["gsd"], uncond, runner="static", num_tokens=20)
    assert_same_run(static, decode(adapter, METHODS["gsd"], uncond, runner=engine, num_tokens=20))
    assert model_only.frame_count == 2 and model_only.op_count < counter.op_count


def test_one_host_read_per_step(model, monkeypatch):
    """The static engine adds no host sync to the loop's one status read per step: the syncs
    of two calls differ by their difference in forwards (the eager adapter adds its own: here
    whether any row is forced, and transformers' mask checks). Also with the torch forms of the
    processing and support (what runs on a GPU: top-k by torch.topk, the allowed ids as GSD's
    support), not only the CPU's numpy forms."""
    adapter = make_adapter(model)
    uncond = UNCONDITIONAL["uncond-padded"]

    def per_step(engine: str) -> float:
        counts = []
        for num_tokens in (8, 20):
            result = []
            syncs = ops_and_syncs(lambda: result.append(decode(adapter, METHODS["gsd"], uncond,
                                                               runner=engine, num_tokens=num_tokens)))[1]
            counts.append((syncs, result[0].nfe))
        (s1, n1), (s2, n2) = counts
        assert n2 > n1
        return (s2 - s1) / (n2 - n1)

    assert per_step("static") == 1
    assert per_step("eager") > 1
    monkeypatch.setattr(adapter_module, "_numpy_ok", lambda values: False)
    assert per_step("static") == 1


def test_eager_attention_gets_an_additive_mask(model):
    """With transformers' eager attention (no CFG: its float32 softmax and padded rows are the
    eager adapter's own limits) the engine matches the adapter to float32 rounding."""
    import copy

    eager_model = copy.deepcopy(model)
    eager_model.set_attn_implementation("eager")
    adapter = make_adapter(eager_model, cfg_scale=None)
    engine = StaticEngine(adapter)
    engine.reserve(20, window=4)
    ids = torch.tensor([7, 9, 11, 13, 15])
    results = []
    for runner in (adapter, engine):
        runner.start(PROMPT)
        results.append([runner.forward(torch.cat([PROMPT, ids[:2]])), runner.forward(ids[2:5])])
    for expected, got in zip(*results):
        assert torch.allclose(expected, got, rtol=0, atol=1e-6)


def test_the_engine_stands_in_for_its_adapter(model):
    adapter = make_adapter(model)
    engine = StaticEngine(adapter)
    assert engine.device == adapter.device and engine.row_length == ROW
    assert engine.random_tokens == adapter.random_tokens and engine.vocab_size == VOCAB
    with pytest.raises(AttributeError):
        engine.no_such_attribute


def test_graphs_are_dropped_when_the_processing_settings_change(model):
    """A recorded graph holds the CFG scale, top-k and temperature as constants: ``start`` drops
    the graphs when they change (and keeps them otherwise)."""
    adapter = make_adapter(model)
    engine = StaticEngine(adapter)
    engine.reserve(8, window=2)
    engine.start(PROMPT, UNCONDITIONAL["uncond-padded"])
    engine._graphs[(3, 128)] = "recorded"
    engine.start(PROMPT, UNCONDITIONAL["cond-padded"])
    assert engine._graphs == {(3, 128): "recorded"}
    adapter.cfg_scale = 2.5
    engine.start(PROMPT, UNCONDITIONAL["uncond-padded"])
    assert engine._graphs == {}


def test_graphs_are_kept_when_methods_alternate(model):
    """AR (window 0) keeps the window width and its graph; a new window width drops that
    width's graph only, never the 1-token one: graphs are recorded once per width, not inside
    every call that follows another method's."""
    adapter = make_adapter(model)
    engine = StaticEngine(adapter)
    uncond = UNCONDITIONAL["uncond-padded"]
    decode(adapter, METHODS["sjd"], uncond, runner=engine, num_tokens=12)
    recorded = {(1, 128): "one token", (5, 128): "window of 4", (5, 256): "window of 4, longer"}
    engine._graphs.update(recorded)
    for name in ("ar", "gsd", "ar"):
        static = decode(adapter, METHODS[name], uncond, runner=engine, num_tokens=12)
        assert_same_run(static, decode(adapter, METHODS[name], uncond, num_tokens=12))
        assert engine._graphs == recorded
    decode(adapter, METHODS["gsd-repeat-row"], uncond, runner=engine, num_tokens=12)  # window 7
    assert engine._graphs == {(1, 128): "one token"}


def test_bad_engine_input(model):
    adapter = make_adapter(model)
    with pytest.raises(ValueError, match="unknown engine"):
        decode(adapter, METHODS["ar"], UNCONDITIONAL["uncond-padded"], runner="fast")
    with pytest.raises(ValueError, match="another adapter"):
        decode(adapter, METHODS["ar"], UNCONDITIONAL["uncond-padded"], runner=StaticEngine(make_adapter(model)))
    with pytest.raises(ValueError, match="unknown capture"):
        StaticEngine(adapter, capture="cudagraph")
    with pytest.raises(ValueError, match="CUDA graphs"):
        StaticEngine(adapter, capture="graph")
    with pytest.raises(ValueError, match="compile_options"):
        StaticEngine(adapter, compile_options={"backend": "eager"})
    engine = StaticEngine(adapter)
    with pytest.raises(ValueError, match="reserve"):
        engine.start(PROMPT, UNCONDITIONAL["uncond-padded"])
    with pytest.raises(ValueError, match="start"):
        engine.forward(PROMPT)
    engine.reserve(4, window=2)
    engine.start(PROMPT, UNCONDITIONAL["uncond-padded"])
    with pytest.raises(ValueError, match="begin with the prompt"):
        engine.forward(torch.tensor([5, 6, 7, 8]))
    engine.forward(PROMPT)
    with pytest.raises(ValueError, match="crop length"):
        engine.crop(PROMPT.numel() + 1)
    too_long = torch.arange(2, 2 + engine.capacity)
    with pytest.raises(ValueError, match="static cache holds"):
        engine.forward(too_long)
    import copy

    flash = LlamaForCausalLM(copy.deepcopy(model.config)).eval()  # not the fixture's config
    flash.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="attn_implementation='sdpa'"):
        StaticEngine(CausalLMAdapter(flash, ALLOWED))


def test_cli_engine_static_decodes_the_same_tokens(capsys):
    from gsd_lab.cli import main

    reports = []
    for engine in ("eager", "static"):
        args = ["generate", "--model", "tiny-random", "--method", "gsd", "--group-size", "10", "--class", "1",
                "--seed", "3", "--json", "--threads", "1", "--runner", engine]
        assert main(args) == 0
        reports.append(json.loads(capsys.readouterr().out))
    assert [r["runner"] for r in reports] == ["eager", "static"]
    assert reports[0]["tokens"] == reports[1]["tokens"] and reports[0]["nfe"] == reports[1]["nfe"]


@pytest.mark.parametrize("name", ["ar", "sjd", "gsd"])
def test_attention_over_the_filled_prefix_decodes_the_same_tokens(model, name):
    """length_step = 8: attention reads the first L slots, L the filled slots rounded up to 8
    (many lengths in one call), with garbage in every slot it must not read: the dynamic cache's
    tokens, nfe and acceptances. length_step=None reads all C slots: the same again."""
    adapter = make_adapter(model)
    uncond = UNCONDITIONAL["cond-padded"]
    eager = decode(adapter, METHODS[name], uncond)
    short = GarbageEngine(adapter, length_step=8)
    assert_same_run(eager, decode(adapter, METHODS[name], uncond, runner=short))
    whole = StaticEngine(adapter, length_step=None)
    assert_same_run(eager, decode(adapter, METHODS[name], uncond, runner=whole))
    lengths = []
    forward = short.forward
    short.forward = lambda *a, **k: (forward(*a, **k), lengths.append(short._length[0]))[0]
    decode(adapter, METHODS[name], uncond, runner=short)
    assert lengths == sorted(lengths) and len(set(lengths)) > 3
    assert all(n % 8 == 0 for n in lengths)
    assert lengths[-1] < short.capacity


def test_compiled_forward_is_one_frame_per_width_and_length(model):
    """Compiled with length_step = 16: one frame per (width, L) met, none when the same call
    runs again (every shape met once already), the tokens static-eager's."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    adapter = make_adapter(model)
    engine = StaticEngine(adapter, capture="compile", compile_options={"backend": counter},
                          length_step=16)
    uncond = UNCONDITIONAL["uncond-padded"]
    static = decode(adapter, METHODS["sjd"], uncond, runner=StaticEngine(adapter, length_step=16))
    assert_same_run(static, decode(adapter, METHODS["sjd"], uncond, runner=engine))
    frames = counter.frame_count
    assert frames == len(engine._graphs) > 2 and {w for w, _ in engine._graphs} == {1, 5}
    assert_same_run(static, decode(adapter, METHODS["sjd"], uncond, runner=engine))
    assert counter.frame_count == frames


class TiedAdapter(RowEndAdapter):
    """At generated positions 4 mod 9 every logit set to 0 (after CFG, before top-k): all allowed
    ids tie at the k-th value, so the row keeps all 40, more than the top-k + 16 = 28 that the
    static engine's fixed-width support holds; other positions untouched."""

    def process_logits(self, logits, generated_positions):
        coarse = (generated_positions % 9 == 4).unsqueeze(-1)
        logits.masked_fill_(coarse, 0.0)
        return super().process_logits(logits, generated_positions)


@pytest.mark.parametrize("name", ["gsd", "gsd-repeat-row"])
def test_top_k_support_overflow_falls_back_to_the_same_tokens(model, monkeypatch, name):
    """The torch forms (as on a GPU): the engine's top-k support, the loop's fallback where a
    row keeps more ids than it holds (verify again on whole rows, the same uniforms): the eager
    adapter's tokens, nfe and acceptances, with overflows and without."""
    monkeypatch.setattr(adapter_module, "_numpy_ok", lambda values: False)
    adapter = TiedAdapter(model, ALLOWED, cfg_scale=2.0, top_k=12, row_length=ROW,
                          compute_dtype=torch.float64)
    engine = StaticEngine(adapter)
    flags = []
    original = StaticEngine.forward

    def spy(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if self.support_overflow is not None:
            flags.append(bool(self.support_overflow))
        return out

    monkeypatch.setattr(StaticEngine, "forward", spy)
    import gsd_lab.decode.loop as decoding_module

    fallbacks = []
    verify = decoding_module.verify

    def counted(*args, **kwargs):
        fallbacks.append("support" not in kwargs)
        return verify(*args, **kwargs)

    monkeypatch.setattr(decoding_module, "verify", counted)
    for uncond in UNCONDITIONAL.values():
        assert_same_run(decode(adapter, METHODS[name], uncond),
                        decode(adapter, METHODS[name], uncond, runner=engine))
    assert any(flags) and not all(flags)
    assert sum(fallbacks) == sum(flags)  # one verify on whole rows per overflowing forward


def test_compile_cache_file_is_loaded_first_and_saved_after(model, tmp_path, monkeypatch):
    """compile_cache: inductor's artifacts are read from the file before the first compilation
    when it exists and written (atomically) after each; nothing is written when torch has none
    (a tracing-only backend). Inductor itself is stubbed (a CPU build takes minutes: on this
    2-core machine a 1-layer model's 1-token width took 262 s cold, 80 s from the file)."""
    from torch._dynamo.testing import CompileCounter

    calls = []
    artifacts = [None]
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts",
                        lambda data: calls.append(("load", data)) or "info")
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts",
                        lambda: calls.append(("save",)) or artifacts[0])
    adapter = make_adapter(model)
    path = tmp_path / "cache" / "inductor.bin"

    def run():
        engine = StaticEngine(adapter, capture="compile", compile_cache=path,
                              compile_options={"backend": CompileCounter()})
        decode(adapter, METHODS["sjd"], UNCONDITIONAL["uncond-padded"], runner=engine,
               num_tokens=8)
        return engine

    engine = run()
    assert calls == [("save",), ("save",)]
    assert not path.exists() and not engine.compile_cache_loaded
    calls.clear()
    artifacts[0] = (b"compiled kernels", "info")
    engine = run()
    assert calls == [("save",), ("save",)] and path.read_bytes() == b"compiled kernels"
    assert not engine.compile_cache_loaded and not list(path.parent.glob("*.partial"))
    calls.clear()
    engine = run()
    assert calls[0] == ("load", b"compiled kernels") and engine.compile_cache_loaded
    with pytest.raises(ValueError, match="compile_cache is for capture 'compile'"):
        StaticEngine(adapter, compile_cache=path)
