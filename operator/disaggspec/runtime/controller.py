"""The `Controller`: one object owning the controller runtime, so no module holds state. Reads the API (the informers'
LISTs and WATCHes, the pool pods, the services' metadata), writes nothing itself: the passes it runs write (through
`apply`), as do its leader elector (the Lease) and its webhook server (the webhook configuration).

Reconcile is level-based: every event of a DisaggSpecService (including its informer's first LIST when the operator
starts, which is the resume case) and every change of a child it owns marks the service dirty in the de-duplicating
`WorkQueue`; its workers run the pass (`Reconcile.reconcile`), which compares desired with actual state. Services and
children come from the operator's own informers (kopf serves only the webhook), which keep the service cache and the
`ChildCache` equal to the API server's state (an authoritative LIST after every gap, a server-side label selector for
children), name the services to (re-)queue and report to /healthz. The workers start once every informer has listed
(the caches are synced) and, with leader election, once this replica leads; they pause while it does not lead. A
service event that is not newer than the cached state (the echo of the operator's own status write) queues nothing.
The periodic resync first checks the caches against metadata-only LISTs, then re-queues every service. A failed pass
is retried with backoff; when an informer gets through after failing, every backoff is cut short.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Protocol

from disaggspec import apply, metrics
from disaggspec import constants as c
from disaggspec.config import OperatorConfig
from disaggspec.runtime import informer
from disaggspec.runtime.availability import ApiAvailability
from disaggspec.runtime.caches import ChildCache, DisaggSpecServiceCache, OwnerKey
from disaggspec.runtime.health import Health
from disaggspec.runtime.webhook_config import ConfiguringWebhookServer, WebhookOptions
from disaggspec.runtime.workqueue import WorkQueue
from disaggspec.servinghealth.monitor import Monitor

log = logging.getLogger("disaggspec.controller")

WORKERS = 4
"""Reconcile worker threads (each pass is mostly waiting on the API server)."""

UNKNOWN_OWNERS_LIMIT = 10_000
"""Owners queued once while not cached (see `Controller.requeue`); the record is cleared when it grows past this."""

POOL_POD_SELECTOR = f"{c.LABEL_ROLE} in ({c.ROLE_PREFILL},{c.ROLE_DECODE})"
"""The pool pods of every service (routers carry the role label too, with another value)."""

POOL_POD_PAGE = 500
"""Pods per page of the pool-pod LIST."""

ChildrenFn = Callable[[str, str], list[dict[str, Any]]]
"""(namespace, service name) -> the live children of that service, read when the pass holds the service's lock."""


class Reconcile(Protocol):
    """What the controller needs of a pass (`reconcile.Reconciler`)."""

    def reconcile(self, namespace: str, name: str, children: ChildrenFn) -> float | None:
        """One pass of a service; returns the seconds after which to look again although nothing changes, or None."""
        ...

    def forget(self, namespace: str, name: str) -> None:
        """Drop what the pass keeps of a deleted service."""
        ...


class Leadership(Protocol):
    """What the controller needs of leader election (`runtime.leader.LeaderElector`)."""

    def wait_until_leader(self) -> None: ...

    def is_leader(self) -> bool: ...


