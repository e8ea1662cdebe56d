"""What the notebooks' checked cells (``# NBVAL_CHECK_OUTPUT``) print, computed here so that the
logic lives in the package and is tested without running a notebook.

A checked cell prints only exact quantities (enumerated with gsd_core, rounded) or the verdict of
a statistical invariant with its tolerance stated, never a sampled number: the random stream may
change (another CPU, a harmless reordering of draws) without the notebook failing, while a wrong
algorithm changes a verdict.

- ``check_verify_law``: a Monte Carlo run of ``gsd_core.verify`` (one position, x ~ q) against
  the exact law ``output_distribution`` and the exact ``acceptance_rate``: every token's
  frequency and the acceptance frequency within ``z`` = 4 standard errors, SE = sqrt(f (1 - f) / n)
  at the exact value f (a token of exact probability 0 must never be emitted).
- ``nfe_invariants``: decoding tables: AR takes exactly one forward per token (that SJD and
  GSD take fewer is measured, in unchecked cells: ``experiments.paper.nfe_below_sjd``).
- ``w1_lines``: the W1 column is exactly 0 on lossless rows and >= 0 everywhere.
- ``experiments.lossless.check_joint``: SJD through ``generate`` against AR's exact joint law
  on a tiny model (notebook 04's decoder-level check).
- ``provenance_header``: the commit, dirty flag and package versions a notebook ran from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from gsd_core import acceptance_rate, output_distribution

from ..decode.methods import method_rule
from ..experiments import toy
from ..io.figure_io import markdown_table
from ..io.provenance import provenance_line

Z_TOLERANCE = 4.0


def weights_line(info: dict[str, Any]) -> str:
    """``weights: {...}`` as a notebook prints it: a path inside the repository relative to it,
    one under the home folder from ``~``, so no stored output names the machine it ran on."""
    from pathlib import Path

    repo, home = Path(__file__).resolve().parents[2], Path.home()

    def shown(value: Any) -> Any:
        if not isinstance(value, str) or not value.startswith("/"):
            return value
        path = Path(value)
        for root, prefix in ((repo, ""), (home, "~/")):
            if path.is_relative_to(root):
                return prefix + path.relative_to(root).as_posix()
        return path.name

    return "weights: " + str({k: shown(v) for k, v in info.items()})


def provenance_header() -> None:
    """Print the notebook's provenance line (commit, dirty flag, versions); not a checked cell."""
    print(provenance_line())


def max_z_score(frequencies: Tensor, exact: Tensor, num_samples: int) -> float:
    """max over entries of |f_hat - f| / sqrt(f (1 - f) / n); inf where f = 0 < f_hat
    (or f = 1 > f_hat).

    frequencies, exact: [K] (empirical frequencies of n independent draws, exact probabilities)."""
    f_hat, f = frequencies.to(torch.float64), exact.to(torch.float64)
    se = torch.sqrt(f * (1 - f) / num_samples)
    gap = (f_hat - f).abs()
    degenerate = se <= 1e-15
    z = torch.where(
        degenerate, torch.where(gap > 1e-12, torch.inf, 0.0), gap / se.clamp(min=1e-300)
    )
    return float(z.max())


@dataclass(frozen=True)
class VerifyLawCheck:
    """Outcome of ``check_verify_law``: the largest z-scores of the law and the acceptance."""

    rule: str
    num_samples: int
    law_max_z: float
    acceptance_max_z: float
    z: float = Z_TOLERANCE

    @property
    def law_ok(self) -> bool:
        return self.law_max_z <= self.z

    @property
    def acceptance_ok(self) -> bool:
        return self.acceptance_max_z <= self.z

    @property
    def passed(self) -> bool:
        return self.law_ok and self.acceptance_ok

    def lines(self) -> list[str]:
        """The checked-cell text: verdicts and tolerances only (no sampled number)."""
        return [
            f"{self.rule}: Monte Carlo of verify ({self.num_samples} draws) against "
            f"output_distribution, every token within {self.z:g} standard errors: {self.law_ok}",
            f"{self.rule}: Monte Carlo acceptance against acceptance_rate, "
            f"within {self.z:g} standard errors: {self.acceptance_ok}",
        ]


def check_verify_law(
    p: Tensor,
    q: Tensor,
    *,
    clusters: object = None,
    residual: str = "token",
    num_samples: int = 200_000,
    seed: int = 0,
    rule: str | None = None,
    z: float = Z_TOLERANCE,
) -> VerifyLawCheck:
    """Monte Carlo of one verification step (x ~ q, ``gsd_core.verify``) against its exact law.

    p, q: [V] float64; the rule is ``method_rule(clusters, residual)``. The emitted token's
    frequencies are compared with ``output_distribution(p, q, rule)`` and the acceptance
    frequency with ``acceptance_rate(p, q, rule)``, each within ``z`` standard errors (module
    docstring).
    A fixed seed makes the run repeatable; the verdict does not depend on the stream."""
    empirical, accepted = toy.empirical_speculative_samples(
        p, q, num_samples=num_samples, seed=seed, clusters=clusters, residual=residual
    )
    exact = output_distribution(p, q, method_rule(clusters, residual))
    alpha = acceptance_rate(p, q, method_rule(clusters, residual)).reshape(1)
    law_z = max_z_score(empirical, exact, num_samples)
    acc_z = max_z_score(torch.tensor([accepted], dtype=torch.float64), alpha, num_samples)
    name = rule or ("SD" if clusters is None else type(clusters).__name__)
    return VerifyLawCheck(name, num_samples, law_z, acc_z, z)


