"""``python -m aiokprod``: the same command line as the ``aiokprod`` console script."""

from aiokprod.cli import main

raise SystemExit(main())
