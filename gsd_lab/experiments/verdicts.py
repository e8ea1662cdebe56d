"""One rule for every "reproduces / does not / noise" verdict, and the paired differences it judges.

``verdict(difference, se, expected_sign, size_ok)``, used everywhere (``paper``, ``matched``):

- "not run": the difference is missing (NaN: a row was not in this run);
- "noise": no standard error (fewer than two images), or |difference| <= ``NOISE_Z`` x SE
  (about a 95% two-sided test): the data cannot tell the claim from its opposite;
- "no": the difference is beyond the noise with the opposite sign to the claim;
- "direction only": beyond the noise with the claim's sign, but the size test (``size_ok``,
  e.g. a speed-up within 20% of the paper's) fails;
- "yes": beyond the noise, with the claim's sign (and size, when one is tested).

So a verdict is never "yes" or "no" on a difference the run cannot resolve, and a difference
of exactly 0 with SE 0 is "noise" (the two sides are equal: neither is smaller).

What a claim is and its paired standard error, the words and intervals shown (``WORDS``,
``interval``, ``minimum_detectable``, ``Decision.text``), and ratio claims (``ratio_verdict``):
docs/verdicts.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

NOISE_Z = 2.0  # a difference within two (paired) standard errors either way is noise
VERDICTS = ("yes", "direction only", "no", "noise", "not run")
WORDS = {  # how a verdict reads wherever it is shown
    "yes": "yes",
    "direction only": "direction only",
    "no": "no",
    "noise": "no difference detected",
    "not run": "not run",
}
POWER = 0.8  # the power at which ``minimum_detectable`` states what a "noise" run could have seen


def verdict(
    difference: float, se: float | None, expected_sign: int, size_ok: bool | None = None
) -> str:
    """The module's rule: "not run", "noise", "no", "direction only" or "yes".

    difference: the measured signed difference (NaN: not run); se: its standard error (None or
    NaN: unknown, which counts as noise); expected_sign: +1 or -1, the sign the claim predicts;
    size_ok: None (a sign-only claim) or whether the size matches the claim's."""
    if expected_sign not in (1, -1):
        raise ValueError(f"expected_sign must be +1 or -1, got {expected_sign!r}")
    if se is not None and (not isinstance(se, (int, float)) or se < 0):
        raise ValueError(f"se must be a number >= 0 or None, got {se!r}")
    if difference is None or not math.isfinite(difference):
        return "not run"
    if not beyond_noise(difference, se):
        return "noise"
    if (difference > 0) != (expected_sign > 0):
        return "no"
    if size_ok is False:
        return "direction only"
    return "yes"


def beyond_noise(difference: float, se: float | None) -> bool:
    """Whether a measured difference can be told from zero: |difference| > ``NOISE_Z`` x SE, with
    a known, finite SE (the test of ``verdict``; notebooks call it instead of re-coding it)."""
    return se is not None and math.isfinite(se) and abs(difference) > NOISE_Z * se


def combined(verdicts: list[str]) -> str:
    """One verdict for a claim made of several differences (e.g. "(B) exceeds both (C) and (D)"):
    "not run" if any part was not run, "no" if any part is "no", "yes" only if every part is
    "yes", "noise" otherwise."""
    if not verdicts or "not run" in verdicts:
        return "not run"
    if "no" in verdicts:
        return "no"
    if all(v == "yes" for v in verdicts):
        return "yes"
    return "direction only" if all(v in ("yes", "direction only") for v in verdicts) else "noise"


