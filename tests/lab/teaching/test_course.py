"""gsd_lab.teaching.course (notebook 05's and 01's helpers) and gsd_lab.experiments.paper (the paper-against-
here tables of 02-04), against hand-computed values."""

from __future__ import annotations

import math
from fractions import Fraction as F

import pytest
import torch

from gsd_core import DynamicClusters, FixedPartition, dynamic_cluster
from gsd_lab.teaching import course
from gsd_lab.experiments import paper, tables, toy


def test_entropy_and_effective_vocabulary():
    uniform = torch.full((2, 8), 1 / 8, dtype=torch.float64)
    assert torch.allclose(course.effective_vocabulary(uniform), torch.tensor([8.0, 8.0], dtype=torch.float64))
    one_hot = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    assert float(course.entropy(one_hot)) == 0.0  # 0 log 0 = 0, no NaN
    assert float(course.entropy(torch.tensor([0.5, 0.5], dtype=torch.float64))) == pytest.approx(math.log(2))


def test_fractions_from_weights_rejects_bad_input():
    assert course.fractions_from_weights([1, 3]) == [F(1, 4), F(3, 4)]
    assert course.fraction_text(course.fractions_from_weights([2, 0, 2])) == "(1/2, 0, 1/2)"
    for bad in ([], [0, 0], [1, -1], [0.5, 1]):
        with pytest.raises(ValueError):
            course.fractions_from_weights(bad)


def test_speculative_parts_worked_example_by_hand():
    p = course.fractions_from_weights([8, 6, 3, 2, 1])
    q = course.fractions_from_weights([4, 8, 4, 2, 2])
    parts = course.speculative_parts(p, q)
    assert parts.accepted == [F(4, 20), F(6, 20), F(3, 20), F(2, 20), F(1, 20)]
    assert parts.excess == [F(4, 20), 0, 0, 0, 0]
    assert parts.reject_probability == F(1, 5)
    assert parts.residual == [1, 0, 0, 0, 0]
    assert parts.output == p
    with pytest.raises(ValueError):
        course.speculative_parts(p, q[:4])


def test_prefix_length_and_tokens_per_forward_by_hand():
    window = [F(4, 5), F(4, 5), F(1, 2)]
    dist = course.prefix_length_distribution(window)
    assert dist == [F(1, 5), F(4, 25), F(8, 25), F(8, 25)]
    assert sum(dist) == 1
    assert course.expected_accepted_prefix(window) == F(4, 5) + F(16, 25) + F(8, 25)
    assert course.tokens_per_forward([F(1, 2)] * 3) == F(15, 8)
    assert course.tokens_per_forward([0.0] * 16) == 1  # every forward still commits one token
    assert course.tokens_per_forward([1.0] * 16) == 17


def test_random_draft_acceptance_is_p_and_cluster_mass():
    p = course.as_tensor(course.fractions_from_weights([8, 6, 3, 2, 1]))
    assert torch.allclose(course.random_draft_acceptance(p), p, atol=1e-15)
    gsd = course.random_draft_acceptance(p, DynamicClusters(3))
    # G = 3 tokens: windows of one rank on each side: {0,1}, {0,1,2}, {1,2,3}, {2,3,4}, {3,4}
    expected = torch.tensor([14, 17, 11, 6, 3], dtype=torch.float64) / 20
    assert torch.allclose(gsd, expected, atol=1e-15)


def test_cluster_steps_match_dynamic_cluster_and_hand_values():
    p = course.as_tensor(course.fractions_from_weights([12, 20, 3, 14, 16, 2, 9, 10, 6, 8]))
    emb = torch.tensor([[0, 0], [1, 0], [0, 1], [2, 2], [5, 5], [1, 1], [3, 2], [2, 1], [4, 4], [2, 3]],
                       dtype=torch.float64)
    steps = course.cluster_steps(p, 3, 5, embeddings=emb, max_prob_gap=0.05, max_embedding_distance=2.0)
    # p-ranking 1, 4, 3, 0, 7, ...: x = 3 has rank 2; G = 5: window ranks 0..4 = {1, 4, 3, 0, 7};
    # gap <= 0.05 around p(3) = 0.14 drops token 1 (0.20); distance <= 2 from (2, 2) keeps 3, 7 (and 9, 6 outside).
    assert int(steps.ranks[3]) == 2
    assert set(torch.nonzero(steps.window).flatten().tolist()) == {0, 1, 3, 4, 7}
    assert set(torch.nonzero(steps.members).flatten().tolist()) == {3, 7}
    assert torch.equal(steps.members, dynamic_cluster(p, 3, 5, embeddings=emb, max_prob_gap=0.05,
                                                      max_embedding_distance=2.0))
    assert (steps.above, steps.below) == (2, 2) and "ranks 2 - 2 .. 2 + 2" in steps.lines(p)[2]
    even = course.cluster_steps(p, 3, 4)  # G = 4: one rank above x, two below
    assert set(torch.nonzero(even.window).flatten().tolist()) == {4, 3, 0, 7}
    assert len(steps.lines(p)) == 6
    with pytest.raises(ValueError, match="embeddings"):
        course.cluster_steps(p, 3, 5, max_embedding_distance=2.0)


