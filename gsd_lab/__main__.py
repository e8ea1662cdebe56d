"""``python -m gsd_lab``: see ``gsd_lab.cli``.

A ``generate`` ends without the interpreter's teardown: once its report is printed (and its
image written and closed) nothing is left to release, and unloading torch's modules is a
measurable share of the call (``benchmarks/cli_generate.py``). The
streams are flushed and the atexit handlers run first; the exit status is main()'s. Every other
command exits normally.
"""

import atexit
import os
import sys

from .cli import main

code = main()
if sys.argv[1:2] == ["generate"]:
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()  # what a normal exit runs first (private, but no public twin)
    os._exit(code)
sys.exit(code)