def rounded(values: Tensor | list[float], digits: int = 4) -> list[float]:
    """Exact values for printing: rounded, with -0.0 shown as 0.0."""
    values = values.tolist() if isinstance(values, Tensor) else list(values)
    return [round(float(v), digits) + 0.0 for v in values]


# ---- decoding tables ---------------------------------------------------------------------------


def nfe_invariants(rows: list[dict[str, Any]], num_tokens: int) -> list[str]:
    """Checked-cell lines for a decoding table (rows of ``runs.summarize``): AR's NFE equals the
    number of tokens (exact: one forward per token). Whether SJD and GSD need fewer forwards is
    sampled (``tables.paired_difference`` prints it with its standard error; for GSD against SJD
    ``experiments.paper.nfe_below_sjd`` gives the verdict), not checked."""
    by_method = {r["method"]: r for r in rows}
    if "AR" not in by_method:
        return []
    return [
        f"AR: NFE = {num_tokens} tokens per image (one token per forward): "
        f"{by_method['AR']['nfe'] == num_tokens}"
    ]


def acceptance_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Checked-cell lines relating the two acceptance measures of each row (exact relations):
    accepted per tested draft position >= accepted per drafted position, both in [0, 1]."""
    ok = [  # block verification accepts blocks: it has no accepted-per-tested measure (None)
        r
        for r in rows
        if r.get("acceptance_rate") is not None and r.get("accepted_per_tested") is not None
    ]
    consistent = all(0 <= r["acceptance_rate"] <= r["accepted_per_tested"] <= 1 for r in ok)
    return [
        f"accepted per drafted position <= accepted per tested position <= 1 in all {len(ok)} "
        f"rows reporting both (speculative, token-verified): {consistent}"
    ]


def _column_lines(
    rows: list[dict[str, Any]], key: str, lossless: tuple[str, ...], zero: tuple[str, Any],
    bound: tuple[str, Any],
) -> list[str]:
    """"lossless rows (...): ZERO_TEXT: bool" (when any) and "every BOUND_TEXT (n rows): bool"
    over the rows that carry ``key``; ``zero`` and ``bound`` are (text, value -> bool)."""
    have = [r for r in rows if r.get(key) is not None]
    held = [r for r in have if r["method"] in lossless]
    lines = []
    if held:
        names = ", ".join(r["method"] for r in held)
        lines.append(f"lossless rows ({names}): {zero[0]}: {all(zero[1](r[key]) for r in held)}")
    lines.append(f"every {bound[0]} ({len(have)} rows): {all(bound[1](r[key]) for r in have)}")
    return lines


def distortion_lines(
    rows: list[dict[str, Any]], lossless: tuple[str, ...] = ("AR", "SJD")
) -> list[str]:
    """Checked-cell lines on the exact distortion column (mean per-token TV(one-step output law,
    p), ``accounting.distortion``): the lossless rows (AR; SJD, standard speculative sampling,
    proofs/02) have distortion 0 up to float64 rounding (<= 1e-12) whatever tokens were drawn,
    and every distortion is a TV, in [0, 1]."""
    zero = ("exact distortion <= 1e-12", lambda d: d <= 1e-12)
    bound = ("distortion in [0, 1]", lambda d: 0 <= d <= 1)
    return _column_lines(rows, "distortion", lossless, zero, bound)


def w1_lines(rows: list[dict[str, Any]], lossless: tuple[str, ...] = ("AR", "SJD")) -> list[str]:
    """Checked-cell lines on the similarity-aware distortion column (mean per-token W1(out, p),
    ``accounting.transport``): exactly 0 for the lossless rows (no row of theirs carries more TV
    than float64 rounding, so none is drawn) and >= 0 everywhere (estimates are means of transport
    costs); an exact invariant of the estimator, whatever rows it drew."""
    zero, bound = ("W1 = 0", lambda w: w == 0), ("W1 >= 0", lambda w: w >= 0)
    return _column_lines(rows, "w1", lossless, zero, bound)


def format_rows(rows: list[dict[str, Any]], columns: list[str], digits: int = 3) -> str:
    """``rows`` as the package's one table, ``figure_io.markdown_table``, with ``digits``
    decimals (for unchecked cells: sampled numbers)."""
    return markdown_table(rows, columns, floatfmt=f".{digits}f")
