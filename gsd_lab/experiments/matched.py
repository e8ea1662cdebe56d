"""Distortion at matched NFE: GSD's curve against another rule's, on TV and on W1, with paired
error bars over images (the matching and the bootstrap in full: docs/matched-distortion.md).

- a curve: one configuration per point (mean NFE, mean distortion) over the same images (GSD
  over G, Amplify over k, LANTERN over delta);
- at every configuration of either curve whose NFE lies inside the other's range, both are read
  by linear interpolation in NFE, and difference = GSD's distortion - the other's at that NFE
  (< 0: GSD lower);
- error bars: a paired bootstrap over images (every configuration's means recomputed on the
  same resampled images); the verdict ``verdicts.verdict`` for "GSD distorts less" (expected
  sign -1), difference +- ``NOISE_Z`` SE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .verdicts import NOISE_Z, verdict

MEASURES = {"distortion": "TV", "w1": "W1"}


def check_matching(measure: str, resamples: int) -> None:
    """ValueError unless ``measure`` is one of ``MEASURES`` and ``resamples`` an int >= 2."""
    if measure not in MEASURES:
        raise ValueError(f"measure must be one of {tuple(MEASURES)}, got {measure!r}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 2:
        raise ValueError(f"resamples must be an int >= 2, got {resamples!r}")


def _per_image(rows: list[dict[str, Any]], key: str) -> np.ndarray | None:
    """[configurations, images] values of ``key`` (None if any is missing)."""
    table = []
    for row in rows:
        values = (row.get("per_image") or {}).get(key)
        if values is None or any(v is None for v in values):
            return None
        table.append(values)
    return np.asarray(table, dtype=np.float64)


def _interpolate(x: np.ndarray, y: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Each resample b: the curve (x[b], y[b]) (configurations on the last axis) read at at[b];
    configurations with equal x are averaged first."""
    out = np.empty(at.shape)
    for b in range(at.shape[0]):
        xs, inverse = np.unique(x[b], return_inverse=True)
        ys = np.bincount(inverse, weights=y[b]) / np.bincount(inverse)
        out[b] = np.interp(at[b], xs, ys)
    return out


@dataclass(frozen=True)
class PairedCurves:
    """Two curves' configurations on the same n images, reference first (``k`` rows), with a
    paired bootstrap: nfe, value [configurations] the means over images; nfe_b, value_b
    [resamples, configurations] the means over each resample's images (every configuration on
    the same resampled images, so the curves' per-image effects cancel in differences)."""

    rows: list[dict[str, Any]]
    k: int
    n: int
    nfe: np.ndarray
    value: np.ndarray
    nfe_b: np.ndarray
    value_b: np.ndarray


def paired_curves(
    curves: dict[str, list[dict[str, Any]]],
    names: tuple[str, str],
    measure: str,
    resamples: int,
    seed: int,
) -> PairedCurves | None:
    """``PairedCurves`` of the curves named ``names`` (reference, other) in ``curves`` (None
    when either has no rows, or a row lacks ``measure`` or NFE per image); rows of other images
    raise ValueError naming them."""
    ref_rows, other_rows = curves.get(names[0]) or [], curves.get(names[1]) or []
    if not ref_rows or not other_rows:
        return None
    rows = ref_rows + other_rows
    keys = {
        (tuple(r["per_image"]["prompt"]), tuple(r["per_image"]["seed"]))
        for r in rows
        if r.get("per_image")
    }
    if len(keys) != 1 or any(not r.get("per_image") for r in rows):
        raise ValueError(
            f"{names[0]} and {names[1]} rows must carry per-image values of the same images"
        )
    nfe, value = _per_image(rows, "nfe"), _per_image(rows, measure)
    if nfe is None or value is None:
        return None
    n = nfe.shape[1]
    index = torch.randint(n, (resamples, n), generator=torch.Generator().manual_seed(seed)).numpy()
    return PairedCurves(
        rows,
        len(ref_rows),
        n,
        nfe.mean(-1),
        value.mean(-1),
        nfe[:, index].mean(-1).T,
        value[:, index].mean(-1).T,
    )