def test_counterexample_table_is_proofs_04():
    table = course.counterexample_table()
    assert table.alpha_sd == F(14, 15)
    assert table.alpha_dynamic == F(898, 975)
    assert [r["accept"] for r in table.rows] == [F(9, 10), F(12, 13), F(9, 10), 1, 1]
    assert [r["cluster"] for r in table.rows] == [[0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4]]
    assert table.float_dynamic == pytest.approx(898 / 975, abs=1e-12)
    assert "| 1 | 5/15 | {0, 1, 2} | 12/15 | 13/15 | 12/13 | 4/13 |" in table.markdown()
    assert table.core_clusters == [[0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4]]
    assert course.counterexample_checks(table) == {"clusters": True, "SD": True, "dynamic": True}


def test_counterexample_table_is_independent_of_gsd_core(monkeypatch):
    """The exact table comes from proofs/04's hand-written clusters: a wrong gsd_core (clusters
    and acceptance) leaves the fractions as they are and turns the checks False."""
    monkeypatch.setattr(course, "dynamic_cluster", lambda p, x, g: torch.ones(5, dtype=torch.bool))
    monkeypatch.setattr(course, "acceptance_rate", lambda p, q, rule=None: torch.tensor(0.5))
    table = course.counterexample_table()
    assert table.alpha_sd == F(14, 15) and table.alpha_dynamic == F(898, 975)
    assert course.counterexample_checks(table) == {"clusters": False, "SD": False, "dynamic": False}


def test_output_law_and_single_cluster_checks(monkeypatch):
    p5 = course.fractions_from_weights(course.WORKED_P)
    q5 = course.fractions_from_weights(course.WORKED_Q)
    assert p5[0] == F(8, 20) and q5[1] == F(8, 20)
    assert course.output_law_is_p(p5, q5)
    assert course.single_cluster_checks(p5, q5) == {"acceptance = 1": True, "output law = q": True}
    # An enumeration that returns the draft's law (GSD's one-cluster limit) fails the first
    # check; one that returns p (grouping ignored: plain SD) fails the second.
    monkeypatch.setattr(course, "output_distribution", lambda p, q, *rule: q.clone())
    assert not course.output_law_is_p(p5, q5)
    monkeypatch.setattr(course, "output_distribution", lambda p, q, *rule: p.clone())
    monkeypatch.setattr(course, "acceptance_rate", lambda p, q, *rule: torch.tensor(0.8))
    assert course.single_cluster_checks(p5, q5) == {"acceptance = 1": False,
                                                    "output law = q": False}


def test_residual_comparison_small_pair_by_hand():
    p = course.as_tensor(course.fractions_from_weights([0, 3, 3, 4]))
    q = course.as_tensor(course.fractions_from_weights([7, 0, 3, 0]))
    result = course.residual_comparison(p, q, torch.tensor([0, 0, 1, 1]))
    # p' = (3, 7)/10, q' = (7, 3)/10: rejection mass TV(p', q') = 4/10. The token residual splits it
    # 3:4 onto tokens 1 and 3, so cluster {0, 1} gets its accepted 3/10 plus 12/70 too many.
    assert result.cluster_mass_error_token == pytest.approx(12 / 70, abs=1e-12)
    assert result.cluster_mass_error_cluster < 1e-12
    assert result.tv_cluster > result.tv_token
    assert course.residual_tv_gap_random(vocab_size=5, num_trials=500, seed=0) <= 1e-12


def test_single_cluster_accepts_everything_and_outputs_q():
    p = course.as_tensor(course.fractions_from_weights([8, 6, 3, 2, 1]))
    q = course.as_tensor(course.fractions_from_weights([4, 8, 4, 2, 2]))
    acceptance, out = course.single_cluster(p, q)
    assert acceptance == pytest.approx(1.0, abs=1e-12)
    assert torch.allclose(out, q, atol=1e-12)


