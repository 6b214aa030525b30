"""`python -m leakwatch.cli`: the same as `python -m leakwatch` and the `leakwatch` script."""

from . import main

raise SystemExit(main())
