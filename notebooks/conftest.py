"""pytest configuration for ``pytest --nbval-lax notebooks/``.

The notebooks run in the current environment's kernel (``--nbval-current-env`` is switched on
here unless a kernel is named), with the non-interactive matplotlib backend, and each cell within
``CELL_TIMEOUT`` seconds unless ``--nbval-cell-timeout`` is given: a stalled cell fails, named,
instead of holding its worker. Once a cell of a notebook has timed out, the notebook's remaining
cells are skipped (nbval would run each of them, expected to fail, up to the timeout again)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")  # inherited by the kernel: no GUI, no figure windows
# Several times the slowest cell's time on a busy CPU: only a stall reaches it.
CELL_TIMEOUT = 300
TIMEOUT_FLAG = "--nbval-cell-timeout"


def pytest_configure(config: pytest.Config) -> None:
    """The current environment's kernel unless one is named; ``CELL_TIMEOUT`` per cell unless
    ``--nbval-cell-timeout`` is on the command line."""
    option = config.option
    if getattr(option, "nbval_lax", False) or getattr(option, "nbval", False):
        if not getattr(option, "nbval_kernel_name", None):
            option.nbval_current_env = True
        args = [str(arg) for arg in config.invocation_params.args]
        if not any(arg == TIMEOUT_FLAG or arg.startswith(TIMEOUT_FLAG + "=") for arg in args):
            option.nbval_cell_timeout = CELL_TIMEOUT


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a notebook cell once an earlier cell of its notebook timed out (nbval sets the
    notebook's ``timed_out``): the kernel was interrupted mid-cell, the timed-out cell has
    failed, and the cells after it would each wait up to the timeout again."""
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:
        return
    if isinstance(item, IPyNbCell) and getattr(item.parent, "timed_out", False):
        pytest.skip("an earlier cell of this notebook timed out")
