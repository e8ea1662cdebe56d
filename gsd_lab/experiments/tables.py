"""The configurations of the paper's Table 1 (speed and quality), Table 2 (clustering
ablation) and Fig. 10 (NFE against quality), the exact-distortion curves (distortion against
NFE), and the functions that fill them from a ``RunCache`` (configurations shared between
tables are decoded once).

The peer rule LANTERN (``gsd_core.lantern``) runs with k = ``LANTERN_K`` = 1001: the paper's and
its code's default of 1000 neighbours, plus the drafted token itself (our k counts it), and the
budgets delta: Table 1 uses the code's default 0.1 and its high-speed 0.4 (LANTERN, arXiv
2410.03355); the curves sweep ``LANTERN_DELTAS``, down to 0.001, because on the stand-in even
delta = 0.01 more than halves SJD's NFE, so only small budgets reach the NFE range of GSD for a
comparison of distortion at equal speed.

The lossless frontier: SJD with coupled re-drafts (MC-SJD / SCD, ``gsd_lab.decode.coupling``,
proofs/09), maximal and Gumbel, as rows and points, and the paper's GSD rule with maximally
coupled re-drafts ("MC-GSD", our name; lossy as GSD is) as rows and a curve over G."""

from __future__ import annotations

from typing import Any

from ..decode.methods import DecodingMethod, AmplifyAcceptance, ClusterAcceptance, LanternAcceptance
from .runs import MethodSpec, RunCache
from . import verdicts

AR = MethodSpec("AR", DecodingMethod("ar"))
SJD = MethodSpec("SJD", DecodingMethod("sjd"))
# AR on a second seed set (the same prompts): its difference to AR is pure sampling noise.
AR_SEED_NOISE = MethodSpec(
    "AR, second seed set (seed noise)", DecodingMethod("ar"), seed_offset=1000
)
LANTERN_K = 1001
LANTERN_DELTAS = (0.001, 0.003, 0.01, 0.1, 0.4)
LANTERN_MAX_CPU_VOCAB = 16384  # its neighbourhood table costs O(V^2 D) on a CPU


def lantern_affordable(vocab_size: int, device: object) -> bool:
    """Whether LANTERN's neighbourhood table (all V^2 embedding distances, ``gsd_core.lantern``)
    is cheap enough to build: on a GPU always, on a CPU for V <= ``LANTERN_MAX_CPU_VOCAB`` (the
    stand-in's 8203, not Lumina-mGPT's 65,536). ``figures`` and notebook 04 both ask this."""
    return str(device).startswith("cuda") or vocab_size <= LANTERN_MAX_CPU_VOCAB


def gsd(
    group_size: int, clusters: str = "dynamic", residual: str = "token", label: str | None = None
) -> MethodSpec:
    """GSD at G; the default label names the paper's rule "GSD (G=..)", other rules by kind."""
    if label is None:
        kind = (
            ""
            if clusters == "dynamic"
            else f" {clusters}" + ("" if residual == "token" else f" {residual}")
        )
        label = f"GSD{kind} (G={group_size})"
    return MethodSpec(
        label,
        DecodingMethod(
            "gsd", acceptance=ClusterAcceptance(clusters, group_size), residual=residual
        ),
    )


def amplify(k: float) -> MethodSpec:
    """The naive lossy relaxation (our definition): SJD accepting with min(1, k p(x)/q(x))."""
    method = DecodingMethod("sjd", acceptance=AmplifyAcceptance(scale=float(k)))
    return MethodSpec(f"Amplify (k={k:g})", method)


def lantern(delta: float, k: int = LANTERN_K) -> MethodSpec:
    """LANTERN's relaxed acceptance (SJD's drafts and residual) with budget delta, k tokens per
    neighbourhood (module docstring)."""
    method = DecodingMethod("sjd", acceptance=LanternAcceptance(k=k, delta=float(delta)))
    return MethodSpec(f"LANTERN k={k} (delta={delta:g})", method)


