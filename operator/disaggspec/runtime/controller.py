"""The `Controller`: one object owning the controller runtime, so no module holds state. Reads the API (the informers'
LISTs and WATCHes, the pool pods, the services' metadata), writes nothing itself: the passes it runs write (through
`apply`), as do its leader elector (the Lease) and its webhook server (the webhook configuration).

Reconcile is level-based: every event of a DisaggSpecService (including kopf's initial listing when the operator
starts, which is the resume case) and every change of a child it owns marks the service dirty in the de-duplicating
`WorkQueue`; its workers run the pass (`Reconcile.reconcile`), which compares desired with actual state. Children come
from the informers, which keep the `ChildCache` equal to the API server's state (an authoritative LIST after every
gap, a server-side label selector) and name the owners to re-queue. The workers start once every informer has listed
(the cache is synced) and, with leader election, once this replica leads. A service event that is not newer than the
cached state (the echo of the operator's own status write) queues nothing. The periodic resync first checks the
caches against metadata-only LISTs, then re-queues every service. A failed pass is retried with backoff.
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
        """The child informers, once started."""
        self.health_monitor = Monitor(
            config.health,
            list_pods=self.list_pool_pods,
            services=self.services.keys,
            requeue=self.requeue,
            is_leader=self.is_leader,
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
        """Start one informer per owned kind and watched namespace (their own threads), and the cache gauges."""
        self.informers = informer.informers(
            self.transport,
            self.children,
            self.namespaces,
            self.requeue,
            health=self.health,
            availability=self.availability,
            on_recovered=self.queue.reset_backoff,
        )
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
        wake_after = self._reconciler().reconcile(str(key[0]), str(key[1]), self.children.children)
        if wake_after is not None:
            # A rollout's progress deadline passes without any event: look again then.
            self.queue.add_after(key, wake_after)

    def is_leader(self) -> bool:
        return self.leader is None or self.leader.is_leader()

    # ---- events --------------------------------------------------------------------------------------------------

    def service_event(self, type_: str | None, body: dict[str, Any], namespace: str, name: str) -> None:
        """A DisaggSpecService event from kopf (`type_` None: its initial listing)."""
        if type_ == "DELETED":
            self.services.delete(body)
            self._reconciler().forget(namespace, name)
            self.health_monitor.forget(namespace, name)
            return
        # Not newer than the cache: the echo of this operator's own status write (already in the cache), or a state
        # delivered again after a re-list. Nothing to do.
        if self.services.put(body):
            with self._unknown_guard:
                self._unknown_owners.discard((namespace, name))
            self.queue.add((namespace, name))

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
        try:
            self.verify_services(self.transport)
        except Exception as error:
            log.warning("could not verify the service cache: %s", error)
        return self.services.keys()

    def verify_services(self, transport: informer.Transport) -> None:
        """Compare the service cache with metadata-only LISTs: evict what is gone, queue what the cache lacks.

        kopf lists services again after a watch gap but never reports what vanished during it. A cached service
        missing from the list is evicted only if the list is newer than the cached state (a service created after
        the list started is not evicted); a listed one missing from the cache is queued (its pass GETs it).
        """
        for namespace in self.namespaces or (None,):
            items, list_version = informer.list_metadata(transport, apply.DSS_RESOURCE.collection(namespace))
            listed = {(str(meta.get("namespace")), str(meta.get("name"))): str(meta.get("uid", "")) for meta in items}
            held_keys = self.services.keys()
            for key in held_keys:
                if namespace is not None and key[0] != namespace:
                    continue
                if key in listed:
                    continue
                held = self.services.version(*key)
                if held is None or not list_version.isdigit() or held > int(list_version):
                    continue
                log.info("service %s/%s is gone (not listed): evicting it", *key)
                self.services.evict(*key)
                self._reconciler().forget(*key)
            cached = set(self.services.keys())
            for key in sorted(listed.keys() - cached):
                if not self.services.tombstoned(listed[key]):
                    self.queue.add(key)
