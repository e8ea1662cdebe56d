"""Build the project's site in one command, offline, from the committed tree, and check it as a
reader would see it.

    python docs/site/build.py                 # docs/site/_build/html, then the check
    python docs/site/build.py --out DIR       # elsewhere
    python docs/site/build.py --check-only DIR

Nothing is executed: the notebooks' stored outputs are rendered (MyST-NB, ``nb_execution_mode =
"off"``). Sphinx runs with ``-W --keep-going`` (every warning fails the build) on a staged copy of
the sources (``stage``): README, docs/, proofs/, notebooks/, the figures they show and the pages
of ``docs/site/`` (the landing page, the API reference), where a link to a file the site does not
hold but the repository does (a source file, a folder) becomes its text, and a link to nothing
fails the build. ``check_site`` then reads every built page: every internal link, anchor and
image resolves inside the output folder, and nothing (script, any ``<link>``, frame, media
source, image, the stylesheets' ``url()`` and ``@import``) is loaded over http(s).
Screenshots of the landing page, the course and an API page (headless Chromium):

    chromium --headless=new --no-sandbox --screenshot=index.png --window-size=1280,2000 \\
        file://$PWD/docs/site/_build/html/index.html
"""

from __future__ import annotations

import argparse
import html.parser
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "docs" / "site"
OUT = SITE / "_build" / "html"
PAGES = ("README.md", "docs/*.md", "proofs/*.md", "notebooks/*.ipynb")
SITE_PAGES = ("index.md", "api/*.md")
IMAGES = ("figures/*.png", "figures/*.svg", "docs/site/screenshots/*.png")
LINK = re.compile(r"(?<!!)\[(?P<text>(?:[^\[\]]|\[[^\]]*\])*)\]\((?P<target>[^)\s]+)\)")


def staged_sources(repo: Path = REPO) -> dict[str, Path]:
    """The site's pages and images by their path in the stage (their path in the repository, the
    site's own pages at the top)."""
    found = {p.relative_to(repo).as_posix(): p for g in PAGES + IMAGES for p in repo.glob(g)}
    for pattern in SITE_PAGES:
        for p in SITE.glob(pattern):
            found[p.relative_to(SITE).as_posix()] = p
    return found


def _normal(path: Path) -> str:
    """``path`` with "." and ".." resolved, without touching the file system."""
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if parts:
                parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


def _rewrite(text: str, name: str, pages: set[str], anchors: dict[str, str],
             repo: Path = REPO, broken: list[str] | None = None) -> str:
    """``text`` of the staged page ``name`` with every relative link to something the site does
    not hold but ``repo`` does (a source file, a folder) replaced by its text; a folder with a
    staged README.md links to it. A link to nothing in ``repo`` is broken: appended to ``broken``
    as "name: link to missing target", or a ValueError when ``broken`` is None."""
    here = Path(name).parent

    def one(match: re.Match) -> str:
        target = match.group("target")
        if urlsplit(target).scheme or target.startswith("#"):
            return match.group(0)
        path, _, fragment = target.partition("#")
        if fragment and path.endswith(".md") and f'id="{fragment}"' in anchors.get(
                _normal(here / unquote(path)), ""):
            # an anchor of raw HTML (the ledger's claim ids), which MyST does not index
            return f'<a href="{path[:-3]}.html#{fragment}">{match.group("text")}</a>'

        key = _normal(here / unquote(path))
        if key in pages:
            return match.group(0)
        if f"{key}/README.md" in pages:
            tail = path.rstrip("/") + "/README.md" + (f"#{fragment}" if fragment else "")
            return f"[{match.group('text')}]({tail})"
        if (repo / key).exists():
            return match.group("text")
        problem = f"{name}: link to missing {target}"
        if broken is None:
            raise ValueError(problem)
        broken.append(problem)
        return match.group(0)

    return LINK.sub(one, text)


def stage(into: Path, repo: Path = REPO) -> Path:
    """Copy the site's sources into ``into`` (conf.py and its docstrings.py included) with ``_rewrite``'s links;
    a RuntimeError listing every link to a file the repository does not have."""
    sources = staged_sources(repo)
    broken: list[str] = []
    pages = {k for k in sources if k.endswith((".md", ".ipynb"))}
    anchors = {k: sources[k].read_text(encoding="utf-8") for k in pages if k.endswith(".md")}
    for name, source in sources.items():
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".md"):
            text = _rewrite(source.read_text(encoding="utf-8"), name, pages, anchors, repo,
                            broken)
            if name == "README.md":  # the site's own title is the landing page's
                title = "# The README: the question, the answer, the quick start"
                text = re.sub(r"\A# .*", title, text)
            target.write_text(text, encoding="utf-8")
        elif name.endswith(".ipynb"):
            notebook = json.loads(source.read_text(encoding="utf-8"))
            notebook["metadata"].pop("widgets", None)  # a widget's state needs a live kernel
            for cell in notebook["cells"]:
                if cell["cell_type"] == "markdown":
                    text = "".join(cell["source"])
                    cell["source"] = _rewrite(text, name, pages, anchors, repo, broken)
            target.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
        else:
            shutil.copyfile(source, target)
    if broken:
        raise RuntimeError("broken links:\n" + "\n".join(broken))
    for name in ("conf.py", "docstrings.py"):
        shutil.copyfile(SITE / name, into / name)
    shutil.copytree(SITE / "_static", into / "_static")
    return into


