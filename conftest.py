"""Root pytest configuration: registers the shared cluster fixtures for every suite in the repository, and orders the
test modules longest first.

`make test` hands whole modules to pytest-xdist workers (`--dist loadfile`) in collection order
(`--no-loadscope-reorder`; xdist's own reorder goes by the number of tests, which put the two 5-minute outage tests
and the serving module's 14 tests behind hundreds of sub-second ones, so one worker still ran a long module after
the others had finished). Modules marked `wall_seconds(n)` go first, longest first (the classic longest-processing-
time rule); the rest keep their collection order. The marks are estimates from `--durations`, not limits.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["e2e.support.fixtures"]


def _estimate(item: pytest.Item) -> float:
    marker = item.get_closest_marker("wall_seconds")
    return float(marker.args[0]) if marker is not None and marker.args else 0.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    per_module: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        per_module[module] = max(per_module.get(module, 0.0), _estimate(item))
    # A stable sort: each module's tests stay together and in their order.
    items.sort(key=lambda item: -per_module[item.nodeid.split("::", 1)[0]])
