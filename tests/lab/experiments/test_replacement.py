"""The Fig. 4 replacement study: each altered image scored by its own log-likelihood (teacher-
forced on the altered sequence, full softmax), its content distance from the original, and
paired changes against the original."""

from __future__ import annotations

import math

import pytest
import torch

from gsd_lab.experiments.image_model import tiny_random_model
from gsd_lab.experiments.replacement import (VARIANTS, content_distance, full_softmax,
                                             replace_tokens, replacement_study,
                                             target_distributions, token_log_likelihoods)
from gsd_lab.experiments.runs import MethodSpec, resolve_for, run_method
from gsd_lab.experiments.verdicts import paired_values
from gsd_lab.decode.methods import DecodingMethod, ClusterAcceptance

AR = MethodSpec("AR", DecodingMethod("ar"))


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return tiny_random_model(0, top_k=5)  # a top-k truncation, as the real models sample with


@pytest.fixture(scope="module")
def records(tiny):
    return run_method(tiny, AR, ["1", "2", "3"], [0])


def step_by_step(model, prompt, tokens):
    """log p_full(x_i | prompt, x_<i), one forward per position from a fresh start (no batching:
    an independent computation of the same quantity)."""
    prompt_ids, uncond = model.encode(prompt)
    out = []
    with full_softmax(model):
        for i in range(tokens.numel()):
            model.adapter.start(prompt_ids, uncond)
            row = model.adapter.forward(torch.cat([prompt_ids, tokens[:i]]), num_rows=1)[0]
            out.append(float(torch.log(row[tokens[i]])))
    return torch.tensor(out, dtype=torch.float64)


def test_an_unaltered_sequence_scores_its_own_log_likelihood(tiny, records):
    tokens = records[0].tokens.cpu()
    scored = token_log_likelihoods(tiny, records[0].prompt, tokens)
    expected = step_by_step(tiny, records[0].prompt, tokens)
    torch.testing.assert_close(scored, expected, rtol=0, atol=1e-10)
    assert tiny.adapter.top_k == 5  # restored after scoring


def test_an_altered_sequence_is_scored_under_its_own_rows_without_a_top_k_floor(tiny, records):
    prompt, tokens = records[0].prompt, records[0].tokens.cpu()
    p = target_distributions(tiny, prompt, tokens).cpu()  # the sampling law: top-5
    j = 10
    outside = [int(t) for t in tiny.image_vocabulary if p[j, t] == 0]
    altered = tokens.clone()
    altered[j] = outside[0]  # a code the top-k law gives probability 0
    own = token_log_likelihoods(tiny, prompt, altered)
    torch.testing.assert_close(own, step_by_step(tiny, prompt, altered), rtol=0, atol=1e-10)
    assert math.isfinite(float(own[j])) and float(own[j]) > -50  # no floor such as log 1e-300
    original_rows = token_log_likelihoods(tiny, prompt, tokens)
    assert torch.equal(own[:j], original_rows[:j])  # the same context up to j
    assert not torch.allclose(own[j + 1:], original_rows[j + 1:])  # later rows see the new token


def test_content_distance_is_the_rms_of_the_code_content_difference(tiny, records):
    tokens = records[0].tokens.cpu()
    assert content_distance(tiny, tokens, tokens) == 0.0
    codes = tiny.image_vocabulary.cpu()
    content = tiny.adapter.code_content().to(torch.float64)
    altered = tokens.clone()
    altered[3] = codes[(torch.nonzero(codes == tokens[3]).item() + 1) % codes.numel()]
    row = lambda t: content[torch.nonzero(codes == t).item()]  # noqa: E731
    expected = math.sqrt(float((row(altered[3]) - row(tokens[3])).square().mean()) / tokens.numel())
    assert content_distance(tiny, tokens, altered) == pytest.approx(expected, rel=1e-12)


def test_replacements_come_from_their_candidate_sets(tiny, records):
    tokens = records[0].tokens.cpu()
    p = target_distributions(tiny, records[0].prompt, tokens).cpu()
    g = torch.Generator().manual_seed(0)
    new, mask = replace_tokens(tokens, p, tiny, mode="top-k", fraction=0.5, top_k=3, generator=g)
    assert int(mask.sum()) == tokens.numel() // 2 and torch.equal(new[~mask], tokens[~mask])
    assert bool((torch.topk(p, 3).indices[mask] == new[mask].unsqueeze(-1)).any(-1).all())
    rule = resolve_for(tiny, DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=7))).clusters
    new, mask = replace_tokens(tokens, p, tiny, mode="same-cluster", fraction=1.0, generator=g,
                               clusters=rule)
    index, keep = rule.members(p, p, tokens.unsqueeze(-1))
    members = [set(index[i, 0][keep[i, 0]].tolist()) for i in range(tokens.numel())]
    assert all(int(new[i]) in members[i] and p[i, new[i]] > 0
               for i in range(tokens.numel()))
    with pytest.raises(ValueError, match="needs clusters"):
        replace_tokens(tokens, p, tiny, mode="same-cluster", fraction=0.5, generator=g)


def test_study_reports_paired_changes_against_the_original(tiny, records):
    study = replacement_study(tiny, records, top_k=3, cluster_size=7)
    assert set(study.images) == set(VARIANTS) and study.changed_share["original"] == 0.0
    for i, record in enumerate(records):
        own = float(token_log_likelihoods(tiny, record.prompt, record.tokens.cpu()).mean())
        assert study.log_likelihood["original"][i] == own
    assert study.content_distance["original"] == [0.0] * len(records)
    assert all(d > 0 for v in ("top-k", "uniform") for d in study.content_distance[v])
    change = study.change("log_likelihood", "uniform")
    ll = study.log_likelihood
    assert change == paired_values(ll["uniform"], ll["original"])
    assert change.n == len(records) and change.se is not None
    assert study.change("log_likelihood", "original").difference == 0.0
    rows = study.rows()
    assert [r["variant"] for r in rows] == list(VARIANTS[1:])
    assert all("paired SE" in r["log_likelihood_change"] for r in rows)


def test_summary_lines_judge_each_change_with_the_verdict_rule(tiny, records):
    study = replacement_study(tiny, records, top_k=3, cluster_size=7)
    study.log_likelihood = {**study.log_likelihood,
                            "uniform": [v - 5.0 for v in study.log_likelihood["original"]]}
    study.log_likelihood["uniform"][0] -= 0.1  # a spread, so a finite paired SE
    lines = dict(zip(VARIANTS[1:], study.summary_lines()))
    assert "own log-likelihood per token lower: -5.03" in lines["uniform"]
    study.log_likelihood["uniform"] = [v + 1e-3 * (-1) ** i
                                       for i, v in enumerate(study.log_likelihood["original"])]
    assert "within 2 SE (noise)" in study.summary_lines()[-1]
