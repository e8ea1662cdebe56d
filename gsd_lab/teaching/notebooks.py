"""Execute the notebooks top to bottom with papermill: ``python -m gsd_lab notebooks`` (the
rules and the notebooks' conventions: docs/notebook-runner.md).

- ``notebook_paths``, ``plan``: the selected ``notebooks/NN_*.ipynb`` and each one's
  parameters (its cell tagged ``parameters``; ``-p name value`` overrides the notebooks that
  declare the name; ``SIZES``: ``--sizes tiny``);
- ``run_notebooks``: every selected notebook executed into a scratch folder before any is
  written (writing into the checkout refuses a dirty tree), each cell within ``CELL_TIMEOUT``,
  the written notebooks normalised (kernelspec ``python3``, no papermill or timing metadata);
- ``main``: the command (``gsd_lab.cli.notebooks``).
"""

from __future__ import annotations

import ast
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = REPO / "notebooks"
# The kernelspec and language_info as JupyterLab writes them for ipykernel's python3 kernel, so
# that opening and saving a committed notebook without edits changes nothing.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
    "version": ".".join(str(v) for v in sys.version_info[:3]),  # the kernel's Python
}
# Per-cell metadata kept in written notebooks (papermill's and nbclient's timing records and
# JupyterLab's view state are dropped): tags, and a figure cell's alt text for the site
# (``mystnb: image: alt``, read by MyST-NB).
KEPT_CELL_METADATA = ("tags", "mystnb")
# Seconds one cell may run before its notebook fails with the cell named: a stalled kernel must
# cost minutes, not hours. The notebooks' own sizes decode real images in one cell (minutes on
# a GPU); tiny sizes take seconds per cell, and the tests run them on shared CPUs.
CELL_TIMEOUT = {None: 3600, "tiny": 180}

# Named parameter sets beside each notebook's own defaults (its parameters cell). Only the names
# a notebook declares are injected into it.
#   tiny: seconds per notebook on a CPU (meaningless sizes: the tests and gpu_reproduce.sh's
#         GSD_SIZES=tiny check that everything runs).
SIZES: dict[str, dict[str, Any]] = {
    "tiny": {
        "threads": 1,
        "num_pairs": 8,
        "num_model_images": 1,
        "seeds": [0],
        "max_prompts": 1,
        "table1_groups": [3],
        "table1_amplify": [2.0],
        "table2_group": 3,
        "pareto_groups": [3],
        "pareto_amplify": [2.0],
        # One configuration per curve beyond Table 1's: LANTERN at one budget, rank bins and
        # MC-GSD (maximal) at one G each (the defaults add 9 more images to notebook 04).
        "table1_lantern": [0.4],
        "pareto_lantern": [0.4],
        "distortion_rank_groups": [3],
        "pareto_coupled_groups": [50],
        "num_samples": 20_000,
        "distortion_pairs": 20,
        "decoder_check_samples": 300,
    },
}


@dataclass
class NotebookRun:
    """One notebook of a run: its source, the parameters injected, and how it ended."""

    source: Path
    parameters: dict[str, Any]
    seconds: float = 0.0
    error: str | None = None
    notebook: Any = field(default=None, repr=False)  # nbformat.NotebookNode once executed


def notebook_paths(only: list[str] | None = None, folder: Path = NOTEBOOK_DIR) -> list[Path]:
    """The notebooks of ``folder`` (sorted), or those whose name starts with one of ``only``.
    Raises ValueError for a prefix that matches none."""
    paths = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        raise ValueError(f"no notebooks (NN_name.ipynb) in {folder}")
    if not only:
        return paths
    missing = [prefix for prefix in only if not any(p.stem.startswith(prefix) for p in paths)]
    if missing:
        raise ValueError(f"no notebook starts with {missing}; notebooks: {[p.stem for p in paths]}")
    return [p for p in paths if any(p.stem.startswith(prefix) for prefix in only)]


