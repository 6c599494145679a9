"""The operator's Prometheus metrics and the HTTP server that exposes them with the probes; no API access.

The probes answer from the `Probes` handed to `serve` (the controller's `runtime.health.Health`). Metric names carry
the `disaggspec_` prefix. Everything lives in one private registry so tests and the benchmark can read values
without the process-wide default registry's collectors.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Literal, Protocol
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from disaggspec.servinghealth.judge import Verdict

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
RENDER_FAILURES = Counter(
    "disaggspec_render_failures_total",
    "Reconcile passes whose render raised (a bug in the operator; the service reports RenderFailed).",
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

WORKQUEUE_DEPTH = Gauge(
    "disaggspec_workqueue_depth",
    "Services waiting for a reconcile pass (not counting those being processed or waiting out a backoff).",
    registry=REGISTRY,
)
WORKQUEUE_RETRIES = Counter(
    "disaggspec_workqueue_retries_total",
    "Reconcile passes that failed and were scheduled again after a backoff.",
    registry=REGISTRY,
)
WORKQUEUE_OLDEST_SECONDS = Gauge(
    "disaggspec_workqueue_oldest_item_seconds",
    "How long the service that has waited longest in the queue has been waiting (0 when the queue is empty).",
    registry=REGISTRY,
)
WATCH_RESTARTS = Counter(
    "disaggspec_watch_restarts_total",
    "Watches of child kinds that were restarted, by kind and why (relist after 410 Gone, error, timeout).",
    ["kind", "reason"],
    registry=REGISTRY,
)
CACHE_OBJECTS = Gauge(
    "disaggspec_cache_objects",
    "Objects held in the operator's watch-fed caches, by cache (children, services, tombstones).",
    ["cache"],
    registry=REGISTRY,
)
IS_LEADER = Gauge(
    "disaggspec_leader",
    "1 while this replica holds the leader Lease and reconciles, 0 otherwise.",
    registry=REGISTRY,
)
LEADER_LOSSES = Counter(
    "disaggspec_leader_losses_total",
    "Times this replica stopped leading (renew deadline passed, or another holder found); it campaigns again.",
    registry=REGISTRY,
)

# ---- runtime health (issue 20): the judgements behind SpecDecodeHealthy / TransferHealthy, per service ------------
SPEC_DECODE_HEALTHY = Gauge(
    "disaggspec_spec_decode_healthy",
    "SpecDecodeHealthy of each service: 1 True, 0 False, -1 Unknown.",
    ["namespace", "service"],
    registry=REGISTRY,
)
TRANSFER_HEALTHY = Gauge(
    "disaggspec_transfer_healthy",
    "TransferHealthy of each service: 1 True, 0 False, -1 Unknown.",
    ["namespace", "service"],
    registry=REGISTRY,
)
SPEC_ACCEPT_LENGTH = Gauge(
    "disaggspec_spec_accept_length",
    "Mean speculative accept length of the service's decode pods over the health window (absent when unknown).",
    ["namespace", "service"],
    registry=REGISTRY,
)
SPEC_EXPECTED_ACCEPT_LENGTH = Gauge(
    "disaggspec_spec_expected_accept_length",
    "The accept length SpecDecodeHealthy judges each service against: spec.speculative.expectedAcceptLength, else the "
    "baseline learned from its healthy traffic (absent while there is none).",
    ["namespace", "service", "source"],
    registry=REGISTRY,
)
TRANSFER_FAILURES_PER_SECOND = Gauge(
    "disaggspec_transfer_failures_per_second",
    "Bootstrap plus KV transfer failures per second over the health window, all pool pods of the service.",
    ["namespace", "service"],
    registry=REGISTRY,
)
# ---- the planner (spec.autoscaling.mode Planner) ---------------------------------------------------------------------
AUTOSCALER_DESIRED = Gauge(
    "disaggspec_autoscaler_desired_replicas",
    "The size the planner wants for each pool of a service at its latest round (before a change is applied).",
    ["namespace", "service", "pool"],
    registry=REGISTRY,
)
AUTOSCALER_DECISIONS = Counter(
    "disaggspec_autoscaler_decisions_total",
    "Pool sizes the planner changed, by direction (up, down).",
    ["namespace", "service", "pool", "direction"],
    registry=REGISTRY,
)
POOL_REPLICAS = Gauge(
    "disaggspec_pool_replicas",
    "Replicas of each pool (prefill, decode, router) of a service, desired and ready, from its Deployments.",
    ["namespace", "service", "pool", "state"],
    registry=REGISTRY,
)

_STATUS_VALUE = {"True": 1.0, "False": 0.0, "Unknown": -1.0}


def record_runtime_health(namespace: str, service: str, verdict: Verdict) -> None:
    """Set a service's measured runtime-health numbers from its latest verdict (the monitor, every round). The
    condition gauges follow the conditions as written (`record_runtime_conditions`)."""
    _set_or_remove(SPEC_ACCEPT_LENGTH, (namespace, service), verdict.accept_length)
    _set_or_remove(TRANSFER_FAILURES_PER_SECOND, (namespace, service), verdict.failures_per_second)
    expected = verdict.expected
    for source in ("spec", "baseline"):
        value = None
        if expected is not None and (source == "spec") == expected.source.startswith("spec."):
            value = expected.accept_length
        _set_or_remove(SPEC_EXPECTED_ACCEPT_LENGTH, (namespace, service, source), value)


def record_runtime_conditions(namespace: str, service: str, statuses: dict[str, str]) -> None:
    """Set SpecDecodeHealthy's and TransferHealthy's gauges from the conditions a pass computed (condition type ->
    status), so they say what status says, also while a new leader keeps the conditions it found."""
    for gauge, type_ in ((SPEC_DECODE_HEALTHY, "SpecDecodeHealthy"), (TRANSFER_HEALTHY, "TransferHealthy")):
        if type_ in statuses:
            gauge.labels(namespace, service).set(_STATUS_VALUE[statuses[type_]])


def _set_or_remove(gauge: Gauge, labels: tuple[str, ...], value: float | None) -> None:
    if value is not None:
        gauge.labels(*labels).set(value)
        return
    with contextlib.suppress(KeyError):  # never set
        gauge.remove(*labels)


def forget_runtime_health(namespace: str, service: str) -> None:
    """Remove a deleted service's runtime-health series."""
    for gauge in (SPEC_DECODE_HEALTHY, TRANSFER_HEALTHY, SPEC_ACCEPT_LENGTH, TRANSFER_FAILURES_PER_SECOND):
        _set_or_remove(gauge, (namespace, service), None)
    for source in ("spec", "baseline"):
        _set_or_remove(SPEC_EXPECTED_ACCEPT_LENGTH, (namespace, service, source), None)