def coupled(draft: str, group_size: int | None = None) -> MethodSpec:
    """SJD with coupled re-drafts, "MC-SJD (maximal)" / "MC-SJD (Gumbel)" (lossless), or with a
    ``group_size`` the paper's GSD rule (dynamic clusters with filters) with them, "MC-GSD (G=..,
    maximal)"."""
    name = {"maximal": "maximal", "gumbel": "Gumbel"}[draft]
    if group_size is None:
        return MethodSpec(f"MC-SJD ({name})", DecodingMethod("sjd", draft=draft))
    return MethodSpec(
        f"MC-GSD (G={group_size}, {name})",
        DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=group_size), draft=draft),
    )


def table1_specs(
    group_sizes: tuple[int, ...] = (3, 10, 25, 50),
    amplify_k: tuple[float, ...] = (2.0, 3.0),
    lantern_deltas: tuple[float, ...] = (),
    seed_noise: bool = False,
    coupled_drafts: tuple[str, ...] = (),
    coupled_groups: tuple[int, ...] = (),
) -> list[MethodSpec]:
    """AR, the AR seed-noise row (``seed_noise``), SJD, MC-SJD per coupling (``coupled_drafts``),
    GSD (dynamic clusters with filters) per G, MC-GSD (maximal) per G of ``coupled_groups``,
    Amplify per k, LANTERN per delta (none of the optional rows by default; ``figures`` asks)."""
    return (
        [AR]
        + ([AR_SEED_NOISE] if seed_noise else [])
        + [SJD]
        + [coupled(d) for d in coupled_drafts]
        + [gsd(g) for g in group_sizes]
        + [coupled("maximal", g) for g in coupled_groups]
        + [amplify(k) for k in amplify_k]
        + [lantern(d) for d in lantern_deltas]
    )


def _frontier(
    coupled_drafts: tuple[str, ...], coupled_groups: tuple[int, ...]
) -> dict[str, list[MethodSpec]]:
    """The curves' lossless points (one per coupling) and the MC-GSD (maximal) curve over G."""
    points = {coupled(d).label: [coupled(d)] for d in coupled_drafts}
    return {
        **points,
        **(
            {"MC-GSD (maximal)": [coupled("maximal", g) for g in coupled_groups]}
            if coupled_groups
            else {}
        ),
    }


def table2_rows(group_size: int = 50) -> dict[str, MethodSpec]:
    """The clustering ablation at one G by row key: the paper's rows (A)-(D), each of D's two
    filters alone ((D1): probability gap, (D2): embedding distance), and our rank-binned partition
    with the token-level (E) and the cluster-exact (F) residual. Labels are built here only."""
    g = group_size
    return {
        "(A)": gsd(g, "static", label=f"(A) static: embedding k-means (G={g})"),
        "(B)": gsd(g, "dynamic-q", label=f"(B) dynamic, sorted by draft q (G={g})"),
        "(C)": gsd(g, "dynamic-nofilter", label=f"(C) dynamic, sorted by target p (G={g})"),
        "(D)": gsd(g, "dynamic", label=f"(D) dynamic, p + filters (paper) (G={g})"),
        "(D1)": gsd(g, "dynamic-gap", label=f"(D1) dynamic, p + |dp| filter only (G={g})"),
        "(D2)": gsd(g, "dynamic-distance", label=f"(D2) dynamic, p + distance filter only (G={g})"),
        "(E)": gsd(g, "rank-binned", "token", label=f"(E) rank-binned, token residual (G={g})"),
        "(F)": gsd(
            g, "rank-binned", "cluster", label=f"(F) rank-binned, cluster-exact residual (G={g})"
        ),
    }


def table2_specs(group_size: int = 50) -> list[MethodSpec]:
    """SJD, then ``table2_rows(group_size)`` in order."""
    return [SJD, *table2_rows(group_size).values()]


def pareto_specs(
    group_sizes: tuple[int, ...] = (3, 10, 25, 50, 100),
    amplify_k: tuple[float, ...] = (1.5, 2.0, 3.0, 4.0),
    lantern_deltas: tuple[float, ...] = (),
    coupled_drafts: tuple[str, ...] = (),
    coupled_groups: tuple[int, ...] = (),
) -> dict[str, list[MethodSpec]]:
    """Fig. 10's curves: GSD over G, Amplify over k, LANTERN over delta (a curve when deltas are
    given), MC-GSD (maximal) over ``coupled_groups``, with AR, SJD and MC-SJD per coupling as
    single points."""
    return {
        "GSD": [gsd(g) for g in group_sizes],
        "Amplify": [amplify(k) for k in amplify_k],
        **({"LANTERN": [lantern(d) for d in lantern_deltas]} if lantern_deltas else {}),
        "AR": [AR],
        "SJD": [SJD],
        **_frontier(coupled_drafts, coupled_groups),
    }


