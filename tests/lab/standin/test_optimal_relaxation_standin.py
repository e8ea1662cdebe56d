"""The one-step bound of proofs/10 on the stand-in's own rows: at its exact TV, no rule (GSD's
dynamic clusters G = 50 with and without the probability-gap filter, rank bins, Amplify) accepts
more than 1 - T + TV, and OptimalRelaxation at that TV attains 1 - T + TV. Rows: a few positions
of one teacher-forced pass (class 0); drafts: a Jacobi-like q (the row one position later, as a
re-draft's law given another prefix) and a fresh one-hot draft."""

from __future__ import annotations

import torch

from gsd_core import (
    Amplify,
    DynamicClusters,
    OptimalRelaxation,
    RankBinnedClusters,
    acceptance_rate,
    output_distribution,
    tv_distance,
)


def test_no_rule_beats_the_bound_on_standin_rows():
    from gsd_lab.standin.adapter import load_standin

    adapter = load_standin()
    prompt = adapter.prompt_ids(0)
    adapter.start(prompt, adapter.uncond_prompt_ids())
    ids = adapter.random_tokens(torch.arange(6), torch.Generator().manual_seed(0))
    rows = adapter.forward(torch.cat([prompt, ids]), num_rows=7).to(torch.float64)
    rows = rows / rows.sum(-1, keepdim=True)
    one_hot = torch.zeros_like(rows[0])
    one_hot[int(rows[1].argmax())] = 1
    pairs = [(rows[i], rows[i + 1]) for i in range(4)] + [(rows[0], one_hot)]
    rules = [DynamicClusters(50), DynamicClusters(50, max_prob_gap=0.15), RankBinnedClusters(50),
             Amplify(2.0), Amplify(2.0, DynamicClusters(50))]
    for p, q in pairs:
        total = tv_distance(p, q).item()
        for rule in rules:
            spent = tv_distance(output_distribution(p, q, rule), p).item()
            alpha = acceptance_rate(p, q, rule).item()
            assert alpha <= 1 - total + spent + 1e-12, (rule, alpha, total, spent)
            best = acceptance_rate(p, q, OptimalRelaxation(min(spent, 1.0))).item()
            assert abs(best - (1 - total + min(spent, total))) < 1e-12
            assert best >= alpha - 1e-12
