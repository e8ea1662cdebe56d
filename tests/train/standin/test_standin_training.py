"""The stand-in's training script runs end to end (tiny sizes, a few steps) and its output loads;
the data split keeps training and held-out pixels apart."""

import json

import pytest
import torch

from gsd_lab.standin.adapter import load_standin
from gsd_lab.standin import data
from gsd_train.standin.__main__ import main

# One thread: beside another xdist worker, a 2-thread pool stalls (and the setting outlives main).
TINY = ["--tiny", "--threads", "1", "--tokenizer-iterations", "2", "--tokenizer-patches", "3000",
        "--decoder-steps", "2"]


AR_ARGS = ["--steps", "2", "--batch", "2", "--eval-every", "1"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One tiny run of every stage (the slowest part of this file: shared by the tests)."""
    out = tmp_path_factory.mktemp("standin") / "run"
    assert main(["train", "--out", str(out), *TINY, "--classifier-steps", "2", *AR_ARGS]) == 0
    return out


def test_train_script_end_to_end_tiny(tiny_run):
    out = tiny_run
    for name in ("tokenizer.safetensors", "classifier.safetensors", "ar_model.safetensors",
                 "ar_config.json", "manifest.json", "reference_outputs.json", "samples.png",
                 "generation_stats.json", "train_log.jsonl"):
        assert (out / name).is_file(), name
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in log} == {"tokenizer", "decoder", "classifier", "ar", "export"}
    evals = [r for r in log if r.get("stage") == "ar" and "step" in r]
    assert len(evals) == 2 and all(0 <= r["heldout_windows"]["share_top1_below_5pct"] <= 1 for r in evals)
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["sources"]) > 10 and manifest["image_size"] == 256
    assert all(s["raw_sha256"] and s["licence"] for s in manifest["sources"])
    adapter = load_standin(weights_dir=out)
    reference = json.loads((out / "reference_outputs.json").read_text())
    assert len(reference["tokens"]) == adapter.num_image_tokens
    from gsd_lab.standin.sampling import sample_tokens

    tokens, _ = sample_tokens(adapter.model, adapter.layout, torch.tensor([0]), cfg_scale=3.0,
                              top_k=reference["top_k"], generator=torch.Generator().manual_seed(0))
    assert tokens[0].tolist() == reference["tokens"]  # same seed, same stored weights


def test_training_is_reproducible(tiny_run, tmp_path):
    """Same seed, same arguments: a second run of the tokenizer and AR stages writes a
    byte-identical AR model and the same codebook (each stage seeds itself, so the stages the
    second run skips change nothing; the decoder stage re-saves the tokenizer with its decoder)."""
    from safetensors.torch import load_file

    out = tmp_path / "again"
    assert main(["train", "--out", str(out), *TINY, "--stages", "tokenizer,ar", *AR_ARGS]) == 0
    assert (out / "ar_model.safetensors").read_bytes() == (tiny_run / "ar_model.safetensors").read_bytes()
    first, second = (load_file(d / "tokenizer.safetensors") for d in (tiny_run, out))
    codebooks = [k for k in second if "codebook" in k]
    assert codebooks and all(torch.equal(first[k], second[k]) for k in codebooks)


def test_training_and_heldout_crops_share_no_pixel():
    """Every training crop position avoids the held-out cells; every held-out crop lies in one."""
    source = data.load_sources("classes")[0]
    size, held_size = data.IMAGE_SIZE, data.HELDOUT_CROP
    for scale in (1.0, 1.2):
        view = data.make_view(source, scale, flip=True)
        corners = data.valid_corners(view, size, "train")
        assert corners.shape[0] > 0
        for top, left in corners[::97].tolist():
            assert not view.touches[top: top + size, left: left + size].any()
    view = data.make_view(source, 1.0, flip=False)
    held = data.valid_corners(view, held_size, "heldout")
    assert held.shape[0] > 0
    for top, left in held.tolist():
        assert source.heldout_mask[top: top + held_size, left: left + held_size].all()


def test_heldout_cells_are_spread_out():
    """Held-out cells of every source: pairwise not touching, a share of the pixels, and over
    all classes not only corner cells (interior and edge cells too)."""
    kinds = set()
    for source in data.load_sources("all"):
        cells = source.heldout_cells
        rows, cols = source.cell_grid
        assert len(cells) == data.HELDOUT_CELLS
        for i, a in enumerate(cells):
            for b in cells[i + 1:]:
                assert max(abs(a[0] - b[0]), abs(a[1] - b[1])) >= 2
            border = (a[0] in (0, rows - 1)) + (a[1] in (0, cols - 1))
            kinds.add(("interior", "edge", "corner")[border])
        share = float(source.heldout_mask.double().mean())
        assert 0.08 < share < 0.25, (source.name, share)
    assert kinds == {"interior", "edge", "corner"}


def test_heldout_cells_draw_is_deterministic_and_separated():
    generator = torch.Generator().manual_seed(0)
    cells = data.heldout_cells(4, 4, 3, generator)
    assert cells == data.heldout_cells(4, 4, 3, torch.Generator().manual_seed(0))
    assert all(max(abs(a[0] - b[0]), abs(a[1] - b[1])) >= 2 for i, a in enumerate(cells) for b in cells[i + 1:])
    with pytest.raises(ValueError, match="separated"):
        data.heldout_cells(2, 2, 2, generator)


def test_window_counts_match_brute_force():
    mask = torch.rand(9, 11, generator=torch.Generator().manual_seed(3)) < 0.3
    counts = data.window_counts(mask, 4)
    for i in range(6):
        for j in range(8):
            assert counts[i, j] == mask[i: i + 4, j: j + 4].sum()


def test_token_windows_respect_the_split():
    """Training windows hold no token that touches a held-out pixel; held-out windows score
    exactly their tokens inside held-out pixels, at least ``min_scored`` of them."""
    from gsd_train.standin.ar import TokenMap, TokenMapDataset

    g = torch.Generator().manual_seed(0)
    inside = torch.zeros(24, 30, dtype=torch.bool)
    inside[3:9, 4:12] = True
    inside[15:21, 20:27] = True
    touches = torch.nn.functional.max_pool2d(inside[None, None].float(), 3, 1, 1)[0, 0] > 0
    codes = torch.arange(24 * 30, dtype=torch.int16).view(24, 30)  # token value = its position
    maps = [[TokenMap(codes, touches, inside)], [TokenMap(codes, touches, inside)]]
    train = TokenMapDataset(grid=6, split="train", maps=maps)
    held = TokenMapDataset(grid=6, split="heldout", maps=maps, min_scored=10)
    tokens, groups, scored = train.sample_with_mask(200, g)
    assert scored.all() and set(groups.tolist()) == {0, 1}
    assert not touches.flatten()[tokens].any()
    tokens, _, scored = held.sample_with_mask(200, g)
    assert torch.equal(scored, inside.flatten()[tokens]) and (scored.sum(1) >= 10).all()
    assert held.num_windows == 2 * int((data.window_counts(inside, 6) >= 10).sum())


def test_heldout_windows_follow_the_training_views():
    """With ``like``, held-out windows come only from maps (views) that have training windows,
    in proportion to their training window counts."""
    from gsd_train.standin.ar import TokenMap, TokenMapDataset

    inside = torch.zeros(12, 12, dtype=torch.bool)
    inside[:4, :4] = True
    open_map = TokenMap(torch.zeros(12, 12, dtype=torch.int16), inside.clone(), inside)
    blocked = TokenMap(torch.ones(12, 12, dtype=torch.int16), torch.ones(12, 12, dtype=torch.bool), inside)
    maps = [[open_map, blocked]]
    train = TokenMapDataset(grid=6, split="train", maps=maps)
    assert train.map_counts == [{0: int((data.window_counts(inside, 6) == 0).sum())}]
    held = TokenMapDataset(grid=6, split="heldout", maps=maps, min_scored=4, like=train)
    tokens, _, _ = held.sample_with_mask(50, torch.Generator().manual_seed(1))
    assert (tokens == 0).all()  # never the blocked map, though it has held-out windows
    assert TokenMapDataset(grid=6, split="heldout", maps=maps, min_scored=4).num_windows > held.num_windows


def test_seam_decoder_starts_as_identity_and_sees_patch_positions():
    from gsd_lab.standin.tokenizer import PatchVQTokenizer, SeamDecoder, TokenizerConfig

    tokenizer = PatchVQTokenizer(TokenizerConfig(patch=4, codebook_size=8))
    tokenizer.codebook.copy_(torch.rand(8, 48, generator=torch.Generator().manual_seed(0)) * 2 - 1)
    codes = torch.randint(0, 8, (2, 3, 5), generator=torch.Generator().manual_seed(1))
    assert torch.equal(tokenizer.decode(codes), tokenizer.decode_tiles(codes))  # no decoder: tiles
    with_decoder = PatchVQTokenizer(TokenizerConfig(patch=4, codebook_size=8, decoder_width=6))
    with_decoder.codebook.copy_(tokenizer.codebook)
    assert torch.equal(with_decoder.decode(codes), tokenizer.decode_tiles(codes))  # zero-initialised
    decoder = SeamDecoder(4, 6)
    seen = []
    decoder.net[0].register_forward_hook(lambda module, args, out: seen.append(args[0]))
    decoder(torch.zeros(1, 3, 8, 12))
    u, v = seen[0][0, 3], seen[0][0, 4]
    assert torch.equal(u[0, :4], torch.linspace(-1, 1, 4)) and torch.equal(u[5, 4:8], u[0, :4])
    assert torch.equal(v[:4, 7], torch.linspace(-1, 1, 4)) and torch.equal(v[4:, 0], v[:4, 0])


def test_code_embeddings_start_at_the_codebooks_principal_components():
    """init_code_embeddings: input and output rows of the K codes are one projection of the
    codebook, at the initializer's scale; with a codebook of rank <= hidden the projection keeps
    every pairwise distance up to one factor (close patches, close embeddings); the class and
    null rows are left as they were; a codebook narrower than the hidden size is refused."""
    from gsd_lab.standin.ar import TokenLayout
    from gsd_train.standin.ar import build_model, init_code_embeddings, llama_config

    layout = TokenLayout(codebook_size=12, num_classes=2, grid=2)
    model = build_model(llama_config(layout, hidden=8, layers=1, heads=2, intermediate=16))
    gen = torch.Generator().manual_seed(0)
    codebook = torch.randn(12, 5, generator=gen) @ torch.randn(5, 20, generator=gen)  # rank 5 <= 8
    extra_rows = model.model.embed_tokens.weight[12:].clone(), model.lm_head.weight[12:].clone()
    init_code_embeddings(model, codebook, std=0.02)
    emb = model.model.embed_tokens.weight[:12].double()
    assert torch.equal(model.model.embed_tokens.weight[:12], model.lm_head.weight[:12])
    assert torch.equal(model.model.embed_tokens.weight[12:], extra_rows[0])
    assert torch.equal(model.lm_head.weight[12:], extra_rows[1])
    assert abs(float(emb.std()) - 0.02) < 1e-6
    ratio = torch.pdist(emb) / torch.pdist(codebook.double())
    assert float(ratio.max() - ratio.min()) < 1e-5 * float(ratio.mean())
    with pytest.raises(ValueError, match="fewer than the hidden size 8"):
        init_code_embeddings(model, torch.randn(12, 4, generator=gen), std=0.02)


def test_early_stopping_ranks_evaluations_after_warm_up_within_the_gap():
    """selection_key: evaluations before warm-up are not ranked (an untrained model's gap is ~0,
    so it would always be 'within'); within the gap the lowest held-out NLL wins, and an
    evaluation within the gap beats every one outside it; outside, the smallest gap wins."""
    from gsd_train.standin.ar import selection_key

    assert selection_key(0, 9.0, 9.0, 0.9, warmup=13) is None
    evaluations = {20: (7.0, 7.7), 40: (6.0, 6.8), 60: (5.0, 6.1), 80: (4.5, 6.0)}  # step: (train, held-out)
    keys = {step: selection_key(step, *nll, 0.9, warmup=13) for step, nll in evaluations.items()}
    assert min(keys, key=keys.get) == 40  # 60 and 80 exceed the gap although their held-out NLL is lower
    assert min(keys, key=lambda s: selection_key(s, *evaluations[s], None, warmup=13)) == 80
    outside = {step: selection_key(step, *nll, 0.5, warmup=13) for step, nll in evaluations.items()}
    assert min(outside, key=outside.get) == 20 and outside[20][0] == 1  # none within 0.5: smallest gap