def distortion_specs(
    group_sizes: tuple[int, ...] = (3, 10, 25, 50, 100),
    rank_group_sizes: tuple[int, ...] = (10, 50),
    amplify_k: tuple[float, ...] = (1.5, 2.0, 3.0, 4.0),
    lantern_deltas: tuple[float, ...] = LANTERN_DELTAS,
    coupled_drafts: tuple[str, ...] = (),
    coupled_groups: tuple[int, ...] = (),
) -> dict[str, list[MethodSpec]]:
    """The exact-distortion curves (Fig. 10's idea with the noise-free distortion as the y axis):
    GSD over G, rank bins with the token and the cluster-exact residual over G, Amplify over k,
    LANTERN over delta, MC-GSD (maximal) over ``coupled_groups``; AR, SJD and MC-SJD per coupling
    as points at distortion 0."""
    curves = {
        "GSD": [gsd(g) for g in group_sizes],
        "rank bins, token residual": [gsd(g, "rank-binned", "token") for g in rank_group_sizes],
        "rank bins, cluster-exact residual": [
            gsd(g, "rank-binned", "cluster") for g in rank_group_sizes
        ],
        "Amplify": [amplify(k) for k in amplify_k],
        "LANTERN": [lantern(d) for d in lantern_deltas],
        "AR": [AR],
        "SJD": [SJD],
        **_frontier(coupled_drafts, coupled_groups),
    }
    return {name: specs for name, specs in curves.items() if specs}


def speed_quality_table(
    cache: RunCache, specs: list[MethodSpec], baseline: MethodSpec = AR
) -> list[dict[str, Any]]:
    """Rows (see ``runs.summarize``) with speed-ups against AR (``baseline``: AR as decoded in this
    run, e.g. with a preset) on the same prompts and seeds."""
    return cache.table(specs, baseline)


def pareto_points(
    cache: RunCache, curves: dict[str, list[MethodSpec]], baseline: MethodSpec = AR
) -> dict[str, list[dict[str, Any]]]:
    """Per curve, the table rows of its configurations (NFE and quality) against ``baseline``."""
    return {name: cache.table(specs, baseline) for name, specs in curves.items()}


def paired_difference(
    cache: RunCache, spec: MethodSpec, baseline: MethodSpec, key: str = "nfe"
) -> tuple[float, float]:
    """Mean over images of ``key`` (a per-image field of the records: "nfe", "distortion") of
    ``spec`` minus ``baseline`` on the same prompts and seeds, and its standard error (the
    standard deviation of the per-image differences over sqrt(n); nan for one image): the one
    ``verdicts.paired_difference``, on the two configurations' records (seeds net of each
    spec's ``seed_offset``, so that the AR-against-AR row pairs with AR)."""

    def row(s: MethodSpec) -> dict[str, Any]:
        records = cache.records(s)
        return {
            "method": s.label,
            "per_image": {
                "prompt": [r.prompt for r in records],
                "seed": [r.seed - s.seed_offset for r in records],
                key: [getattr(r, key) for r in records],
            },
        }

    diff = verdicts.paired_difference(row(spec), row(baseline), key)
    if diff is verdicts.NOT_RUN:
        raise ValueError(f"{spec.label} or {baseline.label} has images without a {key!r} value")
    return diff.difference, float("nan") if diff.se is None else diff.se


# The columns notebook 04's decoding tables show: those its text discusses (the rows keep every
# column, as do ``figures/results.json`` and ``course.show_tables`` without ``columns``).
TABLE_COLUMNS = [
    "method",
    "nfe",
    "nfe_sem",
    "speedup_nfe",
    "accepted_per_tested",
    "acceptance_rate",
    "distortion",
    "distortion_sem",
    "w1",
    "condition_score",
    "condition_score_sem",
    "condition_score_diff_ar",
    "condition_score_diff_ar_low",
    "condition_score_diff_ar_high",
    "frechet_distance",
    "clip_score",
]
