"""Where the tests find the pinned SGLang wheels: the unpacked tree and the CPU test venv of each release.

The tree comes from images/sglang/check-patches.sh --print-tree (downloads and unpacks the pinned wheel once, cached
under ${XDG_CACHE_HOME:-~/.cache}/disaggspec/sglang-tree-<version>/); `make test` has built it before pytest runs.
The venv is images/sglang/tests/lib.sh's (sglang-venv-<version>-<sha256 of requirements, 12 hex>); it is only used
when present (building it takes minutes and gigabytes).
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

from e2e.cluster.build import cache_root

REPO = Path(__file__).resolve().parents[4]
SGLANG_TESTS = REPO / "images" / "sglang" / "tests"


@functools.cache
def sglang_tree(version: str) -> Path | None:
    """The unpacked wheel of `version` (the directory holding `sglang/`), or None when it cannot be had."""
    tree = cache_root() / f"sglang-tree-{version}"
    if (tree / ".complete").is_file() and (tree / "sglang").is_dir():
        return tree
    try:
        out = subprocess.run(
            ["bash", str(REPO / "images" / "sglang" / "check-patches.sh"), "--print-tree", version],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return None
    path = Path(out.splitlines()[-1]) if out else tree
    return path if (path / "sglang").is_dir() else None


def sglang_venv(version: str) -> Path | None:
    """The CPU test venv of `version` when it is built, else None."""
    requirements = SGLANG_TESTS / f"requirements-{version}.txt"
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:12]
    venv = cache_root() / f"sglang-venv-{version}-{digest}"
    return venv if (venv / ".complete").is_file() else None


def read(version: str, relative: str) -> str:
    tree = sglang_tree(version)
    assert tree is not None
    return (tree / relative).read_text()
