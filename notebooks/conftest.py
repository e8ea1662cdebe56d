"""pytest configuration for ``pytest --nbval-lax notebooks/``.

The notebooks run in the current environment's kernel (``--nbval-current-env`` is switched on
here unless a kernel is named), with the non-interactive matplotlib backend, and each cell within
``CELL_TIMEOUT`` seconds unless ``--nbval-cell-timeout`` says otherwise: a stalled cell fails,
named, instead of holding its worker until nbval's own default."""

from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")  # inherited by the kernel: no GUI, no figure windows
# Several times the slowest cell's time on a busy CPU: only a stall reaches it.
CELL_TIMEOUT = 300
NBVAL_DEFAULT_CELL_TIMEOUT = 2000


def pytest_configure(config):
    option = config.option
    if getattr(option, "nbval_lax", False) or getattr(option, "nbval", False):
        if not getattr(option, "nbval_kernel_name", None):
            option.nbval_current_env = True
        if getattr(option, "nbval_cell_timeout", None) == NBVAL_DEFAULT_CELL_TIMEOUT:
            option.nbval_cell_timeout = CELL_TIMEOUT
