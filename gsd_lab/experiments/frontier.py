"""The frontier: NFE against distortion (TV and W1) for GSD, the lossless coupled drafts, the
naive lossy rivals and the optimal lossy rules, and the one-step Pareto line they all sit under
(the configurations, runs, matching and error bars in full: docs/frontier-analysis.md).

- ``frontier_curves``: the configurations (a new rule is one more entry), every one decoding
  the run's prompts x ``seeds``; ``FrontierRuns``: their records, shared with the figures'
  ``RunCache`` where the keys agree;
- ``matched_distortion``: at the reference's mean distortion (GSD G = 50's TV, then its W1),
  difference = reference NFE - the curve's NFE there (linear interpolation between neighbouring
  configurations; < 0: GSD fewer), a paired bootstrap over images, ``verdicts.verdict``;
- ``one_step_points``, ``line_violations``: with T = TV(p, q), any rule whose output law r has
  TV(r, p) = t accepts with probability at most 1 - T + t (proofs/10).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gsd_core import acceptance_rate, output_distribution, tv_distance

from ..decode.methods import (
    BudgetAcceptance,
    DecodingMethod,
    RelaxationAcceptance,
    SDAcceptance,
    TransportAcceptance,
)
from . import tables
from .matched import MEASURES, _interpolate, check_matching, paired_curves
from .runs import GenerationRecord, MethodSpec, RunCache, summarize
from .verdicts import NOISE_Z, verdict, word

RELAXATION = "TV-optimal relaxation"
RELAXATION_MAXIMAL = "TV-optimal relaxation, maximal drafts"
DIAL = "TV dial (sure), maximal drafts"
TRANSPORT = "W1 transport relaxation, maximal drafts"
W1_DIAL = "W1 dial (cap), maximal drafts"
# The optimal rules' curves, compared with GSD at matched distortion.
OPTIMAL = (RELAXATION, RELAXATION_MAXIMAL, DIAL, TRANSPORT, W1_DIAL)
DIAL_POLICY, DIAL_CAP = "sure", 0.5
W1_DIAL_POLICY, W1_DIAL_CAP = "cap", 0.04  # per-token W1 cap (RMS pixel on [-1, 1])
RIVALS = ("amplify", "lantern")  # the naive lossy rules a frontier can show as points


def _drafts(draft: str) -> str:
    """A label's note of the drafts: nothing for independent drafts, else ", maximal" etc."""
    return "" if draft == "independent" else f", {draft}"


def relaxation(delta: float, draft: str = "independent") -> MethodSpec:
    """SJD with the TV-optimal relaxation at per-token budget ``delta`` (delta = 0: SJD's key)."""
    rule = RelaxationAcceptance(delta=float(delta)) if delta else None
    return MethodSpec(
        f"relaxation (delta={delta:g}{_drafts(draft)})",
        DecodingMethod("sjd", acceptance=rule, draft=draft),
    )


def dial(budget: float, draft: str = "maximal") -> MethodSpec:
    """The certified TV dial: budget B per image, policy "sure" with cap 0.5 (``DIAL_POLICY``,
    ``DIAL_CAP``), drafts ``draft``."""
    return _dial("TV dial", "tv", DIAL_POLICY, DIAL_CAP, budget, draft)


def _dial(name: str, measure: str, policy: str, cap: float, budget: float, draft: str
          ) -> MethodSpec:
    """SJD with the certified dial: budget B in ``measure``, ``policy`` and per-token ``cap``."""
    dial = BudgetAcceptance(budget=float(budget), measure=measure, policy=policy, cap=cap)
    method = DecodingMethod("sjd", acceptance=dial, draft=draft)
    return MethodSpec(f"{name} (B={budget:g}{_drafts(draft)})", method)


def transport(eps: float, draft: str = "maximal") -> MethodSpec:
    """SJD with the W1 transport relaxation at per-token budget ``eps`` (content-distance
    units; k = 16 neighbours), drafts ``draft``."""
    return MethodSpec(
        f"transport (eps={eps:g}{_drafts(draft)})",
        DecodingMethod("sjd", acceptance=TransportAcceptance(eps=float(eps)), draft=draft),
    )


def w1_dial(budget: float, draft: str = "maximal") -> MethodSpec:
    """The W1 dial: budget B per image in content-distance units, policy "cap" with cap
    ``W1_DIAL_CAP`` per token, drafts ``draft`` (proofs/13 says what it certifies)."""
    return _dial("W1 dial", "w1", W1_DIAL_POLICY, W1_DIAL_CAP, budget, draft)


