"""Fakes shared by the e2e suites that run without a cluster, in one place.

`serve_http` serves a test's request handler from a thread on a free loopback port for a block (the probes, the
continuous traffic and the cluster-DNS stand-in of the emulator each answer with their own handler). `SERVICE`, `pod`
and `FakeApi` are a router Service, its pods and the API server that serves them, for the tests of Service traffic
(a `servicetraffic.ServiceTarget` reads `FakeApi` like the real API server).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from e2e.serving.kubeapi import ApiError


@contextmanager
def serve_http(handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1") -> Iterator[int]:
    """`handler` served on `host` at a free port by a background thread for the block; yields the port. Requests still
    running when the block ends are not waited for."""
    server = ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


# ---- a router Service behind a fake API server ---------------------------------------------------------------------


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
    """The API server of a `ServiceTarget`: one Service and the pods a test sets; `fail` makes reading the Service
    fail as an unreachable server does (`ApiError`), and `queries` records the query of every pod listing."""

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
