"""gsd_lab.experiments, gsd_lab.decode.clustering, prompts and provenance: the analyses behind the
notebooks and figures, on exact toy inputs and on a tiny random model."""

from __future__ import annotations

import json

import pytest
import torch

from gsd_core import FixedPartition, acceptance_rate, output_distribution, tv_distance
from gsd_lab.decode.clustering import embedding_partition, kmeans
from gsd_lab.decode.methods import ClusterAcceptance, DecodingMethod, SDAcceptance
from gsd_lab.experiments import toy
from gsd_lab.experiments.image_model import tiny_random_model
from gsd_lab.experiments.replacement import replace_tokens, replacement_study, target_distributions
from gsd_lab.experiments.runs import FilterSettings, MethodSpec, RunCache, resolve_for, run_method
from gsd_lab.experiments.top1 import top1_stats
from gsd_lab.io.prompts import read_prompts
from gsd_lab.io.provenance import atomic_write_json, provenance


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return tiny_random_model(0)


# ---- clustering -----------------------------------------------------------------------------

def test_kmeans_recovers_separated_blobs_and_is_seeded():
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    points = torch.cat([c + 0.1 * torch.randn(20, 2, generator=g) for c in centres])
    labels = kmeans(points, 3, generator=torch.Generator().manual_seed(1))
    truth = torch.arange(3).repeat_interleave(20)
    # Same blocks up to renaming: each true blob maps to exactly one label and vice versa.
    pairs = {(int(a), int(b)) for a, b in zip(truth, labels)}
    assert len(pairs) == 3
    again = kmeans(points, 3, generator=torch.Generator().manual_seed(1))
    assert torch.equal(labels, again)


def test_embedding_partition_labels_cover_vocab_with_singletons_outside_tokens():
    emb = torch.randn(40, 4, generator=torch.Generator().manual_seed(0))
    tokens = torch.arange(5, 35)
    partition = embedding_partition(emb, 6, seed=0, tokens=tokens, vocab_size=42)
    labels = partition.labels
    assert isinstance(partition, FixedPartition) and labels.shape == (42,)
    inside = labels[tokens]
    assert inside.unique().numel() == 5  # ceil(30 / 6) clusters, all used
    outside = torch.cat([labels[:5], labels[35:]])
    assert outside.unique().numel() == outside.numel() and not set(outside.tolist()) & set(inside.tolist())
    # Theorem 1 holds for it (a partition): grouped acceptance >= token acceptance.
    p, q = toy.dirichlet_pairs(42, 50, alpha=0.5, seed=3)
    assert bool((acceptance_rate(p, q, partition) >= acceptance_rate(p, q) - 1e-12).all())


def test_embedding_partition_rejects_bad_input():
    with pytest.raises(ValueError, match="group_size"):
        embedding_partition(torch.randn(5, 2), 0)
    with pytest.raises(ValueError, match="tokens"):
        embedding_partition(torch.randn(5, 2), 2, tokens=torch.tensor([7]))
    with pytest.raises(ValueError, match="num_clusters"):
        kmeans(torch.randn(3, 2), 4, generator=torch.Generator())


# ---- toy analyses ----------------------------------------------------------------------------

def test_flat_and_peaked_tv_values():
    pairs = toy.flat_and_peaked_pairs(1000)
    assert float(tv_distance(*pairs["flat"])) == pytest.approx(0.25, abs=1e-12)
    assert float(tv_distance(*pairs["peaked"])) == pytest.approx(0.05, abs=1e-12)


def test_grouping_never_raises_tv_and_partitions_keep_theorem_1():
    p, q = toy.noisy_pairs(64, 0.1, vocab_size=128, noise=0.5, num_pairs=16, generator=torch.Generator().manual_seed(0))
    tv = toy.rank_binned_tv(p, q, [1, 2, 8, 128])
    assert torch.allclose(tv[0], tv_distance(p, q))
    assert bool((tv[1:] <= tv[0] + 1e-12).all())
    assert float(tv[-1].abs().max()) < 1e-12  # one cluster: TV 0
    assert toy.theorem1_random_partitions(vocab_size=10, num_clusters=3, num_trials=500).max_violation <= 1e-12


