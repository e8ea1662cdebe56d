"""Plain-text docstrings as reStructuredText that shows them as written (the site's autodoc).

The docstrings are plain text in the paper's notation (|x|, indented formulas and tables), read
with help() as often as on the site: rather than rewrite them as reStructuredText, each is read as
such text. An indented block under a paragraph (a formula, a table) is shown verbatim, a bullet's
continuation lines stay the bullet's, and "|" outside ``literals`` is a character, not a
substitution.
"""

from __future__ import annotations

import re

_BULLET = re.compile(r"^(\s*)([-*+]|\d+[.)]) +")
_LITERAL = re.compile(r"(``[^`]+``)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _escape(line: str) -> str:
    parts = _LITERAL.split(line)
    for i in range(0, len(parts), 2):  # the text between ``literals``
        parts[i] = parts[i].replace("|", "\\|")
        if i and parts[i][:1].isalnum():  # ``key``s
            parts[i] = "\\ " + parts[i]
    return "".join(parts)


def plain_text_docstring(lines: list[str]) -> list[str]:
    """``lines`` of a plain-text docstring as reStructuredText that shows them as written."""
    out: list[str] = []
    literal_at: int | None = None  # the indent a literal block's lines exceed
    item_indent: int | None = None  # a bullet's continuation indent
    previous = ""
    for line in lines:
        if not line.strip():
            out.append(line)
            continue
        indent = _indent(line)
        if literal_at is not None:
            if indent > literal_at:
                out.append(line)
                continue
            literal_at = None
            out.append("")
        bullet = _BULLET.match(line)
        base = _indent(previous) if previous.strip() else indent
        if bullet:
            if item_indent is None and out and out[-1].strip():
                out.append("")  # a list needs a blank line after its paragraph
            item_indent = bullet.end()
        elif item_indent is not None and indent == item_indent:
            pass  # a bullet's continuation
        elif previous.strip() and indent > (item_indent if item_indent is not None else base):
            literal_at = item_indent if item_indent is not None else base
            while out and not out[-1].strip():
                out.pop()
            if out:
                head = out.pop()
                out.append(head[:-1] + "::" if head.endswith(":") else head + " ::")
            out += ["", line]
            previous = line
            continue
        elif indent <= base:
            item_indent = None if not bullet else item_indent
        out.append(_escape(line))
        previous = line
    return out
