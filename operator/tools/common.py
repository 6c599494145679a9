"""What every generator shares: the repository root, and the write-or-check step with its diff."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

MARKER_FILE: Final = "pyproject.toml"
"""A file only the repository root has; `repo_root` checks for it instead of trusting a directory depth."""


def repo_root(start: Path | None = None) -> Path:
    """The checkout this file sits in: the nearest directory at or above `start` (default: this module) holding both
    `pyproject.toml` and `operator/tools/`. Raises when there is none, say in an installed copy outside a checkout."""
    here = (start or Path(__file__)).resolve()
    for candidate in (here, *here.parents):
        if (candidate / MARKER_FILE).is_file() and (candidate / "operator" / "tools").is_dir():
            return candidate
    raise RuntimeError(f"no repository root (a directory with {MARKER_FILE} and operator/tools/) above {here}")


def diff(relative: Path, have: str, want: str) -> str:
    """A unified diff from the committed text to the generated one, labelled with the repository-relative path."""
    lines = difflib.unified_diff(
        have.splitlines(keepends=True),
        want.splitlines(keepends=True),
        f"{relative} (committed)",
        f"{relative} (generated)",
    )
    return "".join(lines)


def write_or_check(root: Path, outputs: Mapping[Path, str], *, check: bool) -> int:
    """Write each repository-relative path's text (only when it changed), or with `check` write nothing and print a
    diff per stale file. Returns how many files were stale (check) or 0."""
    stale = 0
    for relative, want in outputs.items():
        path = root / relative
        have = path.read_text() if path.exists() else ""
        if check:
            if have != want:
                sys.stderr.write(diff(relative, have, want))
                stale += 1
        elif have != want:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(want)
            sys.stdout.write(f"wrote {relative}\n")
        else:
            sys.stdout.write(f"{relative} is up to date\n")
    return stale