def test_distortion_zero_for_sd_and_positive_for_groups():
    p, q = toy.dirichlet_pairs(8, 20, alpha=0.5, seed=0)
    d = toy.distortion_by_cluster_size(p, q, [1, 5])
    for values in d.values():
        assert float(values[0]) < 1e-12 and float(values[1]) > 1e-3
    freq, rate = toy.empirical_speculative_samples(p[0], q[0], num_samples=40000, seed=1)
    assert float((freq - p[0]).abs().max()) < 0.02
    assert rate == pytest.approx(1 - float(tv_distance(p[0], q[0])), abs=0.02)
    assert torch.allclose(output_distribution(p, q), p, atol=1e-12)


# ---- decoding runs on a tiny random model ------------------------------------------------------

def test_runs_tables_and_top1(tiny):
    cache = RunCache(tiny, ["0", "1"], [0], FilterSettings())
    ar, sjd = MethodSpec("AR", DecodingMethod("ar")), MethodSpec("SJD", DecodingMethod("sjd"))
    gsd = MethodSpec("GSD", DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=10)))
    rows = cache.table([ar, sjd, gsd], ar)
    assert rows[0]["nfe"] == tiny.num_tokens and rows[0]["speedup_nfe"] == 1.0
    assert all(r["nfe"] <= tiny.num_tokens for r in rows) and rows[1]["acceptance_rate"] is not None
    # Same (spec, prompt, seed) -> same tokens; the cache serves the second request.
    again = run_method(tiny, sjd, ["0"], [0])
    assert torch.equal(again[0].tokens, cache.records(sjd)[0].tokens)
    stats = top1_stats(cache.records(ar))
    assert stats.per_image.shape == (2, tiny.num_tokens)
    assert 0 <= stats.pooled_share_below <= 1 and bool(((stats.per_image > 0) & (stats.per_image <= 1)).all())


def test_two_acceptance_measures(tiny):
    from gsd_lab.decode.loop import DecodeResult
    from gsd_lab.experiments.runs import accepted_per_tested

    # Windows of 4 drafts: accepted 1 (tested 2), all 4 (tested 4), 0 (tested 1); an AR step.
    result = DecodeResult(torch.zeros(9, dtype=torch.long), 4, [1, 4, 0, 0], [4, 4, 4, 0], 5 / 12, 1.0, 1.0, "sjd", 4)
    assert accepted_per_tested(result) == pytest.approx(5 / 7)
    cache = RunCache(tiny, ["0", "1"], [0], FilterSettings())
    ar = MethodSpec("AR", DecodingMethod("ar"))
    rows = cache.table([ar, MethodSpec("SJD", DecodingMethod("sjd"))], ar)
    assert rows[0]["accepted_per_tested"] is None and rows[0]["nfe_sem"] == 0.0
    assert 0 <= rows[1]["acceptance_rate"] <= rows[1]["accepted_per_tested"] <= 1


def test_block_verification_reports_no_accepted_per_tested(tiny):
    """Block verification accepts a prefix jointly, testing no draft alone: no accepted / tested
    (None, nan in the records), while its acceptance rate and SJD's measure stay."""
    from dataclasses import replace

    from gsd_lab.decode.loop import DecodeResult
    from gsd_lab.experiments.runs import accepted_per_tested

    token = DecodeResult(torch.zeros(9, dtype=torch.long), 4, [1, 4, 0, 0], [4, 4, 4, 0], 5 / 12,
                         1.0, 1.0, "sjd", 4)
    assert accepted_per_tested(token) == pytest.approx(5 / 7)  # negative control
    assert accepted_per_tested(replace(token, verifier="block")) is None
    cache = RunCache(tiny, ["0"], [0], FilterSettings())
    block = MethodSpec("block", DecodingMethod("sjd", window=4, verifier="block"))
    record = cache.records(block)[0]
    assert record.accepted_per_tested is None and 0 < record.acceptance_rate <= 1
    assert cache.table([block], block)[0]["accepted_per_tested"] is None


