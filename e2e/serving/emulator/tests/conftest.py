"""Fixtures shared by the emulator suites: a `Stack` of emulator and router processes, stopped after each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.serving.emulator.tests.harness import Stack


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """Processes started in a test; their logs are printed when the test fails."""
    with Stack(tmp_path / "procs") as procs:
        try:
            yield procs
        except BaseException:
            print(procs.logs())
            raise
