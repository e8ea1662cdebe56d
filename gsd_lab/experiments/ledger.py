"""The claims ledger: every claim of the GSD paper (and of the lossless-frontier papers it is
compared with), run or not, in one table (docs/claims.md), rendered from ``claims`` on a figures
run's ``results.json``.

Each row is one claim by its id: the statement, the paper's number, ours with the interval its
verdict was decided on (d or R, +- 2 paired SE) and the verdict in the one vocabulary of
``verdicts.WORDS`` (the rule is ``verdicts.verdict``; size claims are ratios against the paper's
ratio, ``verdicts.ratio_verdict``):

- "yes": beyond two paired standard errors with the claim's sign (and, for a ratio, the paper's
  ratio inside ours +- 2 SE);
- "direction only": the claim's sign beyond the noise, but the paper's ratio outside ours +- 2 SE;
- "no": beyond the noise against the claim, the paper's ratio excluded without the direction
  shown, or disproved exactly (Theorem 1's conclusion for the package's dynamic clusters);
- "no difference detected": within two paired standard errors: nothing was shown either way
  (never read as "equal"); the row names the smallest difference the run could have detected
  at 80% power;
- "not run": not measured here, with the reason.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from . import claims
from .verdicts import VERDICTS, word

COLUMNS = ["claim", "paper", "here", "verdict", "note", "source", "id"]
REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "figures" / "results.json"
CLAIMS_MD = REPO / "docs" / "claims.md"
RESULTS_MD = REPO / "figures" / "results.md"
SECTION = "Claims, by id"  # results.md's heading for the ledger


def ledger(results: dict[str, Any]) -> list[dict[str, str]]:
    """Every claim, headline claims first, from a figures run's ``results.json`` (as a dict)."""
    return claims.rows(claims.of_results(results))


def load_results(path: str | Path = RESULTS) -> dict[str, Any]:
    """A figures run's ``results.json`` (default: the repository's)."""
    return json.loads(Path(path).read_text())


def ledger_markdown(results: dict[str, Any]) -> str:
    """The ledger as one markdown page (the project's table renderer), with the run it reads."""
    from ..io.figure_io import markdown_table

    rows = ledger(results)
    counts = {word(v): sum(r["outcome"] == v for r in rows) for v in VERDICTS}
    images = next((r.get("images") for r in results.get("tables", {}).get("table1", [])), None)
    commit = (results.get("git") or {}).get("commit")
    head = [
        "# Claims ledger: every claim of the paper, run or not",
        "",
        f"Generated from `figures/results.json` (model `{results.get('model')}`, "
        f"commit `{commit}`, "
        f"{images} images per method) by `gsd_lab.experiments.ledger` from "
        "`gsd_lab.experiments.claims` (one row per claim id); do not edit by hand "
        "(`python -m gsd_lab readme` rewrites it). Verdicts by the one rule "
        "(`gsd_lab.experiments.verdicts`), in one vocabulary: yes / no beyond two paired standard "
        "errors (d +- 2 SE, printed with every number it judged), direction only (the claim's "
        "sign, but the paper's ratio outside ours +- 2 SE), no difference detected (within "
        "them; never read as equality: the row names the smallest difference the run could "
        "have detected at 80% power), not run (why). "
        "Headline claims first. Every number here is from the stand-in unless stated: "
        "**Lumina-mGPT's real weights have not run.**",
        "",
        "Counts: " + ", ".join(f"{s} {n}" for s, n in counts.items()) + ".",
        "",
        "",
    ]
    anchored = [{**r, "id": f'<a id="{r["id"]}"></a>{r["id"]}'} for r in rows]  # README links
    return "\n".join(head) + markdown_table(anchored, COLUMNS) + "\n"


def write_claims(results: dict[str, Any], path: str | Path = CLAIMS_MD) -> Path:
    """Write ``ledger_markdown(results)`` to ``path`` (default docs/claims.md); the figures job and
    ``python -m gsd_lab readme`` call it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ledger_markdown(results))
    return path


def claims_section(rows: list[dict[str, str]]) -> str:
    """results.md's claims section body: the ledger's ``rows`` with what they are."""
    from ..io.figure_io import markdown_table

    return (
        "Every claim by its stable id (`gsd_lab.experiments.claims`; results.json's `claims` "
        "holds the same numbers as numbers), judged by the one rule of "
        "`gsd_lab.experiments.verdicts`: the interval is d (or R) +- 2 paired SE; \"no "
        "difference detected\" is never equality. The same table as docs/claims.md when this run "
        "is the committed one.\n\n" + markdown_table(rows, COLUMNS)
    )


def with_claims_section(text: str, results: dict[str, Any]) -> str:
    """results.md's ``text`` with its claims section rendered from ``results`` (replaced, or
    inserted before "## Run" in a results.md written before claims had ids)."""
    section = f"## {SECTION}\n\n{claims_section(ledger(results))}\n\n"
    pattern = re.compile(r"^## " + re.escape(SECTION) + r"\n.*?(?=^## )", re.S | re.M)
    if pattern.search(text):
        return pattern.sub(lambda _: section, text, count=1)
    if "\n## Run\n" not in text:
        raise ValueError("results.md has no '## Run' section to put the claims before")
    return text.replace("\n## Run\n", f"\n{section}## Run\n", 1)


def write_results_claims(results: dict[str, Any], path: str | Path = RESULTS_MD) -> Path:
    """Re-render results.md's claims section from ``results`` (no decoding: the rest of the
    page is the figures run's)."""
    path = Path(path)
    path.write_text(with_claims_section(path.read_text(), results))
    return path


def show_ledger(
    results: dict[str, Any] | None = None, columns: list[str] | tuple[str, ...] = tuple(COLUMNS)
) -> None:
    """Display the ledger's ``columns`` (in a notebook as markdown, else printed); default: every
    column of the repository's run."""
    from ..io.figure_io import markdown_table

    unknown = sorted(set(columns) - set(COLUMNS))
    if unknown:
        raise ValueError(f"the ledger has no columns {unknown}; it has {COLUMNS}")
    rows = ledger(results if results is not None else load_results())
    text = markdown_table(rows, list(columns))
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:  # pragma: no cover - IPython is in the notebooks extra
        print(text)
        return
    if get_ipython() is None:
        print(text)
    else:
        display(Markdown(text))