def test_rules_for_cluster_size_have_that_many_members():
    p = torch.softmax(torch.randn(40, generator=torch.Generator().manual_seed(0), dtype=torch.float64), -1)
    middle = torch.argsort(p, descending=True)[20]  # ranked in the middle: a full window
    for size in (1, 3, 4, 5, 9):
        rules = toy.rules_for_cluster_size(size)
        _, keep = rules["dynamic"].members(p, p, middle.reshape(1))
        assert int(keep.sum()) == size
        labels = rules["rank_binned"].partition_labels(p)
        assert int((labels == labels[middle]).sum()) == size
    with pytest.raises(ValueError, match="G, tokens per cluster"):
        toy.rules_for_cluster_size(0)


def test_resolve_cluster_kinds(tiny):
    filters = FilterSettings()
    distance = filters.resolve(tiny.embeddings, tiny.image_vocabulary)
    emb = tiny.embeddings[tiny.image_vocabulary].double()
    all_pairs = torch.cdist(emb, emb).square()
    below = all_pairs[torch.triu(torch.ones_like(all_pairs, dtype=torch.bool), 1)] <= distance
    assert float(below.double().mean()) == pytest.approx(filters.distance_quantile, abs=0.01)
    for kind in ("dynamic", "dynamic-gap", "dynamic-distance", "dynamic-nofilter", "dynamic-q", "rank-binned",
                 "static"):
        rule = resolve_for(tiny, DecodingMethod("gsd", acceptance=ClusterAcceptance(clusters=kind, group_size=8))).clusters
        assert rule is not None
    static = resolve_for(tiny, DecodingMethod("gsd", acceptance=ClusterAcceptance(clusters="static", group_size=8))).clusters
    assert static.labels.shape == (tiny.adapter.vocab_size,)
    with pytest.raises(ValueError, match="method 'gsd' verifies clusters"):
        DecodingMethod("gsd", acceptance=SDAcceptance())  # gsd without clusters


def test_replacement_replaces_half_with_top_k_candidates(tiny):
    records = run_method(tiny, MethodSpec("AR", DecodingMethod("ar")), ["2"], [0])
    tokens = records[0].tokens
    p = target_distributions(tiny, "2", tokens).cpu()
    assert p.shape == (tiny.num_tokens, tiny.adapter.vocab_size)
    new, mask = replace_tokens(tokens, p, tiny, mode="top-k", fraction=0.5, top_k=5,
                               generator=torch.Generator().manual_seed(0))
    assert int(mask.sum()) == tiny.num_tokens // 2 and torch.equal(new[~mask], tokens[~mask])
    top5 = torch.topk(p, 5, dim=-1).indices
    assert bool((top5[mask] == new[mask].unsqueeze(-1)).any(-1).all())
    study = replacement_study(tiny, records, top_k=5)
    assert set(study.images) == {"original", "top-k", "same-cluster", "uniform"}
    assert study.changed_share["original"] == 0.0
    assert study.mean_log_prob["top-k"] > study.mean_log_prob["uniform"]


def test_tiny_model_runs_in_float64_and_switches_guidance_off(tiny):
    from gsd_lab.experiments.image_model import guidance_scale, load_image_model

    assert tiny.adapter.compute_dtype == torch.float64
    assert load_image_model("tiny-random", float64_on_cpu=False).adapter.compute_dtype == torch.float32
    with guidance_scale(tiny, None):  # the prompt encoding follows the adapter (notebook 02's comparison)
        assert tiny.encode("1")[1] is None
        run_method(tiny, MethodSpec("AR", DecodingMethod("ar")), ["1"], [0])
    assert tiny.encode("1")[1] is not None


# ---- prompts and provenance ------------------------------------------------------------------

