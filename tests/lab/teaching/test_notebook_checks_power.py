"""Power of the notebooks' checked cells, without running a notebook.

Notebook 05's checked cells print the verdicts of ``gsd_lab.teaching.nbcheck.check_verify_law`` (a Monte
Carlo run of ``gsd_core.verify`` against the exact ``output_distribution`` / ``acceptance_rate``,
tolerance 4 standard errors). Here the same calls, with the notebook's parameters, run against
mutated versions of ``verify``:

- resampling from p after a rejection (instead of the residual norm((p - q)+)),
- testing p(x)/q(C) instead of p(C)/q(C),
- ignoring its clusters (plain SD),
must each turn at least one printed verdict to False (so nbval fails), and
- uniforms U replaced by 1 - U (a harmless change of the random stream)
must leave every verdict True (so nbval passes).

The mutants wrap the rule ``verify`` looks up (``gsd_core.verification.window_rule``; the exact
enumeration in ``gsd_core.exact`` keeps its own reference, ``as_rule``), or wrap ``verify`` where the check
looks it up.
"""

from __future__ import annotations

import pytest
import torch

import gsd_core.verification as verification
from gsd_core import SD, DynamicClusters, RankBinnedClusters
from gsd_lab.experiments import toy
from gsd_lab.teaching import nbcheck
from gsd_lab.teaching.nbcheck import check_verify_law, max_z_score

# Notebook 05's parameters and rules (sections 1 and 6).
VOCAB, NUM_SAMPLES, SEED = 6, 200_000, 0
RULES = {"dynamic G=3 (3 tokens)": DynamicClusters(3),
         "rank bins of 3, token residual": RankBinnedClusters(3),
         "rank bins of 3, cluster residual": RankBinnedClusters(3, "cluster")}


def notebook_verdicts() -> dict[str, bool]:
    """Every verdict notebook 05's checked cells print from ``check_verify_law``."""
    p, q = toy.dirichlet_pairs(VOCAB, 1, alpha=1.0, seed=SEED)
    p, q = p[0], q[0]
    mc_seed = SEED + 1000  # as the notebook: not the stream that drew p and q
    checks = [check_verify_law(p, q, num_samples=NUM_SAMPLES, seed=mc_seed, rule="SD")]
    checks += [check_verify_law(p, q, clusters=rule, num_samples=NUM_SAMPLES, seed=mc_seed + i + 1, rule=name)
               for i, (name, rule) in enumerate(RULES.items())]
    verdicts = {}
    for c in checks:
        verdicts[f"{c.rule} law"] = c.law_ok
        verdicts[f"{c.rule} acceptance"] = c.acceptance_ok
    return verdicts


class Mutant:
    """A rule that wraps ``base`` and changes one thing: resampling from p instead of the
    residual, or crediting p(x) instead of p(C(x))."""

    def __init__(self, base, change: str):
        self.base, self.change = base, change

    def masses(self, p, q, x):
        credited, charged = self.base.masses(p, q, x)
        return (p.gather(-1, x), charged) if self.change == "p_token" else (credited, charged)

    def residual_weights(self, p, q):
        return p.clone() if self.change == "resample_from_p" else self.base.residual_weights(p, q)


def _wrap_rules(module, monkeypatch, change: str) -> None:
    """Wrap the function ``module`` turns a rule argument into a rule with: ``window_rule`` in
    ``gsd_core.verification`` (``verify``), ``as_rule`` in ``gsd_core.exact`` (the exact laws)."""
    name = "window_rule" if hasattr(module, "window_rule") else "as_rule"
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda rule: SD() if change == "ignore" else Mutant(real(rule), change))


def _one_minus_u(original):
    def mutant(p, q, draft_tokens, rule=None, *, generator=None, **kwargs):
        batch = torch.broadcast_shapes(p.shape[:-2], q.shape[:-2], draft_tokens.shape[:-1])
        u = torch.rand(*batch, q.shape[-2] + 1, generator=generator, dtype=torch.float64)
        return original(p, q, draft_tokens, rule, uniforms=1 - u, **kwargs)
    return mutant


def apply_mutation(monkeypatch, name: str) -> None:
    if name == "resample_from_p":
        _wrap_rules(verification, monkeypatch, "resample_from_p")
    elif name == "p_token_over_q_cluster":
        _wrap_rules(verification, monkeypatch, "p_token")
    elif name == "ignore_clusters":
        _wrap_rules(verification, monkeypatch, "ignore")
    elif name == "one_minus_u":
        monkeypatch.setattr(toy, "verify", _one_minus_u(verification.verify))
    else:
        raise ValueError(name)


def test_checks_pass_on_the_real_verify():
    verdicts = notebook_verdicts()
    assert all(verdicts.values()), verdicts


