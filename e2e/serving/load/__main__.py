"""`python -m e2e.serving.load`: see `e2e.serving.load.cli`."""

from e2e.serving.load.cli import main

raise SystemExit(main())