def record_pool_replicas(namespace: str, service: str, pools: dict[str, tuple[int, int]] | None) -> None:
    """Set (pool -> (desired, ready)) of a service; None removes its series (the service was deleted)."""
    for pool in ("prefill", "decode", "router"):
        for index, state in enumerate(("desired", "ready")):
            labels = (namespace, service, pool, state)
            _set_or_remove(POOL_REPLICAS, labels, None if pools is None else float(pools.get(pool, (0, 0))[index]))


def record_autoscaler_desired(namespace: str, service: str, pools: dict[str, int] | None) -> None:
    """Set the planner's latest size per pool of a service; None removes its series (not planned any more)."""
    for pool in ("prefill", "decode"):
        labels = (namespace, service, pool)
        _set_or_remove(AUTOSCALER_DESIRED, labels, None if pools is None else float(pools.get(pool, 0)))


def count_rejection(rules: Iterable[str], where: Literal["admission", "reconcile"]) -> None:
    """Count one rejected spec in REJECTIONS: once per failed rule (a `Rejection`'s `rules`), labelled by `where`."""
    for rule in rules:
        REJECTIONS.labels(rule, where).inc()


class ConditionTally:
    """Keeps SERVICES_BY_CONDITION equal to the latest conditions of every known service.

    Incremental: a pass moves its own service's counts only, so recording costs the same with 10 or 10,000 services.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, dict[str, str]] = {}

    def record(self, key: str, conditions: dict[str, str] | None) -> None:
        with self._lock:
            before = self._latest.pop(key, {})
            if conditions is not None:
                self._latest[key] = dict(conditions)
            after = conditions or {}
            if before == after:
                return
            for type_, status in before.items():
                SERVICES_BY_CONDITION.labels(type_, status).dec()
            for type_, status in after.items():
                SERVICES_BY_CONDITION.labels(type_, status).inc()


TALLY = ConditionTally()


class Probes(Protocol):
    """What the probes answer from (`runtime.health.Health`): (alive, lines) and (ready, what holds it back)."""

    def status(self) -> tuple[bool, list[str]]: ...

    def ready(self) -> tuple[bool, list[str]]: ...


class _Server(ThreadingHTTPServer):
    probes: Probes


class _Handler(BaseHTTPRequestHandler):
    """/metrics; /healthz and /livez (liveness: 500 once a component failed beyond its grace period); /readyz
    (readiness: 503 until every gating component, the webhook server and the caches, has worked once)."""

    server: _Server

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
        elif path in ("/healthz", "/livez"):
            alive, lines = self.server.probes.status()
            self._send(200 if alive else 500, _text("ok" if alive else "unhealthy", lines), "text/plain; charset=utf-8")
        elif path == "/readyz":
            ready, waiting = self.server.probes.ready()
            self._send(
                200 if ready else 503, _text("ok" if ready else "not ready", waiting), "text/plain; charset=utf-8"
            )
        else:
            self.send_error(404)

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # scrapes every few seconds: keep the log quiet
        return


def _text(verdict: str, lines: list[str]) -> bytes:
    return "".join(f"{line}\n" for line in [verdict, *lines]).encode()


def serve(host: str, port: int, probes: Probes) -> ThreadingHTTPServer:
    """Serve /metrics, and /healthz, /livez and /readyz from `probes`, on a daemon thread; returns the server (its
    port if 0 was asked)."""
    server = _Server((host, port), _Handler)
    server.probes = probes
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