@pytest.mark.parametrize("mutation, expect_fail", [
    ("resample_from_p", "SD law"),
    ("p_token_over_q_cluster", "dynamic G=3 (3 tokens) acceptance"),
    ("ignore_clusters", "dynamic G=3 (3 tokens) law"),
])
def test_checks_fail_on_a_wrong_verify(monkeypatch, mutation, expect_fail):
    apply_mutation(monkeypatch, mutation)
    verdicts = notebook_verdicts()
    failed = sorted(k for k, ok in verdicts.items() if not ok)
    print(f"{mutation}: failing verdicts {failed}")
    assert expect_fail in failed, verdicts


def test_checks_pass_with_uniforms_one_minus_u(monkeypatch):
    apply_mutation(monkeypatch, "one_minus_u")
    p, q = toy.dirichlet_pairs(VOCAB, 1, alpha=1.0, seed=SEED)
    # The mutation is live: the same seed now gives another stream, hence other frequencies.
    mutated, _ = toy.empirical_speculative_samples(p[0], q[0], num_samples=1000, seed=SEED)
    monkeypatch.undo()
    original, _ = toy.empirical_speculative_samples(p[0], q[0], num_samples=1000, seed=SEED)
    assert not torch.equal(mutated, original)
    apply_mutation(monkeypatch, "one_minus_u")
    verdicts = notebook_verdicts()
    assert all(verdicts.values()), verdicts


def test_max_z_score():
    exact = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    assert max_z_score(exact, exact, 100) == 0.0
    # 0.6 vs 0.5 with n = 100: SE 0.05, z = 2.
    assert max_z_score(torch.tensor([0.6, 0.4, 0.0]), exact, 100) == pytest.approx(2.0)
    # A token of exact probability 0 that was emitted fails whatever n.
    assert max_z_score(torch.tensor([0.5, 0.49, 0.01]), exact, 100) == float("inf")


# ---- the exact checks of notebook 05 (sections 1, 6, 7, 8) ----------------------------------------

def exact_verdicts() -> dict[str, bool]:
    """The verdicts notebook 05's exact checked cells print, from the same ``gsd_lab.teaching.course``
    functions on the same inputs: gsd_core's float64 enumeration against exact fractions
    (worked example, proofs/04 counterexample, one cluster)."""
    from gsd_lab.teaching import course

    p5 = course.fractions_from_weights(course.WORKED_P)
    q5 = course.fractions_from_weights(course.WORKED_Q)
    counterexample = course.counterexample_checks(course.counterexample_table())
    one_cluster = course.single_cluster_checks(p5, q5)
    # Section 8 (LANTERN): proofs/08's example in fractions, and the identity on section 1's pair.
    p8 = course.fractions_from_weights(course.LANTERN_P)
    q8 = course.fractions_from_weights(course.LANTERN_Q)
    lantern8 = course.lantern_parts(p8, q8, course.LANTERN_NEIGHBOURS, course.LANTERN_DELTA)
    embeddings8 = torch.tensor(course.LANTERN_EMBEDDINGS, dtype=torch.float64).unsqueeze(1)
    lantern_agrees = course.lantern_checks(lantern8, p8, q8, embeddings8, k=2, delta=float(course.LANTERN_DELTA))
    p, q = toy.dirichlet_pairs(VOCAB, 1, alpha=1.0, seed=SEED)
    embeddings6 = torch.randn(VOCAB, 2, generator=torch.Generator().manual_seed(SEED + 7), dtype=torch.float64)
    gaps = [course.lantern_identity_gap(p[0], q[0], embeddings6, k, delta) for k in (2, 4) for delta in (0.05, 0.2, 0.5)]
    return {"worked example output = p": course.output_law_is_p(p5, q5),
            "counterexample clusters": counterexample["clusters"],
            "counterexample dynamic acceptance": counterexample["dynamic"],
            "counterexample SD acceptance": counterexample["SD"],
            "one cluster outputs q": all(one_cluster.values()),
            "lantern example law": lantern_agrees["output law"] and lantern_agrees["acceptance"],
            "lantern identity": max(gaps) < 1e-12}


def test_exact_checks_pass_on_the_real_core():
    verdicts = exact_verdicts()
    assert all(verdicts.values()), verdicts


@pytest.mark.parametrize("mutation, expect_fail", [
    ("exact_resample_from_p", "worked example output = p"),
    ("exact_ignore_clusters", "counterexample dynamic acceptance"),
    ("exact_ignore_clusters", "one cluster outputs q"),
    ("window_one_rank_wider", "counterexample clusters"),
    ("lantern_no_credit", "lantern example law"),
    ("lantern_residual_from_p", "lantern identity"),
])
def test_exact_checks_fail_on_a_wrong_enumeration(monkeypatch, mutation, expect_fail):
    import gsd_core.exact as exact
    from gsd_lab.teaching import course

    if mutation == "exact_resample_from_p":
        _wrap_rules(exact, monkeypatch, "resample_from_p")
    elif mutation == "exact_ignore_clusters":
        _wrap_rules(exact, monkeypatch, "ignore")
    elif mutation == "lantern_no_credit":  # LANTERN credits no neighbour mass: plain SD
        from gsd_core import Lantern

        monkeypatch.setattr(Lantern, "credited", lambda self, p, x: p.gather(-1, x))
    elif mutation == "lantern_residual_from_p":
        from gsd_core import Lantern

        monkeypatch.setattr(Lantern, "residual_weights", lambda self, p, q: p.expand(torch.broadcast_shapes(p.shape,
                                                                                                        q.shape)))
    else:  # a dynamic_cluster whose window is one rank wider on each side
        wrong = course.dynamic_cluster
        monkeypatch.setattr(course, "dynamic_cluster",
                            lambda p, x, group_size: wrong(p, x, group_size + 2))
    verdicts = exact_verdicts()
    assert not verdicts[expect_fail], verdicts


