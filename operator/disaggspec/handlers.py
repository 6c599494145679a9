"""Thin kopf wiring: which events trigger a reconcile, the admission webhook, and operator settings.

Reconcile is level-based: every event of a DisaggSpecService (including the initial listing when the operator
starts, which is the resume case) and every event of a child it owns marks the service dirty in a de-duplicating
work queue; its workers run `Reconciler.reconcile`, which compares desired with actual state. Raw event handlers
are used, not kopf's change handlers, so kopf keeps no progress annotations on the objects and a no-op pass writes
nothing. Live children come from a `ChildCache` fed by the children's watch events, not from LIST requests (see
`childcache` for why not kopf's indexes). The event handlers are coroutines: they only pack a body and mark a key,
so they run on kopf's event loop instead of a hop to its thread pool per event. A failed pass is retried with
backoff. The validating webhook refuses a spec through the same `rejection.check` as reconcile (with the update-only
rules on updates).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import kopf

from disaggspec import apply, metrics
from disaggspec import constants as c
from disaggspec.childcache import ChildCache, ServiceCache
from disaggspec.reconcile import Reconciler
from disaggspec.rejection import check
from disaggspec.workqueue import WorkQueue

log = logging.getLogger("disaggspec.handlers")

WORKERS = 4
"""Reconcile worker threads (each pass is mostly waiting on the API server)."""

LIST_CHUNK_SIZE = 100
"""Objects per page of the initial LIST of each watched kind."""

OBJECT_WORKER_IDLE_SECONDS = 0.5
"""How long kopf keeps an object's worker after its last event."""

SYNC_TIMEOUT = 60.0
"""Longest wait at start-up for the watch to deliver the children that existed; after it the workers start anyway,
and a pass GETs what the cache lacks."""

SYNC_RECHECK = 2.0
"""While waiting, how often to list again and stop waiting for children deleted in the meantime."""


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
    webhook: WebhookOptions | None = None
    children: ChildCache = field(default_factory=ChildCache)
    services: ServiceCache = field(default_factory=ServiceCache)
    """Every service seen and not deleted: what passes read, and what the periodic resync re-queues."""
    namespaces: tuple[str, ...] = ()
    """Watched namespaces; empty: all."""


RUNTIME = Runtime()


def _reconciler() -> Reconciler:
    if RUNTIME.reconciler is None:
        raise RuntimeError("disaggspec.handlers used before RUNTIME.reconciler was set")
    return RUNTIME.reconciler


def _process(key: Hashable) -> None:
    assert isinstance(key, tuple)
    _reconciler().reconcile(str(key[0]), str(key[1]), RUNTIME.children.children)


QUEUE = WorkQueue(_process)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.reporting_component = c.MANAGED_BY
    # Our own Events say what matters; kopf's per-handler INFO events would be noise.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    # The initial listing comes in pages: a restart with thousands of children never holds them all as dicts at once.
    settings.watching.chunk_size = LIST_CHUNK_SIZE
    # kopf keeps a worker task per object alive this long after its last event (default 5 s). At start-up that is
    # every object at once: with 500 services, restart RSS peaked at 190 MiB with 5 s and at 128 MiB with 0.5 s. A
    # later event simply starts a new worker.
    settings.queueing.idle_timeout = OBJECT_WORKER_IDLE_SECONDS
    # kopf starts watching only after the startup handlers: listing here sees every child the watch will deliver.
    expected = _existing_children()
    threading.Thread(target=_start_workers_when_synced, args=(expected,), name="cache-sync", daemon=True).start()
    QUEUE.resync_every(_reconciler().config.resync_seconds, RUNTIME.services.keys)
    options = RUNTIME.webhook
    if options is not None:
        settings.admission.server = kopf.WebhookServer(
            addr=options.addr,
            port=options.port,
            host=options.host,
            certfile=options.certfile,
            pkeyfile=options.pkeyfile,
            cafile=options.cafile,
        )
        settings.admission.managed = c.GROUP


