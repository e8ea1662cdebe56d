"""Sphinx configuration of the project's site, built by ``python docs/site/build.py`` from a
staged copy of the committed tree (``build.stage``): MyST-NB renders the notebooks' stored outputs
(``nb_execution_mode = "off"``: nothing is executed), sphinx-book-theme lays it out, MathJax is
shipped with the site (``sphinx-mathjax-offline``) and widget outputs load no script."""

from __future__ import annotations

project = "gsd: Grouped Speculative Decoding"
author = "gsd developers"
copyright = "gsd developers, MIT licence"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx-mathjax-offline",  # copies MathJax into _static and points mathjax_path at it
]

root_doc = "index"
exclude_patterns = ["_build"]
suppress_warnings: list[str] = []

# MyST: $...$ and $$...$$ math, GitHub-style heading anchors (the links the code host follows).
myst_enable_extensions = ["dollarmath", "amsmath", "html_image"]
myst_heading_anchors = 4
myst_dmath_double_inline = True

# The notebooks as committed: stored outputs rendered, nothing executed.
nb_execution_mode = "off"
nb_ipywidgets_js: dict = {}  # a stored widget needs a live kernel; no widget script is loaded
nb_mime_priority_overrides = [
    ("html", "application/vnd.jupyter.widget-view+json", None),
    ("html", "application/vnd.jupyter.widget-state+json", None),
]
nb_merge_streams = True

# The API reference: signatures with their type hints, members in source order.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

html_theme = "sphinx_book_theme"
html_title = "gsd"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "home_page_in_toc": True,
    "navigation_with_keys": False,
}
html_static_path = ["_static"]
html_css_files = ["site.css"]
html_show_sourcelink = False
html_copy_source = False
html_last_updated_fmt = None


# The docstrings are plain text in the paper's notation (|x|, indented formulas and tables), read
# with help() as often as here: rather than rewrite them as reStructuredText, each is read as
# such text. An indented block under a paragraph (a formula, a table) is shown verbatim, a bullet's
# continuation lines stay the bullet's, and "|" outside ``literals`` is a character, not a
# substitution.
import re as _re

_BULLET = _re.compile(r"^(\s*)([-*+]|\d+[.)]) +")
_LITERAL = _re.compile(r"(``[^`]+``)")


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


def _process(app, what, name, obj, options, lines):  # noqa: ANN001 - Sphinx's signature
    lines[:] = plain_text_docstring(lines)


def setup(app):  # noqa: ANN001
    app.connect("autodoc-process-docstring", _process)
    app.set_html_assets_policy("always")  # MathJax on every page: the navigation holds math too
