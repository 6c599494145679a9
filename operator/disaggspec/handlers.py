"""Thin kopf wiring: which events trigger a reconcile, the admission webhook, and operator settings.

Reconcile is level-based: every event of a DisaggSpecService (including the initial listing when the operator
starts, which is the resume case) and every event of a child it owns marks the service dirty in a de-duplicating
work queue; its workers run `Reconciler.reconcile`, which compares desired with actual state. Raw event handlers
are used, not kopf's change handlers, so kopf keeps no progress annotations on the objects and a no-op pass writes
nothing. Live children come from kopf indexes, not from LIST requests. A failed pass is retried with backoff. The
validating webhook runs the same rule table as reconcile (`validation.validate_update` on updates).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
import pydantic

from disaggspec import apply, childcache, metrics
from disaggspec import constants as c
from disaggspec.api import parse_service
from disaggspec.reconcile import ChildrenFn, Reconciler, schema_violations
from disaggspec.validation import validate, validate_update
from disaggspec.workqueue import WorkQueue

log = logging.getLogger("disaggspec.handlers")

WORKERS = 4
"""Reconcile worker threads (each pass is mostly waiting on the API server)."""

LIST_CHUNK_SIZE = 200
"""Objects per page of the initial LIST of each watched kind."""


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
    indexes: Mapping[str, Any] | None = None
    services: set[tuple[str, str]] = field(default_factory=set)
    """(namespace, name) of every service seen and not deleted: what the periodic resync re-queues."""
    services_lock: threading.Lock = field(default_factory=threading.Lock)

    def known_services(self) -> list[tuple[str, str]]:
        with self.services_lock:
            return sorted(self.services)


RUNTIME = Runtime()


def _reconciler() -> Reconciler:
    if RUNTIME.reconciler is None:
        raise RuntimeError("disaggspec.handlers used before RUNTIME.reconciler was set")
    return RUNTIME.reconciler


def _process(key: Hashable) -> None:
    assert isinstance(key, tuple)
    namespace, name = str(key[0]), str(key[1])
    children = _children_from(RUNTIME.indexes) if RUNTIME.indexes else None
    _reconciler().reconcile(namespace, name, children)


QUEUE = WorkQueue(_process)


def _enqueue(namespace: str, name: str, kwargs: Mapping[str, Any]) -> None:
    if RUNTIME.indexes is None:
        # kopf passes the same live Index objects to every handler: keep them for the workers.
        RUNTIME.indexes = {k: v for k, v in kwargs.items() if k.startswith("children_")}
    QUEUE.add((namespace, name))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.reporting_component = c.MANAGED_BY
    # Our own Events say what matters; kopf's per-handler INFO events would be noise.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    # The initial listing comes in pages: a restart with thousands of children never holds them all as dicts at once.
    settings.watching.chunk_size = LIST_CHUNK_SIZE
    QUEUE.start(WORKERS)
    QUEUE.resync_every(_reconciler().config.resync_seconds, RUNTIME.known_services)
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


def _index_id(kind: apply.Kind) -> str:
    return f"children_{kind.plural}"


def _children_from(indexes: Mapping[str, Any]) -> ChildrenFn:
    """Read the live children of a service from kopf's indexes (kopf fills them before any handler runs, so a
    restarted operator sees every existing child and rewrites none)."""

    def children(namespace: str, name: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for kind in apply.OWNED_KINDS:
            out.extend(childcache.unpack(packed) for packed in indexes[_index_id(kind)].get((namespace, name), []))
        return out

    return children


def _index_child(*, body: kopf.Body, namespace: str | None, **_: Any) -> dict[tuple[str, str], bytes] | None:
    owner = _owner_name(body)
    if owner is None or namespace is None:
        return None
    return {(namespace, owner): childcache.pack(dict(body))}


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL)
def on_service_event(*, type: str, namespace: str | None, name: str, **kwargs: Any) -> None:
    if namespace is None:
        return
    with RUNTIME.services_lock:
        if type == "DELETED":
            RUNTIME.services.discard((namespace, name))
        else:
            RUNTIME.services.add((namespace, name))
    if type == "DELETED":
        _reconciler().forget(namespace, name)
        return
    _enqueue(namespace, name, kwargs)


def _owner_name(body: kopf.Body) -> str | None:
    for owner in body.get("metadata", {}).get("ownerReferences", []):
        if owner.get("apiVersion") == c.API_VERSION and owner.get("kind") == c.KIND and owner.get("controller"):
            return str(owner["name"])
    return None


def _on_child_event(*, body: kopf.Body, namespace: str | None, **kwargs: Any) -> None:
    owner = _owner_name(body)
    if owner is not None and namespace is not None:
        _enqueue(namespace, owner, kwargs)


# Every owned kind: an index (the operator's cache of its children, keyed by owner) and an event handler (a deleted
# child is recreated, a manual edit reverted, a Deployment's progress lands in status).
for _kind in apply.OWNED_KINDS:
    _group, _, _version = _kind.api_version.rpartition("/")
    kopf.index(_group or "", _version, _kind.plural, labels={c.LABEL_MANAGED_BY: c.MANAGED_BY}, id=_index_id(_kind))(
        _index_child
    )
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
    try:
        new = parse_service(_plain(body))
        if operation == "UPDATE" and old:
            violations = validate_update(parse_service(_plain(old)), new)
        else:
            violations = validate(new)
        problems = [(v.rule, f"{v.field}: {v.message}") for v in violations]
    except pydantic.ValidationError as error:
        problems = schema_violations(error)
    if problems:
        for rule, _message in problems:
            metrics.REJECTIONS.labels(rule, "admission").inc()
        raise kopf.AdmissionError("; ".join(f"[{rule}] {message}" for rule, message in problems), code=422)


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
