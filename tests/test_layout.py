"""The packages' layout: no import cycle among gsd_lab's subpackages, no import of the optional
training package (gsd_train) from gsd_core or gsd_lab, every function of gsd_core, gsd_lab and
gsd_train short (at most ``MAX_LINES`` lines) and simple (cyclomatic complexity at most
``MAX_COMPLEXITY``, radon's measure), module docstrings that are maps (at most
``MAX_DOCSTRING_LINES`` lines; explanations live in docs/), and no issue numbers or timings in
the packages' code. Each check has a negative control on a tree it must reject."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from textwrap import indent

from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gsd_core", "gsd_lab", "gsd_train")
MAX_LINES = 100
MAX_COMPLEXITY = 20
MAX_DOCSTRING_LINES = 20

# Named exceptions, each with its reason.
LONG_OR_COMPLEX: dict[str, str] = {}

# Module docstrings still longer than a map: each is to move its explanation to a docs/ page
# (as gsd_lab/workers.py did: docs/worker-processes.md). The check fails for a module not
# listed here, and for a listed one that is short now (take it off the list).
LONG_DOCSTRINGS_PENDING: set[str] = set()


def sources(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Path]:
    return sorted(p for package in packages for p in (root / package).rglob("*.py"))


def _name(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


# -- import cycles -------------------------------------------------------------------------


def _imported_modules(path: Path, root: Path) -> list[tuple[str, ...]]:
    """Every module ``path`` imports (absolute or relative, at any depth: a function-level
    import is an import too), as dotted parts."""
    package = path.relative_to(root).with_suffix("").parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [tuple(alias.name.split(".")) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - (node.level - 1)] if node.level else ()
            if node.module:
                found.append(base + tuple(node.module.split(".")))
            else:
                found += [base + (alias.name,) for alias in node.names]
    return found


def subpackage_graph(root: Path = ROOT, package: str = "gsd_lab") -> dict[str, set[str]]:
    """Which of ``package``'s subpackages and top-level modules each one imports (the package's
    own ``__init__`` and ``__main__`` left out: they load the public surface and the CLI)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root / package).with_suffix("").parts
        if parts in (("__init__",), ("__main__",)):
            continue
        node = parts[0]
        graph.setdefault(node, set())
        for module in _imported_modules(path, root):
            if len(module) > 1 and module[0] == package and module[1] != node:
                graph[node].add(module[1])
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_import_cycle_among_gsd_lab_subpackages():
    graph = subpackage_graph()
    assert {"decode", "engine", "experiments", "io", "cli"} <= set(graph)  # the scan sees them
    assert cycles(graph) == []


