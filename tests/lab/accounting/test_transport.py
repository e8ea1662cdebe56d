"""gsd_lab.accounting.transport: W1(one-step law, p) with the codes' content distance, exact and estimated."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gsd_core import (Amplify, DynamicClusters, FixedPartition, Lantern, RankBinnedClusters, acceptance_rate,
                      latent_neighbourhoods)
from gsd_lab.accounting.distortion import exact_distortion, one_step_output_laws
from gsd_lab.accounting.transport import (
    W1Log,
    content_distances,
    substitution_cost,
    substitution_defined,
    w1_distortion,
    w1_from_laws,
)

ot = pytest.importorskip("ot")


def _rows(seed: int, vocab: int = 10, rows: int = 6, one_hot_q: bool = False):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(2 * torch.randn(rows, vocab, generator=g, dtype=torch.float64), -1)
    if one_hot_q:
        q = torch.nn.functional.one_hot(torch.randint(vocab, (rows,), generator=g), vocab).double()
    else:
        q = torch.softmax(2 * torch.randn(rows, vocab, generator=g, dtype=torch.float64), -1)
    return p, q, torch.randn(vocab, 3, generator=g, dtype=torch.float64)


def test_w1_hand_value_and_distances():
    content = torch.tensor([[0.0], [1.0], [3.0]], dtype=torch.float64)  # D = 1: d(x, y) = |c_x - c_y|
    p = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    out = torch.tensor([[0.5, 0.0, 0.5]], dtype=torch.float64)  # half the mass moves from 1 to 3
    assert float(w1_from_laws(p, out, content, torch.arange(3))[0]) == pytest.approx(1.0, abs=1e-15)
    assert float(w1_from_laws(p, p, content, torch.arange(3))[0]) == 0.0
    # RMS per coordinate: D = 4, every coordinate 0.5 apart -> d = 0.5.
    block = torch.tensor([[0.0] * 4, [0.5] * 4], dtype=torch.float64)
    assert torch.allclose(content_distances(block, torch.tensor([0]), torch.tensor([1])),
                          torch.tensor([[0.5]], dtype=torch.float64), atol=1e-15)


def test_w1_matches_the_1d_closed_form_pot_on_full_supports_and_an_independent_lp():
    from scipy.optimize import linprog

    p, q, emb = _rows(0, vocab=9, rows=5)
    out = one_step_output_laws(p, q, DynamicClusters(4))
    tokens = torch.arange(9)
    # 1-D content: W1 = integral |F_out - F_p| over the sorted positions.
    line = emb[:, :1]
    order = torch.argsort(line[:, 0])
    gaps = line[order, 0].diff()
    closed = ((out[:, order].cumsum(-1) - p[:, order].cumsum(-1))[:, :-1].abs() * gaps).sum(-1)
    assert torch.allclose(w1_from_laws(p, out, line, tokens), closed, rtol=0, atol=1e-12)
    # 3-D content: POT on the full supports of out and p (no Kantorovich-Rubinstein reduction), and
    # an LP solved by scipy's HiGHS (another solver) on the same costs.
    got = w1_from_laws(p, out, emb, tokens)
    cost = content_distances(emb, tokens, tokens).numpy()
    for i in range(p.shape[0]):
        full = ot.emd2(out[i].numpy(), p[i].numpy(), cost)
        assert float(got[i]) == pytest.approx(full, abs=1e-12)
        n = p.shape[1]
        rows = np.kron(np.eye(n), np.ones(n))  # sum_y pi(x, y) = out(x)
        cols = np.kron(np.ones(n), np.eye(n))  # sum_x pi(x, y) = p(y)
        lp = linprog(cost.reshape(-1), A_eq=np.vstack([rows, cols]), b_eq=np.concatenate([out[i], p[i]]),
                     bounds=(0, None), method="highs")
        assert float(got[i]) == pytest.approx(lp.fun, abs=1e-9)
        assert float(got[i]) > 1e-3  # GSD moved mass on these rows


@pytest.mark.parametrize("rule", ["gsd", "amplify"])
def test_w1_of_a_fresh_one_hot_draft_is_its_closed_form(rule):
    """q = one-hot at x: out = a delta_x + (1 - a) p(. | y != x), so all moved mass goes to x:
    W1 = (a - p(x)) / (1 - p(x)) sum_{y != x} p(y) d(x, y), a = the exact acceptance."""
    p, q, emb = _rows(1, one_hot_q=True)
    method = DynamicClusters(4) if rule == "gsd" else Amplify(2.0)
    got = w1_distortion(p, q, emb, torch.arange(10), method)
    accept = acceptance_rate(p, q, method)
    x = q.argmax(-1)
    distance = content_distances(emb, torch.arange(10), torch.arange(10))
    px = p.gather(-1, x[:, None]).squeeze(-1)
    want = (accept - px) / (1 - px) * (p * distance[x]).sum(-1)
    assert torch.allclose(got, want, rtol=0, atol=1e-13) and float(want.max()) > 1e-3


def test_w1_zero_for_sd_and_between_the_tv_bounds():
    p, q, emb = _rows(2)
    tokens = torch.arange(10)
    assert float(w1_distortion(p, q, emb, tokens).abs().max()) <= 1e-12  # POT on SD's rounding: ~0
    assert float(w1_distortion(p.float(), q.float(), emb, tokens).abs().max()) <= 1e-12
    distance = content_distances(emb, tokens, tokens)
    off = distance[~torch.eye(10, dtype=torch.bool)]
    for method in (RankBinnedClusters(3), Amplify(3.0), Lantern(latent_neighbourhoods(emb, 4), 0.2)):
        w1, tv = w1_distortion(p, q, emb, tokens, method), exact_distortion(p, q, method)
        assert bool((w1 >= float(off.min()) * tv - 1e-12).all() and (w1 <= float(off.max()) * tv + 1e-12).all())
    with pytest.raises(ValueError, match="without decoded content"):
        w1_distortion(p, q, emb[:8], torch.arange(8), Amplify(3.0))  # tokens 8, 9 moved, no content
    with pytest.raises(ValueError, match="distinct"):
        w1_distortion(p, q, emb, torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 8]))


def test_substitution_cost_hand_value_bound_and_definition():
    content = torch.tensor([[0.0], [1.0], [2.0], [4.0]], dtype=torch.float64)
    p = torch.tensor([[0.4, 0.1, 0.3, 0.2]], dtype=torch.float64)
    q = torch.tensor([[0.1, 0.4, 0.25, 0.25]], dtype=torch.float64)
    rule = FixedPartition(torch.tensor([0, 0, 1, 1]), "cluster")
    # Clusters {0, 1}: min(q', p') = 0.5, W1((.2, .8), (.8, .2)) on {0, 1} = 0.6; {2, 3}: 0.5 x
    # W1((.5, .5), (.6, .4)) on {2, 4} = 0.5 x 0.2. S = 0.3 + 0.1.
    got = substitution_cost(p, q, content, torch.arange(4), rule)
    assert float(got[0]) == pytest.approx(0.4, abs=1e-15)
    p, q, emb = _rows(3)
    tokens = torch.arange(10)
    for rule in (RankBinnedClusters(3, "cluster"), FixedPartition(torch.arange(10) % 4, "cluster")):
        s = substitution_cost(p, q, emb, tokens, rule)
        w1 = w1_distortion(p, q, emb, tokens, rule)
        assert bool((s >= w1 - 1e-12).all()) and float((s - w1).max()) > 1e-3  # a coupling, not the cheapest
    assert torch.equal(substitution_cost(p, q, emb, tokens), torch.zeros(6, dtype=torch.float64))  # SD
    assert substitution_defined(None) and not substitution_defined(Amplify(2.0))
    for rule in (RankBinnedClusters(3), DynamicClusters(3), Amplify(2.0, RankBinnedClusters(3, "cluster")),
                 Lantern(latent_neighbourhoods(emb, 3), 0.1)):
        with pytest.raises(ValueError, match="defined for SD or a partition"):
            substitution_cost(p, q, emb, tokens, rule)


def _population(seed: int = 4, rows: int = 7):
    """Verified rows of one 'image' (Amplify k = 2): their exact TV and W1."""
    p, q, emb = _rows(seed, vocab=8, rows=rows)
    tv = exact_distortion(p, q, Amplify(2.0))
    w1 = w1_distortion(p, q, emb, torch.arange(8), Amplify(2.0))
    return p, q, emb, tv, w1


def test_pps_estimator_is_unbiased_within_its_bounds_and_error_bars():
    p, q, emb, tv, w1 = _population()
    num_tokens = 10  # 7 verified rows + 3 tokens of TV 0 (bonus tokens)
    exact = float(w1.sum()) / num_tokens
    ratio = (w1 / tv).numpy()
    scale = float(tv.sum()) / num_tokens
    estimates, errors, held = [], [], torch.zeros(7)
    for seed in range(400):
        log = W1Log(emb, torch.arange(8), num_tokens, Amplify(2.0), draws=3, seed=seed)
        log.add(0, p[:4], q[:4], tv[:4])  # two forward passes: rows 0-3, then 4-6 and a bonus
        log.add(4, torch.cat([p[4:], p[:1]]), q[4:], torch.cat([tv[4:], tv.new_zeros(1)]))
        drawn = [entry[0] for entry in log.held]
        for row in drawn:
            held[row] += 1
        estimate = scale * ratio[drawn].mean()  # the module's formula on the rows drawn
        estimates.append(estimate)
        errors.append(scale * ratio[drawn].std(ddof=1) / math.sqrt(3))
        if seed < 3:  # finish() solves those rows and gives the same numbers
            result = log.finish(num_tokens)
            assert result.mean == pytest.approx(estimate, abs=1e-13) and result.sem == pytest.approx(errors[-1])
            assert result.rows == len(set(drawn)) and result.draws == 3 and result.tokens is None
    estimates = np.asarray(estimates)
    # Deterministic bounds: a mean of ratios W1/TV times the mean TV.
    assert scale * ratio.min() - 1e-12 <= estimates.min() and estimates.max() <= scale * ratio.max() + 1e-12
    spread = estimates.std(ddof=1)
    assert abs(estimates.mean() - exact) <= 4 * spread / math.sqrt(len(estimates))  # unbiased
    # The reported SE tracks the actual spread of the estimate (a 3-draw SE is itself noisy).
    assert 0.6 < math.sqrt(np.mean(np.square(errors))) / spread < 1.6
    # Each reservoir holds row t with probability TV_t / T.
    share = tv / tv.sum()
    frequency = held / 1200
    assert bool(((frequency - share).abs() <= 4 * (share * (1 - share) / 1200).sqrt()).all())


def test_exact_mode_and_lossless_rows():
    p, q, emb, tv, w1 = _population()
    log = W1Log(emb, torch.arange(8), 8, Amplify(2.0), draws=None)
    log.add(0, p, q, tv)
    result = log.finish(8)
    assert torch.allclose(result.tokens[:7], w1, rtol=0, atol=1e-15) and float(result.tokens[7]) == 0.0
    assert result.mean == pytest.approx(float(w1.sum()) / 8) and result.sem == 0.0 and result.rows == 7
    sd = W1Log(emb, torch.arange(8), 8, draws=2)
    sd.add(0, p, q, exact_distortion(p, q))  # SD: TVs of float64 rounding, never drawn
    assert sd.finish(8).mean == 0.0
    with pytest.raises(ValueError, match="draws"):
        W1Log(emb, torch.arange(8), 8, draws=0)


def test_accounting_keeps_the_tokens_and_records_on_the_tiny_model():
    from gsd_lab.decode.loop import generate
    from gsd_lab.experiments.image_model import tiny_random_model
    from gsd_lab.decode.methods import DecodingMethod, AmplifyAcceptance, ClusterAcceptance

    torch.set_num_threads(1)
    model = tiny_random_model(0)
    prompt, uncond = model.encode("1")

    def run(method, **kwargs):  # 24 of the image's 64 tokens: enough windows, a few seconds
        return generate(model.adapter, prompt, method, num_tokens=24, uncond_prompt_ids=uncond,
                        generator=torch.Generator().manual_seed(3), **kwargs)

    for method in (DecodingMethod("sjd", acceptance=AmplifyAcceptance(scale=2.0)),
                   DecodingMethod("gsd", acceptance=ClusterAcceptance(clusters="rank-binned", group_size=4), residual="cluster")):
        plain = run(method)
        exact = run(method, record_distortion=True, record_w1=True, w1_draws=None)
        sampled = run(method, record_distortion=True, record_w1=True, w1_draws=2)
        for result in (exact, sampled):
            assert torch.equal(result.tokens, plain.tokens) and result.nfe == plain.nfe
            assert result.accounting_seconds >= result.w1.seconds > 0
        assert exact.w1.tokens.shape == (24,) and exact.w1.mean == float(exact.w1.tokens.mean())
        assert 0 < exact.w1.mean and sampled.w1.draws == 2
        assert (exact.w1.substitution is not None) == (method.kind == "gsd")
        if method.kind == "gsd":
            assert exact.w1.substitution >= exact.w1.mean - 1e-12
    for kind in ("ar", "sjd"):
        lossless = run(DecodingMethod(kind), record_distortion=True, record_w1=True)
        assert lossless.w1.mean == 0.0 and lossless.w1.substitution == 0.0
    with pytest.raises(ValueError, match="record_w1 needs"):
        run(DecodingMethod("sjd"), record_w1=True)


def test_code_content_of_the_tiny_model_is_what_decode_paints():
    from gsd_lab.experiments.image_model import tiny_random_model

    model = tiny_random_model(0)
    content = model.adapter.code_content()
    codes = model.adapter.allowed_tokens
    assert content.shape == (codes.numel(), 48)
    tokens = codes[torch.arange(64) % codes.numel()]
    image = torch.from_numpy(model.decode(tokens)).to(torch.float64)  # [32, 32, 3] uint8 values
    for position in (0, 9, 63):
        block = image[4 * (position // 8): 4 * (position // 8) + 4, 4 * (position % 8): 4 * (position % 8) + 4]
        row = content[int(torch.searchsorted(codes, tokens[position]))].view(16, 3)
        assert torch.allclose((row + 1) * 127.5, block.reshape(16, 3), atol=1e-9)


def test_code_content_of_the_standin_is_each_code_s_decoded_patch():
    from gsd_lab.standin.adapter import load_standin
    from gsd_lab.standin.tokenizer import image_to_patches

    adapter = load_standin()
    content = adapter.code_content()
    assert content.shape[0] == adapter.allowed_tokens.numel() and float(content.abs().max()) <= 1.0
    tokens = torch.randint(adapter.allowed_tokens.numel(), (1, adapter.num_image_tokens),
                           generator=torch.Generator().manual_seed(0))
    side = int(adapter.num_image_tokens ** 0.5)
    codes = (adapter.allowed_tokens[tokens] - adapter.allowed_tokens[0]).view(1, side, side)
    tiles = adapter.tokenizer.decode_tiles(codes)  # [1, 3, H, W] in [-1, 1], before the seam decoder
    patches = image_to_patches(tiles.to(torch.float64), adapter.tokenizer.patch)[0]  # raster order, as the codes
    assert torch.equal(patches, content[tokens[0]].to(torch.float64))
    # The seam decoder blends the tiles: the picture is close to its tiles, not equal.
    image = adapter.decode_images(tokens, as_uint8=False).to(torch.float64)
    assert 0 < float((image - tiles.to(torch.float64)).abs().mean()) < 0.2


def test_code_content_of_lumina_is_the_vqgan_codebook_and_w1_skips_forced_tokens(tmp_path):
    from gsd_lab.decode.loop import generate
    from gsd_lab.decode.methods import AmplifyAcceptance, DecodingMethod
    from gsd_lab.models.lumina_mgpt import load_lumina_mgpt
    from gsd_lab.testing.tiny_checkpoints import write_tiny_lumina_checkpoint, write_tiny_vqgan

    weights = write_tiny_lumina_checkpoint(tmp_path / "w", num_layers=1, num_shards=1)
    vqgan = write_tiny_vqgan(tmp_path / "v", n_embed=64)
    assert load_lumina_mgpt(weights, resolution=64, device="cpu").code_content() is None  # no VQGAN
    adapter = load_lumina_mgpt(weights, vqgan_dir=vqgan, resolution=64, device="cpu")
    content = adapter.code_content()
    allowed = adapter.allowed_tokens
    grid = allowed[torch.arange(16).view(4, 4) * 3 % allowed.numel()]  # 4 rows of 4 codes
    tokens = torch.cat([grid, torch.full((4, 1), adapter.layout.row_end)], 1).reshape(-1)
    z = adapter.vqgan.quantize.embedding(adapter.image_codes(tokens))[0]  # what the decoder receives
    assert torch.equal(z.reshape(16, -1), content[torch.searchsorted(allowed, grid.reshape(-1))])
    method = DecodingMethod("sjd", window=4, acceptance=AmplifyAcceptance(scale=2.0))
    prompt = adapter.text_ids_to_prompt([5, 6])
    plain = generate(adapter, prompt, method, num_tokens=adapter.num_image_tokens,
                     generator=torch.Generator().manual_seed(1))
    result = generate(adapter, prompt, method, num_tokens=adapter.num_image_tokens,
                      generator=torch.Generator().manual_seed(1), record_distortion=True, record_w1=True, w1_draws=None)
    assert torch.equal(plain.tokens, result.tokens) and result.w1.mean > 0  # row ends: forced, W1 0 there
    row_ends = (torch.arange(adapter.num_image_tokens) + 1) % adapter.layout.row_length == 0
    assert float(result.w1.tokens[row_ends].abs().max()) == 0.0


def test_streamed_paper_runs_record_w1_in_their_result_rows(tmp_path):
    from gsd_lab.experiments import tables
    from gsd_lab.experiments.image_model import tiny_random_model
    from gsd_lab.experiments.runs import FilterSettings, Recording
    from gsd_lab.experiments.stream import Configuration, StreamedRunCache

    torch.set_num_threads(1)
    model = tiny_random_model(0)
    specs = [tables.AR, tables.amplify(2.0)]
    cache = StreamedRunCache(model, ["0", "1"], [0], FilterSettings(), tmp_path, weights={"test": "tiny"},
                             progress=False,
                             recording=Recording(distortion=True, w1=None, w1_draws=2))
    cache.storage.plan([Configuration(spec) for spec in specs])
    assert cache.storage.run() == 4
    rows = {r["method"]: r for r in cache.table(specs, tables.AR)}
    assert rows["AR"]["w1"] == 0.0 and rows["Amplify (k=2)"]["w1"] > 0
    # The substitution cost stays in the records (defined for SD: 0) but not in the tables: it is
    # undefined for GSD's dynamic rule, Amplify and LANTERN (gsd_lab.experiments.runs).
    assert cache.records(specs[0])[0].substitution == 0.0
    assert not any(key.startswith("substitution") for row in rows.values() for key in row)
    assert rows["Amplify (k=2)"]["per_image"]["w1"] == [r.w1 for r in cache.records(specs[1])]
    assert sum(cache.w1_seconds()) > 0


def test_release_preset_rows_with_a_forced_token_are_exact_and_w1_runs(tmp_path):
    """Random drafts at row ends (the release preset) that a rule without filters clusters with the
    forced row-end token (G above the vocabulary: every window holds it) are overruled to the
    forced token, p's only token there: distortion 0 at every row end, and W1 (which has no
    content for the row-end token) is solved without error."""
    from gsd_lab.decode.loop import generate
    from gsd_lab.decode.methods import ClusterAcceptance, DecodingMethod
    from gsd_lab.models.lumina_mgpt import load_lumina_mgpt
    from gsd_lab.testing.tiny_checkpoints import write_tiny_lumina_checkpoint, write_tiny_vqgan

    weights = write_tiny_lumina_checkpoint(tmp_path / "w", num_layers=1, num_shards=1)
    adapter = load_lumina_mgpt(weights, vqgan_dir=write_tiny_vqgan(tmp_path / "v", n_embed=64), resolution=64,
                               device="cpu")
    method = DecodingMethod("gsd", acceptance=ClusterAcceptance(clusters="dynamic-nofilter", group_size=20000), window=15, preset="release")
    result = generate(adapter, adapter.text_ids_to_prompt([5, 6]), method, num_tokens=adapter.num_image_tokens,
                      generator=torch.Generator().manual_seed(1), record_distortion=True, record_w1=True, w1_draws=None)
    row_ends = (torch.arange(adapter.num_image_tokens) + 1) % adapter.layout.row_length == 0
    assert float(result.distortion[row_ends].abs().max()) == 0.0 and float(result.distortion.max()) > 0
    assert float(result.w1.tokens[row_ends].abs().max()) == 0.0 and result.w1.mean > 0


def test_content_check_is_cached_by_identity_and_gives_the_same_values():
    """The float64 content and the token index are built once per content object (a run solves
    a few rows per image against one table); another object is checked again."""
    from gsd_lab.accounting import transport

    p, q, content = _rows(7, vocab=12, rows=5)
    tokens = torch.arange(12)
    laws = one_step_output_laws(p, q, DynamicClusters(group_size=3))
    transport._CONTENT_CACHE.clear()
    first = w1_from_laws(p, laws, content, tokens)
    assert len(transport._CONTENT_CACHE) == 1
    cached64 = transport._CONTENT_CACHE[0][3]
    again = w1_from_laws(p, laws, content, tokens)
    assert transport._CONTENT_CACHE[0][3] is cached64 and len(transport._CONTENT_CACHE) == 1
    assert torch.equal(first, again)
    transport._CONTENT_CACHE.clear()
    assert torch.equal(first, w1_from_laws(p, laws, content.clone(), tokens.clone()))
    broken = content.clone()
    broken[0, 0] = math.nan  # a new object: checked, not served from the cache
    with pytest.raises(ValueError, match="non-finite"):
        w1_from_laws(p, laws, broken, tokens)
