"""The prose check (test tooling): every number a document shows is rendered, quoted with its
source, or explained by a reviewed rule.

Besides ``gsd_lab.experiments.prose``'s rendered value spans, two spans mark a number's source:

- ``<!-- from: PATH -->TEXT<!-- /from -->``: numbers quoted from another committed file (a
  benchmark's text output, or the test that asserts an exact value). Every numeral in TEXT that
  no rule explains must occur in PATH (a substring check; thousands separators may be written
  ``_`` or left out there, as in code): ``check_from_spans``.
- ``<!-- paper: SOURCE -->TEXT<!-- /paper -->``: values quoted from a publication; SOURCE names
  a public source, never a file outside this repository. Not checked against the source.

``unmarked(text)`` lists the numerals outside these spans and the blocks ``experiments.findings``
renders that no reviewed rule of ``ALLOWED`` explains (code, math, links, file names, hashes,
arXiv ids, years, versions, numbered references, identifiers with digits, ``name = value``
settings, fractions, tolerances, single digits). tests/tooling/test_prose_lint.py allows none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gsd_lab.experiments import prose
from gsd_lab.experiments.prose import VALUE, markdown_of

RENDERED_BLOCKS = (  # blocks rendered by ``experiments.findings`` (their own test)
    re.compile(r"<!-- findings:start.*?findings:end -->", re.S),
    re.compile(r"<!-- table1:start.*?<!-- table1:end -->", re.S),
    re.compile(r"<!-- answer:start.*?<!-- answer:end -->", re.S),
)

PAPER = re.compile(r"<!-- paper: (?P<source>[^>]*?\S[^>]*?) -->(?P<text>.*?)<!-- /paper -->", re.S)
FROM = re.compile(r"<!-- from: (?P<path>\S+) -->(?P<text>.*?)<!-- /from -->", re.S)


# -- the numeral check ----------------------------------------------------------------------

NUMERAL = re.compile(r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?")
ALLOWED = {  # reviewed rules: (name, pattern) blanked out before numerals are counted
    "fenced code": r"```.*?```",
    "inline code": r"`[^`\n]*`",
    "math (display and inline, paired left to right)": r"\$\$.*?\$\$|\$[^$]+?\$",
    "html comment": r"<!--.*?-->",
    "link target": r"\]\([^)]*\)",
    "url": r"https?://\S+",
    "another project's issue (owner/repo#N, repo#N)": r"\b[\w.-]+(?:/[\w.-]+)?#\d+\b",
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
        path = prose.REPO / match["path"]
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


def unmarked_in(path: Path) -> list[Numeral]:
    """``unmarked`` over a document's prose."""
    return unmarked(markdown_of(path), proofs=path.parent.name == "proofs")
