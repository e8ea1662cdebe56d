"""The documentation site builds offline from the committed tree in one command, with every
Sphinx warning an error, and reads as a reader would see it: every page, internal link, anchor
and image resolves inside the site and nothing is loaded over the network
(docs/site/build.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("site_build", ROOT / "docs" / "site" / "build.py")
site = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(site)
BUILD_SECONDS = 480  # a ceiling: Sphinx renders stored outputs and executes nothing


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "html"
    try:
        problems = site.build(out, timeout=BUILD_SECONDS)
    except TimeoutError as error:
        pytest.fail(f"{error}: the site must build in minutes (docs/site/build.py)")
    except RuntimeError as error:
        pytest.fail(f"the site does not build with warnings as errors:\n{error}")
    return out, problems


def test_the_site_builds_and_every_link_anchor_and_image_resolves(built):
    out, problems = built
    assert problems == [], "\n".join(problems)


def test_the_site_has_every_part(built):
    out, _ = built
    for page in ("index", "README", "docs/findings", "docs/claims", "docs/glossary",
                 "notebooks/05_speculative_decoding_tutorial", "notebooks/04_speedup_and_quality",
                 "proofs/README", "proofs/01_theorem1_partitions", "api/gsd_core", "api/gsd_lab"):
        assert (out / f"{page}.html").exists(), page
    api = (out / "api" / "gsd_core.html").read_text()
    assert 'id="gsd_core.verification.verify"' in api and "min(1, P(x) / Q(x))" in api
    course = (out / "notebooks" / "05_speculative_decoding_tutorial.html").read_text()
    assert "output_area" in course or "cell_output" in course  # stored outputs rendered
    assert "application/vnd.jupyter.widget" not in course  # no widget needing a live kernel
    assert "interactive(children=" not in course  # nor a widget's repr in its place
    assert "/work/" not in course  # nor a machine's path
    assert 'alt="Bar charts of the worked example' in course  # a figure's alt text


def test_the_readme_answer_links_into_the_ledger_on_the_site(built):
    out, _ = built
    front = (out / "README.html").read_text()
    assert 'href="docs/claims.html#gsd_fewer_nfe_than_sjd"' in front
    assert 'id="gsd_fewer_nfe_than_sjd"' in (out / "docs" / "claims.html").read_text()


def test_the_check_finds_what_a_reader_would(tmp_path):
    """Negative control: a missing page, a missing anchor, a missing image, a link outside the
    site, a Markdown table left as text and everything loaded over the network (script, stylesheet, preload, icon, frame,
    media source, image, a stylesheet's url() and @import) are each reported."""
    (tmp_path / "_static" / "mathjax").mkdir(parents=True)
    (tmp_path / "_static" / "mathjax" / "tex-chtml.js").write_text("")
    (tmp_path / "other.html").write_text('<h1 id="here">x</h1>')
    (tmp_path / "index.html").write_text(
        '<a href="other.html#here">ok</a><a href="other.html#gone">a</a><a href="none.html">b</a>'
        '<img src="_images/none.png"><script src="https://cdn.example/x.js"></script>'
        '<link rel="stylesheet" href="https://cdn.example/x.css">'
        '<link rel="preload" href="https://cdn.example/f.woff2"><link rel="icon" href="//x/i.ico">'
        '<iframe src="https://x.org/v"></iframe><video><source src="http://x.org/v.mp4"></video>'
        '<img src="https://x.org/i.png"><a href="../../outside.html">o</a>'
        '<img src="data:image/png;base64,AAAA"><link rel="stylesheet" href="_static/s.css">'
        '<p>| method | nfe | |\u2014|\u2014| | AR | 256 |</p><pre>| a |\n|---|</pre>'
    )
    (tmp_path / "_static" / "s.css").write_text(
        '@import "https://fonts.example/a.css";\nbody { background: url("https://x.org/b.png") }\n'
        'p { background: url(local.png) }')
    problems = site.check_site(tmp_path)
    assert len(problems) == 14, problems
    assert any("a Markdown table shown as text" in p for p in problems)  # not the one in <pre>
    assert any("missing anchor other.html#gone" in p for p in problems)
    assert any("link to missing none.html" in p for p in problems)
    assert any("missing image" in p for p in problems)
    assert any("../../outside.html outside the site" in p for p in problems)
    assert sum("over the network" in p for p in problems) == 9
    assert sum(p.startswith("_static/s.css") for p in problems) == 2


def test_links_to_files_the_site_does_not_hold_become_their_text():
    pages = {"README.md", "docs/claims.md", "proofs/README.md"}
    text = "[a](docs/claims.md) [`gsd_core/`](gsd_core) [p](proofs) [w](https://x.org)"
    assert site._rewrite(text, "README.md", pages, {}) == (
        "[a](docs/claims.md) `gsd_core/` [p](proofs/README.md) [w](https://x.org)")
    anchored = {"docs/claims.md": '<a id="c1"></a>'}
    assert site._rewrite("[q](docs/claims.md#c1)", "README.md", pages, anchored) == (
        '<a href="docs/claims.html#c1">q</a>')


def test_a_link_to_nothing_is_a_broken_link_not_text():
    """A mistyped link (to a file neither the site nor the repository has) must not pass
    silently as plain text: it is reported, and staging fails."""
    pages = {"README.md"}
    text = "[typo](gsd_core/verificaton.py) [ok](gsd_core/verification.py)"
    with pytest.raises(ValueError, match="README.md: link to missing gsd_core/verificaton.py"):
        site._rewrite(text, "README.md", pages, {})
    broken: list[str] = []
    assert site._rewrite(text, "README.md", pages, {}, broken=broken) == (
        "[typo](gsd_core/verificaton.py) ok")
    assert broken == ["README.md: link to missing gsd_core/verificaton.py"]
