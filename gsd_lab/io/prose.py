"""Numbers in prose: rendered from committed outputs, or marked with their source.

Markdown (README.md, docs/*.md, proofs/*.md, the notebooks' markdown cells, the stand-in's
weights README) marks every measured number it shows with a span that says where it comes from:

- ``<!-- value: EXPR fmt=SPEC -->TEXT<!-- /value -->``: a *rendered* value. EXPR is read from
  ``figures/results.json`` (its top-level keys are names: ``tables``, ``config``, ``seconds``,
  ``git``, ...), e.g. ``tables.frontier.seconds`` or ``row(tables.table1, "SJD").nfe``, with
  ``+ - * /``, one comparison (``< <= > >=``: a bool, rendered yes / no), numbers and
  ``FUNCTIONS``: ``row(rows, method)``, the row of that method;
  ``paired(a, b, key)``, ``verdicts.paired_difference`` (``.difference``, ``.se``, ``.n``);
  ``short(commit)``, its first 7 characters; ``detectable(se)``,
  ``verdicts.minimum_detectable(se)``, the smallest true difference the verdicts' two-SE test
  detects with 80% power; ``word(verdict)``, ``verdicts.word`` (the one vocabulary: a stored
  "noise" reads "no difference detected"); ``load(path)``, another
  committed JSON output (a ``.jsonl`` log: the list of its records). SPEC is a Python format
  spec (``+.1f``, ``.1%``, ``,.0f``; default
  ``.3g``; a bool renders as yes / no). ``render`` replaces TEXT by ``format(value, SPEC)``;
  ``python -m gsd_lab readme`` writes every document, and a test fails when one differs from
  its rendering.
- ``<!-- from: PATH -->TEXT<!-- /from -->``: numbers quoted from another committed file: a
  benchmark's text output, or the test that asserts an exact value. Every numeral in TEXT that
  no rule below explains must occur in PATH (a substring check: weak for short numerals;
  thousands separators may be written ``_`` or left out there, as in code).
- ``<!-- paper: SOURCE -->TEXT<!-- /paper -->``: values quoted from the paper or another
  publication; SOURCE names a public source (``GSD paper (arXiv 2508.07747), Table 1``), never
  a file outside this repository. Not checked against the source.

``unmarked(text)`` lists the numerals outside these spans (and outside the blocks that
``experiments.findings`` renders) that no reviewed rule of ``ALLOWED`` explains: code (inline
and fenced), LaTeX math (exact; each proof's test checks it), links and file names, commit
hashes, arXiv ids, years, versions, section, list and proof numbers, identifiers with digits
(W1, top-1, float16, 7B), settings written ``name = value`` (``G = 50``, ``k=2``), integer
fractions and sets, tolerances (1e-12), single digits. Everything else is reported: a
hand-written measured number is to be rendered, quoted from its file, or removed; the test
(tests/lab/test_prose.py) allows none in any document.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "figures" / "results.json"

VALUE = re.compile(
    r"<!-- value: (?P<expr>.+?)(?: fmt=(?P<fmt>\S+))? -->(?P<text>.*?)<!-- /value -->", re.S
)
FROM = re.compile(r"<!-- from: (?P<path>\S+) -->(?P<text>.*?)<!-- /from -->", re.S)
PAPER = re.compile(r"<!-- paper: (?P<source>[^>]*?\S[^>]*?) -->(?P<text>.*?)<!-- /paper -->", re.S)
RENDERED_BLOCKS = (  # blocks rendered by ``experiments.findings`` (their own test)
    re.compile(r"<!-- findings:start.*?findings:end -->", re.S),
    re.compile(r"<!-- table1:start.*?<!-- table1:end -->", re.S),
)

# -- evaluation -----------------------------------------------------------------------------


def _row(rows: list[dict[str, Any]], method: str) -> dict[str, Any]:
    found = [r for r in rows if r.get("method") == method]
    if len(found) != 1:
        raise KeyError(f"{len(found)} rows of method {method!r}")
    return found[0]


def _paired(a: dict[str, Any], b: dict[str, Any], key: str):
    from ..experiments.verdicts import paired_difference

    return paired_difference(a, b, key)


def _detectable(se: float) -> float:
    """``verdicts.minimum_detectable``: (NOISE_Z + z_power) x se at ``verdicts.POWER``."""
    from ..experiments.verdicts import minimum_detectable

    return minimum_detectable(se)


def _word(outcome: str) -> str:
    """``verdicts.word``: a verdict's key as it reads ("noise": "no difference detected")."""
    from ..experiments.verdicts import word

    return word(outcome)


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


