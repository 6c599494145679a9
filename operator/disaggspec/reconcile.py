"""One reconcile pass of a DisaggSpecService: parse, validate, render, apply, compute status, write it, emit events.

Steps of `Reconciler.reconcile`:
  1. parse and validate the object (`rejection.check`: the API models, then the rule table), as admission does;
  2. on any problem, change no child, set SpecConfigConsistent=False with the rejection's text;
  3. otherwise render the children (an exception there is a bug: SpecConfigConsistent=False, reason RenderFailed,
     no child changed, no hot retry) and `apply.sync` them against the live ones (writes only what differs, prunes
     what is no longer rendered); live children come from the watch-fed cache, and a rendered child the cache has
     not seen yet is read from the API server first (unless the service has no status yet, i.e. never had
     children), so a lagging cache never causes a write; what would be written is dry-run first, and if the API
     server would refuse any child nothing is written (Degraded=True, reason ChildRefused, naming each child and
     the spec field it comes from) and the pass is retried with backoff;
  4. compute the status from the live Deployments (pure `status.compute`, a typed `DisaggSpecServiceStatus`);
  5. write the status (its `to_wire()` JSON) in one patch, only when it changed;
  6. only then emit Events (reasons from `conditions`), and only for transitions (a resync never repeats them).
The runtime-health conditions (SpecDecodeHealthy, TransferHealthy) are the latest verdict of `servinghealth.Monitor`,
read from memory: the measuring runs on its own thread and requeues a service when its verdict changes.
Passes for one service are serialised by a per-service lock, because events of the service and of its children
arrive on different threads. A pass never creates children for an owner that no longer exists: a service whose uid
is tombstoned (deleted) is skipped, and a 404 on the status write evicts and tombstones it. A service in a denied
namespace (`OperatorConfig.denied_namespaces`) gets no children: Ready=False with reason NamespaceDenied.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from disaggspec import apply, childrefusal, informer, metrics, render, rollout, status
from disaggspec import conditions as r
from disaggspec import constants as c
from disaggspec.api import DisaggSpecService, DisaggSpecServiceStatus, pool
from disaggspec.api.v1alpha1 import RevisionStatus
from disaggspec.apis import AVAILABILITY, ApiAvailability
from disaggspec.childcache import ServiceCache
from disaggspec.conditions import EventReason
from disaggspec.config import OperatorConfig
from disaggspec.rejection import ACCEPTED, Rejection, check
from disaggspec.render import caches
from disaggspec.servinghealth.judge import NOT_MEASURED, Verdict

log = logging.getLogger("disaggspec.reconcile")

ChildrenFn = Callable[[str, str], list[dict[str, Any]]]
"""(namespace, service name) -> the live children, read when the pass holds the service's lock."""
RuntimeHealthFn = Callable[[str, str], Verdict]
"""(namespace, service name) -> the latest runtime-health verdict; never does I/O."""
EventFn = Callable[[dict[str, Any], str, str, str], None]
"""(object, type Normal|Warning, reason, message) -> None."""

_DEGRADED_EVENTS: Mapping[str, EventReason] = {
    r.DEGRADED_APPLY_FAILED.reason: r.EVENT_APPLY_FAILED,
    r.DEGRADED_ROLLOUT_STUCK.reason: r.EVENT_ROLLOUT_STUCK,
    r.DEGRADED_CHILD_REFUSED.reason: r.EVENT_CHILD_REFUSED,
    r.DEGRADED_API_MISSING.reason: r.EVENT_API_MISSING,
}
"""The Warning Event announcing each reason Degraded turns True with."""

_RUNTIME_EVENTS: Mapping[str, tuple[EventReason, EventReason]] = {
    c.CONDITION_SPEC_DECODE_HEALTHY: (r.EVENT_LOW_ACCEPT_LENGTH, r.EVENT_ACCEPT_LENGTH_RECOVERED),
    c.CONDITION_TRANSFER_HEALTHY: (r.EVENT_TRANSFER_FAILURES, r.EVENT_TRANSFER_RECOVERED),
}
"""Per runtime-health condition, the Events of its turning False and of its turning True again after False."""


