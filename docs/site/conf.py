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
# Markdown outputs (the notebooks' tables) parsed as the pages are: CommonMark, the default, has no tables.
nb_render_markdown_format = "myst"

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


# The docstrings are plain text in the paper's notation, shown as written (docstrings.py, staged
# beside this file).
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent))
from docstrings import plain_text_docstring  # noqa: E402


def _process(app, what, name, obj, options, lines):  # noqa: ANN001 - Sphinx's signature
    lines[:] = plain_text_docstring(lines)


def setup(app):  # noqa: ANN001
    app.connect("autodoc-process-docstring", _process)
    app.set_html_assets_policy("always")  # MathJax on every page: the navigation holds math too