def frontier_curves(
    group_size: int = 50,
    deltas: tuple[float, ...] = (0.1, 0.3),
    budgets: tuple[float, ...] = (8.0, 32.0),
    transport_eps: tuple[float, ...] = (),
    w1_budgets: tuple[float, ...] = (),
    *,
    rivals: tuple[str, ...] = RIVALS,
    coupled: bool = True,
) -> dict[str, list[MethodSpec]]:
    """Every configuration of the frontier, by curve (a point is a curve of one configuration):
    GSD (G), and with ``coupled`` MC-SJD (maximal) and MC-GSD (G, maximal); the naive rivals
    named in ``rivals``: "amplify" (k = 2), "lantern" (delta = 0.1); the TV-optimal relaxation
    over ``deltas`` from SJD, and with ``coupled`` from MC-SJD with maximal drafts, the TV
    dial over ``budgets``, the transport relaxation over ``transport_eps`` and the W1 dial over
    ``w1_budgets``, each from MC-SJD (B = 0, eps = 0) with ``coupled``. Empty curves are left
    out."""
    gsd = tables.gsd(group_size)
    curves: dict[str, list[MethodSpec]] = {gsd.label: [gsd]}
    if coupled:
        mc_sjd, mc_gsd = tables.coupled("maximal"), tables.coupled("maximal", group_size)
        curves |= {mc_sjd.label: [mc_sjd], mc_gsd.label: [mc_gsd]}
    unknown = set(rivals) - set(RIVALS)
    if unknown:
        raise ValueError(f"rivals must be among {RIVALS}, got {sorted(unknown)}")
    for name in rivals:
        spec = tables.amplify(2.0) if name == "amplify" else tables.lantern(0.1)
        curves[spec.label] = [spec]
    if deltas:
        curves[RELAXATION] = [tables.SJD] + [relaxation(d) for d in deltas]
    if coupled and deltas:
        curves[RELAXATION_MAXIMAL] = [tables.coupled("maximal")] + [
            relaxation(d, "maximal") for d in deltas
        ]
    if coupled and budgets:
        curves[DIAL] = [tables.coupled("maximal")] + [dial(b) for b in budgets]
    if coupled and transport_eps:
        curves[TRANSPORT] = [tables.coupled("maximal")] + [transport(e) for e in transport_eps]
    if coupled and w1_budgets:
        curves[W1_DIAL] = [tables.coupled("maximal")] + [w1_dial(b) for b in w1_budgets]
    return curves


@dataclass
class FrontierRuns:
    """The frontier's records on ``seeds`` x the shared cache's prompts: seeds the shared cache
    (``main``, the figures' ``RunCache``) decodes are read from it when all its seeds are
    frontier seeds (the same keys: the same images); the others are decoded in a cache made
    here with ``main``'s settings. Records come seed by seed
    in one order for every configuration (``main``'s seeds, then the rest), so rows pair."""

    main: RunCache
    seeds: tuple[int, ...]
    progress: Any = None
    _caches: dict[tuple[int, ...], RunCache] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct and non-empty, got {self.seeds!r}")

    @property
    def shared_seeds(self) -> tuple[int, ...]:
        """The frontier seeds read from ``main`` (all of ``main``'s seeds, or none)."""
        shared = set(self.main.seeds) <= set(self.seeds)
        return tuple(self.main.seeds) if shared else ()

    @property
    def own_seeds(self) -> tuple[int, ...]:
        return tuple(s for s in self.seeds if s not in self.shared_seeds)

    def _cache(self, seeds: tuple[int, ...]) -> RunCache:
        if seeds not in self._caches:
            main = self.main
            self._caches[seeds] = RunCache(
                main.model,
                main.prompts,
                list(seeds),
                main.filters,
                recording=replace(main.recording, top1=False),
                progress=self.progress,
                progress_lines=main.progress_lines,
                workers=main.workers,
            )
        return self._caches[seeds]

    def records(self, spec: MethodSpec) -> list[GenerationRecord]:
        parts = [self.main.records(spec)] if self.shared_seeds else []
        if self.own_seeds:
            parts.append(self._cache(self.own_seeds).records(spec))
        return [r for part in parts for r in part]

    def images_to_decode(self, curves: dict[str, list[MethodSpec]], decoded: set) -> int:
        """How many images ``rows`` will decode, given the keys ``decoded`` that ``main``
        decodes anyway (for a progress bar's total)."""
        unique = {s.key: s for specs in curves.values() for s in specs}
        prompts = len(self.main.prompts)
        total = 0
        shared = len(self.shared_seeds)
        for key in unique:
            total += prompts * (len(self.seeds) - shared)
            total += prompts * shared * (key not in decoded)
        return total

    def rows(self, curves: dict[str, list[MethodSpec]]) -> dict[str, list[dict[str, Any]]]:
        """Per curve, one ``runs.summarize`` row per configuration (NFE, TV ``distortion``,
        ``w1``, their standard errors over images, ``per_image`` values); no quality proxies.
        Every distinct configuration of the curves is decoded first, in one ``prefetch`` per
        cache (split over its workers; a configuration on two curves, or one the tables
        decoded, is decoded once: the caches key by ``MethodSpec.key``)."""
        unique = list({s.key: s for specs in curves.values() for s in specs}.values())
        if self.shared_seeds:
            self.main.prefetch(unique)
        if self.own_seeds:
            self._cache(self.own_seeds).prefetch(unique)
        return {
            name: [summarize(self.main.model, self.records(s), quality_row={}) for s in specs]
            for name, specs in curves.items()
        }


