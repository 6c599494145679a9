"""The operator's Prometheus metrics and the HTTP server that exposes them with a liveness endpoint.

Metric names carry the `disaggspec_` prefix. Everything lives in one private registry so tests and the benchmark can
read values without the process-wide default registry's collectors.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILE_SECONDS = Histogram(
    "disaggspec_reconcile_duration_seconds",
    "Time of one reconcile pass of a DisaggSpecService.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "disaggspec_reconcile_errors_total",
    "Reconcile passes that failed, by reason.",
    ["reason"],
    registry=REGISTRY,
)
REJECTIONS = Counter(
    "disaggspec_rule_rejections_total",
    "Specs rejected by a validation rule, by rule id and where (admission or reconcile).",
    ["rule", "source"],
    registry=REGISTRY,
)
CHILD_WRITES = Counter(
    "disaggspec_child_writes_total",
    "Writes to child objects, by operation (apply or prune).",
    ["operation"],
    registry=REGISTRY,
)
API_WRITES = Counter(
    "disaggspec_api_writes_total",
    "Write requests the operator sent to the API server, by HTTP method (children, status, prunes).",
    ["method"],
    registry=REGISTRY,
)
SERVICES_BY_CONDITION = Gauge(
    "disaggspec_services",
    "DisaggSpecServices by condition type and status, as last reconciled.",
    ["condition", "status"],
    registry=REGISTRY,
)


def count_rejection(rules: Iterable[str], where: Literal["admission", "reconcile"]) -> None:
    """Count one rejected spec in REJECTIONS: once per failed rule (a `Rejection`'s `rules`), labelled by `where`."""
    for rule in rules:
        REJECTIONS.labels(rule, where).inc()


class ConditionTally:
    """Keeps SERVICES_BY_CONDITION equal to the latest conditions of every known service."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, dict[str, str]] = {}

    def record(self, key: str, conditions: dict[str, str] | None) -> None:
        with self._lock:
            if conditions is None:
                self._latest.pop(key, None)
            else:
                self._latest[key] = dict(conditions)
            counts: dict[tuple[str, str], int] = {}
            for per_service in self._latest.values():
                for type_, status in per_service.items():
                    counts[(type_, status)] = counts.get((type_, status), 0) + 1
            SERVICES_BY_CONDITION.clear()
            for (type_, status), count in counts.items():
                SERVICES_BY_CONDITION.labels(type_, status).set(count)


TALLY = ConditionTally()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/metrics":
            body, content_type = generate_latest(REGISTRY), CONTENT_TYPE_LATEST
        elif self.path in ("/healthz", "/livez"):
            body, content_type = b"ok\n", "text/plain"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # scrapes every few seconds: keep the log quiet
        return


def serve(host: str, port: int) -> ThreadingHTTPServer:
    """Serve /metrics and /healthz on a daemon thread; returns the server (its port when 0 was asked)."""
    server = ThreadingHTTPServer((host, port), _Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