@dataclass(frozen=True)
class PairedDifference:
    """mean(a_i - b_i) over n paired images, its paired standard error (None for n < 2)."""

    difference: float
    se: float | None
    n: int

    def text(self, digits: int = 3) -> str:
        """ "+0.123 (paired SE 0.045, n = 10)"; "-" when not run."""
        if not math.isfinite(self.difference):
            return "-"
        se = "no SE" if self.se is None else f"paired SE {self.se:.{digits}g}"
        return f"{self.difference:+.{digits}g} ({se}, n = {self.n})"

    def as_dict(self) -> dict[str, float | int | None]:
        """{"difference", "se", "n"} as results.json stores it (None for a difference not run)."""
        finite = math.isfinite(self.difference)
        return {"difference": self.difference if finite else None, "se": self.se, "n": self.n}

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> PairedDifference:
        """The inverse of ``as_dict`` (None or a missing difference: ``NOT_RUN``)."""
        if values is None or values.get("difference") is None:
            return NOT_RUN
        se = values.get("se")
        return cls(float(values["difference"]), None if se is None else float(se), int(values["n"]))


NOT_RUN = PairedDifference(math.nan, None, 0)


def paired_values(a: list[float], b: list[float]) -> PairedDifference:
    """Paired difference of per-image values a, b [n]
    (item i of both from one image's prompt and seed)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape or x.size == 0:
        raise ValueError(
            f"a and b must be paired non-empty 1-D values, got shapes {x.shape} and {y.shape}"
        )
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("a and b must be finite (a missing per-image value cannot be paired)")
    d = x - y
    se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else None
    return PairedDifference(float(d.mean()), se, int(d.size))


def per_image(row: dict[str, Any] | None, key: str) -> list[float] | None:
    """A table row's per-image values of ``key`` (``runs.summarize``'s ``per_image``), or None."""
    if row is None:
        return None
    values = (row.get("per_image") or {}).get(key)
    return None if values is None or any(v is None for v in values) else list(values)


def paired_difference(
    a: dict[str, Any] | None, b: dict[str, Any] | None, key: str
) -> PairedDifference:
    """Row a minus row b on ``key``, image by image. NOT_RUN when a row or its per-image values
    are missing; ValueError when the rows were not decoded on the same prompts and seeds."""
    x, y = per_image(a, key), per_image(b, key)
    if x is None or y is None:
        return NOT_RUN
    for field in ("prompt", "seed"):
        if a["per_image"].get(field) != b["per_image"].get(field):
            raise ValueError(
                f"{a['method']} and {b['method']} are not paired: their images have other {field}s"
            )
    return paired_values(x, y)


def word(outcome: str) -> str:
    """How ``outcome`` (one of ``VERDICTS``) reads wherever a verdict is shown."""
    if outcome not in WORDS:
        raise ValueError(f"unknown verdict {outcome!r}; expected one of {VERDICTS}")
    return WORDS[outcome]


def interval(diff: PairedDifference) -> tuple[float, float] | None:
    """(d - ``NOISE_Z`` SE, d + ``NOISE_Z`` SE): the interval ``verdict`` decides on; None
    without a finite SE or difference."""
    if diff.se is None or not math.isfinite(diff.se) or not math.isfinite(diff.difference):
        return None
    return diff.difference - NOISE_Z * diff.se, diff.difference + NOISE_Z * diff.se


def minimum_detectable(se: float | None, power: float = POWER) -> float | None:
    """The true |difference| that ``verdict``'s test (|d| > ``NOISE_Z`` SE) detects with
    probability ``power``: (``NOISE_Z`` + Phi^-1(power)) SE (None without an SE).

    >>> round(minimum_detectable(1.0), 4)
    2.8416"""
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), got {power!r}")
    if se is None or not math.isfinite(se):
        return None
    return (NOISE_Z + NormalDist().inv_cdf(power)) * se


def _signed(value: float, digits: int) -> str:
    return f"{value:+.{digits}f}"


@dataclass(frozen=True)
class Decision:
    """A verdict with the paired difference it was decided on."""

    outcome: str
    diff: PairedDifference

    @property
    def word(self) -> str:
        return word(self.outcome)

    def span(self, digits: int = 1) -> str:
        """ "+2.6 [-2.5, +7.7]": d and d +- 2 SE; "+2.6 (no SE)"; "-" when not run."""
        if not math.isfinite(self.diff.difference):
            return "-"
        bounds = interval(self.diff)
        if bounds is None:
            return f"{_signed(self.diff.difference, digits)} (no SE)"
        low, high = (_signed(b, digits) for b in bounds)
        return f"{_signed(self.diff.difference, digits)} [{low}, {high}]"

    def text(self, digits: int = 1, unit: str = "") -> str:
        """ "no difference detected: +2.6 NFE [-2.5, +7.7] (n = 10; detectable at 80% power:
        |d| >= 7.4)"; the other verdicts without the detectable size."""
        if self.outcome == "not run" or not math.isfinite(self.diff.difference):
            return "not run"
        unit = f" {unit}" if unit else ""
        head = self.span(digits).replace(" [", f"{unit} [", 1) if unit else self.span(digits)
        extra = f"n = {self.diff.n}"
        detectable = minimum_detectable(self.diff.se)
        if self.outcome == "noise" and detectable is not None:
            extra += f"; detectable at {POWER:.0%} power: |d| >= {detectable:.{digits}f}"
        return f"{self.word}: {head} ({extra})"


