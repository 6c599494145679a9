"""Traffic through a Service as kube-proxy would send it: which pods are endpoints (pure), and the `ServiceTarget`
reading a fake API server; no cluster."""

from __future__ import annotations

import pytest

from e2e.serving.servicetraffic import (
    ServiceTarget,
    label_selector,
    pod_ready,
    ready_endpoints,
    service_port,
    target_port,
)
from e2e.serving.traffic import Endpoint, FixedTarget, Load, NotLoopback, send
from e2e.support.fakes import SELECTOR, SERVICE, FakeApi, pod


def test_pod_ready_needs_the_ready_condition_and_no_deletion() -> None:
    assert pod_ready(pod("a", "127.0.0.2"))
    assert not pod_ready(pod("a", "127.0.0.2", ready=False))
    assert not pod_ready(pod("a", "127.0.0.2", deleting=True))
    assert not pod_ready({"metadata": {"name": "a"}, "status": {}})


def test_label_selector_and_service_port() -> None:
    assert label_selector(SELECTOR) == "disaggspec.io/role=router,disaggspec.io/service=llama"
    assert service_port(SERVICE)["name"] == "http"
    assert service_port(SERVICE, 30000) is service_port(SERVICE, "http")
    with pytest.raises(LookupError, match="no port 'metrics'"):
        service_port(SERVICE, "metrics")


def test_target_port_numeric_named_and_default() -> None:
    assert target_port({"port": 80, "targetPort": 8080}, pod("a", "127.0.0.2")) == 8080
    assert target_port({"port": 80}, pod("a", "127.0.0.2")) == 80
    assert target_port({"port": 80, "targetPort": "http"}, pod("a", "127.0.0.2", port=31000)) == 31000
    assert target_port({"port": 80, "targetPort": "http"}, pod("a", "127.0.0.2", port_name="web")) is None
    assert target_port({"port": 80, "targetPort": "http", "protocol": "UDP"}, pod("a", "127.0.0.2")) is None


def test_ready_endpoints_are_ready_loopback_pods_with_the_port_in_name_order() -> None:
    pods = [
        pod("r-b", "127.0.0.3", port=31000),
        pod("r-a", "127.0.0.2"),
        pod("r-not-ready", "127.0.0.4", ready=False),
        pod("r-terminating", "127.0.0.5", deleting=True),
        pod("r-elsewhere", "10.0.0.7"),
        pod("r-no-ip", ""),
        pod("r-no-port", "127.0.0.6", port_name="web"),
    ]
    assert ready_endpoints(SERVICE, pods) == [
        Endpoint("http://127.0.0.2:30000", "r-a"),
        Endpoint("http://127.0.0.3:31000", "r-b"),
    ]
    assert ready_endpoints(SERVICE, []) == []


def test_service_target_round_robins_and_keeps_its_view_when_the_api_fails() -> None:
    api = FakeApi(SERVICE, [pod("r-a", "127.0.0.2"), pod("r-b", "127.0.0.3")])
    target = ServiceTarget(api, "ns", "llama-router")
    assert target.pick() is None  # nothing read yet
    target.refresh()
    assert api.queries == [{"labelSelector": label_selector(SELECTOR)}]
    assert [e.name for e in (target.pick(), target.pick(), target.pick())] == ["r-a", "r-b", "r-a"]  # type: ignore[union-attr]

    api.fail = True
    target.refresh()
    assert target.errors == 1 and "unreachable" in str(target)
    assert len(target.endpoints) == 2

    api.fail = False
    api.pods = [pod("r-a", "127.0.0.2", deleting=True), pod("r-b", "127.0.0.3")]
    target.refresh()
    assert {target.pick().name for _ in range(4)} == {"r-b"}  # type: ignore[union-attr]

    api.service = None  # the Service is gone: no endpoints
    target.refresh()
    assert target.pick() is None


def test_a_service_without_selector_has_no_endpoints() -> None:
    api = FakeApi({**SERVICE, "spec": {**SERVICE["spec"], "selector": {}}}, [pod("r-a", "127.0.0.2")])
    target = ServiceTarget(api, "ns", "llama-router")
    target.refresh()
    assert target.pick() is None and api.queries == []


def test_non_loopback_targets_are_refused() -> None:
    with pytest.raises(NotLoopback):
        FixedTarget("http://10.0.0.1:30000")
    with pytest.raises(NotLoopback):
        Load(url="http://example.com:30000", model="m")
    assert FixedTarget("http://127.0.0.9:30000").pick() == Endpoint("http://127.0.0.9:30000", "127.0.0.9")
    Load(url="", model="m")  # no fixed URL: a target picks each request's address


class _Elsewhere:
    """A target that picks an address off loopback (a bug the sender must refuse, not follow)."""

    refresh_interval: float | None = None

    def refresh(self) -> None:
        pass

    def pick(self) -> Endpoint | None:
        return Endpoint("http://10.0.0.1:30000", "elsewhere")


def test_a_target_picking_a_non_loopback_address_fails_the_load() -> None:
    with pytest.raises(NotLoopback):
        send(Load(url="", model="m", requests=1, duration=5), _Elsewhere())
    with pytest.raises(ValueError, match="no target"):
        send(Load(url="", model="m"))