def _existing_children() -> set[str]:
    """UIDs of every child the operator owns now (one paged LIST per kind and watched namespace)."""
    selector = f"{c.LABEL_MANAGED_BY}={c.MANAGED_BY}"
    try:
        return {
            uid
            for kind in apply.OWNED_KINDS
            for namespace in (RUNTIME.namespaces or (None,))
            for uid in apply.list_uids(_reconciler().client, kind, namespace, selector)
        }
    except Exception as error:  # the cache still fills from the watch; passes then GET what it lacks
        log.warning("could not list existing children before starting (%s): starting without waiting", error)
        return set()


def _start_workers_when_synced(expected: set[str]) -> None:
    """Start the reconcile workers once the watch has delivered every child that existed at start-up."""
    started = time.monotonic()
    recheck = started + SYNC_RECHECK
    while not RUNTIME.children.synced(expected):
        now = time.monotonic()
        if now > started + SYNC_TIMEOUT:
            log.warning("child cache not synced after %.0fs: starting the workers anyway", SYNC_TIMEOUT)
            break
        if now > recheck:
            # A child deleted between the two listings is never delivered: stop waiting for what no longer exists.
            expected &= _existing_children()
            recheck = now + SYNC_RECHECK
        time.sleep(0.05)
    log.info("child cache synced with %d children: starting %d workers", len(RUNTIME.children), WORKERS)
    QUEUE.start(WORKERS)


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL)
async def on_service_event(*, type: str, body: kopf.Body, namespace: str | None, name: str, **_: Any) -> None:
    if namespace is None:
        return
    if type == "DELETED":
        RUNTIME.services.remove(namespace, name)
        _reconciler().forget(namespace, name)
        return
    RUNTIME.services.put(dict(body))
    QUEUE.add((namespace, name))


def _owner_name(body: kopf.Body) -> str | None:
    for owner in body.get("metadata", {}).get("ownerReferences", []):
        if owner.get("apiVersion") == c.API_VERSION and owner.get("kind") == c.KIND and owner.get("controller"):
            return str(owner["name"])
    return None


async def _on_child_event(*, type: str | None, body: kopf.Body, namespace: str | None, **_: Any) -> None:
    owner = _owner_name(body)
    uid = str(body.get("metadata", {}).get("uid", ""))
    if type == "DELETED" or owner is None or namespace is None:
        # Gone, or no longer ours (an owner reference removed by hand): the next pass recreates what is missing.
        RUNTIME.children.remove(uid)
    else:
        RUNTIME.children.put((namespace, owner), dict(body))
    if owner is not None and namespace is not None:
        QUEUE.add((namespace, owner))


# Every owned kind: its events keep the child cache current and mark the owner dirty (a deleted child is recreated, a
# manual edit reverted, a Deployment's progress lands in status). The initial listing arrives as events too.
for _kind in apply.OWNED_KINDS:
    _group, _, _version = _kind.api_version.rpartition("/")
    kopf.on.event(
        _group or "",
        _version,
        _kind.plural,
        labels={c.LABEL_MANAGED_BY: c.MANAGED_BY},
        id=f"child-{_kind.plural}",
    )(_on_child_event)


def admit(*, body: kopf.Body, **kwargs: Any) -> None:
    """Reject a spec the rule table refuses, with every rule's message (the CRD's CEL rules ran already)."""
    old, operation = kwargs.get("old"), kwargs.get("operation")
    previous = _plain(old) if operation == "UPDATE" and old else None
    _, rejection = check(_plain(body), previous)
    if rejection:
        metrics.count_rejection(rejection.rules, "admission")
        raise kopf.AdmissionError(rejection.text, code=422)


def enable_webhook(options: WebhookOptions) -> None:
    """Serve `admit` as the validating webhook (kopf refuses admission handlers without a server, so opt-in).

    failurePolicy is Ignore: when the operator is down, writes still go through the CRD's CEL rules, and reconcile
    refuses (SpecConfigConsistent=False, no child changed) what only the Python rules catch.
    """
    RUNTIME.webhook = options
    kopf.on.validate(
        c.GROUP, c.VERSION, c.PLURAL, id="validate", operations=["CREATE", "UPDATE"], ignore_failures=True
    )(admit)


def _plain(body: Any) -> dict[str, Any]:
    """A kopf Body (a live view) as a plain, detached dict."""
    return copy.deepcopy(dict(body))