ROLLBACK_HOLD_SECONDS: tuple[float, ...] = (2.0, 5.0, 15.0, 30.0, 60.0)
"""How long a service whose pass was rolled back waits before writing again (the last one repeats)."""


@dataclass
class _Hold:
    """A service whose last pass created children, was refused and deleted them again: until `until` (monotonic),
    passes of the same generation write nothing. Without it, the rollback's own DELETE events would queue the
    service again at once, and every pass would create and delete the same children (the work queue's backoff only
    spaces retries, not passes that events trigger)."""

    generation: int
    message: str
    until: float
    attempts: int


class HeldOff(Exception):
    """A pass that wrote nothing because its service is on hold; `retry_after` tells the work queue when to retry."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"a child was refused: writing again in {retry_after:.0f}s")
        self.retry_after = retry_after


class ApiMissing(Exception):
    """A pass that wrote nothing because the spec needs an API the cluster does not serve; retried after
    `retry_after` (the informer of that kind lists again as often)."""

    def __init__(self, message: str, retry_after: float = informer.ABSENT_RECHECK_SECONDS) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def missing_api(service: DisaggSpecService, desired: list[dict[str, Any]], availability: ApiAvailability) -> str | None:
    """Why `desired` cannot be applied because the cluster does not serve one of its optional kinds, or None."""
    needs_lws = any(m["kind"] == apply.LEADER_WORKER_SET.kind for m in desired)
    if not needs_lws or not availability.absent(apply.LEADER_WORKER_SET.api_version, apply.LEADER_WORKER_SET.kind):
        return None
    pools = " and ".join(
        f"spec.{role}.nodesPerInstance is {pool(service.spec, role).nodes_per_instance}"
        for role in rollout.POOL_ROLES
        if pool(service.spec, role).nodes_per_instance > 1
    )
    return (
        f"{pools}: a multi-node pool is a LeaderWorkerSet ({apply.LEADER_WORKER_SET.api_version}), which this "
        f"cluster does not serve; install the LeaderWorkerSet controller {c.LWS_MIN_VERSION} or newer "
        "(the chart README, 'Prerequisite for multi-node pools') or set nodesPerInstance to 1. Nothing of this spec "
        "is applied."
    )


def _optional_kind_path(message: str) -> apply.Kind | None:
    """The optional kind whose REST path a request error names, if any."""
    return next((k for k in apply.OWNED_KINDS if k.optional and f"/apis/{k.api_version}/" in message), None)


class _Stale(Exception):
    """The cached service no longer exists as cached; `current` is what the API server holds (None: nothing)."""

    def __init__(self, current: dict[str, Any] | None) -> None:
        super().__init__("stale service")
        self.current = current


def _uid(obj: dict[str, Any]) -> str:
    return str(obj["metadata"].get("uid", ""))


def _creates(desired: list[dict[str, Any]], live: list[dict[str, Any]]) -> bool:
    """Whether applying `desired` over `live` would create an object."""
    known = {apply.ref(obj) for obj in live}
    return any(apply.ref(manifest) not in known for manifest in desired)


def render_failure(error: Exception, stage: str = "rendering the children") -> str:
    """The SpecConfigConsistent message of a render (or validation) that raised."""
    what = f"{type(error).__name__}: {error}"
    return f"{stage} failed: {what}; this is a bug in the operator, please report it"


def model_cache_observation(
    service: DisaggSpecService | None, live: list[dict[str, Any]]
) -> status.ModelCacheObservation | None:
    """The model cache of `service` and its live fill Job, for the ModelCached condition (None: no model cache)."""
    if service is None or service.spec.model.cache is None:
        return None
    if not caches.uses_fill_job(service):
        return status.ModelCacheObservation(None)
    name = caches.job_name(service)
    job = next((obj for obj in live if obj["kind"] == apply.JOB.kind and obj["metadata"]["name"] == name), None)
    return status.ModelCacheObservation(name, job)


def _previous_revisions(previous: dict[str, Any] | None) -> tuple[RevisionStatus, ...]:
    """status.revisions as last written: what a pass that applied nothing keeps reporting."""
    return tuple(RevisionStatus.model_validate(entry) for entry in (previous or {}).get("revisions") or [])


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition_message(status_: dict[str, Any] | None, type_: str) -> str | None:
    for cond in (status_ or {}).get("conditions", []):
        if cond.get("type") == type_:
            return str(cond.get("message"))
    return None


def _bug(body: dict[str, Any], error: Exception, stage: str) -> str:
    """Count and log (with the traceback, once per message) an exception of a pure stage; returns the message."""
    message = render_failure(error, stage)
    metrics.RENDER_FAILURES.inc()
    if _condition_message(body.get("status"), c.CONDITION_SPEC_CONSISTENT) != message:
        meta = body["metadata"]
        log.error("%s/%s: %s failed", meta["namespace"], meta["name"], stage, exc_info=error)
    return message


class Reconciler:
    """Reconciles services through one API client; safe to call from many threads."""

    def __init__(
        self,
        client: apply.Client,
        config: OperatorConfig,
        emit: EventFn,
        *,
        services: ServiceCache,
        clock: Callable[[], str] = _now,
        runtime_health: RuntimeHealthFn | None = None,
        availability: ApiAvailability = AVAILABILITY,
    ):
        self.client = client
        self.config = config
        self.emit = emit
        self.services = services
        """The watch-fed services (with this operator's own status writes); a miss GETs the service."""
        self.clock = clock
        self.availability = availability
        """Which optional APIs the cluster serves (fed by the informers)."""
        self.runtime_health: RuntimeHealthFn = runtime_health or (lambda namespace, name: NOT_MEASURED)
        """The latest runtime-health verdict of a service (`servinghealth.Monitor.verdict`): an in-memory read."""
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._rolled_back: dict[tuple[str, str], set[str]] = {}
        """Per service, uids of children a refused pass created and deleted again, until the cache no longer holds
        them: a pass in between must not take them for live (it would skip re-creating them, or create the others
        alone and leave the service half-applied). Touched only under the service's lock."""
        self._holds: dict[tuple[str, str], _Hold] = {}
        """Services whose last pass was rolled back, and until when they write nothing (see `_Hold`)."""

    def _lock(self, key: tuple[str, str]) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def forget(self, namespace: str, name: str) -> None:
        with self._locks_guard:
            self._locks.pop((namespace, name), None)
            self._rolled_back.pop((namespace, name), None)
            self._holds.pop((namespace, name), None)
        metrics.TALLY.record(f"{namespace}/{name}", None)
        metrics.record_pool_replicas(namespace, name, None)
        metrics.forget_runtime_health(namespace, name)

    def reconcile(self, namespace: str, name: str, children: ChildrenFn) -> float | None:
        """Reconcile the service `namespace/name` (nothing to do when it no longer exists); returns the seconds after
        which it must be reconciled again even if nothing changes (a rollout's progress deadline), or None.

        The object is read inside the per-service lock, from the service cache (which also holds this operator's
        own status writes, so it is never older than the last one) or, on a miss, from the API server: comparing
        against a status older than the one just written would write it again.
        """
        key = (namespace, name)
        started = time.monotonic()
        with self._lock(key):
            try:
                body = self.services.get(namespace, name)
                confirmed = body is None
                if body is None:
                    body = self._read(namespace, name)
                    if body is None:
                        return None  # gone: nothing to create children for
                if self.services.tombstoned(_uid(body)):
                    return None  # deleted after this pass was queued: its children are being garbage-collected
                try:
                    return self._reconcile(body, children, confirmed)
                except _Stale as stale:
                    # The cached service is a ghost (deleted while the watch was cut off, or replaced by a new
                    # object of the same name): forget it for good, and reconcile what exists instead, if anything.
                    log.info("%s/%s (uid %s) no longer exists: evicting it", namespace, name, _uid(body))
                    self.services.delete(body)
                    if stale.current is None:
                        self.forget(namespace, name)
                        return None
                    self.services.put(stale.current)
                    return self._reconcile(stale.current, children, confirmed=True)
            except Exception as error:
                metrics.RECONCILE_ERRORS.labels(type(error).__name__).inc()
                raise
            finally:
                metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    def _read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The service as the API server holds it now; None when it does not exist."""
        try:
            return self.client.request("GET", apply.SERVICE_RESOURCE.item(namespace, name))
        except apply.ApiError as error:
            if error.status == 404:
                return None
            raise

    def _reconcile(self, body: dict[str, Any], children: ChildrenFn, confirmed: bool = False) -> float | None:
        """One pass over `body`; `confirmed`: it was just read from the API server (not from the cache). Returns
        when to run again although nothing changes (`rollout.Plan.wake_after`)."""
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        generation = int(meta.get("generation", 1))
        previous = body.get("status") or None

        render_error: str | None = None
        try:
            service, rejection = check(body)
        except Exception as error:  # the rule table is pure too: a crash there is a bug, reported like a render's
            service, rejection = None, ACCEPTED
            render_error = _bug(body, error, "validating the spec")
        # The operator's watch-fed cache: no request.
        live = children(namespace, name)
        gone = self._rolled_back.get((namespace, name))
        if gone:
            held = [obj for obj in live if obj["metadata"].get("uid") in gone]
            live = [obj for obj in live if obj["metadata"].get("uid") not in gone]
            if not held:  # the cache has seen every rollback delete
                del self._rolled_back[(namespace, name)]
        result = apply.SyncResult()
        apply_error: str | None = None
        failed: Exception | None = None
        fingerprint = endpoint = None
        refused: str | None = None
        absent_api: str | None = None
        denied = namespace in self.config.denied_namespaces
        desired: list[dict[str, Any]] | None = None
        revisions = rollout.observe(name, live)
        plan: rollout.Plan | None = None
        # A service being deleted gets no new children (they would only be garbage-collected again).
        if not rejection and service is not None and not denied and not meta.get("deletionTimestamp"):
            try:
                fingerprint = render.fingerprint(service)
                endpoint = render.endpoint(service)
                plan = rollout.plan(
                    service, fingerprint, revisions, (previous or {}).get("revisions") or [], self.clock()
                )
                desired = render.render(service, self.config, plan.revisions)
            except Exception as error:  # render is pure: whatever it raises is a bug, never a reason to crash
                render_error = _bug(body, error, "rendering the children")
        hold = self._holds.get((namespace, name))
        if hold is not None and (hold.generation != generation or desired is None):
            hold = None  # an edit (or a spec with nothing to apply) is a new attempt
            del self._holds[(namespace, name)]
        if desired is not None and service is not None:
            absent_api = missing_api(service, desired, self.availability)
        if absent_api is not None:
            failed = ApiMissing(absent_api)
        elif desired is not None and hold is not None and time.monotonic() < hold.until:
            refused, failed = hold.message, HeldOff(hold.until - time.monotonic())
        elif desired is not None and service is not None:
            try:
                # A service never reconciled before (no status) has no children to find: skip the reads.
                if previous is not None:
                    live = live + apply.fetch_unseen(self.client, desired, live)
                if not confirmed and _creates(desired, live):
                    # Creating a child is the one write that can outlive a dead owner (the garbage collector
                    # deletes it again, its event queues the owner, and so on): make sure the owner exists first.
                    current = self._read(namespace, name)
                    if current is None or _uid(current) != _uid(body):
                        raise _Stale(current)
                kept = plan.kept(revisions) if plan is not None else []
                apply.sync(self.client, body, desired, live, result=result, keep=kept)
            except apply.ChildrenRefused as error:
                outcome = childrefusal.ROLLED_BACK if error.rolled_back else childrefusal.NOTHING_APPLIED
                refused, failed = childrefusal.explain(error.refusals, desired, body.get("spec"), outcome), error
                if error.rolled_back_uids:
                    self._rolled_back.setdefault((namespace, name), set()).update(error.rolled_back_uids)
                    attempts = hold.attempts + 1 if hold is not None else 1
                    wait = ROLLBACK_HOLD_SECONDS[min(attempts, len(ROLLBACK_HOLD_SECONDS)) - 1]
                    self._holds[(namespace, name)] = _Hold(generation, refused, time.monotonic() + wait, attempts)
            except apply.ApiError as error:
                missing_kind = _optional_kind_path(str(error)) if error.status == 404 else None
                if missing_kind is not None:
                    # The API went away before its informer noticed (it lists again every 30 s): same as absent.
                    self.availability.mark(missing_kind, present=False)
                    absent_api = missing_api(service, desired, self.availability)
                if absent_api is not None:
                    failed = ApiMissing(absent_api)
                else:
                    apply_error, failed = str(error), error
            else:
                self._holds.pop((namespace, name), None)
            metrics.CHILD_WRITES.labels("apply").inc(len(result.applied))
            metrics.CHILD_WRITES.labels("prune").inc(len(result.pruned) + len(result.rolled_back))
        if desired is None or refused is not None or absent_api is not None:
            # Nothing of this spec was applied: keep reporting what the children run (nothing, for a new service).
            fingerprint = (previous or {}).get("specFingerprint")
            endpoint = (previous or {}).get("endpoint")
            plan = None
        serving = revisions.get(fingerprint or "")
        deployments = dict(serving.deployments) if serving is not None else {}
        observation = status.Observation(
            generation,
            rejection,
            deployments,
            fingerprint,
            endpoint,
            apply_error,
            namespace if denied else None,
            refused=refused,
            missing_api=absent_api,
            render_error=render_error,
            runtime=self.runtime_health(namespace, name),
            # Only for a spec that rendered: a rejected spec's Job name says nothing about the children that run.
            model_cache=model_cache_observation(service, live) if desired is not None else None,
            revisions=plan.status if plan is not None else _previous_revisions(previous),
            held=plan.held if plan is not None else None,
            draining=plan.draining if plan is not None else (),
            desired=rollout.desired_replicas(service) if plan is not None and service is not None else None,
        )
        new_status = status.compute(observation, previous, self.clock())
        written = status.changed(new_status, previous)
        if written:
            try:
                updated = self.client.patch_status(namespace, name, new_status.to_wire())
            except apply.ApiError as error:
                if error.status != 404:
                    raise
                # Deleted while this pass ran: never compute (or create children) for it again.
                log.info("%s/%s was deleted during its pass", namespace, name)
                self.services.delete(body)
                self.forget(namespace, name)
                return None
            self.services.put(updated)
        metrics.TALLY.record(f"{namespace}/{name}", {cond.type: cond.status for cond in new_status.conditions})
        pools = {role: getattr(new_status, role) for role in status.POOLS}
        metrics.record_pool_replicas(
            namespace, name, {role: (pool.replicas or 0, pool.ready_replicas or 0) for role, pool in pools.items()}
        )
        self._events(body, previous, new_status, rejection, result)
        if result.changed or written:
            log.info(
                "reconciled %s/%s: applied=%s pruned=%s rolled_back=%s status_written=%s violations=%d",
                namespace,
                name,
                result.applied,
                result.pruned,
                result.rolled_back,
                written,
                len(rejection.problems),
            )
        if failed is not None:
            # Status and Events say what failed; raising hands the pass back to the work queue, which retries it
            # with backoff (or after the server's Retry-After) instead of waiting for the next event or resync.
            raise failed
        return plan.wake_after if plan is not None else None

    def _emit(self, body: dict[str, Any], event: EventReason, message: str) -> None:
        self.emit(body, event.type, event.reason, message)

    def _events(
        self,
        body: dict[str, Any],
        previous: dict[str, Any] | None,
        new: DisaggSpecServiceStatus,
        rejection: Rejection,
        result: apply.SyncResult,
    ) -> None:
        before = {cond["type"]: cond for cond in (previous or {}).get("conditions", [])}
        after = {cond.type: cond for cond in new.conditions}
        consistent = after[c.CONDITION_SPEC_CONSISTENT]
        if rejection and before.get(c.CONDITION_SPEC_CONSISTENT, {}).get("message") != consistent.message:
            metrics.count_rejection(rejection.rules, "reconcile")
            self._emit(body, r.EVENT_SPEC_REJECTED, rejection.text)
        was = before.get(c.CONDITION_SPEC_CONSISTENT, {}).get("message")
        if consistent.reason == r.CONSISTENT_RENDER_FAILED.reason and was != consistent.message:
            self._emit(body, r.EVENT_RENDER_FAILED, consistent.message or "")
        if result.changed and not result.rolled_back:
            self._emit(body, r.EVENT_CHILDREN_APPLIED, f"applied {result.applied}, pruned {result.pruned}")
        progressing = after[c.CONDITION_PROGRESSING]
        was_progressing = before.get(c.CONDITION_PROGRESSING, {})
        if progressing.reason == r.PROGRESSING_ROLLOUT_HELD.reason and was_progressing.get("reason") != (
            r.PROGRESSING_ROLLOUT_HELD.reason
        ):
            self._emit(body, r.EVENT_ROLLOUT_HELD, progressing.message or "")
        self._revision_events(body, previous, new)
        ready = after[c.CONDITION_READY]
        if ready.status == "True" and before.get(c.CONDITION_READY, {}).get("status") != "True":
            self._emit(body, r.EVENT_READY, ready.message or "")
        if ready.reason == r.READY_NAMESPACE_DENIED.reason and before.get(c.CONDITION_READY, {}).get("reason") != (
            r.READY_NAMESPACE_DENIED.reason
        ):
            self._emit(body, r.EVENT_NAMESPACE_DENIED, ready.message or "")
        degraded = after[c.CONDITION_DEGRADED]
        if degraded.status == "True" and before.get(c.CONDITION_DEGRADED, {}).get("message") != degraded.message:
            self._emit(body, _DEGRADED_EVENTS[str(degraded.reason)], degraded.message or "")
        cached, was_cached = after.get(c.CONDITION_MODEL_CACHED), before.get(c.CONDITION_MODEL_CACHED, {})
        if cached is not None and cached.status == "True" and was_cached.get("status") != "True":
            self._emit(body, r.EVENT_MODEL_CACHE_FILLED, cached.message or "")
        if (
            cached is not None
            and cached.reason == r.MODEL_CACHED_FILL_FAILED.reason
            and was_cached.get("message") != cached.message
        ):
            self._emit(body, r.EVENT_MODEL_CACHE_FILL_FAILED, cached.message or "")
        for type_, (unhealthy, recovered) in _RUNTIME_EVENTS.items():
            now_status, was = after[type_].status, before.get(type_, {}).get("status")
            if now_status == "False" and was != "False":
                self._emit(body, unhealthy, after[type_].message or "")
            elif now_status == "True" and was == "False":
                self._emit(body, recovered, after[type_].message or "")

    def _revision_events(
        self, body: dict[str, Any], previous: dict[str, Any] | None, new: DisaggSpecServiceStatus
    ) -> None:
        """RevisionCreated for a revision that starts next to a serving one, RevisionRetired for one removed."""
        had = [str(entry.get("name")) for entry in (previous or {}).get("revisions") or []]
        has = [revision.name for revision in new.revisions]
        if had and has and has[0] not in had:
            self._emit(
                body,
                r.EVENT_REVISION_CREATED,
                f"revision {has[0]} started for the new spec; {', '.join(had)} keeps serving until it is replaced",
            )
        for name in had:
            if name not in has:
                self._emit(body, r.EVENT_REVISION_RETIRED, f"revision {name} was drained and removed")