def test_distortion_lines_fail_on_a_lossy_sjd_row_and_pass_on_exact_zero():
    rows = [{"method": "AR", "distortion": 0.0}, {"method": "SJD", "distortion": 3e-17},
            {"method": "GSD (G=50)", "distortion": 0.12}]
    assert all(line.endswith("True") for line in nbcheck.distortion_lines(rows))
    lossy_sjd = [dict(r, distortion=1e-6) if r["method"] == "SJD" else r for r in rows]
    assert nbcheck.distortion_lines(lossy_sjd)[0].endswith("False")
    out_of_range = rows + [{"method": "Amplify (k=2)", "distortion": 1.5}]
    assert nbcheck.distortion_lines(out_of_range)[-1].endswith("False")


# ---- notebook 04's decoder-level check: SJD through generate against AR's exact joint law ---------

DECODER_SAMPLES, DECODER_SEED = 1000, 0  # notebook 04's parameters


def joint_verdicts(which=("sjd", "sjd_repeat", "gsd"), seed: int = DECODER_SEED) -> dict[str, bool]:
    """The verdicts of notebook 04's exact-joint cell (the same calls, the same parameters)."""
    from gsd_lab.experiments import lossless
    from gsd_lab.decode.methods import DecodingMethod, ClusterAcceptance

    out = {}
    if "sjd" in which:
        out["sjd"] = lossless.check_joint("SJD, window 2", DECODER_SAMPLES, seed,
                                          method=DecodingMethod("sjd", window=2)).passed
    if "sjd_repeat" in which:
        out["sjd_repeat"] = lossless.check_joint("SJD, window 2, drafts repeat the previous token", DECODER_SAMPLES,
                                                 seed + 2, method=DecodingMethod("sjd", window=2,
                                                                                 init="repeat_row")).passed
    if "gsd" in which:
        out["gsd"] = lossless.check_joint("GSD, one rank bin of the 3 tokens (lossy)", DECODER_SAMPLES, seed + 1,
                                          lossless_expected=False,
                                          method=DecodingMethod("gsd", acceptance=ClusterAcceptance(clusters="rank-binned", group_size=3),
                                                                window=2)).passed
    return out


def test_joint_check_passes_on_the_real_decoder_and_another_stream():
    assert joint_verdicts() == {"sjd": True, "sjd_repeat": True, "gsd": True}
    assert joint_verdicts(("sjd",), seed=DECODER_SEED + 100) == {"sjd": True}  # the stream changed


def test_joint_check_fails_on_a_decoder_that_verifies_against_the_wrong_q(monkeypatch):
    """Verifying each draft as if it had been drawn from the target (q := p) accepts it always."""
    import gsd_lab.decode.loop as decoding

    real_verify = decoding.verify

    def wrong_q_verify(p, q, drafts, *args, **kwargs):
        return real_verify(p, p[..., : q.shape[-2], :], drafts, *args, **kwargs)

    monkeypatch.setattr(decoding, "verify", wrong_q_verify)
    assert joint_verdicts(("sjd",)) == {"sjd": False}


def test_joint_check_fails_when_the_lossy_rule_ignores_its_clusters(monkeypatch):
    """GSD that verifies single tokens is SJD, lossless: the lossy control's verdict turns False."""
    import gsd_lab.decode.loop as decoding

    real_verify = decoding.verify
    monkeypatch.setattr(decoding, "verify", lambda p, q, drafts, rule=None, **kwargs:
                        real_verify(p, q, drafts, SD(), **kwargs))
    assert joint_verdicts(("gsd",)) == {"gsd": False}


def test_joint_check_fails_on_a_decoder_that_resamples_from_p(monkeypatch):
    """The classic bug: after a rejection, a token drawn from p instead of norm((p - q)+). With
    uniformly random one-hot drafts it is lossless on average over the draft (lossless.py's
    docstring), so the check whose drafts repeat the previous token is the one that must fail."""
    import gsd_lab.decode.loop as decoding

    class ResampleFromP(SD):
        def residual_weights(self, p, q):
            return p.clone()

    real_verify = decoding.verify
    monkeypatch.setattr(decoding, "verify", lambda p, q, drafts, rule=None, **kwargs:
                        real_verify(p, q, drafts, ResampleFromP(), **kwargs))
    assert joint_verdicts(("sjd_repeat",)) == {"sjd_repeat": False}