FUNCTIONS = {"row": _row, "short": lambda commit: commit[:7], "paired": _paired,
             "detectable": _detectable, "word": _word, "load": _load, "abs": abs, "min": min,
             "max": max, "len": len, "sqrt": math.sqrt}
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}
_COMPARISONS = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
                ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}


def evaluate(expr: str, names: dict[str, Any]) -> Any:
    """EXPR over ``names`` (results.json's top level): attribute access reads a dict's key (or a
    public field of a result object), subscripts index lists and dicts, calls only ``FUNCTIONS``.
    Anything else is refused (ValueError)."""

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in names:
                return names[node.id]
            raise ValueError(f"unknown name {node.id!r} in {expr!r}")
        if isinstance(node, ast.Attribute):
            base = ev(node.value)
            if isinstance(base, dict):
                return base[node.attr]
            if node.attr.startswith("_"):
                raise ValueError(f"private attribute in {expr!r}")
            return getattr(base, node.attr)
        if isinstance(node, ast.Subscript):
            return ev(node.value)[ev(node.slice)]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = ev(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and (
            type(node.ops[0]) in _COMPARISONS
        ):
            return _COMPARISONS[type(node.ops[0])](ev(node.left), ev(node.comparators[0]))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            if node.func.id not in FUNCTIONS:
                raise ValueError(f"unknown function {node.func.id!r} in {expr!r}")
            return FUNCTIONS[node.func.id](*(ev(a) for a in node.args))
        raise ValueError(f"not allowed in a value span: {ast.dump(node)[:60]} in {expr!r}")

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


# -- the numeral check ----------------------------------------------------------------------

NUMERAL = re.compile(r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?")
ALLOWED = {  # reviewed rules: (name, pattern) blanked out before numerals are counted
    "fenced code": r"```.*?```",
    "inline code": r"`[^`\n]*`",
    "math (display and inline, paired left to right)": r"\$\$.*?\$\$|\$[^$]+?\$",
    "html comment": r"<!--.*?-->",
    "link target": r"\]\([^)]*\)",
    "url": r"https?://\S+",
    "path or file name": r"[\w.-]*[/\\][\w./\\-]*|\b[\w-]+\.(?:py|md|json|txt|npz|png|svg|ipynb|cff"
                         r"|toml|yml|sh|safetensors|csv)\b",
    "arXiv id": r"\b\d{4}\.\d{4,5}(?:v\d+)?\b",
    "commit hash": r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"
                   r"|(?<=commit )[0-9a-f]{7,40}\b",
    "year": r"\b(?:19|20)\d\d\b",
    "version": r"\bv\d+(?:\.\d+)*\b|\b\d+\.\d+\.\d+\b",
    "identifier with digits": r"\b[A-Za-z]+[\w-]*\d[\w-]*\b|\b\d+[A-Za-z]\w*\b",
    "setting (name = value)": r"\b[A-Za-z][\w']*\s*(?:=|<=|>=|<|>)\s*[-+]?\d[\d.,]*",
    "proof or notebook number (01-09)": r"\b0[1-9]\b(?=[\s,.;:)'-])",
    "exact fraction": r"\b\d+/\d+\b",
    "integer set": r"\{[\d, ]+\}",
    "tolerance (1e-12)": r"\b\d+(?:\.\d+)?e[-+]?\d+\b",
    "small integer (0-9: an index, a count, a constant)": r"(?<![\w.,])[0-9](?!\w)(?![.,]\d)(?!%)",
    "test level, power and their z": r"\b(?:95|80)% (?:paired[- ])?(?:bootstrap |confidence )?"
                                     r"(?:interval|power)|\b(?:1\.96|0\.8416)\b",
    "list or heading number": r"(?m)^\s*(?:#+\s*)?\d+(?:\.\d+)*[.)]?\s",
    "section reference": r"\b(?:[Ss]ections?|[Ss]ec\.|[Tt]heorem|[Ll]emma|[Cc]laim|[Ss]tep|[Tt]able"
                         r"|[Ff]ig\.?|[Ff]igure|[Aa]lgorithm|[Ee]q\.?|[Pp]roof|[Cc]ells?"
                         r"|[Nn]otebooks?"
                         r"|C|paper\.md|proofs?)\s+\d+(?:\.\d+)*(?:\s*(?:and|,|-)\s*\d+)*",
}
PROOF_RULES = {  # in proofs/ only: "by 10", "(11, (i))", "12's" name proofs 10-13
    "proof number (10-13, in proofs/)": r"\b1[0-3]\b(?=[\s,.;:)'])",
}
_ALLOWED = [(name, re.compile(pattern, re.S)) for name, pattern in ALLOWED.items()]
_PROOF_RULES = [(name, re.compile(pattern, re.S)) for name, pattern in PROOF_RULES.items()]


@dataclass(frozen=True)
class Numeral:
    line: int
    text: str
    context: str


def _blank(text: str, pattern: re.Pattern) -> str:
    """Spaces (newlines kept) in place of every match: line numbers stay."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def check_from_spans(text: str) -> list[str]:
    """Problems with ``from`` spans: a missing file, or a numeral (one no rule of ``ALLOWED``
    explains) that does not occur in the file."""
    problems = []
    for match in FROM.finditer(text):
        path = REPO / match["path"]
        if not path.is_file():
            problems.append(f"from: {match['path']} is not a committed file")
            continue
        source = path.read_text(encoding="utf-8")
        for numeral in NUMERAL.findall(_mask_allowed(match["text"])):
            bare = numeral.lstrip("+-−").rstrip(",")
            # 7,013,158,912 may be written 7_013_158_912 or 7013158912 in code
            if not any(form in source for form in {bare, bare.replace(",", "_"),
                                                      bare.replace(",", "")}):
                problems.append(f"from: {numeral} does not occur in {match['path']}")
    return problems


_CODE_FIRST = ("fenced code", "inline code")  # blanked before the other rules look: a ``$`` in
# code (``$OUT``) must not pair with a later ``$`` as math and hide the prose between them


def _mask_allowed(text: str, proofs: bool = False) -> str:
    """``text`` with every match of the reviewed rules blanked (newlines kept); code first."""
    for name, pattern in _ALLOWED:
        if name in _CODE_FIRST:
            text = _blank(text, pattern)
    covered = [False] * len(text)
    for _name, pattern in _ALLOWED + (_PROOF_RULES if proofs else []):  # order does not matter
        for match in pattern.finditer(text):
            covered[match.start():match.end()] = [True] * (match.end() - match.start())
    return "".join(" " if c and ch != "\n" else ch for ch, c in zip(text, covered))


def unmarked(text: str, proofs: bool = False) -> list[Numeral]:
    """Numerals of ``text`` outside every span and rendered block and not allowed by a rule
    (``proofs``: a file of proofs/, where 10-13 also name proofs)."""
    original = text
    for pattern in (*RENDERED_BLOCKS, VALUE, FROM, PAPER):
        text = _blank(text, pattern)
    text = _mask_allowed(text, proofs)
    lines = original.splitlines()
    out = []
    for match in NUMERAL.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        out.append(Numeral(line, match.group(0), lines[line - 1].strip()[:100]))
    return out


# -- documents ------------------------------------------------------------------------------

DOCUMENTS = ("README.md", "docs/*.md", "proofs/*.md", "notebooks/*.ipynb",
             "gsd_lab/standin/weights/README.md", "gsd_lab/digits/weights/README.md")


RENDERED_WHOLE = ("docs/claims.md",)  # rendered entirely by ``experiments.ledger`` (its own test)


def documents(root: Path = REPO) -> list[Path]:
    found = {p for pattern in DOCUMENTS for p in root.glob(pattern)}
    return sorted(p for p in found if p.relative_to(root).as_posix() not in RENDERED_WHOLE)


def unmarked_in(path: Path) -> list[Numeral]:
    """``unmarked`` over a document's prose."""
    return unmarked(markdown_of(path), proofs=path.parent.name == "proofs")


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
