"""The configurations of the paper's Table 1 (speed and quality), Table 2 (clustering
ablation) and Fig. 10 (NFE against quality), and the functions that fill them from a
``RunCache`` (configurations shared between tables are decoded once)."""

from __future__ import annotations

from typing import Any

from .runs import MethodSpec, RunCache

AR = MethodSpec("AR", "ar")
SJD = MethodSpec("SJD", "sjd")


def gsd(group_size: int, clusters: str = "dynamic", residual: str = "token", label: str | None = None) -> MethodSpec:
    """GSD at G; the default label names the paper's rule "GSD (G=..)", other rules by kind."""
    if label is None:
        kind = "" if clusters == "dynamic" else f" {clusters}" + ("" if residual == "token" else f" {residual}")
        label = f"GSD{kind} (G={group_size})"
    return MethodSpec(label, "gsd", clusters, group_size, residual)


def amplify(k: float) -> MethodSpec:
    """The naive lossy relaxation (our definition): SJD accepting with min(1, k p(x)/q(x))."""
    return MethodSpec(f"Amplify (k={k:g})", "sjd", acceptance_scale=float(k))


def table1_specs(group_sizes: tuple[int, ...] = (3, 10, 25, 50), amplify_k: tuple[float, ...] = (2.0, 3.0)) -> list[MethodSpec]:
    """AR, SJD, GSD (dynamic clusters with filters) per G, Amplify per k."""
    return [AR, SJD] + [gsd(g) for g in group_sizes] + [amplify(k) for k in amplify_k]


def table2_specs(group_size: int = 50) -> list[MethodSpec]:
    """The clustering ablation at one G: the paper's rows A-D, each of D's two filters alone
    (D1: probability gap, D2: embedding distance), and our rank-binned partition with the
    token-level and the cluster-exact residual."""
    g = group_size
    return [
        SJD,
        gsd(g, "static", label=f"(A) static: embedding k-means (G={g})"),
        gsd(g, "dynamic-q", label=f"(B) dynamic, sorted by draft q (G={g})"),
        gsd(g, "dynamic-nofilter", label=f"(C) dynamic, sorted by target p (G={g})"),
        gsd(g, "dynamic", label=f"(D) dynamic, p + filters (paper) (G={g})"),
        gsd(g, "dynamic-gap", label=f"(D1) dynamic, p + |dp| filter only (G={g})"),
        gsd(g, "dynamic-distance", label=f"(D2) dynamic, p + distance filter only (G={g})"),
        gsd(g, "rank-binned", "token", label=f"(E) rank-binned, token residual (G={g})"),
        gsd(g, "rank-binned", "cluster", label=f"(F) rank-binned, cluster-exact residual (G={g})"),
    ]


def pareto_specs(group_sizes: tuple[int, ...] = (3, 10, 25, 50, 100),
                 amplify_k: tuple[float, ...] = (1.5, 2.0, 3.0, 4.0)) -> dict[str, list[MethodSpec]]:
    """Fig. 10's curves: GSD over G, Amplify over k, with AR and SJD as single points."""
    return {"GSD": [gsd(g) for g in group_sizes], "Amplify": [amplify(k) for k in amplify_k],
            "AR": [AR], "SJD": [SJD]}


def speed_quality_table(cache: RunCache, specs: list[MethodSpec]) -> list[dict[str, Any]]:
    """Rows (see ``runs.summarize``) with speed-ups against AR on the same prompts and seeds."""
    return cache.table(specs, AR)


def pareto_points(cache: RunCache, curves: dict[str, list[MethodSpec]]) -> dict[str, list[dict[str, Any]]]:
    """Per curve, the table rows of its configurations (NFE and quality)."""
    return {name: cache.table(specs, AR) for name, specs in curves.items()}
