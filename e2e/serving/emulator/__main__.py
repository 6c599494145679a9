"""`python -m e2e.serving.emulator`: see `e2e.serving.emulator.cli`."""

from e2e.serving.emulator.cli import main

raise SystemExit(main())
