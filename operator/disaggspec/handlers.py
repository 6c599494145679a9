"""Thin kopf wiring: which events trigger a reconcile, the admission webhook, and operator settings.

Reconcile is level-based: every event of a DisaggSpecService (including the initial listing when the operator
starts, which is the resume case) and every change of a child it owns marks the service dirty in a de-duplicating
work queue; its workers run `Reconciler.reconcile`, which compares desired with actual state. Raw event handlers
are used, not kopf's change handlers, so kopf keeps no progress annotations on the objects and a no-op pass writes
nothing. Services come from kopf; children come from the operator's own informers (`informer`), which keep the
`ChildCache` equal to the API server's state (an authoritative LIST after every gap, a server-side label selector)
and name the owners to re-queue. The reconcile workers start once every informer has listed (the cache is synced)
and, with leader election, once this replica leads. A service event that is not newer than the cached state (the
echo of the operator's own status write) queues nothing. The periodic resync first checks the caches against
metadata-only LISTs, then re-queues every service. A failed pass is retried with backoff. The validating webhook
refuses a spec through the same `rejection.check` as reconcile (with the update-only rules on updates), then, when
the rules pass, refuses one whose children the API server would refuse (`admission_children`: a dry-run of each
child, with the message reconcile would write to Degraded; fail-safe, it admits when the dry-run cannot answer).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import kopf

from disaggspec import admission_children, apply, informer, metrics
from disaggspec import constants as c
from disaggspec.childcache import ChildCache, OwnerKey, ServiceCache
from disaggspec.reconcile import Reconciler
from disaggspec.rejection import check
from disaggspec.servinghealth.monitor import Monitor
from disaggspec.workqueue import WorkQueue

log = logging.getLogger("disaggspec.handlers")

WORKERS = 4
"""Reconcile worker threads (each pass is mostly waiting on the API server)."""

LIST_CHUNK_SIZE = 100
"""Objects per page of kopf's initial LIST of the services."""

OBJECT_WORKER_IDLE_SECONDS = 0.5
"""How long kopf keeps an object's worker after its last event."""

UNKNOWN_OWNERS_LIMIT = 10_000
"""Owners queued once while not cached (see `requeue`); the record is cleared when it grows past this."""


class LeaderElector(Protocol):
    """What the handlers need of leader election (`disaggspec.leader.LeaderElector`)."""

    def wait_until_leader(self) -> None: ...

    def is_leader(self) -> bool: ...


@dataclass
class WebhookOptions:
    """How the admission webhook is served; None in `Runtime.webhook` disables it."""

    addr: str
    port: int
    host: str | None
    certfile: str | None = None
    pkeyfile: str | None = None
    cafile: str | None = None


@dataclass
class Runtime:
    """Set by `__main__` before kopf starts; handlers read it."""

    reconciler: Reconciler | None = None
    webhook_server: Any | None = None
    """The webhook server (`webhookconfig.ConfiguringWebhookServer`) when the webhook is on; kopf serves with it."""
    children: ChildCache = field(default_factory=ChildCache)
    services: ServiceCache = field(default_factory=ServiceCache)
    """Every service seen and not deleted: what passes read, and what the periodic resync re-queues."""
    namespaces: tuple[str, ...] = ()
    """Watched namespaces; empty: all."""
    leader: LeaderElector | None = None
    """When set, the reconcile workers start only once this replica leads."""
    informers: list[informer.Informer] = field(default_factory=list)
    """The child informers, once started."""
    health_monitor: Monitor | None = None
    """Measures the serving pods' runtime health (SpecDecodeHealthy, TransferHealthy); started with the workers."""


RUNTIME = Runtime()

_unknown_owners: set[OwnerKey] = set()
_unknown_guard = threading.Lock()


def _reconciler() -> Reconciler:
    if RUNTIME.reconciler is None:
        raise RuntimeError("disaggspec.handlers used before RUNTIME.reconciler was set")
    return RUNTIME.reconciler


def _process(key: Hashable) -> None:
    assert isinstance(key, tuple)
    wake_after = _reconciler().reconcile(str(key[0]), str(key[1]), RUNTIME.children.children)
    if wake_after is not None:
        # A rollout's progress deadline passes without any event: look again then.
        QUEUE.add_after(key, wake_after)


QUEUE = WorkQueue(_process)