def comparisons(curves: dict[str, Any], group_size: int = 50) -> list[tuple[str, str]]:
    """(reference, optimal curve) pairs present in ``curves``: GSD (G) against every optimal
    rule, MC-GSD (G, maximal) against those with maximal drafts."""
    gsd, mc_gsd = tables.gsd(group_size).label, tables.coupled("maximal", group_size).label
    out = [(gsd, name) for name in OPTIMAL if name in curves and gsd in curves]
    out += [
        (mc_gsd, name)
        for name in OPTIMAL
        if name in curves and mc_gsd in curves and "maximal" in name
    ]
    return out


def matched_distortion(
    curves: dict[str, list[dict[str, Any]]],
    pairs: list[tuple[str, str]],
    measure: str = "distortion",
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """NFE at matched distortion (docs/frontier-analysis.md): one row per reference configuration
    and curve of ``pairs`` whose rows carry ``measure``'s per-image values ("distortion": TV, "w1"):
    measure, reference, other, distortion (the reference's), reference_nfe, other_nfe (the curve
    read there), difference, se, low, high, n, inside, verdict. Rows of other images raise."""
    check_matching(measure, resamples)
    out = []
    for reference, other in pairs:
        paired = paired_curves(curves, (reference, other), measure, resamples, seed)
        if paired is None:
            continue
        rows, n, k = paired.rows, paired.n, paired.k
        mean_nfe, mean_value = paired.nfe, paired.value
        nfe_b, value_b = paired.nfe_b, paired.value_b
        opp = slice(k, len(rows))
        for anchor in range(k):
            at = mean_value[anchor]
            other_nfe = float(_interpolate(mean_value[None, opp], mean_nfe[None, opp], at[None])[0])
            difference = float(mean_nfe[anchor]) - other_nfe
            boot = nfe_b[:, anchor] - _interpolate(
                value_b[:, opp], nfe_b[:, opp], value_b[:, anchor]
            )
            se = float(boot.std(ddof=1)) if n > 1 else None
            spread = NOISE_Z * (se or 0.0)  # low / high: the interval the verdict decides on
            low, high = difference - spread, difference + spread
            out.append(
                {
                    "measure": MEASURES[measure],
                    "reference": rows[anchor]["method"],
                    "other": other,
                    "distortion": float(at),
                    "reference_nfe": float(mean_nfe[anchor]),
                    "other_nfe": other_nfe,
                    "difference": difference,
                    "se": se,
                    "low": float(low),
                    "high": float(high),
                    "n": n,
                    "inside": bool(mean_value[opp].min() <= at <= mean_value[opp].max()),
                    "verdict": verdict(difference, se, expected_sign=-1),
                }
            )
    return out


# The claim judged is "the reference needs fewer forwards" (expected sign -1).
VERDICT_WORDS = {
    "yes": "yes (fewer forwards)",
    "no": "no (more forwards)",
    "noise": word("noise"),
    "not run": word("not run"),
}


def matched_sentence(row: dict[str, Any]) -> str:
    """One matched-distortion row in words, e.g. "GSD (G=50) - TV-optimal relaxation at TV 0.121:
    -4.2 NFE [-6.8, -1.6] (n = 30): yes (fewer forwards)"."""
    where = "" if row["inside"] else " (outside the curve's range: its nearest end)"
    span = "no SE" if row["se"] is None else f"[{row['low']:+.1f}, {row['high']:+.1f}]"
    return (
        f"{row['reference']} - {row['other']} at {row['measure']} {row['distortion']:.3g}{where}: "
        f"{row['difference']:+.1f} NFE {span} (n = {row['n']}): {VERDICT_WORDS[row['verdict']]}"
    )


def frontier_results(
    runs: FrontierRuns, curves: dict[str, list[MethodSpec]], group_size: int = 50
) -> dict[str, Any]:
    """What results.json keeps under ``frontier``: seeds, prompts, the rows per curve and the
    matched-distortion rows (TV, then W1) of ``comparisons``."""
    rows = runs.rows(curves)
    pairs = comparisons(rows, group_size)
    matched = [row for m in MEASURES for row in matched_distortion(rows, pairs, m)]
    return {
        "seeds": list(runs.seeds),
        "prompts": list(runs.main.prompts),
        "shared_seeds": list(runs.shared_seeds),
        "group_size": group_size,
        "matching": "the curve interpolated linearly in the distortion at the reference's; "
        "paired bootstrap SE over images (gsd_lab.experiments.frontier)",
        "curves": rows,
        "matched": matched,
    }


# ---- the one-step Pareto line ----------------------------------------------------------------


def pareto_bound(T: Tensor, tv: Tensor) -> Tensor:
    """The largest acceptance of any rule at TV(out, p) = tv on rows with TV(p, q) = T:
    1 - T + tv (proofs/10), capped at 1."""
    return (1 - T + tv).clamp(max=1.0)


def one_step_points(
    p: Tensor, q: Tensor, rules: dict[str, object]
) -> dict[str, tuple[Tensor, Tensor]]:
    """Per rule (a ``gsd_core`` rule, or None for SD), each row's exact (TV(out, p),
    acceptance) [N] each, from ``output_distribution`` and ``acceptance_rate``. p, q [N, V]
    float64."""
    if p.dtype != torch.float64 or q.dtype != torch.float64:
        raise ValueError("p and q must be float64: the points are exact")
    return {
        name: (tv_distance(output_distribution(p, q, rule), p), acceptance_rate(p, q, rule))
        for name, rule in rules.items()
    }


def line_violations(
    p: Tensor,
    q: Tensor,
    points: dict[str, tuple[Tensor, Tensor]],
    tolerance: float = 1e-12,
) -> dict[str, int]:
    """Per rule, how many rows accept more often than the line allows: acceptance > 1 - T + tv
    + ``tolerance`` (0 for every rule that obeys proofs/10)."""
    T = tv_distance(p, q)
    return {
        name: int((acceptance > pareto_bound(T, tv) + tolerance).sum())
        for name, (tv, acceptance) in points.items()
    }


def line_gap(p: Tensor, q: Tensor, points: tuple[Tensor, Tensor]) -> float:
    """max over rows of |acceptance - (1 - T + tv)|: 0 for a rule on the line."""
    tv, acceptance = points
    return float((acceptance - pareto_bound(tv_distance(p, q), tv)).abs().max())


def standard_rules(
    group_size: int = 3,
    *,
    delta: float = 0.1,
    amplify: float = 2.0,
    embeddings: Tensor | None = None,
    lantern_k: int = 3,
    lantern_delta: float = 0.1,
) -> dict[str, object]:
    """The rules placed against the line: SD, GSD (``DynamicClusters(G)``), Amplify (k),
    rank bins (token and cluster-exact residual), LANTERN (with ``embeddings`` [V, D]: its
    ``lantern_k`` neighbourhoods, budget ``lantern_delta``), the TV-optimal relaxation (delta)."""
    from gsd_core import (
        SD,
        Amplify,
        DynamicClusters,
        Lantern,
        OptimalRelaxation,
        RankBinnedClusters,
        latent_neighbourhoods,
    )

    rules: dict[str, object] = {
        "SD": SD(),
        f"GSD (G={group_size})": DynamicClusters(group_size),
        f"Amplify (k={amplify:g})": Amplify(amplify),
        f"rank bins (G={group_size})": RankBinnedClusters(group_size),
        f"rank bins, cluster residual (G={group_size})": RankBinnedClusters(group_size, "cluster"),
    }
    if embeddings is not None:
        hood = latent_neighbourhoods(embeddings, lantern_k)
        rules[f"LANTERN (k={lantern_k}, delta={lantern_delta:g})"] = Lantern(hood, lantern_delta)
    rules[f"TV-optimal relaxation (delta={delta:g})"] = OptimalRelaxation(delta)
    return rules


def check_rules(
    p: Tensor, q: Tensor, rules: dict[str, object], tolerance: float = 1e-12
) -> tuple[int, int, float]:
    """(rows above the line over all rules, rows checked, the TV-optimal relaxation's largest
    distance to the line; NaN without it)."""
    points = one_step_points(p, q, rules)
    above = sum(line_violations(p, q, points, tolerance).values())
    relaxed = [k for k in points if k.startswith("TV-optimal relaxation")]
    gap = max((line_gap(p, q, points[k]) for k in relaxed), default=math.nan)
    return above, (p.numel() // p.shape[-1]) * len(points), gap


def on_the_line(
    p: Tensor, q: Tensor, points: dict[str, tuple[Tensor, Tensor]], tolerance: float = 1e-12
) -> list[str]:
    """The rules whose every row lies on the line (within ``tolerance``): the relaxation, and
    any rule that accepts every token with p >= q and keeps SD's residual (SD, Amplify,
    LANTERN: then TV(out, p) = alpha - (1 - T) exactly)."""
    return [name for name, pts in points.items() if line_gap(p, q, pts) <= tolerance]


def gains(
    p: Tensor, q: Tensor, points: dict[str, tuple[Tensor, Tensor]]
) -> dict[str, tuple[Tensor, Tensor]]:
    """Per rule, (TV(out, p), acceptance - (1 - T)) [N]: the line is gain = TV (the plot's
    coordinates: every row of every rule on one line)."""
    T = tv_distance(p, q)
    return {name: (tv, acceptance - (1 - T)) for name, (tv, acceptance) in points.items()}


# ---- exact invariants of a stored frontier (notebook 04's checked cell) ------------------------


def invariant_lines(front: dict[str, Any], num_tokens: int) -> list[str]:
    """What must hold exactly in a stored frontier (results.json's ``frontier``, with its
    ``specs``), one line each: lossless rows (no relaxation, no budget, no transport, SJD's rule)
    have TV 0 on every image (up to float64 rounding, 1e-12); a relaxation row's per-image mean TV
    per token is at most its delta (each token's TV is at most delta; 1e-12); a TV dial row's
    per-image summed TV (mean x ``num_tokens``) is at most its B (the certificate; 1e-9); every
    matched row's verdict is ``verdicts.verdict``'s. Transport and W1-dial rows have no exact
    stored invariant (their per-image W1 is an estimate from drawn rows): counted, not checked."""
    lossless, relaxed, certified, unchecked = [], [], [], 0
    for name, rows in front["curves"].items():
        for row, spec in zip(rows, front["specs"][name]):
            method = DecodingMethod.from_dict(spec["method"])
            rule = method.acceptance
            tv = np.asarray(row["per_image"]["distortion"], dtype=np.float64)
            if rule.uses_transport:
                unchecked += 1
            elif isinstance(rule, BudgetAcceptance):
                certified.append(bool((tv * num_tokens <= rule.budget + 1e-9).all()))
            elif isinstance(rule, RelaxationAcceptance):
                relaxed.append(bool((tv <= rule.delta + 1e-12).all()))
            elif method.kind == "sjd" and rule == SDAcceptance():
                lossless.append(bool((tv <= 1e-12).all()))
    judged = [
        r["verdict"] == verdict(r["difference"], r["se"], expected_sign=-1)
        for r in front["matched"]
    ]
    return [
        f"lossless rows ({len(lossless)}): TV 0 on every image (1e-12): {all(lossless)}",
        (
            f"relaxation rows ({len(relaxed)}): every image's mean TV per token <= delta "
            f"(1e-12): {all(relaxed)}"
        ),
        f"dial rows ({len(certified)}): every image's summed TV <= B (1e-9): {all(certified)}",
        f"matched rows ({len(judged)}): verdicts by the one rule: {all(judged)}",
        f"transport and W1-dial rows ({unchecked}): W1 estimated, no exact invariant",
    ]
