"""pytest configuration for ``pytest --nbval-lax notebooks/``.

The notebooks run in the current environment's kernel (``--nbval-current-env`` is switched on
here unless a kernel is named), with the non-interactive matplotlib backend."""

from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")  # inherited by the kernel: no GUI, no figure windows


def pytest_configure(config):
    option = config.option
    if getattr(option, "nbval_lax", False) or getattr(option, "nbval", False):
        if not getattr(option, "nbval_kernel_name", None):
            option.nbval_current_env = True