def requeue(owners: Iterable[OwnerKey]) -> None:
    """Mark the owners of changed children dirty; called from the informer threads.

    A cached service is queued. One that is not cached is queued only if it may exist: never when a service of that
    name was deleted (its children are being garbage-collected: a pass would re-create them for a dead owner), and
    once otherwise (the pass GETs it; on 404 it does nothing, and the owner's later child events queue nothing).
    """
    for key in owners:
        if key in RUNTIME.services:
            QUEUE.add(key)
            continue
        if RUNTIME.services.deleted(*key):
            continue
        with _unknown_guard:
            if key in _unknown_owners:
                continue
            if len(_unknown_owners) >= UNKNOWN_OWNERS_LIMIT:
                _unknown_owners.clear()
            _unknown_owners.add(key)
        QUEUE.add(key)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.reporting_component = c.MANAGED_BY
    # Our own Events say what matters; kopf's per-handler INFO events would be noise.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    # The initial listing comes in pages: a restart with thousands of services never holds them all as dicts at once.
    settings.watching.chunk_size = LIST_CHUNK_SIZE
    # kopf keeps a worker task per object alive this long after its last event (default 5 s). At start-up that is
    # every object at once: with 500 services, restart RSS peaked at 190 MiB with 5 s and at 128 MiB with 0.5 s. A
    # later event simply starts a new worker.
    settings.queueing.idle_timeout = OBJECT_WORKER_IDLE_SECONDS
    start_informers()
    threading.Thread(target=_start_workers, name="start-workers", daemon=True).start()
    QUEUE.resync_every(_reconciler().config.resync_seconds, _resync_keys)
    if RUNTIME.webhook_server is not None:
        # Built, served and registered (with its own timeoutSeconds) by `__main__`: kopf does not manage it.
        settings.admission.server = RUNTIME.webhook_server


def start_informers() -> list[informer.Informer]:
    """Start one informer per owned kind and watched namespace (their own threads), and the cache gauges."""
    transport = informer.ClientTransport(_reconciler().client)
    RUNTIME.informers = informer.informers(
        transport, RUNTIME.children, RUNTIME.namespaces, requeue, on_recovered=QUEUE.reset_backoff
    )
    for each in RUNTIME.informers:
        each.start()
    metrics.CACHE_OBJECTS.labels("children").set_function(lambda: len(RUNTIME.children))
    metrics.CACHE_OBJECTS.labels("services").set_function(lambda: len(RUNTIME.services))
    metrics.CACHE_OBJECTS.labels("tombstones").set_function(RUNTIME.services.tombstones)
    return RUNTIME.informers


def _start_workers() -> None:
    """Start the reconcile workers once every informer has listed and, with leader election, once leading."""
    for each in RUNTIME.informers:
        each.synced.wait()
    log.info("child cache synced with %d children", len(RUNTIME.children))
    if RUNTIME.leader is not None:
        log.info("waiting to become the leader")
        RUNTIME.leader.wait_until_leader()
    log.info("starting %d workers", WORKERS)
    QUEUE.start(WORKERS)
    if RUNTIME.health_monitor is not None and RUNTIME.health_monitor.settings.source != "off":
        RUNTIME.health_monitor.start()


POOL_POD_SELECTOR = f"{c.LABEL_ROLE} in ({c.ROLE_PREFILL},{c.ROLE_DECODE})"
"""The pool pods of every service (routers carry the role label too, with another value)."""


def list_pool_pods() -> list[dict[str, Any]]:
    """Every pool pod in the watched namespaces (paged LISTs; the ClusterRole grants pods list)."""
    client = _reconciler().client
    pods: list[dict[str, Any]] = []
    for namespace in RUNTIME.namespaces or (None,):
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        token = ""
        while True:
            query = {"labelSelector": POOL_POD_SELECTOR, "limit": str(LIST_CHUNK_SIZE * 5)}
            if token:
                query["continue"] = token
            page = client.request("GET", path, query=query)
            pods.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                break
    return pods


def is_leader() -> bool:
    return RUNTIME.leader is None or RUNTIME.leader.is_leader()


def _resync_keys() -> list[OwnerKey]:
    """The periodic resync: check the caches against the API server first, then every cached service."""
    for each in RUNTIME.informers:
        try:
            each.verify()
        except Exception as error:  # the watch keeps the cache meanwhile; the next period checks again
            log.warning("%s: could not verify the cache: %s", each.component, error)
    try:
        verify_services(informer.ClientTransport(_reconciler().client))
    except Exception as error:
        log.warning("could not verify the service cache: %s", error)
    return RUNTIME.services.keys()