def matched_nfe(
    curves: dict[str, list[dict[str, Any]]],
    measure: str = "distortion",
    reference: str = "GSD",
    others: tuple[str, ...] = ("Amplify", "LANTERN"),
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Rows comparing ``reference``'s curve with each of ``others`` at matched NFE (module
    docstring). curves: name -> table rows with ``per_image`` values (``tables.pareto_points``);
    measure: "distortion" (TV) or "w1". Each row: measure, nfe, anchor (the configuration whose
    NFE places the point), other, reference_value, other_value, difference, se, low, high,
    images, verdict. Curves or measures missing from the run give no rows; rows of one curve on
    other images raise ValueError."""
    check_matching(measure, resamples)
    out: list[dict[str, Any]] = []
    for other in others:
        paired = paired_curves(curves, (reference, other), measure, resamples, seed)
        if paired is None:
            continue
        rows, n, k = paired.rows, paired.n, paired.k
        mean_nfe, mean_value = paired.nfe, paired.value
        nfe_b, value_b = paired.nfe_b, paired.value_b
        ref, opp = slice(0, k), slice(k, len(rows))
        points, seen = [], set()
        # every configuration inside the other curve's NFE range, once per NFE
        for anchor in range(len(rows)):
            across = opp if anchor < k else ref
            if (
                mean_nfe[across].min() <= mean_nfe[anchor] <= mean_nfe[across].max()
                and mean_nfe[anchor] not in seen
            ):
                points.append(anchor)
                seen.add(mean_nfe[anchor])
        for anchor in sorted(points, key=lambda a: -mean_nfe[a]):
            at = np.array([mean_nfe[anchor]])
            ref_value = float(_interpolate(mean_nfe[None, ref], mean_value[None, ref], at)[0])
            other_value = float(_interpolate(mean_nfe[None, opp], mean_value[None, opp], at)[0])
            difference = ref_value - other_value
            boot = _interpolate(nfe_b[:, ref], value_b[:, ref], nfe_b[:, anchor]) - _interpolate(
                nfe_b[:, opp], value_b[:, opp], nfe_b[:, anchor]
            )
            se = float(boot.std(ddof=1))
            spread = NOISE_Z * (se or 0.0)  # low / high: the interval the verdict decides on
            low, high = difference - spread, difference + spread
            out.append(
                {
                    "measure": MEASURES[measure],
                    "nfe": float(at[0]),
                    "anchor": rows[anchor]["method"],
                    "other": other,
                    "reference_value": ref_value,
                    "other_value": other_value,
                    "difference": difference,
                    "se": se,
                    "low": float(low),
                    "high": float(high),
                    "images": n,
                    "verdict": verdict(difference, se if n > 1 else None, expected_sign=-1),
                }
            )
    return out


def matched_summary(rows: list[dict[str, Any]], reference: str = "GSD") -> str:
    """One sentence per measure, e.g. "on TV: GSD higher than Amplify at 3 of 3 matched NFE
    (differences +0.018 +- 0.006, ...), noise against LANTERN at 2 of 2; ...", from
    ``matched_nfe`` rows (any number of measures and other rules)."""
    if not rows:
        return "no matched-NFE comparison: the run lacks the curves or their per-image values"
    parts = []
    for measure in dict.fromkeys(r["measure"] for r in rows):
        clauses = []
        for other in dict.fromkeys(r["other"] for r in rows if r["measure"] == measure):
            these = [r for r in rows if r["measure"] == measure and r["other"] == other]
            counts = {v: sum(r["verdict"] == v for r in these) for v in ("yes", "no", "noise")}
            said = [
                f"{phrase} at {counts[v]}"
                for v, phrase in (
                    ("yes", "lower"),
                    ("no", "higher"),
                    ("noise", "no difference detected"),
                )
                if counts[v]
            ]
            detail = ", ".join(
                f"{r['difference']:+.3g} [{r['low']:+.3g}, {r['high']:+.3g}] at {r['nfe']:.1f} NFE"
                for r in these
            )
            clauses.append(
                f"{reference} vs {other}: {' and '.join(said)} "
                f"of {len(these)} matched points ({detail})"
            )
        parts.append(f"on {measure}, " + "; ".join(clauses))
    return (
        "At matched NFE (difference = "
        + reference
        + " minus the other [+- 2 paired bootstrap SE over images]): "
        + "; ".join(parts)
        + "."
    )
