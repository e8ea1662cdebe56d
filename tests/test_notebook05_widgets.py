"""Notebook 05's explorer cell (``course.tradeoff_explorer()``, ipywidgets sliders) executed
headless by nbclient, the executor under papermill (``python -m gsd_lab notebooks``).

The stall this guards against: nbclient mirrors an Output widget by sending the kernel comm
messages on the shell channel while it waits on that channel for the cell's reply, which can leave
the reply undelivered and the execution waiting with the kernel idle
(https://github.com/jupyter/nbclient/issues/312). The explorer draws into an Image widget instead,
so the executor sends the kernel nothing beyond the cells' execute requests (and kernel_info):
checked on every message, deterministically (an Output widget sends on every execution), and
the execution runs under a timeout.

Only the cells the explorer needs run (the parameters, the imports, then the explorer cell twice
in the same kernel, the second time with the first's widgets alive): one kernel start, since the
message check needs no repeats to fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipywidgets")

from gsd_lab.teaching.course import SLIDERS_TEXT  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "05_speculative_decoding_tutorial.ipynb"
EXPLORER = "explorer = course.tradeoff_explorer()"
RUNS = 1  # kernels
EXPLORER_CELLS = 2  # explorer executions per kernel
CELL_TIMEOUT = 60  # seconds; the explorer cell draws three small figures
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
# What nbclient itself sends on the shell channel: the cells, and kernel_info around them.
OWN_REQUESTS = {"execute_request", "kernel_info_request"}


def explorer_notebook(copies: int) -> Any:
    """Notebook 05's parameters cell and import cell, then its explorer cell ``copies`` times."""
    source = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in source.cells if cell.cell_type == "code"]
    parameters = next(c for c in code if "parameters" in c.metadata.get("tags", []))
    imports = code[code.index(parameters) + 1]
    (explorer,) = [c for c in code if c.source.startswith(EXPLORER)]
    assert "from gsd_lab.teaching import course" in imports.source
    repeated = [nbformat.v4.new_code_cell(explorer.source) for _ in range(copies)]
    cells = [parameters, imports, *repeated]
    metadata = {k: v for k, v in source.metadata.items() if k != "widgets"}  # saved by this run
    return nbformat.v4.new_notebook(cells=cells, metadata=metadata)


def execute_recording(nb: Any) -> tuple[Any, list[str]]:
    """Execute ``nb`` with nbclient, each cell within ``CELL_TIMEOUT``; returns the executed
    notebook and the type of every message the executor sent on the shell channel once the
    kernel was ready. A stalled cell fails the test naming the execution."""
    sent: list[str] = []

    def record(notebook: Any) -> None:
        channel = client.kc.shell_channel
        send = channel.send

        def recording_send(msg: dict) -> None:
            sent.append(msg["header"]["msg_type"])
            send(msg)

        channel.send = recording_send

    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
        on_notebook_start=record,
    )
    try:
        client.execute()
    except nbclient.exceptions.CellTimeoutError as error:
        done = sum(1 for m in sent if m == "execute_request") - 1
        pytest.fail(f"cell {done + 1} of {len(nb.cells)} stalled: no reply within "
                    f"{CELL_TIMEOUT} s ({str(error).splitlines()[0]})")
    return nb, sent


@pytest.mark.timeout(RUNS * (EXPLORER_CELLS + 2) * CELL_TIMEOUT)
def test_explorer_cell_runs_headless_without_messages_back_to_the_kernel(monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")  # the kernel inherits it
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    for _ in range(RUNS):
        nb, sent = execute_recording(explorer_notebook(EXPLORER_CELLS))
        assert set(sent) <= OWN_REQUESTS, f"the executor sent the kernel {sorted(set(sent))}"
        assert sent.count("execute_request") == len(nb.cells)
        for cell in nb.cells[2:]:
            images = [o for o in cell.outputs if o.output_type == "display_data"
                      and "image/png" in o.get("data", {})]
            views = [o for o in cell.outputs if WIDGET_VIEW in o.get("data", {})]
            assert len(images) == 2, cell.outputs  # the static figures
            assert len(views) == 1 and views[0].output_type == "display_data", cell.outputs
            assert views[0].data["text/plain"] == SLIDERS_TEXT  # what shows before a kernel runs
        state = nb.metadata["widgets"][WIDGET_STATE]["state"]
        models = [model["model_name"] for model in state.values()]
        assert "OutputModel" not in models, models
        assert any(model["model_name"] == "ImageModel" and model.get("buffers")
                   for model in state.values()), models  # the figure, saved with the notebook
