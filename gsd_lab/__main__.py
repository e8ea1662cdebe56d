"""``python -m gsd_lab``: see ``gsd_lab.cli``."""

import sys

from .cli import main

sys.exit(main())