def test_tradeoff_explorer_draws_static_figures_and_sliders(monkeypatch):
    import builtins

    import matplotlib
    matplotlib.use("Agg")
    pytest.importorskip("ipywidgets")
    shown = []
    monkeypatch.setattr("gsd_lab.experiments.plots.show", shown.append)
    sliders = course.tradeoff_explorer(group_sizes=(1, 5), viables=(1, 64))
    assert len(shown) == 2  # the static figures (always drawn); the sliders' figure is no output
    group, viable, image = sliders.children
    assert [w.description for w in (group, viable)] == ["group_size", "viable"]
    assert (group.value, viable.value) == (5, 64) and bytes(image.value)[:4] == b"\x89PNG"
    first = bytes(image.value)
    group.value = 1  # G = 1 is SD: another title, another picture
    assert bytes(image.value)[:4] == b"\x89PNG" and bytes(image.value) != first
    real_import = builtins.__import__

    def no_widgets(name, *args, **kwargs):
        if name == "ipywidgets":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_widgets)
    assert course.tradeoff_explorer(group_sizes=(1, 5), viables=(1, 64)) is None
    assert len(shown) == 4


def test_course_figures_hold_no_pyplot_state():
    """A pyplot figure would be shown twice in a live notebook (``plots.show`` and the inline
    backend's flush at the end of the cell) and pile up with every slider move."""
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    parts = course.speculative_parts(course.fractions_from_weights(course.WORKED_P),
                                     course.fractions_from_weights(course.WORKED_Q))
    figures = [course.plot_speculative_parts(parts), course.tradeoff_figure(5, 8)]
    assert plt.get_fignums() == before and all(len(f.axes) >= 1 for f in figures)


def test_flatness_pairs_follow_notebook_01():
    """The explorer's pairs are notebook 01's family: one viable token gives p = q (SD accepts
    everything); more viable tokens, flatter pairs, lower SD acceptance (TV adds up); G = 1 is SD."""
    rows = course.tradeoff_table((1, 5), (1, 8, 64))
    assert all(r["acceptance SD"] == 1.0 for r in rows if r["viable"] == 1)
    mean_sd = {n: sum(course.tradeoff(*course.flatness_pair(n, seed=s), 1)["acceptance SD"] for s in range(16))
               for n in (2, 64)}
    assert mean_sd[64] < mean_sd[2]  # on average over pairs, as notebook 01's grid
    averages = course.mean_sd_acceptance((1, 2, 64), 16)
    assert averages[0] == 1.0 and averages[1:] == pytest.approx([mean_sd[2] / 16, mean_sd[64] / 16], abs=1e-12)
    p, q = course.flatness_pair(8, seed=3)
    p01, q01 = toy.noisy_pairs(8, 1 / 8, vocab_size=course.EXPLORER_VOCAB, noise=course.EXPLORER_NOISE,
                               num_pairs=1, generator=torch.Generator().manual_seed(3))
    assert torch.equal(p, p01[0]) and torch.equal(q, q01[0])
    for r in rows:
        if r["G"] == 1:
            assert r["acceptance GSD"] == pytest.approx(r["acceptance SD"], abs=1e-12)
            assert r["TV(output GSD, p)"] < 1e-12
    p, q = course.flatness_pair(8)
    assert int((p > 0).sum()) == int((q > 0).sum()) == 8


def test_iid_tokens_per_forward_is_the_window_sum():
    for alpha in (F(0), F(1, 3), F(4, 5), F(1)):
        for window in (0, 1, 5, 16):
            assert course.iid_tokens_per_forward(alpha, window) == course.tokens_per_forward([alpha] * window)
    assert course.iid_tokens_per_forward(0.5, 200) == pytest.approx(2.0)  # -> 1 / (1 - alpha)
    with pytest.raises(ValueError, match="alpha"):
        course.iid_tokens_per_forward(1.5, 3)