REMOTE = ("http:", "https:", "//")
# A Markdown table's rule row (|---|---|, or its dashes typeset as en or em dashes) in a page's text.
RAW_TABLE_RULE = re.compile(r"\|\s*:?(?:-{3,}|[\u2013\u2014]+):?\s*\|")
CODE_TAGS = ("pre", "code", "script", "style", "textarea")
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""")


class _Page(html.parser.HTMLParser):
    """The ids, links, images and resources loaded over the network of one HTML page, and the
    rows of Markdown tables left as text (outside code: a table the renderer did not parse)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.images: list[str] = []
        self.remote: list[str] = []
        self.raw_tables: list[str] = []
        self._in_code = 0

    def handle_endtag(self, tag: str) -> None:
        if tag in CODE_TAGS and self._in_code:
            self._in_code -= 1

    def handle_data(self, data: str) -> None:
        if not self._in_code and (match := RAW_TABLE_RULE.search(data)):
            self.raw_tables.append(data[max(0, match.start() - 40):match.end()].strip())

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in CODE_TAGS:
            self._in_code += 1
        a = {k: v or "" for k, v in attrs}
        for key in ("id", "name"):
            if a.get(key) and (key == "id" or tag == "a"):
                self.ids.add(a[key])
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        if tag == "img" and "src" in a:
            self.images.append(a["src"])
        # what the browser fetches by itself: scripts, every <link> (stylesheet, preload,
        # icon), frames, media sources
        loaded = [a.get("src", "")] if tag in ("script", "iframe", "source", "img") else []
        loaded += [a.get("href", "")] if tag == "link" else []
        loaded += [c.split()[0] for c in a.get("srcset", "").split(",") if c.strip()]
        self.remote += [u for u in loaded if u.startswith(REMOTE)]


def _css_remote(out: Path) -> list[str]:
    """``url(...)`` and ``@import`` over http(s) in the site's own stylesheets."""
    problems = []
    for css in sorted((out / "_static").glob("*.css")):
        for match in CSS_URL.finditer(css.read_text(encoding="utf-8", errors="replace")):
            url = match.group(1) or match.group(2)
            if url.startswith(REMOTE):
                problems.append(f"_static/{css.name}: loads {url} over the network")
    return problems


def check_site(out: Path) -> list[str]:
    """What a reader would find broken in the built site ``out``: a link to a missing page or
    anchor or to a file outside ``out``, a missing image, anything loaded over the network."""
    root = out.resolve()
    parsed: dict[Path, _Page] = {}
    for page in sorted(out.rglob("*.html")):
        parser = _Page()
        parser.feed(page.read_text(encoding="utf-8"))
        parsed[page.resolve()] = parser
    problems = _css_remote(out)
    for page, found in parsed.items():
        name = page.relative_to(root).as_posix()
        problems += [f"{name}: loads {src} over the network" for src in found.remote]
        problems += [f"{name}: a Markdown table shown as text: {row!r}" for row in found.raw_tables]
        for src in found.images:
            if src.startswith(REMOTE) or urlsplit(src).scheme:
                continue  # remote ones are reported with the other remote loads; data: is inline
            target = (page.parent / unquote(urlsplit(src).path)).resolve()
            if not target.is_relative_to(root):
                problems.append(f"{name}: image {src} outside the site")
            elif not target.exists():
                problems.append(f"{name}: missing image {src}")
        for href in found.links:
            split = urlsplit(href)
            if split.scheme or href.startswith("//"):
                continue
            target = page if not split.path else (page.parent / unquote(split.path)).resolve()
            if not target.is_relative_to(root):
                problems.append(f"{name}: link to {href} outside the site")
            elif not target.exists():
                problems.append(f"{name}: link to missing {href}")
            elif split.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else set()
                if unquote(split.fragment) not in ids:
                    problems.append(f"{name}: link to missing anchor {href}")
    if not (out / "index.html").exists():
        problems.append("no index.html")
    if not (out / "_static" / "mathjax" / "tex-chtml.js").exists():
        problems.append("MathJax is not shipped with the site (_static/mathjax/tex-chtml.js)")
    return problems


def build(out: Path = OUT, timeout: float = 600.0) -> list[str]:
    """Stage the sources, run Sphinx (warnings are errors) into ``out``, then ``check_site``.
    Returns the check's problems; raises RuntimeError with Sphinx's output when it fails and
    TimeoutError past ``timeout`` seconds."""
    with tempfile.TemporaryDirectory(prefix="gsd-site-") as tmp:
        source = stage(Path(tmp) / "src")
        command = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q",
                   "-d", str(Path(tmp) / "doctrees"), str(source), str(out)]
        env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": tmp,
               "OMP_NUM_THREADS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                  env=env, cwd=tmp)
        except subprocess.TimeoutExpired as error:
            raise TimeoutError(f"the site's Sphinx build ran past {timeout:.0f} s") from error
        if done.returncode != 0:
            raise RuntimeError(f"sphinx-build failed ({done.returncode}):\n{done.stderr}"
                               f"{done.stdout}")
    return check_site(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where the HTML goes")
    parser.add_argument("--check-only", type=Path, default=None, metavar="DIR",
                        help="check an existing build instead of building")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for Sphinx")
    args = parser.parse_args(argv)
    try:
        problems = check_site(args.check_only) if args.check_only else build(args.out,
                                                                             args.timeout)
    except (RuntimeError, TimeoutError) as error:
        print(error, file=sys.stderr)
        return 1
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"site: {(args.check_only or args.out) / 'index.html'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