def declared_parameters(path: Path) -> dict[str, str]:
    """name -> default (source text) of the notebook's ``parameters`` cell (papermill's own
    inspection). Raises ValueError when the notebook has no cell tagged ``parameters``."""
    import papermill

    declared = papermill.inspect_notebook(str(path))
    if not declared:
        raise ValueError(f"{path.name} has no cell tagged 'parameters' (or it assigns nothing)")
    return {name: info["default"] for name, info in declared.items()}


def parse_value(text: str) -> Any:
    """A ``-p`` value: a Python literal (``3``, ``[0, 1]``, ``None``, ``'x'``) or else the text
    itself as a string (``tiny-random``, a path). ``-r`` keeps the text as a string always."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def plan(
    paths: list[Path], parameters: dict[str, Any], sizes: str | None = None
) -> list[NotebookRun]:
    """What each notebook gets: the named ``sizes`` preset and then ``parameters``, each
    restricted to the names the notebook declares. Raises ValueError for an explicit parameter
    that no selected notebook declares (a typo would otherwise be ignored)."""
    if sizes is not None and sizes not in SIZES:
        raise ValueError(f"unknown sizes {sizes!r}; choose from {sorted(SIZES)}")
    preset = SIZES[sizes] if sizes else {}
    runs, used = [], set()
    for path in paths:
        names = declared_parameters(path)
        chosen = {k: v for k, v in {**preset, **parameters}.items() if k in names}
        used |= chosen.keys()
        runs.append(NotebookRun(path, chosen))
    unknown = sorted(set(parameters) - used)
    if unknown:
        raise ValueError(f"parameter(s) {unknown} declared by none of {[p.stem for p in paths]}")
    return runs


def normalise(nb: Any) -> Any:
    """Committed form: ``KERNELSPEC`` and ``LANGUAGE_INFO`` (as JupyterLab saves them; the
    executing kernel's language_info where it reported one), no papermill / nbclient /
    JupyterLab metadata, no saved widget state (a widget needs a live kernel: the cell's stored
    text says to run it)."""
    reported = dict(nb.metadata.get("language_info") or {})
    info = reported if set(reported) == set(LANGUAGE_INFO) else dict(LANGUAGE_INFO)
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": info}
    for cell in nb.cells:
        kept = {k: v for k, v in cell.metadata.items() if k in KEPT_CELL_METADATA and v}
        cell.metadata = type(cell.metadata)(kept)
    return nb


def _kernel_environment() -> None:
    """The kernel (a child process) inherits this: this checkout first on the path, no GUI, no
    tqdm progress bars (their timings would make every stored output differ)."""
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *([path] if path else [])])
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ["TQDM_DISABLE"] = "1"


def cell_label(cell: Any, source: Any, index: int | None = None) -> str:
    """``cell N (id ..., "first line")``: N counts the cells of the committed notebook
    ``source`` from 1, as JupyterLab shows them (papermill's injected parameters cell has none).
    Without cell ids (nbformat < 4.5) N is ``index``, the cell's 0-based position in the executed
    notebook, counted from 1 (papermill's injected cell included)."""
    first = next((line for line in cell.source.splitlines() if line.strip()), "")
    if cell.get("id") is None:
        number = "cell" if index is None else f"cell {index + 1} of the executed notebook"
        return f'{number} ("{first[:60]}")'
    ids = [c.get("id") for c in source.cells]
    number = f"cell {ids.index(cell.get('id')) + 1}" if cell.get("id") in ids else "injected cell"
    return f'{number} (id {cell.get("id")}, "{first[:60]}")'


def execute(run: NotebookRun, scratch: Path, *, timeout: int | None = None) -> NotebookRun:
    """Execute ``run.source`` with papermill into ``scratch``, each cell within ``timeout``
    seconds (default ``CELL_TIMEOUT[None]``); fills ``notebook``, ``seconds`` and ``error``: the
    failing cell's exception (the notebook then holds its traceback), or the notebook and the
    cell that did not finish in time or whose kernel died."""
    import nbformat
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    _kernel_environment()
    timeout = timeout or CELL_TIMEOUT[None]
    target = scratch / run.source.name
    source = nbformat.read(run.source, as_version=4)
    current: list[Any] = []  # the cell being executed and its index

    def started(cell: Any, cell_index: int) -> None:
        current[:] = [cell, cell_index]

    start = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(run.source),
            str(target),
            parameters=run.parameters or None,
            kernel_name="python3",
            language="python",
            cwd=str(run.source.parent),
            progress_bar=False,
            execution_timeout=timeout,
            stderr_file=sys.stderr,
            on_cell_start=started,  # nbclient's hook
        )  # progress lines and bars as they come (a log shows them)
    except papermill.PapermillExecutionError as error:
        run.error = f"{error.ename}: {error.evalue}"
    except (CellTimeoutError, DeadKernelError) as error:
        where = cell_label(current[0], source, current[1]) if current else "before the first cell"
        timed_out = isinstance(error, CellTimeoutError)
        what = f"not finished within {timeout} s" if timed_out else "the kernel died"
        run.error = f"{type(error).__name__}: {run.source.name}, {where}: {what}"
    run.seconds = time.perf_counter() - start
    run.notebook = normalise(nbformat.read(target if target.exists() else run.source, 4))
    return run


def run_notebooks(
    out: Path = NOTEBOOK_DIR,
    *,
    only: list[str] | None = None,
    parameters: dict[str, Any] | None = None,
    sizes: str | None = None,
    allow_dirty: bool = False,
    timeout: int | None = None,
    folder: Path = NOTEBOOK_DIR,
    log=print,
) -> list[NotebookRun]:
    """Execute the selected notebooks, then write them into ``out``.

    Into the checkout, a dirty tree is refused (``DirtyTreeError``) unless ``allow_dirty``. In
    place (``out`` is ``folder``) a failed notebook writes nothing; elsewhere every notebook is
    written, failed ones with their traceback. Each cell has ``timeout`` seconds (default
    ``CELL_TIMEOUT`` of ``sizes``). Every run is returned, ``error`` set on the failed ones."""
    from ..io.provenance import inside_repository, require_clean_tree

    require_clean_tree("notebook outputs", allow_dirty=allow_dirty or not inside_repository(out))
    runs = plan(notebook_paths(only, folder), parameters or {}, sizes)
    with tempfile.TemporaryDirectory(prefix="gsd-notebooks-") as scratch:
        for run in runs:
            log(f"{run.source.name}: parameters {run.parameters}")
            execute(run, Path(scratch), timeout=timeout or CELL_TIMEOUT[sizes])
            log(
                f"{run.source.name}: {'FAILED ' + run.error if run.error else 'executed'} "
                f"in {run.seconds:.0f} s"
            )
    failed = [run for run in runs if run.error]
    if failed and out.resolve() == folder.resolve():
        log(f"nothing written into {out}: {len(failed)} notebook(s) failed")
        return runs
    import nbformat

    out.mkdir(parents=True, exist_ok=True)
    for run in runs:  # only now: a notebook written earlier would dirty the tree for the next one
        nbformat.write(run.notebook, out / run.source.name)
    return runs


def main(args: Any) -> int:
    """The ``notebooks`` command (``gsd_lab.cli``); exit 0 when every notebook ran."""
    from ..io.provenance import DirtyTreeError

    parameters = {name: parse_value(value) for name, value in args.parameter or []}
    parameters.update({name: value for name, value in args.raw_parameter or []})
    fail = args.command_parser.error
    try:
        if args.dry_run:
            for run in plan(notebook_paths(args.only), parameters, args.sizes):
                print(f"{run.source.name}: {run.parameters}")
            return 0
        runs = run_notebooks(
            args.out,
            only=args.only,
            parameters=parameters,
            sizes=args.sizes,
            allow_dirty=args.allow_dirty,
            timeout=args.timeout,
        )
    except (ValueError, DirtyTreeError) as error:
        fail(str(error))
    failed = [run.source.name for run in runs if run.error]
    if failed:
        print(f"notebooks failed: {failed}", file=sys.stderr)
        return 1
    print(f"{len(runs)} notebook(s) written to {args.out}")
    return 0
