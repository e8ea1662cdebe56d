"""Numbers in prose rendered from committed outputs: value spans in the documents.

Markdown (README.md, docs/*.md, proofs/*.md, the notebooks' markdown cells, the stand-in's
weights README) shows a measured number as a *rendered* value span,
``<!-- value: EXPR fmt=SPEC -->TEXT<!-- /value -->``. EXPR is read from
``figures/results.json`` (its top-level keys are names: ``tables``, ``config``, ``seconds``,
``git``, ...), e.g. ``row(tables.table1, "SJD").nfe``, with ``+ - * /``, one comparison (a
bool, rendered yes / no), numbers and ``FUNCTIONS``: ``row``, ``paired``, ``short``,
``detectable``, ``word``, ``load`` (another committed JSON output). SPEC is a Python format spec
(default ``.3g``). ``render`` replaces TEXT by ``format(value, SPEC)``; ``python -m gsd_lab
readme`` writes every document (``update_documents``). The other spans (``from``, ``paper``)
and the check that no document holds an unmarked number are test tooling
(tests/tooling/prose_lint.py; the syntax: docs/reproducibility.md).
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
from pathlib import Path
from typing import Any, Callable

from .verdicts import minimum_detectable, paired_difference, word

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "figures" / "results.json"

VALUE = re.compile(
    r"<!-- value: (?P<expr>.+?)(?: fmt=(?P<fmt>\S+))? -->(?P<text>.*?)<!-- /value -->", re.S
)

# -- evaluation -----------------------------------------------------------------------------


def _row(rows: list[dict[str, Any]], method: str) -> dict[str, Any]:
    found = [r for r in rows if r.get("method") == method]
    if len(found) != 1:
        raise KeyError(f"{len(found)} rows of method {method!r}")
    return found[0]


def _load(path: str) -> Any:
    """A committed JSON output (``.json``), or a JSON-lines log (``.jsonl``: the list of its
    records, e.g. ``load("...train_log.jsonl")[-1]``, its last record)."""
    target = (REPO / path).resolve()
    if REPO not in target.parents or target.suffix not in (".json", ".jsonl"):
        raise ValueError(f"load() reads a committed JSON file in the repository, got {path!r}")
    text = target.read_text(encoding="utf-8")
    if target.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


# ``paired``: verdicts.paired_difference; ``detectable``: verdicts.minimum_detectable,
# (NOISE_Z + z_power) x se at verdicts.POWER; ``word``: a verdict's key as it reads ("noise":
# "no difference detected").
FUNCTIONS = {"row": _row, "short": lambda commit: commit[:7], "paired": paired_difference,
             "detectable": minimum_detectable, "word": word, "load": _load, "abs": abs,
             "min": min, "max": max, "len": len, "sqrt": math.sqrt}
# The operators a value span may use, by their ast node: unary, binary and comparison.
_OPS = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Add: operator.add,
        ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}


def _refused(node: ast.AST, expr: str) -> ValueError:
    return ValueError(f"not allowed in a value span: {ast.dump(node)[:60]} in {expr!r}")


Ev = Callable[[ast.AST], Any]


def _op(op: ast.AST, node: ast.AST, expr: str) -> Callable[..., Any]:
    """The function of operator ``op`` (of ``node``) from ``_OPS``; refused if not there."""
    if type(op) not in _OPS:
        raise _refused(node, expr)
    return _OPS[type(op)]


def _constant(node: ast.Constant, ev: Ev, names: dict[str, Any], expr: str) -> Any:
    if isinstance(node.value, (int, float, str)):
        return node.value
    raise _refused(node, expr)


def _name(node: ast.Name, ev: Ev, names: dict[str, Any], expr: str) -> Any:
    if node.id in names:
        return names[node.id]
    raise ValueError(f"unknown name {node.id!r} in {expr!r}")


def _attribute(node: ast.Attribute, ev: Ev, names: dict[str, Any], expr: str) -> Any:
    base = ev(node.value)
    if isinstance(base, dict):
        return base[node.attr]
    if node.attr.startswith("_"):
        raise ValueError(f"private attribute in {expr!r}")
    return getattr(base, node.attr)


def _compare(node: ast.Compare, ev: Ev, names: dict[str, Any], expr: str) -> Any:
    if len(node.ops) != 1:
        raise _refused(node, expr)
    return _op(node.ops[0], node, expr)(ev(node.left), ev(node.comparators[0]))


def _call(node: ast.Call, ev: Ev, names: dict[str, Any], expr: str) -> Any:
    if not isinstance(node.func, ast.Name) or node.keywords:
        raise _refused(node, expr)
    if node.func.id not in FUNCTIONS:
        raise ValueError(f"unknown function {node.func.id!r} in {expr!r}")
    return FUNCTIONS[node.func.id](*(ev(a) for a in node.args))


_NODES: dict[type, Callable[[Any, Ev, dict[str, Any], str], Any]] = {
    ast.Expression: lambda node, ev, names, expr: ev(node.body),
    ast.Constant: _constant,
    ast.Name: _name,
    ast.Attribute: _attribute,
    ast.Subscript: lambda node, ev, names, expr: ev(node.value)[ev(node.slice)],
    ast.UnaryOp: lambda node, ev, names, expr: _op(node.op, node, expr)(ev(node.operand)),
    ast.BinOp: lambda node, ev, n, expr: _op(node.op, node, expr)(ev(node.left), ev(node.right)),
    ast.Compare: _compare,
    ast.Call: _call,
}


def evaluate(expr: str, names: dict[str, Any]) -> Any:
    """EXPR over ``names`` (results.json's top level): attribute access reads a dict's key (or a
    public field of a result object), subscripts index lists and dicts, calls only ``FUNCTIONS``.
    Anything else is refused (ValueError)."""

    def ev(node: ast.AST) -> Any:
        if type(node) not in _NODES:
            raise _refused(node, expr)
        return _NODES[type(node)](node, ev, names, expr)

    return ev(ast.parse(expr.strip(), mode="eval"))


def format_value(value: Any, fmt: str | None) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, (int, float, str)):
        raise ValueError(f"a value span must give a number, a bool or a string, got {value!r}")
    if isinstance(value, str):
        return value
    return format(value, fmt or ".3g")


def render(text: str, results: dict[str, Any]) -> str:
    """``text`` with every value span's TEXT replaced by its rendering."""

    def one(match: re.Match) -> str:
        shown = format_value(evaluate(match["expr"], results), match["fmt"])
        fmt = f" fmt={match['fmt']}" if match["fmt"] else ""
        return f"<!-- value: {match['expr']}{fmt} -->{shown}<!-- /value -->"

    return VALUE.sub(one, text)


# -- documents ------------------------------------------------------------------------------

DOCUMENTS = ("README.md", "docs/*.md", "proofs/*.md", "notebooks/*.ipynb",
             "gsd_lab/standin/weights/README.md", "gsd_lab/digits/weights/README.md",
             "docs/site/*.md", "docs/site/api/*.md")


RENDERED_WHOLE = ("docs/claims.md",)  # rendered entirely by ``experiments.ledger`` (its own test)


def documents(root: Path = REPO) -> list[Path]:
    """The documents that may hold value spans (``DOCUMENTS``, less those rendered whole)."""
    found = {p for pattern in DOCUMENTS for p in root.glob(pattern)}
    return sorted(p for p in found if p.relative_to(root).as_posix() not in RENDERED_WHOLE)


def markdown_of(path: Path) -> str:
    """The prose of a document: a notebook's markdown cells, joined by blank lines."""
    if path.suffix != ".ipynb":
        return path.read_text(encoding="utf-8")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def rendered_document(path: Path, results: dict[str, Any]) -> str:
    """The file's text with its value spans rendered (a notebook: in its markdown cells, the
    JSON written back as Jupyter writes it: indent 1, non-ASCII kept, a final newline)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        try:
            return render(text, results)
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise ValueError(f"{path}: {error!r}") from error
    if "<!-- value:" not in text:
        return text
    notebook = json.loads(text)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            source = render("".join(cell["source"]), results)
            cell["source"] = source.splitlines(keepends=True)
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def load_results(path: Path = RESULTS) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def stale_documents(results: dict[str, Any] | None = None, root: Path = REPO) -> list[Path]:
    """Documents that differ from their rendering."""
    results = load_results() if results is None else results
    return [p for p in documents(root) if rendered_document(p, results) != p.read_text("utf-8")]


def update_documents(results: dict[str, Any] | None = None, root: Path = REPO) -> list[Path]:
    """Render every document's value spans in place; the paths written."""
    results = load_results() if results is None else results
    written = []
    for path in stale_documents(results, root):
        path.write_text(rendered_document(path, results), encoding="utf-8")
        written.append(path)
    return written