def verify_services(transport: informer.Transport) -> None:
    """Compare the service cache with metadata-only LISTs: evict what is gone, queue what the cache lacks.

    kopf lists services again after a watch gap but never reports what vanished during it. A cached service missing
    from the list is evicted only if the list is newer than the cached state (a service created after the list
    started is not evicted); a listed one missing from the cache is queued (its pass GETs it).
    """
    for namespace in RUNTIME.namespaces or (None,):
        items, list_version = informer.list_metadata(transport, apply.SERVICE_RESOURCE.collection(namespace))
        listed = {(str(meta.get("namespace")), str(meta.get("name"))): str(meta.get("uid", "")) for meta in items}
        held_keys = RUNTIME.services.keys()
        for key in held_keys:
            if namespace is not None and key[0] != namespace:
                continue
            if key in listed:
                continue
            held = RUNTIME.services.version(*key)
            if held is None or not list_version.isdigit() or held > int(list_version):
                continue
            log.info("service %s/%s is gone (not listed): evicting it", *key)
            RUNTIME.services.evict(*key)
            _reconciler().forget(*key)
        cached = set(RUNTIME.services.keys())
        for key in sorted(listed.keys() - cached):
            if not RUNTIME.services.tombstoned(listed[key]):
                QUEUE.add(key)


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL)
async def on_service_event(*, type: str, body: kopf.Body, namespace: str | None, name: str, **_: Any) -> None:
    if namespace is None:
        return
    if type == "DELETED":
        RUNTIME.services.delete(dict(body))
        _reconciler().forget(namespace, name)
        if RUNTIME.health_monitor is not None:
            RUNTIME.health_monitor.forget(namespace, name)
        return
    # Not newer than the cache: the echo of this operator's own status write (already in the cache), or a state
    # delivered again after a re-list. Nothing to do.
    if RUNTIME.services.put(dict(body)):
        with _unknown_guard:
            _unknown_owners.discard((namespace, name))
        QUEUE.add((namespace, name))


CHILD_REFUSED_RULE = "child-refused"
"""The `rule` label of `disaggspec_rule_rejections_total` for a spec refused because a child would be refused."""


def admit(*, body: kopf.Body, **kwargs: Any) -> None:
    """Reject a spec the rule table refuses, with every rule's message (the CRD's CEL rules ran already), or one
    whose children the API server would refuse, with the message reconcile would write to Degraded."""
    old, operation = kwargs.get("old"), kwargs.get("operation")
    previous = _plain(old) if operation == "UPDATE" and old else None
    obj = _plain(body)
    meta = obj.setdefault("metadata", {})
    if not meta.get("namespace") and kwargs.get("namespace"):
        meta["namespace"] = kwargs["namespace"]  # the request's: children are rendered into it
    try:
        service, rejection = check(obj, previous)
    except Exception:  # a bug in the rule table must not block users (nor be their error message): admit
        log.exception("%s/%s: admitted unvalidated: the rule table raised", meta.get("namespace"), meta.get("name"))
        return
    if rejection:
        metrics.count_rejection(rejection.rules, "admission")
        raise kopf.AdmissionError(rejection.text, code=422)
    if service is None or RUNTIME.reconciler is None:
        return
    refused = admission_children.refusal_text(RUNTIME.reconciler.client, RUNTIME.reconciler.config, obj, service)
    if refused is not None:
        metrics.count_rejection((CHILD_REFUSED_RULE,), "admission")
        raise kopf.AdmissionError(refused, code=422)


def enable_webhook() -> None:
    """Serve `admit` as the validating webhook (kopf refuses admission handlers without a server, so opt-in).

    failurePolicy is Ignore: when the operator is down, writes still go through the CRD's CEL rules, and reconcile
    refuses (SpecConfigConsistent=False, no child changed) what only the Python rules catch.
    """
    # persistent: a graceful exit leaves the webhook registered (failurePolicy Ignore covers the downtime), so a
    # restart or a failover never opens a window without it.
    kopf.on.validate(
        c.GROUP,
        c.VERSION,
        c.PLURAL,
        id="validate",
        operations=["CREATE", "UPDATE"],
        ignore_failures=True,
        persistent=True,
    )(admit)


def _plain(body: Any) -> dict[str, Any]:
    """A kopf Body (a live view) as a plain, detached dict."""
    return copy.deepcopy(dict(body))
