"""A router Service, its pods and a fake API server serving them, for the tests of Service traffic (a
`servicetraffic.ServiceTarget` reads it like the real API server)."""

from __future__ import annotations

from typing import Any

from e2e.serving.kubeapi import ApiError

SELECTOR = {"disaggspec.io/service": "llama", "disaggspec.io/role": "router"}
SERVICE: dict[str, Any] = {
    "metadata": {"name": "llama-router", "namespace": "ns"},
    "spec": {"selector": SELECTOR, "ports": [{"name": "http", "port": 30000, "targetPort": "http", "protocol": "TCP"}]},
}


def pod(
    name: str,
    ip: str,
    *,
    ready: bool = True,
    deleting: bool = False,
    port: int = 30000,
    port_name: str = "http",
) -> dict[str, Any]:
    """A router pod of the Service with its named container port."""
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": dict(SELECTOR)}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "router", "ports": [{"name": port_name, "containerPort": port}]}]},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


class FakeApi:
    """The API server of a `ServiceTarget`: one Service and the pods a test sets; `fail` makes every call fail."""

    def __init__(self, service: dict[str, Any] | None, pods: list[dict[str, Any]]) -> None:
        self.service, self.pods = service, pods
        self.fail = False
        self.queries: list[dict[str, Any] | None] = []

    def get(self, path: str) -> dict[str, Any] | None:
        if self.fail:
            raise ApiError(0, "unreachable")
        assert path == "/api/v1/namespaces/ns/services/llama-router"
        return self.service

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None) -> Any:
        assert (method, path) == ("GET", "/api/v1/namespaces/ns/pods")
        self.queries.append(query)
        return {"items": self.pods}
