"""``python -m gsd_lab.cli``: the commands of ``python -m gsd_lab`` (``gsd_lab.cli.main``)."""

from . import main

raise SystemExit(main())