def test_a_cycle_through_a_relative_import_is_found(tmp_path):
    for name, text in {
        "lab/__init__.py": "",
        "lab/a/__init__.py": "",
        "lab/a/x.py": "def f():\n    from ..b import y\n",
        "lab/b/__init__.py": "",
        "lab/b/y.py": "from lab.a import x\n",
        "lab/c.py": "from .a import x\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = subpackage_graph(tmp_path, "lab")
    assert graph == {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert cycles(graph) == [["a", "b"]]


def imports_of(root: Path, package: str, forbidden: str) -> list[str]:
    """``path: module`` of every import of ``forbidden`` (or a module in it) by ``package``'s
    files, at any depth."""
    return [
        f"{_name(path, root)}: {'.'.join(module)}"
        for path in sorted((root / package).rglob("*.py"))
        for module in _imported_modules(path, root)
        if module[0] == forbidden
    ]


def test_the_runtime_packages_never_import_the_training_package():
    assert [m for p in ("gsd_core", "gsd_lab") for m in imports_of(ROOT, p, "gsd_train")] == []
    assert imports_of(ROOT, "gsd_train", "gsd_lab")  # the scan sees imports across packages


def test_an_import_of_the_training_package_is_found(tmp_path):
    for name, text in {
        "lab/__init__.py": "",
        "lab/a.py": "def f():\n    from train.standin import ar\n",
        "lab/b.py": "import train\nimport trainer\n",
        "train/__init__.py": "",
        "train/c.py": "from lab.a import f\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert imports_of(tmp_path, "lab", "train") == ["lab/a.py: train.standin", "lab/b.py: train"]


# -- function length and complexity --------------------------------------------------------


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, node) of every function, methods and nested functions included."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + child.name, child
            yield from _functions(child, prefix + child.name + ".")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, prefix + child.name + ".")


def _blocks(blocks: list, prefix: str = ""):
    """(qualified name, block) of every function radon measured: top-level functions, methods,
    closures (``Function.closures``) and methods of nested classes (``Class.inner_classes``), at
    any depth."""
    for block in blocks:
        if type(block).__name__ == "Function":
            yield prefix + block.name, block
            yield from _blocks(block.closures, prefix + block.name + ".")
        else:
            yield from _blocks(block.methods, prefix + block.name + ".")
            yield from _blocks(block.inner_classes, prefix + block.name + ".")


def offenders(paths: list[Path], root: Path) -> dict[str, str]:
    """``path::name`` of every function over ``MAX_LINES`` lines (its ``def`` to its last line)
    or over ``MAX_COMPLEXITY`` (radon's ``cc_visit``), with what it measures."""
    found: dict[str, str] = {}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        for name, node in _functions(ast.parse(text)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LINES:
                found[f"{_name(path, root)}::{name}"] = f"{lines} lines"
        for name, block in _blocks(cc_visit(text)):
            if block.complexity > MAX_COMPLEXITY:
                key = f"{_name(path, root)}::{name}"
                measured = [found.get(key), f"complexity {block.complexity}"]
                found[key] = ", ".join(filter(None, measured))
    return found


def test_functions_are_short_and_simple():
    found = offenders(sources(), ROOT)
    assert {k: v for k, v in found.items() if k not in LONG_OR_COMPLEX} == {}, (
        "split these into named helpers (or name the exception, with its reason)"
    )
    assert sorted(set(LONG_OR_COMPLEX) - set(found)) == []  # a fixed exception leaves the list


def test_a_long_or_branchy_function_is_found(tmp_path):
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(MAX_COMPLEXITY))
    long_body = "".join(f"    y = {i}\n" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(
        f"def branchy(x):\n{branches}    return -1\n\n\ndef long():\n{long_body}    return y\n\n\n"
        "class C:\n    def fine(self):\n        return 1\n\n"
        f"    class Inner:\n        def branchy(self, x):\n{indent(branches, '    ' * 2)}"
        "            return -1\n\n\n"
        f"def outer():\n    def branchy(x):\n{indent(branches, '    ')}        return -1\n\n"
        "    return branchy\n"
    )
    assert offenders([tmp_path / "m.py"], tmp_path) == {
        "m.py::branchy": f"complexity {MAX_COMPLEXITY + 1}",
        "m.py::long": f"{MAX_LINES + 2} lines",
        "m.py::C.Inner.branchy": f"complexity {MAX_COMPLEXITY + 1}",
        "m.py::outer.branchy": f"complexity {MAX_COMPLEXITY + 1}",
    }


# -- docstrings and comments ---------------------------------------------------------------


def docstring_lines(path: Path) -> int:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    return 0 if doc is None else doc.count("\n") + 1


def test_module_docstrings_are_maps():
    long = {_name(p, ROOT) for p in sources() if docstring_lines(p) > MAX_DOCSTRING_LINES}
    assert sorted(long - LONG_DOCSTRINGS_PENDING) == [], (
        f"a module docstring is a map of at most {MAX_DOCSTRING_LINES} lines: move the "
        "explanation to a page of docs/ and link it"
    )
    assert sorted(LONG_DOCSTRINGS_PENDING - long) == []  # shortened: take it off the list


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the docstrings and comments of ``path``."""
    import io
    import tokenize

    out = []
    for token in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if token.type == tokenize.COMMENT:
            out.append((token.start[0], token.string))
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((getattr(node, "lineno", 1), doc))
    return out


# This project's own issue numbers: "issue 27", "issues #3", a bare "#12". Another project's
# issue is a citation and allowed: qualified by its name ("owner/repo#N", "repo#N") or a URL.
ISSUE = re.compile(r"\bissues?\s*#?\d+|(?<![\w/.#-])#\d+\b", re.I)
# A measured duration: "0.2 s", "50 ms", "95-230 s", "3 minutes" (not "2 s.e.", "O(n) ms").
TIMING = re.compile(r"\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?\s?(?:ms|s|seconds|minutes|min|hours)\b"
                    r"(?!\.\w)")
TIMING_ALLOWED = {  # the format's own examples, not a measurement
    "gsd_lab/io/progress.py": "duration's docstring shows the format",
}


def history_in(paths: list[Path], root: Path, pattern: re.Pattern) -> list[str]:
    return [
        f"{_name(path, root)}:{line}: {match.group(0)}"
        for path in paths
        for line, text in _prose(path)
        for match in pattern.finditer(text)
    ]


def test_no_issue_numbers_in_the_packages():
    """No issue number of this project (history); citing another project's issue, qualified
    by its name (``huggingface/transformers#45488``, ``transformers#45488``) or as a full URL,
    is allowed."""
    assert history_in(sources(), ROOT, ISSUE) == []


def test_no_timings_in_the_packages():
    paths = [p for p in sources() if _name(p, ROOT) not in TIMING_ALLOWED]
    assert history_in(paths, ROOT, TIMING) == [], "timings belong to docs/ (with their run)"


def test_history_and_timings_are_found(tmp_path):
    (tmp_path / "m.py").write_text(
        '"""As issue 27 asked."""\n\n# costs about 0.2 s a row; 95-230 s in all\nx = "issue 3"\n'
        "# cf. huggingface/transformers#45488, transformers#48206, #12 and\n"
        "# https://github.com/huggingface/transformers/issues/32867\n"
    )
    paths = [tmp_path / "m.py"]
    assert history_in(paths, tmp_path, ISSUE) == ["m.py:5: #12", "m.py:1: issue 27"]
    assert history_in(paths, tmp_path, TIMING) == ["m.py:3: 0.2 s", "m.py:3: 95-230 s"]


# -- paths named in prose ------------------------------------------------------------------

# A repository path of a module or a test: not inside a longer path (``benchmarks/tests/x.py``).
MENTIONED_PATH = re.compile(r"(?<![\w/.-])((?:tests|gsd_lab|gsd_core|gsd_train)/[\w/.-]*\.py)\b")


def _docstrings(path: Path) -> list[str]:
    nodes = ast.walk(ast.parse(path.read_text(encoding="utf-8")))
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return [doc for n in nodes if isinstance(n, kinds) and (doc := ast.get_docstring(n))]


def prose_texts(root: Path = ROOT) -> list[tuple[str, str]]:
    """(file, text) of the hand-written prose: README.md, docs/**/*.md, proofs/*.md, the
    notebooks' markdown cells and the packages' docstrings (figures/, results.json and the
    notebooks' stored outputs are regenerated, not read)."""
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    pages += sorted((root / "proofs").glob("*.md"))
    out = [(_name(p, root), p.read_text(encoding="utf-8")) for p in pages if p.exists()]
    for notebook in sorted((root / "notebooks").glob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        out += [(_name(notebook, root), "".join(c["source"])) for c in cells
                if c["cell_type"] == "markdown"]
    for path in sources(root):
        out += [(_name(path, root), doc) for doc in _docstrings(path)]
    return out


def missing_paths(root: Path = ROOT) -> list[str]:
    return [
        f"{where}: {match[1]}"
        for where, text in prose_texts(root)
        for match in MENTIONED_PATH.finditer(text)
        if not (root / match[1]).exists()
    ]


def test_paths_named_in_prose_exist():
    assert len([m for _, t in prose_texts() for m in MENTIONED_PATH.finditer(t)]) > 100
    assert missing_paths() == [], "a moved or renamed file: name its path now"


def test_a_stale_path_in_prose_is_found(tmp_path):
    for name, text in {
        "gsd_core/__init__.py": '"""See gsd_core/gone.py and gsd_core/__init__.py."""\n',
        "gsd_lab/__init__.py": "",
        "tests/test_a.py": "",
        "README.md": "`tests/test_a.py::test_x`, `tests/lab/old.py`, benchmarks/tests/x.py\n",
        "docs/sub/page.md": "moved: gsd_lab/io/prose.py\n",
        "proofs/01.md": "gsd_lab/cli.py\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    cells = [{"cell_type": "markdown", "source": ["see tests/", "gone.py"]},
             {"cell_type": "code", "source": ["# tests/code.py"], "outputs": []}]
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "n.ipynb").write_text(json.dumps({"cells": cells}))
    assert missing_paths(tmp_path) == [
        "README.md: tests/lab/old.py",
        "docs/sub/page.md: gsd_lab/io/prose.py",
        "proofs/01.md: gsd_lab/cli.py",
        "notebooks/n.ipynb: tests/gone.py",
        "gsd_core/__init__.py: gsd_core/gone.py",
    ]