def decide(diff: PairedDifference, expected_sign: int, size_ok: bool | None = None) -> Decision:
    """``verdict`` on ``diff`` kept with ``diff``."""
    return Decision(verdict(diff.difference, diff.se, expected_sign, size_ok), diff)


@dataclass(frozen=True)
class PairedRatio:
    """R = mean(a) / mean(b) over n paired images with its delta-method SE (None for n < 2)."""

    ratio: float
    se: float | None
    n: int

    def text(self, digits: int = 2, suffix: str = "x") -> str:
        """ "4.60x [4.31, 4.89]" (R +- 2 SE); "-" when not run."""
        if not math.isfinite(self.ratio):
            return "-"
        if self.se is None:
            return f"{self.ratio:.{digits}f}{suffix} (no SE)"
        low, high = self.ratio - NOISE_Z * self.se, self.ratio + NOISE_Z * self.se
        return f"{self.ratio:.{digits}f}{suffix} [{low:.{digits}f}, {high:.{digits}f}]"


RATIO_NOT_RUN = PairedRatio(math.nan, None, 0)


def paired_ratio(a: dict[str, Any] | None, b: dict[str, Any] | None, key: str) -> PairedRatio:
    """mean(a) / mean(b) of two rows' per-image ``key`` values (the same images, as
    ``paired_difference``), SE(R) = sd(a_i - R b_i, ddof 1) / (sqrt(n) mean(b))."""
    if paired_difference(a, b, key) is NOT_RUN:
        return RATIO_NOT_RUN
    x = np.asarray(per_image(a, key), dtype=np.float64)
    y = np.asarray(per_image(b, key), dtype=np.float64)
    if y.mean() <= 0:
        raise ValueError(f"{b['method']}'s mean {key} must be positive for a ratio")
    ratio = float(x.mean() / y.mean())
    residual = x - ratio * y
    se = float(residual.std(ddof=1) / (math.sqrt(x.size) * y.mean())) if x.size > 1 else None
    return PairedRatio(ratio, se, int(x.size))


def ratio_verdict(ours: PairedRatio, paper: float) -> str:
    """A size claim, "the ratio is ``paper``", judged on ``ours``: the direction by ``verdict``
    on R - 1 (expected: the paper's side of 1), the size by whether ``paper`` lies inside
    R +- ``NOISE_Z`` SE(R). "yes": both; "direction only": the direction without the size;
    "noise": neither side of 1 shown, the paper's ratio not excluded; "no": the direction
    contradicted, or the paper's ratio excluded without the direction shown."""
    if not math.isfinite(ours.ratio):
        return "not run"
    if paper == 1:
        raise ValueError("a paper ratio of 1 states no direction")
    sign = 1 if paper > 1 else -1
    size_ok = ours.se is not None and abs(ours.ratio - paper) <= NOISE_Z * ours.se
    direction = verdict(ours.ratio - 1, ours.se, sign)
    if direction == "yes":
        return "yes" if size_ok else "direction only"
    if direction == "noise":
        return "noise" if size_ok else "no"
    return direction
