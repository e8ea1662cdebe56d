"""Distortion at matched NFE: GSD's curve against another rule's, on TV and on W1, with paired
error bars over images.

Each rule traces a curve of configurations (GSD over G, Amplify over k, LANTERN over delta),
each configuration a point (mean NFE, mean distortion) over the same images (prompts and
generator seeds). At each point of the reference curve (GSD) whose NFE lies inside the other
curve's NFE range, the other curve is read at that NFE by linear interpolation between its two
neighbouring configurations (configurations tied in NFE are averaged), and

    difference = reference's distortion - the other's interpolated distortion   (< 0: GSD lower).

Error bars: a paired bootstrap over images. One resample draws image indices with replacement
and recomputes every configuration's mean NFE and mean distortion from the same images (the
images are paired across configurations, so their shared variation cancels), then the
reference point's NFE, the interpolation and the difference; the standard error is the spread
of the resampled differences, the interval their quantiles. Where a per-image distortion is
itself estimated (W1 from a few rows, ``gsd_lab.transport``), its sampling noise is inside the
per-image values and so inside these error bars. A resample whose reference NFE leaves the other
curve's range reads the nearest end (``np.interp``), so points near the ends lean toward them.

Verdicts follow ``verdicts.verdict`` for the claim "GSD distorts less than the other rule"
(expected sign -1): "yes", "no", or "noise" (within two standard errors).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .verdicts import verdict

MEASURES = {"distortion": "TV", "w1": "W1"}


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


def matched_nfe(curves: dict[str, list[dict[str, Any]]], measure: str = "distortion", reference: str = "GSD",
                others: tuple[str, ...] = ("Amplify", "LANTERN"), *, resamples: int = 2000, level: float = 0.95,
                seed: int = 0) -> list[dict[str, Any]]:
    """Rows comparing ``reference``'s curve with each of ``others`` at the reference's NFEs (module
    docstring). curves: name -> table rows with ``per_image`` values (``tables.pareto_points``);
    measure: "distortion" (TV) or "w1". Each row: measure, nfe, reference (configuration), other,
    reference_value, other_value, difference, se, low, high, images, verdict. Curves or measures
    missing from the run give no rows; rows of one curve on other images raise ValueError."""
    if measure not in MEASURES:
        raise ValueError(f"measure must be one of {tuple(MEASURES)}, got {measure!r}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 2:
        raise ValueError(f"resamples must be an int >= 2, got {resamples!r}")
    ref_rows = curves.get(reference) or []
    out: list[dict[str, Any]] = []
    for other in others:
        other_rows = curves.get(other) or []
        if not ref_rows or len(other_rows) < 2:
            continue
        rows = ref_rows + other_rows
        keys = {(tuple(r["per_image"]["prompt"]), tuple(r["per_image"]["seed"])) for r in rows if r.get("per_image")}
        if len(keys) != 1 or any(not r.get("per_image") for r in rows):
            raise ValueError(f"{reference} and {other} rows must carry per-image values of the same images")
        nfe, value = _per_image(rows, "nfe"), _per_image(rows, measure)
        if nfe is None or value is None:
            continue
        n = nfe.shape[1]
        index = torch.randint(n, (resamples, n), generator=torch.Generator().manual_seed(seed)).numpy()
        nfe_b, value_b = nfe[:, index].mean(-1).T, value[:, index].mean(-1).T  # [B, configurations]
        k = len(ref_rows)
        lo, hi = nfe[k:].mean(-1).min(), nfe[k:].mean(-1).max()
        for i, row in enumerate(ref_rows):
            at = nfe[i].mean()
            if not lo <= at <= hi:
                continue
            other_value = float(_interpolate(nfe[None, k:].mean(-1), value[None, k:].mean(-1), np.array([at]))[0])
            difference = float(value[i].mean()) - other_value
            boot = value_b[:, i] - _interpolate(nfe_b[:, k:], value_b[:, k:], nfe_b[:, i])
            se = float(boot.std(ddof=1))
            low, high = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
            out.append({"measure": MEASURES[measure], "nfe": float(at), "reference": row["method"], "other": other,
                        "reference_value": float(value[i].mean()), "other_value": other_value,
                        "difference": difference, "se": se, "low": float(low), "high": float(high), "images": n,
                        "verdict": verdict(difference, se if n > 1 else None, expected_sign=-1)})
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
            said = [f"{word} at {counts[v]}" for v, word in (("yes", "lower"), ("no", "higher"), ("noise", "within noise"))
                    if counts[v]]
            detail = ", ".join(f"{r['difference']:+.3g} +- {r['se']:.2g} at {r['nfe']:.1f} NFE" for r in these)
            clauses.append(f"{reference} vs {other}: {' and '.join(said)} of {len(these)} matched points ({detail})")
        parts.append(f"on {measure}, " + "; ".join(clauses))
    return "At matched NFE (difference = " + reference + " minus the other, +- paired bootstrap SE over images): " \
        + "; ".join(parts) + "."