def test_read_prompts_plain_and_parti_tsv(tmp_path):
    plain = tmp_path / "p.txt"
    plain.write_text("# comment\na red cube\n\nthe moon\n")
    assert read_prompts(plain) == ["a red cube", "the moon"]
    tsv = tmp_path / "parti.tsv"
    tsv.write_text("Prompt\tCategory\tChallenge\tNote\nbond\tAbstract\tBasic\t\n"
                   "a \"quoted\" prompt\tPeople\tBasic\tn\n")
    assert read_prompts(tsv) == ["bond", 'a "quoted" prompt']
    with pytest.raises(FileNotFoundError):
        read_prompts(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n# only a comment\n")
    with pytest.raises(ValueError, match="no prompts"):
        read_prompts(tmp_path / "empty.txt")


def test_provenance_record_and_atomic_json(tmp_path):
    record = provenance(model="m", seeds=[1, 2], config={"a": 1})
    assert record["versions"]["torch"] == torch.__version__ and record["seeds"] == [1, 2]
    assert "commit" in record["git"]
    path = atomic_write_json(tmp_path / "x" / "r.json", record)
    assert json.loads(path.read_text())["config"] == {"a": 1}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temporary left behind


def test_markdown_table_escapes_pipes_in_cells():
    from gsd_lab.io.figure_io import markdown_table

    table = markdown_table([{"method": "(D1) p + |dp| filter only", "nfe": 68.6}], ["method", "nfe"])
    row = table.splitlines()[2]
    assert row == "| (D1) p + \\|dp\\| filter only | 68.6 |"
    assert len([c for c in row.replace("\\|", "").split("|") if c.strip()]) == 2  # two cells, not four


# ---- exact distortion, LANTERN, error bars ----------------------------------------------------

def test_tables_record_exact_distortion_and_lantern(tiny):
    from gsd_lab.experiments import tables

    cache = RunCache(tiny, ["0", "1"], [0], FilterSettings())
    specs = [tables.AR, tables.SJD, tables.gsd(25, "dynamic-nofilter"), tables.amplify(3.0),
             tables.lantern(0.1, k=8), tables.lantern(0.4, k=8)]
    rows = {r["method"]: r for r in cache.table(specs, tables.AR)}
    assert rows["AR"]["distortion"] == 0.0 and rows["AR"]["distortion_sem"] == 0.0
    assert 0 <= rows["SJD"]["distortion"] <= 1e-12
    for label in ("GSD dynamic-nofilter (G=25)", "Amplify (k=3)", "LANTERN k=8 (delta=0.4)"):
        assert 0 < rows[label]["distortion"] < 1 and rows[label]["distortion_sem"] is not None
    # One neighbourhood table per k, shared by both budgets; LANTERN's records are SJD-shaped.
    assert [key for key in cache._resolved if key[0] == "lantern"] == [("lantern", 8)]
    assert all(r.distortion is not None and r.accounting_seconds > 0 for r in cache.records(specs[4]))
    assert sum(cache.accounting_seconds()) > 0


def test_lantern_with_zero_budget_decodes_like_sjd(tiny):
    from gsd_lab.experiments import tables

    cache = RunCache(tiny, ["0", "1"], [0], FilterSettings())
    sjd, zero = cache.records(tables.SJD), cache.records(tables.lantern(0.0, k=8))
    assert all(torch.equal(a.tokens, b.tokens) and a.nfe == b.nfe for a, b in zip(sjd, zero))


def test_method_spec_lantern_and_seed_offset_validation():
    from gsd_lab.experiments import tables

    with pytest.raises(ValueError, match="seed_offset"):
        MethodSpec("x", DecodingMethod("ar"), seed_offset=1.5)
    with pytest.raises(ValueError, match="DecodingMethod"):
        MethodSpec("x", "ar")
    assert tables.lantern(0.1).method.acceptance.k == tables.LANTERN_K == 1001
    assert tables.AR_SEED_NOISE.key != tables.AR.key
    # Defaults keep the notebooks' tables as they were; figures opt in.
    assert [s.label for s in tables.table1_specs((3,), (2.0,))] == ["AR", "SJD", "GSD (G=3)", "Amplify (k=2)"]
    assert "LANTERN" not in tables.pareto_specs()
    labels = [s.label for s in tables.table1_specs((3,), (2.0,), (0.1,), seed_noise=True)]
    assert labels[1] == tables.AR_SEED_NOISE.label and labels[-1] == "LANTERN k=1001 (delta=0.1)"
    curves = tables.distortion_specs((3,), (10,), (2.0,), (0.1,))
    assert set(curves) == {"GSD", "rank bins, token residual", "rank bins, cluster-exact residual", "Amplify",
                           "LANTERN", "AR", "SJD"}
    assert curves["rank bins, cluster-exact residual"][0].method.residual == "cluster"
    # The lossless frontier: MC-SJD rows after SJD, MC-GSD rows after GSD; points and a curve.
    labels = [s.label for s in tables.table1_specs((50,), (), coupled_drafts=("maximal", "gumbel"),
                                                   coupled_groups=(50,))]
    assert labels == ["AR", "SJD", "MC-SJD (maximal)", "MC-SJD (Gumbel)", "GSD (G=50)", "MC-GSD (G=50, maximal)"]
    coupled_gsd = tables.coupled("maximal", 50).method
    assert (coupled_gsd.draft, coupled_gsd.acceptance) == ("maximal", ClusterAcceptance("dynamic", 50))
    assert coupled_gsd.key != tables.gsd(50).method.key and tables.coupled("gumbel").method.draft == "gumbel"
    curves = tables.distortion_specs((3,), (), (), (), coupled_drafts=("maximal",), coupled_groups=(10, 50))
    assert [s.label for s in curves["MC-SJD (maximal)"]] == ["MC-SJD (maximal)"]
    assert [s.method.acceptance.group_size for s in curves["MC-GSD (maximal)"]] == [10, 50]
    assert "MC-GSD (maximal)" in tables.pareto_specs(coupled_groups=(50,))


def test_table_rows_carry_paired_differences_to_ar_and_seed_noise(tiny):
    import dataclasses

    import numpy as np

    from gsd_lab.experiments import tables

    # A per-image proxy for the tiny model: the mean pixel value (its numbers mean nothing).
    scored = dataclasses.replace(tiny, condition_scores=lambda images, prompts: np.array([i.mean() for i in images]))
    cache = RunCache(scored, ["0", "1", "2", "3"], [0], FilterSettings())
    rows = {r["method"]: r for r in cache.table([tables.AR, tables.AR_SEED_NOISE, tables.SJD], tables.AR)}
    ar, noise = rows["AR"], rows[tables.AR_SEED_NOISE.label]
    assert ar["condition_score_diff_ar"] == 0.0 and ar["condition_score_diff_ar_low"] == 0.0
    assert noise["condition_score_diff_ar"] == pytest.approx(noise["condition_score"] - ar["condition_score"])
    assert noise["condition_score_diff_ar_low"] <= noise["condition_score_diff_ar"] <= noise["condition_score_diff_ar_high"]
    assert noise["condition_score_diff_ar_low"] < noise["condition_score_diff_ar_high"]  # other seeds, other images
    ar_tokens = [r.tokens for r in cache.records(tables.AR)]
    assert not any(torch.equal(a, r.tokens) for a, r in zip(ar_tokens, cache.records(tables.AR_SEED_NOISE)))


def test_distortion_and_interval_plots():
    from gsd_lab.experiments import plots

    points = {"GSD": [{"method": "GSD (G=3)", "nfe": 40.0, "distortion": 0.02, "distortion_sem": 0.005},
                      {"method": "GSD (G=10)", "nfe": 30.0, "distortion": 0.05, "distortion_sem": 0.01}],
              "AR": [{"method": "AR", "nfe": 64.0, "distortion": 0.0, "distortion_sem": 0.0}]}
    fig = plots.distortion_vs_nfe(points)
    assert fig.axes[0].get_ylabel().startswith("exact distortion")
    rows = [{"method": "AR", "condition_score_diff_ar": 0.0, "condition_score_diff_ar_low": 0.0,
             "condition_score_diff_ar_high": 0.0},
            {"method": "GSD", "condition_score_diff_ar": -1.0, "condition_score_diff_ar_low": -3.0,
             "condition_score_diff_ar_high": 0.5}]
    fig = plots.bars(rows, [("condition_score_diff_ar", "difference")])
    assert len(fig.axes) == 1


def test_pareto_draws_reference_lines():
    from gsd_lab.experiments import plots

    points = {"GSD": [{"method": "GSD (G=3)", "nfe": 40.0, "condition_score": 90.0},
                      {"method": "GSD (G=10)", "nfe": 30.0, "condition_score": 85.0}]}
    fig = plots.pareto(points, [("condition_score", "score")], {"real crops": {"condition_score": 92.0},
                                                               "AR, other seeds": None})
    lines = [line for line in fig.axes[0].get_lines() if list(line.get_ydata()) == [92.0, 92.0]]
    assert len(lines) == 1 and "real crops" in [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]


def test_pareto_names_the_better_corner_and_zooms_on_gsds_range():
    from gsd_lab.experiments import plots

    points = {"GSD": [{"method": "GSD (G=3)", "nfe": 40.0, "condition_score": 90.0, "frechet_distance": 4.0},
                      {"method": "GSD (G=10)", "nfe": 30.0, "condition_score": 85.0, "frechet_distance": 5.0}],
              "SJD": [{"method": "SJD", "nfe": 45.0, "condition_score": 91.0, "frechet_distance": 3.0}],
              "AR": [{"method": "AR", "nfe": 100.0, "condition_score": 92.0, "frechet_distance": 3.0}]}
    fig = plots.pareto(points, [("condition_score", "score"), ("frechet_distance", "Frechet")])
    full_score, zoom_score, full_frechet, zoom_frechet = fig.axes
    assert "better: up-left" in full_score.get_title() and "better: down-left" in full_frechet.get_title()
    assert full_score.get_xscale() == "log" and zoom_score.get_xscale() == "linear"
    low, high = zoom_score.get_xlim()
    assert low <= 30.0 and 45.0 <= high < 100.0  # GSD's curve to SJD's point, AR outside
    assert {"G=3", "G=10"} <= {t.get_text() for t in zoom_frechet.texts}
    assert not {t.get_text() for t in full_frechet.texts} & {"G=3", "G=10"}  # labelled once, in the zoom


def test_pareto_labels_do_not_overlap_in_a_crowded_zoom():
    """The stand-in's distortion-against-NFE points (figures run of 2026-11-30, rounded): four
    curves within 30 NFE and 0.15 distortion. Every label lies inside its panel and no two
    overlap; the zoom's y range is that of the points in it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from gsd_lab.experiments import plots

    def curve(label, pairs):
        return [{"method": f"{label} ({name})", "nfe": nfe, "distortion": d, "distortion_sem": 0.01}
                for name, nfe, d in pairs]

    points = {"GSD": curve("GSD", [("G=3", 96.4, 0.093), ("G=10", 85.7, 0.15), ("G=25", 82.3, 0.163),
                                   ("G=50", 75.1, 0.19), ("G=100", 68.4, 0.213)]),
              "Amplify": curve("Amplify", [("k=1.5", 96.8, 0.086), ("k=2", 86.7, 0.132), ("k=3", 68.7, 0.187),
                                           ("k=4", 68.7, 0.2)]),
              "rank bins": curve("rank", [("G=10", 79.8, 0.158), ("G=50", 67.1, 0.218)]),
              "LANTERN": curve("LANTERN", [("delta=0.001", 96.0, 0.094), ("delta=0.003", 84.2, 0.178),
                                           ("delta=0.01", 55.3, 0.277), ("delta=0.1", 34.1, 0.44),
                                           ("delta=0.4", 32.8, 0.46)]),
              "SJD": [{"method": "SJD", "nfe": 108.7, "distortion": 0.0}]}
    fig = plots.distortion_vs_nfe(points)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    full, zoom = fig.axes[:2]
    for ax in (full, zoom):
        boxes = [t.get_window_extent(renderer) for t in ax.texts]
        frame = ax.get_window_extent(renderer)
        assert all(frame.contains(b.x0, b.y0) and frame.contains(b.x1, b.y1) for b in boxes)
        assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a.overlaps(b)]
    assert len(zoom.texts) == 13 and len(full.texts) == 3  # LANTERN's three cheapest points left of the zoom
    assert zoom.get_ylim()[1] < 0.25 and full.get_ylim()[1] > 0.45


def test_top1_histograms_one_panel_per_class():
    import numpy as np

    from gsd_lab.experiments import plots
    from gsd_lab.experiments.top1 import Top1Stats

    stats = Top1Stats(np.array([[0.01, 0.2], [0.02, 0.03], [0.5, 0.6]]), 0.05)
    fig = plots.top1_histograms(stats, ["cat", "dog", "cat"])
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["all images: 50% below", "cat: 25% below", "dog: 100% below"]
    prompt = "an astronaut riding a horse in a field of flowers under a blue sky at noon"
    fig = plots.top1_histograms(stats, [prompt, "dog", prompt])
    assert fig.axes[1].get_title() == "an astronaut riding a horse in\na field of...: 25% below"
    assert fig.axes[1].get_xlabel() == "top-1 probability of p" and fig.axes[1].get_ylabel() == "generated tokens"
    with pytest.raises(ValueError, match="labels"):
        plots.top1_histograms(stats, ["cat"])


def test_paired_difference_is_the_mean_per_image_difference(tiny):
    from gsd_lab.experiments import tables

    cache = RunCache(tiny, ["0", "1", "2"], [0], FilterSettings())
    diff, se = tables.paired_difference(cache, tables.SJD, tables.AR)
    per_image = [a.nfe - b.nfe for a, b in zip(cache.records(tables.SJD), cache.records(tables.AR))]
    assert diff == pytest.approx(sum(per_image) / 3)
    assert se == pytest.approx(float(torch.tensor(per_image, dtype=torch.float64).std() / 3 ** 0.5))


def test_seed_noise_row_refuses_seeds_that_repeat_the_cache_s_own():
    from dataclasses import replace

    from gsd_lab.experiments import tables

    model = tiny_random_model(0)
    cache = RunCache(model, model.default_prompts[:1], [0, 1000], FilterSettings.for_model(model.name))
    with pytest.raises(ValueError, match="seed_offset 1000 maps seeds \\[1000\\]"):
        cache.records(tables.AR_SEED_NOISE)
    assert len(cache.records(replace(tables.AR_SEED_NOISE, seed_offset=5000))) == 2


def test_one_run_store_hands_its_storage_only_configurations_not_read_yet(tiny, tmp_path):
    """``RunCache`` and ``StreamedRunCache`` are the one ``RunStore`` over its two storages;
    ``prefetch`` keeps the memo in the store: a configuration read once (or preloaded) is not
    asked of the storage again, and seed offsets are checked there for either storage."""
    from gsd_lab.experiments import tables
    from gsd_lab.experiments.runs import MemoryRuns, Recording, RunStore
    from gsd_lab.experiments.stream import FolderRuns, StreamedRunCache

    folder = StreamedRunCache(tiny, ["0"], [0], FilterSettings(), tmp_path, weights={"t": "t"},
                              progress=False)
    cache = RunCache(tiny, ["0", "1"], [0, 1000], FilterSettings(),
                     recording=Recording(batch_size=2))
    assert isinstance(cache.storage, MemoryRuns) and isinstance(folder.storage, FolderRuns)
    assert isinstance(cache, RunStore) and isinstance(folder, RunStore)
    cache.prefetch([tables.AR])
    decoded = cache.decoded()
    asked = []
    cache.storage.prefetch = lambda specs: asked.append([s.label for s in specs]) or {}
    cache.preload(repr(cache._concrete(tables.SJD).key), decoded[cache._concrete(tables.AR).key])
    gsd = MethodSpec("GSD-3", DecodingMethod("gsd", window=4, acceptance=ClusterAcceptance(group_size=3)))
    cache.prefetch([tables.AR, tables.SJD, gsd])
    assert asked == [["GSD-3"]] and cache.decoded().keys() == decoded.keys()
    with pytest.raises(ValueError, match="seed_offset 1000 maps seeds"):
        cache.prefetch([tables.AR_SEED_NOISE])


def test_lantern_affordable_on_gpu_or_small_cpu_vocabularies():
    from gsd_lab.experiments import tables

    assert tables.lantern_affordable(8203, "cpu") and not tables.lantern_affordable(65536, "cpu")
    assert tables.lantern_affordable(65536, "cuda:0")


def test_results_md_tables_show_the_verdict_vocabulary_and_the_detectable_size():
    """matched-NFE and frontier rows keep the verdict's key in results.json; results.md shows
    ``verdicts.WORDS`` and, on a "no difference detected" row, ``minimum_detectable(se)``."""
    from gsd_lab.experiments.verdicts import minimum_detectable
    from gsd_lab.io.figure_io import markdown_table
    from gsd_lab.paper import render as figures

    rows = [{"verdict": "noise", "se": 2.0}, {"verdict": "yes", "se": 1.0},
            {"verdict": "noise", "se": None}]
    shown = figures._worded(rows)
    assert [r["verdict"] for r in shown] == ["no difference detected", "yes",
                                             "no difference detected"]
    assert [r["detectable"] for r in shown] == [minimum_detectable(2.0), None, None]
    assert rows[0]["verdict"] == "noise"  # the stored rows are not changed
    table = markdown_table(shown, ["verdict", "detectable"])
    assert "noise" not in table and "detectable" in figures.MATCHED_COLUMNS


def test_results_md_template_numbers_come_from_the_run():
    """The template's sizes are placeholders: window width, the transport curve's k, the toy's
    Theorem 1 trials."""
    from gsd_lab.paper import render as figures, template

    assert "17-token" in template.fill("batch_many", batch=8, batched_how="x", window_tokens=17)
    assert "5 random pairs" in template.fill("toy", table="", violation="0", trials=5)
    specs = {figures.frontier.TRANSPORT: [
        {"method": {"kind": "sjd"}},
        {"method": {"kind": "sjd", "acceptance": {"rule": "transport", "eps": 0.1, "k": 8}}},
    ]}
    assert "k = 8 content" in figures._curve_texts(specs)[figures.frontier.TRANSPORT]
    text = template.TEMPLATE.read_text()
    assert "2000" not in text and "k = 16" not in text and "17-token" not in text


def test_the_report_step_updates_what_the_readme_command_updates(tmp_path, monkeypatch, capsys):
    """figures' report step calls both updates of ``python -m gsd_lab readme`` (findings and
    ledger, then prose value spans) with the run's results.json; a span the run cannot render
    leaves the documents as they were and says so."""
    from gsd_lab.paper import render as figures

    path = tmp_path / "results.json"
    path.write_text(json.dumps({"tables": {}}))
    calls = []
    monkeypatch.setattr(figures.findings, "update_repository",
                        lambda results: calls.append(("findings", results)) or [])
    monkeypatch.setattr(figures.prose, "update_documents",
                        lambda results: calls.append(("prose", results)) or [])
    assert figures.update_documents(path) == []
    assert calls == [("findings", {"tables": {}}), ("prose", {"tables": {}})]

    def missing(results):
        raise KeyError("tables.frontier")

    monkeypatch.setattr(figures.prose, "update_documents", missing)
    figures.update_documents(path)
    assert "NOT updated" in capsys.readouterr().out


def test_guided_specs_names_the_figures_configurations_in_order(tiny):
    from gsd_lab.paper import guided_specs

    specs = guided_specs(tiny, ["SJD", "AR"])
    assert [s.label for s in specs] == ["SJD", "AR"] and specs[1].method.kind == "ar"
    with pytest.raises(ValueError, match="unknown configurations"):
        guided_specs(tiny, ["no such configuration"])