class Controller:
    """The runtime of one operator process: caches, informers, work queue, leader elector, health, API
    availability, runtime-health monitor and webhook server. The entry point builds it, sets `reconciler`, and hands
    it to kopf (`kopf.run(memo=handlers.memo_for(controller))`), whose handlers (`disaggspec.handlers`) delegate to
    it."""

    def __init__(
        self,
        client: apply.Client,
        config: OperatorConfig,
        *,
        namespaces: Iterable[str] = (),
        leader: Leadership | None = None,
        health: Health | None = None,
        workers: int = WORKERS,
    ) -> None:
        self.client = client
        self.transport = informer.ClientTransport(client)
        """The informers' and the resync's reads, through `client`."""
        self.config = config
        self.namespaces = tuple(namespaces)
        """Watched namespaces; empty: all."""
        self.leader = leader
        """When set, the reconcile workers start only once this replica leads."""
        self.health = health if health is not None else Health()
        """What /healthz and /readyz answer from; the informers and the webhook server report to it."""
        self.availability = ApiAvailability()
        """Which optional APIs the cluster serves: the informers write it, the passes read it."""
        self.children = ChildCache()
        self.services = DisaggSpecServiceCache()
        """Every service seen and not deleted: what passes read, and what the periodic resync re-queues."""
        self.workers = workers
        self.queue = WorkQueue(self._process)
        self.informers: list[informer.Informer] = []
        """The service and child informers, once started."""
        self.health_monitor = Monitor(
            config.health,
            list_pods=self.list_pool_pods,
            services=self.services.keys,
            requeue=self.requeue,
            is_leader=self.is_leader,
            lookup=self.services.get,
        )
        """Measures the serving pods' runtime health (SpecDecodeHealthy, TransferHealthy); started with the workers."""
        self.webhook_server: ConfiguringWebhookServer | None = None
        """The webhook server when the webhook is on (`serve_webhook`); kopf serves with it."""
        self.reconciler: Reconcile | None = None
        """The pass the workers run; set by the entry point (it reads this controller's caches) before `start`."""
        self._unknown_owners: set[OwnerKey] = set()
        self._unknown_guard = threading.Lock()

    # ---- start-up ------------------------------------------------------------------------------------------------

    def serve_webhook(self, options: WebhookOptions, timeout_seconds: int) -> ConfiguringWebhookServer:
        """Build the webhook server kopf will serve with (it registers itself in the ValidatingWebhookConfiguration)."""
        self.webhook_server = ConfiguringWebhookServer.serving(self.client, self.health, options, timeout_seconds)
        return self.webhook_server

    def start(self) -> None:
        """Start the informers, the workers (on a thread: once synced and, with leader election, leading) and the
        periodic resync."""
        self.start_informers()
        threading.Thread(target=self._start_workers, name="start-workers", daemon=True).start()
        self.queue.resync_every(self.config.resync_seconds, self._resync_keys)

    def start_informers(self) -> list[informer.Informer]:
        """Start the service informers and one informer per owned kind and watched namespace (their own threads),
        and the cache gauges."""
        services = informer.service_informers(
            self.transport,
            ServiceEvents(self),
            self.namespaces,
            self.queue_services,
            health=self.health,
            availability=self.availability,
            on_recovered=self.recovered,
        )
        children = informer.informers(
            self.transport,
            self.children,
            self.namespaces,
            self.requeue,
            health=self.health,
            availability=self.availability,
            on_recovered=self.recovered,
        )
        self.informers = [*services, *children]
        for each in self.informers:
            each.start()
        metrics.CACHE_OBJECTS.labels("children").set_function(lambda: len(self.children))
        metrics.CACHE_OBJECTS.labels("services").set_function(lambda: len(self.services))
        metrics.CACHE_OBJECTS.labels("tombstones").set_function(self.services.tombstones)
        return self.informers

    def _start_workers(self) -> None:
        """Start the reconcile workers once every informer has listed and, with leader election, once leading."""
        for each in self.informers:
            each.synced.wait()
        log.info("child cache synced with %d children", len(self.children))
        if self.leader is not None:
            log.info("waiting to become the leader")
            self.leader.wait_until_leader()
        log.info("starting %d workers", self.workers)
        self.queue.start(self.workers)
        if self.health_monitor.settings.source != "off":
            self.health_monitor.start()

    # ---- the passes ------------------------------------------------------------------------------------------------

    def _reconciler(self) -> Reconcile:
        if self.reconciler is None:
            raise RuntimeError("Controller used before its reconciler was set")
        return self.reconciler

    def _process(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        if self.leader is not None and not self.leader.is_leader():
            # Lost the Lease after the workers started: wait to lead again (a pass now would be refused by the
            # reconciler's fenced client anyway). The caches stay warm meanwhile.
            self.leader.wait_until_leader()
        wake_after = self._reconciler().reconcile(str(key[0]), str(key[1]), self.children.children)
        if wake_after is not None:
            # A rollout's progress deadline passes without any event: look again then.
            self.queue.add_after(key, wake_after)

    def is_leader(self) -> bool:
        return self.leader is None or self.leader.is_leader()

    # ---- events --------------------------------------------------------------------------------------------------

    def recovered(self) -> None:
        """An informer reached the API server again after failing: the API server is back, so retry now what was
        backing off (the work queue's failed passes, the other informers' watches)."""
        self.queue.reset_backoff()
        for each in self.informers:
            each.wake()

    def service_changed(self, body: dict[str, Any]) -> bool:
        """A DisaggSpecService was added or changed (its informer's event or LIST); True when it is to be queued.

        Not newer than the cache: the echo of this operator's own status write (already in the cache), or a state
        delivered again after a re-list. Nothing to do."""
        if not self.services.put(body):
            return False
        meta = body["metadata"]
        with self._unknown_guard:
            self._unknown_owners.discard((str(meta["namespace"]), str(meta["name"])))
        return True

    def service_deleted(self, body: dict[str, Any]) -> None:
        """A DisaggSpecService was deleted (its informer's DELETED event)."""
        self.services.delete(body)
        self._forget(str(body["metadata"]["namespace"]), str(body["metadata"]["name"]))

    def service_gone(self, namespace: str, name: str) -> None:
        """A cached DisaggSpecService is missing from an authoritative LIST: deleted while nobody watched."""
        log.info("service %s/%s is gone (not listed): evicting it", namespace, name)
        self.services.evict(namespace, name)
        self._forget(namespace, name)

    def _forget(self, namespace: str, name: str) -> None:
        self._reconciler().forget(namespace, name)
        self.health_monitor.forget(namespace, name)

    def queue_services(self, keys: Iterable[OwnerKey]) -> None:
        """Queue services whose own object changed (the service informers' `on_change`)."""
        for key in keys:
            self.queue.add(key)

    def requeue(self, owners: Iterable[OwnerKey]) -> None:
        """Mark the owners of changed children dirty; called from the informer threads.

        A cached service is queued. One that is not cached is queued only if it may exist: never when a service of
        that name was deleted (its children are being garbage-collected: a pass would re-create them for a dead
        owner), and once otherwise (the pass GETs it; on 404 it does nothing, and the owner's later child events
        queue nothing).
        """
        for key in owners:
            if key in self.services:
                self.queue.add(key)
                continue
            if self.services.deleted(*key):
                continue
            with self._unknown_guard:
                if key in self._unknown_owners:
                    continue
                if len(self._unknown_owners) >= UNKNOWN_OWNERS_LIMIT:
                    self._unknown_owners.clear()
                self._unknown_owners.add(key)
            self.queue.add(key)

    # ---- reads -----------------------------------------------------------------------------------------------------

    def list_pool_pods(self) -> list[dict[str, Any]]:
        """Every pool pod in the watched namespaces (paged LISTs; the ClusterRole grants pods list)."""
        return [pod for namespace in self.namespaces or (None,) for pod in self._pool_pods_in(namespace)]

    def _pool_pods_in(self, namespace: str | None) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"

        def get(query: dict[str, str]) -> dict[str, Any]:
            return self.client.request("GET", path, query=query)

        pages = apply.list_pages(get, {"labelSelector": POOL_POD_SELECTOR}, POOL_POD_PAGE)
        return [pod for page in pages for pod in page.get("items") or []]

    def _resync_keys(self) -> list[OwnerKey]:
        """The periodic resync: check the caches against the API server first, then every cached service."""
        for each in self.informers:
            try:
                each.verify()
            except Exception as error:  # the watch keeps the cache meanwhile; the next period checks again
                log.warning("%s: could not verify the cache: %s", each.component, error)
        return self.services.keys()


class ServiceEvents:
    """The service informers' `informer.Store`: DisaggSpecService changes become the `Controller`'s service events.

    A LIST is authoritative as a child LIST is, with one care: the cache is also written by the passes (the
    response of each status write), so a cached service missing from the list is evicted only if its cached
    resourceVersion is not newer than the newest listed one (the list's snapshot is at least that new, so such a
    service existed at the snapshot and is gone; one created or written after the snapshot is kept, and its own
    event follows)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def put(self, obj: dict[str, Any]) -> set[OwnerKey]:
        meta = obj["metadata"]
        return {(str(meta["namespace"]), str(meta["name"]))} if self.controller.service_changed(obj) else set()

    def discard(self, obj: dict[str, Any]) -> set[OwnerKey]:
        self.controller.service_deleted(obj)
        return set()

    def replace(self, kind_name: str, namespace_scope: str | None, objects: Iterable[dict[str, Any]]) -> set[OwnerKey]:
        queued: set[OwnerKey] = set()
        listed: set[OwnerKey] = set()
        newest = 0
        for obj in objects:
            meta = obj["metadata"]
            listed.add((str(meta["namespace"]), str(meta["name"])))
            version = str(meta.get("resourceVersion", ""))
            newest = max(newest, int(version) if version.isdigit() else 0)
            queued |= self.put(obj)
        services = self.controller.services
        cached = services.keys()
        for key in cached:
            if key in listed or (namespace_scope is not None and key[0] != namespace_scope):
                continue
            held = services.version(*key)
            if held is not None and held <= newest:
                self.controller.service_gone(*key)
        return queued

    def versions(self, kind_name: str, namespace_scope: str | None) -> dict[str, str]:
        return self.controller.services.versions(namespace_scope)
