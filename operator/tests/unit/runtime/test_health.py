"""Health bookkeeping (grace period, readiness gates) with a fake clock, and the probes served over HTTP."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from disaggspec import metrics
from disaggspec.runtime.health import Health


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def registry(clock: Clock) -> Health:
    return Health(grace_seconds=60, clock=clock)


def test_nothing_reported_is_alive_and_ready(registry: Health) -> None:
    assert registry.status() == (True, [])
    assert registry.ready() == (True, [])


def test_an_expected_component_holds_readiness_but_not_liveness(registry: Health) -> None:
    registry.expect("webhook")
    registry.expect("cache")
    assert registry.ready() == (False, ["cache: not ready", "webhook: not ready"])
    assert registry.status() == (True, ["cache: starting", "webhook: starting"])
    registry.report("webhook", True, "serving")
    assert registry.ready() == (False, ["cache: not ready"])
    registry.report("cache", True)
    assert registry.ready() == (True, [])
    assert registry.status() == (True, ["cache: ok", "webhook: ok serving"])


def test_a_component_outside_readiness_never_gates_it(registry: Health) -> None:
    registry.expect("leader-election", gates_readiness=False)
    assert registry.ready() == (True, [])


def test_a_failure_is_tolerated_for_the_grace_period_then_fails_liveness(registry: Health, clock: Clock) -> None:
    registry.report("watch/deployments", True)
    clock.now = 10
    registry.report("watch/deployments", False, "connection refused")
    clock.now = 40
    registry.report("watch/deployments", False, "connection refused again")  # the grace period is not restarted
    alive, lines = registry.status()
    assert alive
    assert lines == ["watch/deployments: failing for 30s (grace 60s): connection refused again"]
    clock.now = 70
    assert registry.status()[0]
    clock.now = 70.5
    assert registry.status() == (False, ["watch/deployments: failing for 60s: connection refused again"])
    # Readiness, once reached, is not withdrawn by a failure: liveness handles that.
    assert registry.ready() == (True, [])


def test_a_recovery_within_the_grace_period_ends_it(registry: Health, clock: Clock) -> None:
    registry.report("webhook", False, "cannot register")
    clock.now = 50
    registry.report("webhook", True, "serving")
    clock.now = 500
    assert registry.status() == (True, ["webhook: ok serving"])
    registry.report("webhook", False, "again")
    clock.now = 559
    assert registry.status()[0]  # a new failure starts a new grace period


def test_one_failing_component_fails_liveness_and_the_others_still_report(registry: Health, clock: Clock) -> None:
    registry.report("a", True)
    registry.report("b", False, "down")
    clock.now = 61
    alive, lines = registry.status()
    assert not alive
    assert lines == ["a: ok", "b: failing for 61s: down"]


def test_forget_drops_a_component(registry: Health, clock: Clock) -> None:
    registry.report("old", False, "gone")
    registry.forget("old")
    clock.now = 1000
    assert registry.status() == (True, [])


def test_grace_seconds_is_adjustable(registry: Health, clock: Clock) -> None:
    registry.grace_seconds = 5
    registry.report("a", False)
    clock.now = 6
    assert not registry.status()[0]


# ---- over HTTP -----------------------------------------------------------------------------------------------------


@pytest.fixture
def served(registry: Health) -> Iterator[str]:
    server = metrics.serve("127.0.0.1", 0, registry)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_probes_answer_from_the_registry(served: str, registry: Health, clock: Clock) -> None:
    registry.expect("webhook")
    registry.expect("cache")
    for path in ("/healthz", "/livez", "/healthz?verbose"):
        assert get(served + path) == (200, "ok\ncache: starting\nwebhook: starting\n")
    assert get(served + "/readyz") == (503, "not ready\ncache: not ready\nwebhook: not ready\n")
    registry.report("webhook", True, "serving")
    registry.report("cache", True)
    assert get(served + "/readyz") == (200, "ok\n")
    registry.report("cache", False, "watch of deployments: 401 Unauthorized")
    clock.now = 61
    for path in ("/healthz", "/livez"):
        assert get(served + path) == (
            500,
            "unhealthy\ncache: failing for 61s: watch of deployments: 401 Unauthorized\nwebhook: ok serving\n",
        )


def test_metrics_and_unknown_paths(served: str) -> None:
    status, body = get(served + "/metrics")
    assert status == 200 and "disaggspec_leader" in body
    assert get(served + "/nope")[0] == 404