def test_lantern_parts_are_proofs_08_example():
    p = course.fractions_from_weights(course.LANTERN_P)
    q = course.fractions_from_weights(course.LANTERN_Q)
    parts = course.lantern_parts(p, q, course.LANTERN_NEIGHBOURS, course.LANTERN_DELTA)
    assert parts.credited == [F(1, 4)] * 4 + [0] * 4 and parts.accept[:4] == [1] * 4
    assert parts.alpha == 1 and parts.alpha_sd == 0 and parts.output == q and parts.tv == 1
    embeddings = torch.tensor(course.LANTERN_EMBEDDINGS, dtype=torch.float64).unsqueeze(1)
    assert course.lantern_checks(parts, p, q, embeddings, 2, 0.25) == {"output law": True, "acceptance": True}
    # A budget below a neighbour's mass credits nothing: plain SD, no distortion.
    plain = course.lantern_parts(p, q, course.LANTERN_NEIGHBOURS, F(1, 5))
    assert plain.alpha == plain.alpha_sd == 0 and plain.tv == 0
    pp, qq = toy.dirichlet_pairs(6, 1, alpha=1.0, seed=0)
    emb = torch.randn(6, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert course.lantern_identity_gap(pp[0], qq[0], emb, 3, 0.2) < 1e-12


def test_present_columns_are_generic():
    rows = [{"method": "AR", "acceptance_rate": None, "nfe": 4.0, "distortion": None, "wall_seconds": 1.0},
            {"method": "GSD", "acceptance_rate": 0.5, "nfe": 2.0, "distortion": 0.1, "new_metric": float("nan")}]
    assert course.present_columns(rows) == ["method", "acceptance_rate", "nfe", "distortion"]


def test_rank_bins_against_random_partitions():
    p, q = toy.noisy_pairs(256, 0.05, vocab_size=1024, noise=0.5, num_pairs=16,
                           generator=torch.Generator().manual_seed(1))
    cmp = toy.rank_bins_against_random(p, q, [1, 64], seed=0)
    assert torch.allclose(cmp.rank_binned[0], cmp.tv_tokens) and torch.allclose(cmp.random[0], cmp.tv_tokens)
    assert (cmp.random <= cmp.tv_tokens + 1e-12).all() and (cmp.rank_binned <= cmp.tv_tokens + 1e-12).all()
    rank_ratio, random_ratio = cmp.cancellation()
    assert float(random_ratio[1]) < float(rank_ratio[1])  # the lesson of notebook 01, by a wide margin here


# ---- paper ---------------------------------------------------------------------------------------

def test_top1_comparison():
    assert paper.top1_comparison(0.7, 0.05, "m")[0]["outcome"] == "yes"
    row = paper.top1_comparison(0.17, 0.05, "standin")[0]
    assert row["outcome"] == "no" and "sharper" in row["why not / note"]
    assert paper.top1_comparison(0.7, 0.1, "m")[0]["outcome"] == "not run"


def test_replacement_comparison_is_paired_and_never_calls_no_change_a_reproduction():
    quality = {"original": {"condition_score": 50.0, "condition_score_sem": 2.0},
               "top-k": {"condition_score": 49.0, "condition_score_sem": 2.0},
               "uniform": {"condition_score": 20.0, "condition_score_sem": 2.0}}
    rows = paper.replacement_comparison(quality)
    assert rows[0]["outcome"] == "noise" and "unpaired" in rows[0]["here"]
    assert rows[1]["why not / note"] == "as expected"
    # Paired: the same images before and after; a -1 shift on every image with little spread is decisive.
    scores = {"original": [50.0, 60.0, 40.0, 55.0], "top-k": [49.0, 59.1, 38.9, 54.0], "uniform": None}
    drop = paper.replacement_comparison(quality, scores)[0]
    assert drop["outcome"] == "no" and drop["why not / note"].startswith("a drop") and "paired" in drop["here"]
    rise = paper.replacement_comparison(quality, {**scores, "top-k": [70.0, 80.0, 60.5, 75.0]})[0]
    assert rise["outcome"] == "no" and rise["why not / note"].startswith("a rise")
    noisy = paper.replacement_comparison(quality, {**scores, "top-k": [55.0, 55.0, 45.0, 50.0]})[0]
    assert noisy["outcome"] == "noise"
    assert paper.replacement_comparison({"original": {}, "top-k": {}})[0]["outcome"] == "not run"


def _table_row(method, nfe, score, distortion=0.0):
    """A table row with per-image values over four images (two prompts x two seeds)."""
    return {"method": method, "nfe": sum(nfe) / len(nfe), "speedup_nfe": 256 / (sum(nfe) / len(nfe)),
            "condition_score": sum(score) / len(score), "distortion": sum(distortion) / 4 if distortion else 0.0,
            "per_image": {"prompt": ["a", "b", "a", "b"], "seed": [0, 1, 2, 3], "nfe": nfe,
                          "condition_score": score, "distortion": distortion or [0.0] * 4,
                          "w1": None}}


def test_speed_quality_comparison_from_paired_rows():
    ar = _table_row("AR", [256] * 4, [50.0, 52.0, 48.0, 51.0])
    sjd = _table_row("SJD", [112, 108, 111, 109], [50.0, 52.0, 48.0, 51.0])
    gsd = _table_row("GSD (G=50)", [69, 67, 70, 66], [49.5, 51.5, 47.6, 50.4])
    amp = _table_row("Amplify (k=3)", [61, 59, 60, 60], [40.0, 41.0, 39.0, 40.5])
    labels = {key: spec.label for key, spec in tables.table2_rows(50).items()}
    table2 = [sjd, _table_row(labels["(A)"], [100, 99, 101, 100], [50.0] * 4, [0.10, 0.11, 0.12, 0.10]),
              _table_row(labels["(B)"], [75, 76, 74, 75], [45.0] * 4, [0.30, 0.32, 0.31, 0.29]),
              _table_row(labels["(C)"], [68, 69, 67, 68], [49.0] * 4, [0.20, 0.21, 0.22, 0.19]),
              _table_row(labels["(D)"], [68, 67, 69, 68], [49.5] * 4, [0.18, 0.20, 0.19, 0.21])]
    rows = {r["id"]: r for r in paper.speed_quality_comparison([ar, sjd, gsd, amp], table2)}
    assert rows["sjd_speedup_over_ar"]["outcome"] == "yes"  # 2.33x against 2.31x
    assert rows["gsd_speedup_over_ar"]["outcome"] == "yes"  # 3.76x
    assert "gsd_fewer_nfe_than_sjd" not in rows  # nfe_below_sjd's row
    assert rows["gsd_quality_above_amplify"]["outcome"] == "yes"
    ordering = rows["table2_b_distorts_most_tv"]
    assert ordering["outcome"] == "yes" and "(B) - (C): +0.1" in ordering["here"]
    assert rows["table2_a_nfe_over_sjd"]["here"].startswith(f"(A) / SJD: {100 / 110:.2f}")
    # Table 2 (B) is judged against the paper's ratio 685.31 / 1035, not against SJD alone.
    assert rows["table2_b_nfe_over_sjd"]["paper"] == f"{685.31 / 1035:.2f}"
    # One image's difference of the other sign on the ordering: within the noise, not "yes".
    table2[2]["per_image"]["distortion"] = [0.30, 0.32, 0.31, 0.05]
    ordering = {r["id"]: r for r in paper.speed_quality_comparison([ar, sjd, gsd, amp], table2)}[
        "table2_b_distorts_most_tv"]
    assert ordering["outcome"] == "noise" and ordering["verdict"] == "no difference detected"
    # A missing row is reported, not invented.
    rows = {r["id"]: r for r in paper.speed_quality_comparison([ar, sjd], [])}
    assert rows["gsd_speedup_over_ar"]["outcome"] == "not run"
    assert rows["table2_d_nfe_over_sjd"]["outcome"] == "not run"


def test_frontier_comparison_from_paired_rows():
    ar = _table_row("AR", [256] * 4, [50.0] * 4)
    table1 = [ar, _table_row("SJD", [112, 108, 111, 109], [50.0] * 4),
              _table_row("MC-SJD (maximal)", [61, 60, 62, 61], [50.0] * 4),
              _table_row("MC-SJD (Gumbel)", [90, 91, 89, 90], [50.0] * 4),
              _table_row("GSD (G=50)", [75, 76, 74, 75], [49.0] * 4),
              _table_row("MC-GSD (G=50, maximal)", [58, 57, 59, 58], [49.0] * 4)]
    rows = {r["id"]: r for r in paper.frontier_comparison(table1)}
    assert rows["mc_sjd_maximal_speedup_over_ar"]["outcome"] == "yes"  # 4.20x against 4.21x
    assert rows["mc_sjd_gumbel_speedup_over_ar"]["outcome"] == "direction only"
    claim = "mc_sjd_maximal_fewer_nfe_than_gsd"
    assert rows[claim]["outcome"] == "yes"
    assert rows[claim]["here"].startswith("MC-SJD (maximal) - GSD (G=50), NFE: -14")
    # Each coupling is judged on its own: the slower Gumbel chain is a "no" here, not hidden by the faster one.
    assert rows["mc_sjd_gumbel_fewer_nfe_than_gsd"]["outcome"] == "no"
    assert rows["coupled_drafts_speed_up_gsd"]["outcome"] == "yes"
    assert rows["sjd_pac_step_compression"]["outcome"] == "not run"
    # A run without the rows says so; a slower coupled SJD is a "no"; a tie within the noise is "noise".
    missing = {r["id"]: r for r in paper.frontier_comparison(table1[:2])}
    assert missing[claim]["outcome"] == "not run"
    gsd = table1[4]
    slower = paper.frontier_comparison([ar, _table_row("MC-SJD (maximal)", [80, 81, 79, 80], [50.0] * 4), gsd])
    assert {r["id"]: r for r in slower}[claim]["outcome"] == "no"
    tie = paper.frontier_comparison([ar, _table_row("MC-SJD (maximal)", [76, 74, 75, 76], [50.0] * 4), gsd])
    assert {r["id"]: r for r in tie}[claim]["outcome"] == "noise"
    assert paper.SCD_AR_NFE.value / paper.SCD_NFE.value == pytest.approx(4.21, abs=5e-3)  # SCD (arXiv 2510.24211)


def test_nfe_below_sjd_is_a_measured_inequality():
    sjd = _table_row("SJD", [112, 108, 111, 109], [0.0] * 4)
    clear = _table_row("GSD (G=50)", [69, 67, 70, 66], [0.0] * 4)
    close = _table_row("GSD (G=3)", [110, 109, 112, 108], [0.0] * 4)  # -0.25 NFE, paired SE 0.75
    worse = _table_row("GSD (G=10)", [115, 111, 114, 112], [0.0] * 4)
    rows = {r["claim"]: r for r in paper.nfe_below_sjd([sjd, clear, close, worse])}
    assert rows["GSD (G=50) needs fewer NFE than SJD"]["outcome"] == "yes"
    assert rows["GSD (G=50) needs fewer NFE than SJD"]["paper"] == "637 < 1035"
    assert rows["GSD (G=3) needs fewer NFE than SJD"]["outcome"] == "noise"
    assert rows["GSD (G=10) needs fewer NFE than SJD"]["outcome"] == "no"
    # -0.25 NFE, paired SE 0.75: the interval d +- 2 SE and what the run could have detected
    assert "-0.2 [-1.8, +1.2]" in rows["GSD (G=3) needs fewer NFE than SJD"]["here"]
    assert "detectable at 80% power" in rows["GSD (G=3) needs fewer NFE than SJD"]["here"]
    assert paper.nfe_below_sjd([clear])[0]["outcome"] == "not run"


def test_paper_numbers_match_the_reference_ratios():
    assert paper.AR_NFE.value / paper.GSD50_NFE.value == pytest.approx(3.755, abs=1e-3)  # the paper: 3.76x
    assert all("arXiv 2508.07747" in n.source for n in (paper.AR_NFE, paper.SJD_NFE, *paper.TABLE2_NFE.values()))


def test_coupling_agreement_and_redraft_then_verify():
    q_old = course.fractions_from_weights(course.WORKED_Q)
    q_new = course.fractions_from_weights(course.WORKED_P)
    agree = course.coupling_agreement(q_old, q_new)
    assert agree["independent"] == F(32 + 48 + 12 + 4 + 2, 400)
    assert agree["maximal"] == 1 - F(sum(abs(a - b) for a, b in zip(course.WORKED_P, course.WORKED_Q)), 40)
    assert agree["independent"] < agree["gumbel"] <= agree["maximal"]
    assert course.coupling_agreement(q_new, q_new) == {"independent": sum(x * x for x in q_new),
                                                       "maximal": 1, "gumbel": 1}
    # Re-drafted by maximal coupling and verified with q_new: the target; with q_old for a kept
    # draft (SCD's release): proofs/09's (7/8, 1/8) against (3/4, 1/4).
    half, quarter = [F(1, 2)] * 2, [F(3, 4), F(1, 4)]
    assert course.redraft_then_verify(q_old, q_new, q_new) == q_new
    assert course.redraft_then_verify(half, quarter, quarter[::-1]) == quarter[::-1]
    assert course.redraft_then_verify(half, quarter, quarter, declare_previous_when_kept=True) == [F(7, 8),
                                                                                                  F(1, 8)]
    with pytest.raises(ValueError, match="exact distributions"):
        course.coupling_agreement(q_old, q_new[:4])
