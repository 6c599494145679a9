"""One reconcile pass of a DisaggSpecService: parse, validate, render, apply, compute status, write it, emit events.

Steps of `Reconciler.reconcile`:
  1. parse the object with the API models; a spec the models reject is reported like a rule violation;
  2. run the rule table; on any violation, change no child, set SpecConfigConsistent=False with the rules' messages;
  3. otherwise render the children and `apply.sync` them against the live ones (writes only what differs, prunes
     what is no longer rendered); live children come from the watch-fed cache, and a rendered child the cache has
     not seen yet is read from the API server first (unless the service has no status yet, i.e. never had
     children), so a lagging cache never causes a write;
  4. compute the status from the live Deployments (pure `status.compute`);
  5. write the status in one patch, only when it changed;
  6. only then emit Events, and only for transitions (a resync never repeats them).
Passes for one service are serialised by a per-service lock, because events of the service and of its children
arrive on different kopf workers.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pydantic

from disaggspec import apply, metrics, render, status
from disaggspec import constants as c
from disaggspec.api import DisaggSpecService, parse_service
from disaggspec.childcache import ServiceCache
from disaggspec.config import OperatorConfig
from disaggspec.validation import validate

log = logging.getLogger("disaggspec.reconcile")

ChildrenFn = Callable[[str, str], list[dict[str, Any]]]
"""(namespace, service name) -> the live children, read when the pass holds the service's lock."""
EventFn = Callable[[dict[str, Any], str, str, str], None]
"""(object, type Normal|Warning, reason, message) -> None."""


def schema_violations(error: pydantic.ValidationError) -> list[tuple[str, str]]:
    """pydantic errors as (rule id, message) pairs naming the field, for status and admission alike."""
    out = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"])
        out.append(("schema", f"{where}: {item['msg']}"))
    return out


@dataclass
class Outcome:
    """What a pass did, for logs, metrics and tests."""

    applied: list[str]
    pruned: list[str]
    status_written: bool
    violations: list[tuple[str, str]]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Reconciler:
    """Reconciles services through one API client; safe to call from many threads."""

    def __init__(
        self,
        client: apply.Client,
        config: OperatorConfig,
        emit: EventFn,
        clock: Callable[[], str] = _now,
        services: ServiceCache | None = None,
    ):
        self.client = client
        self.config = config
        self.emit = emit
        self.clock = clock
        self.services = services
        """The watch-fed services, when the handlers keep them; None: every pass GETs its service."""
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock(self, key: tuple[str, str]) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def forget(self, namespace: str, name: str) -> None:
        with self._locks_guard:
            self._locks.pop((namespace, name), None)
        metrics.TALLY.record(f"{namespace}/{name}", None)

    def reconcile(self, namespace: str, name: str, children: ChildrenFn | None = None) -> Outcome | None:
        """Reconcile the service `namespace/name`; None when it no longer exists.

        The object is read inside the per-service lock, from the service cache (which also holds this operator's
        own status writes, so it is never older than the last one) or, on a miss, from the API server: comparing
        against a status older than the one just written would write it again.
        """
        key = (namespace, name)
        started = time.monotonic()
        with self._lock(key):
            try:
                body = self.services.get(namespace, name) if self.services is not None else None
                if body is None:
                    try:
                        body = self.client.request("GET", apply.SERVICE_RESOURCE.item(namespace, name))
                    except apply.ApiError as error:
                        if error.status == 404:
                            return None
                        raise
                return self._reconcile(body, children)
            except Exception as error:
                metrics.RECONCILE_ERRORS.labels(type(error).__name__).inc()
                raise
            finally:
                metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    def _reconcile(self, body: dict[str, Any], children: ChildrenFn | None) -> Outcome:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        generation = int(meta.get("generation", 1))
        previous = body.get("status") or None

        service: DisaggSpecService | None = None
        try:
            service = parse_service(body)
            violations = [(v.rule, f"{v.field}: {v.message}") for v in validate(service)]
        except pydantic.ValidationError as error:
            violations = schema_violations(error)

        # The operator's watch-fed cache when the handlers have it (no request); a LIST per kind otherwise.
        live = children(namespace, name) if children is not None else apply.list_children(self.client, namespace, name)
        result = apply.SyncResult()
        apply_error: str | None = None
        fingerprint = endpoint = None
        if not violations and service is not None:
            fingerprint = render.fingerprint(service)
            endpoint = render.endpoint(service)
            desired = render.render(service, self.config)
            try:
                # A service never reconciled before (no status) has no children to find: skip the reads.
                if children is not None and previous is not None:
                    live = live + apply.fetch_unseen(self.client, desired, live)
                result = apply.sync(self.client, body, desired, live)
            except apply.ApiError as error:
                apply_error = str(error)
            metrics.CHILD_WRITES.labels("apply").inc(len(result.applied))
            metrics.CHILD_WRITES.labels("prune").inc(len(result.pruned))
        elif previous is not None:
            # Keep reporting what the children run while the spec is rejected.
            fingerprint = previous.get("specFingerprint")
            endpoint = previous.get("endpoint")

        deployments = {
            obj["metadata"]["labels"].get(c.LABEL_ROLE): obj
            for obj in live
            if obj["kind"] == apply.DEPLOYMENT.kind and obj["metadata"]["name"].startswith(f"{name}-")
        }
        observation = status.Observation(generation, violations, deployments, fingerprint, endpoint, apply_error)
        new_status = status.compute(observation, previous, self.clock())
        written = status.changed(new_status, previous)
        if written:
            updated = self.client.patch_status(namespace, name, new_status)
            if self.services is not None:
                self.services.put(updated)
        conditions = {cond["type"]: cond["status"] for cond in new_status["conditions"]}
        metrics.TALLY.record(f"{namespace}/{name}", conditions)
        self._events(body, previous, new_status, violations, result)
        if result.changed or written:
            log.info(
                "reconciled %s/%s: applied=%s pruned=%s status_written=%s violations=%d",
                namespace,
                name,
                result.applied,
                result.pruned,
                written,
                len(violations),
            )
        return Outcome(result.applied, result.pruned, written, violations)

    def _events(
        self,
        body: dict[str, Any],
        previous: dict[str, Any] | None,
        new: dict[str, Any],
        violations: list[tuple[str, str]],
        result: apply.SyncResult,
    ) -> None:
        before = {cond["type"]: cond for cond in (previous or {}).get("conditions", [])}
        after = {cond["type"]: cond for cond in new["conditions"]}
        consistent = after[c.CONDITION_SPEC_CONSISTENT]
        if violations and before.get(c.CONDITION_SPEC_CONSISTENT, {}).get("message") != consistent["message"]:
            for rule, _ in violations:
                metrics.REJECTIONS.labels(rule, "reconcile").inc()
            self.emit(body, "Warning", "SpecRejected", consistent["message"])
        if result.changed:
            self.emit(body, "Normal", "ChildrenApplied", f"applied {result.applied}, pruned {result.pruned}")
        ready = after[c.CONDITION_READY]
        if ready["status"] == "True" and before.get(c.CONDITION_READY, {}).get("status") != "True":
            self.emit(body, "Normal", "Ready", ready["message"])
        degraded = after[c.CONDITION_DEGRADED]
        if degraded["status"] == "True" and before.get(c.CONDITION_DEGRADED, {}).get("message") != degraded["message"]:
            self.emit(body, "Warning", degraded["reason"], degraded["message"])
