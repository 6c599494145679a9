"""One reconcile pass of a DisaggSpecService, as named stages that pass one frozen `Outcome` along.

`Reconciler.reconcile` reads the service (from the watch-fed cache, or the API server on a miss) under a
per-service lock (events of a service and of its children arrive on different threads), skips a tombstoned one,
then runs the stages:
  1. **decide** the desired state, with no write: parse and check the spec (`rejection.check`, as admission does);
     nothing for a rejected spec, a denied namespace (`OperatorConfig.denied_namespaces`) or a service being
     deleted; otherwise plan the revisions (`rollout.plan`) and render them (a crash of either pure step is a bug:
     SpecConfigConsistent=False, reason RenderFailed, nothing changed, no hot retry), and note an optional API the
     cluster does not serve (`guards.missing_api`: nothing of such a spec is applied);
  2. **write** it: unless a guard stops the pass (`guards`: a hold after a rollback, a missing API, an owner that no
     longer exists as cached), read the rendered children the cache has not seen yet (only for a service that was
     reconciled before), then `apply.sync`: dry-run everything, write only what differs, prune what is no longer
     rendered; a child the API server refuses writes nothing (or rolls back what the pass created), and Degraded
     names the child and the spec field it comes from;
  3. **observe**: compute the whole status (pure `status.compute`, the typed `DisaggSpecServiceStatus`) from the
     live workloads, the plan and the write's outcome; a spec that was not applied keeps reporting what runs;
  4. **publish**: write the status in one patch, only when it changed (a 404 there means the service was deleted
     during the pass: it is evicted and tombstoned); then metrics; then the Events of the transitions
     (`events.transitions`), never before the write succeeded; a failed write stage is re-raised last, so the work
     queue retries it with backoff (or after `retry_after`).
The runtime-health conditions (SpecDecodeHealthy, TransferHealthy) are the latest verdict of `servinghealth.Monitor`,
read from memory. The pass's only API writes go through `apply` (children) and `Client.patch_status` (status).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from disaggspec import apply, childrefusal, metrics, render, rollout, scaletargets, status
from disaggspec import conditions as r
from disaggspec import constants as c
from disaggspec.api import DisaggSpecService, DisaggSpecServiceStatus
from disaggspec.api.v1alpha1 import AutoscalingStatus, PlannerDecisionStatus
from disaggspec.config import OperatorConfig
from disaggspec.reconcile import events, guards
from disaggspec.reconcile.guards import ApiMissing, Guards, ServiceKey, Stale
from disaggspec.rejection import ACCEPTED, Rejection, check
from disaggspec.render import caches
from disaggspec.runtime.availability import ApiAvailability
from disaggspec.runtime.caches import DisaggSpecServiceCache
from disaggspec.runtime.controller import ChildrenFn
from disaggspec.servinghealth.judge import NOT_MEASURED, Verdict

log = logging.getLogger("disaggspec.reconcile")

RuntimeHealthFn = Callable[[str, str], Verdict]
"""(namespace, service name) -> the latest runtime-health verdict; never does I/O."""
EventFn = Callable[[dict[str, Any], str, str, str], None]
"""(object, type Normal|Warning, reason, message) -> None."""
PlannerFn = Callable[[str, str], tuple[PlannerDecisionStatus | None, dict[str, Any] | None]]
"""(namespace, service name) -> the planner's last decision and what it learned, from memory (None, None: nothing
yet in this process, so status keeps what it holds); never does I/O."""


@dataclass(frozen=True)
class Outcome:
    """What a pass has decided and done so far; each stage returns a copy with its part filled in."""

    body: dict[str, Any]
    """The service as this pass reconciles it (cached, or just read)."""
    confirmed: bool
    """`body` was just read from the API server, not from the cache."""
    previous: DisaggSpecServiceStatus | None
    """The status as last written, typed (`status.parse_previous`)."""
    live: list[dict[str, Any]]
    """The live children (the cache's, without rolled-back ones; after the write stage, with the unseen ones read)."""
    revisions: Mapping[str, rollout.LiveRevision]
    """The live revisions by fingerprint (`rollout.observe`)."""
    service: DisaggSpecService | None = None
    """The parsed spec; None when it could not be parsed."""
    rejection: Rejection = ACCEPTED
    render_error: str | None = None
    """A crash of a pure stage (validation, planning, rendering): a bug, reported in SpecConfigConsistent."""
    denied: bool = False
    """The namespace is denied to the operator."""
    plan: rollout.Plan | None = None
    desired: list[dict[str, Any]] | None = None
    """The rendered children; None when nothing is to be applied."""
    fingerprint: str | None = None
    endpoint: str | None = None
    missing_api: str | None = None
    """Why the spec cannot be applied: it needs an API the cluster does not serve."""
    refused: str | None = None
    """Why the API server refuses a child (or a hold repeats it); nothing of the spec was applied."""
    apply_error: str | None = None
    failed: Exception | None = None
    """What the write stage raises at the end of the pass (the work queue retries)."""
    result: apply.SyncResult = field(default_factory=apply.SyncResult)
    targets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The live scale targets by role (`scaletargets`)."""
    sizes: Mapping[str, scaletargets.PoolScale] = field(default_factory=dict)
    """Each pool's size under spec.autoscaling (empty without it); `service` already runs at these sizes."""

    @property
    def key(self) -> ServiceKey:
        return self.body["metadata"]["namespace"], self.body["metadata"]["name"]

    @property
    def generation(self) -> int:
        return int(self.body["metadata"].get("generation", 1))

    @property
    def applied(self) -> bool:
        """The whole spec was applied (or found applied): status reports its fingerprint, endpoint and plan."""
        return self.desired is not None and self.refused is None and self.missing_api is None


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


def _pool_pods(revisions: Mapping[str, rollout.LiveRevision]) -> dict[str, tuple[int, int]]:
    """(pods, ready pods) of each pool over every revision: what the pool runs, for its scale target's status."""
    return {
        role: (
            sum(revision.count(role).pods for revision in revisions.values()),
            sum(revision.count(role).ready for revision in revisions.values()),
        )
        for role in c.POOLS
    }


def _status_patch(new: DisaggSpecServiceStatus, previous: DisaggSpecServiceStatus | None) -> dict[str, Any]:
    """The merge patch that makes the status `new`: a top-level field `previous` had and `new` lacks (the
    autoscaling block once spec.autoscaling is unset) is sent as null, which a merge patch needs to remove it."""
    wire = new.to_wire()
    for key in previous.to_wire() if previous is not None else {}:
        wire.setdefault(key, None)
    return wire


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Reconciler:
    """Reconciles services through one API client; safe to call from many threads."""

    def __init__(
        self,
        client: apply.Client,
        config: OperatorConfig,
        emit: EventFn,
        *,
        services: DisaggSpecServiceCache,
        clock: Callable[[], str] = _now,
        runtime_health: RuntimeHealthFn | None = None,
        availability: ApiAvailability | None = None,
        planner: PlannerFn | None = None,
    ):
        self.client = client
        self.config = config
        self.emit = emit
        self.services = services
        """The watch-fed services (with this operator's own status writes); a miss GETs the service."""
        self.clock = clock
        self.availability = availability if availability is not None else ApiAvailability()
        """Which optional APIs the cluster serves (fed by the informers)."""
        self.runtime_health: RuntimeHealthFn = runtime_health or (lambda namespace, name: NOT_MEASURED)
        """The latest runtime-health verdict of a service (`servinghealth.Monitor.verdict`): an in-memory read."""
        self.planner: PlannerFn = planner or (lambda namespace, name: (None, None))
        """The planner's last decision and learned capacity of a service: an in-memory read."""
        self.guards = Guards()
        """Holds and rolled-back children per service; touched only under the service's lock."""
        self._locks: dict[ServiceKey, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock(self, key: ServiceKey) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def forget(self, namespace: str, name: str) -> None:
        with self._locks_guard:
            self._locks.pop((namespace, name), None)
            self.guards.forget((namespace, name))
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
        started = time.monotonic()
        with self._lock((namespace, name)):
            try:
                body = self.services.get(namespace, name)
                confirmed = body is None
                if body is None:
                    body = self._read(namespace, name)
                    if body is None:
                        return None  # gone: nothing to create children for
                if self.services.tombstoned(guards.uid(body)):
                    return None  # deleted after this pass was queued: its children are being garbage-collected
                try:
                    return self._pass(body, children, confirmed)
                except Stale as stale:
                    # The cached service is a ghost (deleted while the watch was cut off, or replaced by a new
                    # object of the same name): forget it for good, and reconcile what exists instead, if anything.
                    log.info("%s/%s (uid %s) no longer exists: evicting it", namespace, name, guards.uid(body))
                    self.services.delete(body)
                    if stale.current is None:
                        self.forget(namespace, name)
                        return None
                    self.services.put(stale.current)
                    return self._pass(stale.current, children, confirmed=True)
            except Exception as error:
                metrics.RECONCILE_ERRORS.labels(type(error).__name__).inc()
                raise
            finally:
                metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    def _read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The service as the API server holds it now; None when it does not exist."""
        try:
            return self.client.request("GET", apply.DSS_RESOURCE.item(namespace, name))
        except apply.ApiError as error:
            if error.status == 404:
                return None
            raise

    def _pass(self, body: dict[str, Any], children: ChildrenFn, confirmed: bool) -> float | None:
        """The stages of one pass (see the module docstring); returns `rollout.Plan.wake_after` of what was applied."""
        outcome = self._decide(body, children, confirmed)
        outcome = self._write(outcome)
        return self._publish(outcome, self._observe(outcome))

    # ---- 1. decide ----------------------------------------------------------------------------------------------

    def _decide(self, body: dict[str, Any], children: ChildrenFn, confirmed: bool) -> Outcome:
        """What this pass should apply, from the spec and the live children; writes nothing."""
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        live = self.guards.without_rolled_back((namespace, name), children(namespace, name))
        outcome = Outcome(
            body=body,
            confirmed=confirmed,
            previous=status.parse_previous(body.get("status")),
            live=live,
            revisions=self._with_router_pods(namespace, name, rollout.observe(name, live)),
            denied=namespace in self.config.denied_namespaces,
        )
        try:
            service, rejection = check(body)
        except Exception as error:  # the rule table is pure too: a crash there is a bug, reported like a render's
            return dataclasses.replace(outcome, render_error=self._bug(outcome, error, "validating the spec"))
        outcome = dataclasses.replace(outcome, service=service, rejection=rejection)
        # A service being deleted gets no new children (they would only be garbage-collected again).
        if rejection or service is None or outcome.denied or meta.get("deletionTimestamp"):
            return outcome
        try:
            # Under spec.autoscaling the pools run the scale targets' sizes: everything below sees them as replicas.
            targets = scaletargets.live_targets(name, live)
            service, sizes = scaletargets.scaled(service, targets)
            outcome = dataclasses.replace(outcome, service=service, targets=targets, sizes=sizes)
            fingerprint = render.fingerprint(service)
            endpoint = render.endpoint(service)
            previous_revisions = outcome.previous.revisions if outcome.previous is not None else []
            timing = render.rollout_timing(service)
            plan = rollout.plan(service, fingerprint, outcome.revisions, previous_revisions, self.clock(), timing)
            desired = render.render(service, self.config, plan.revisions)
        except Exception as error:  # render is pure: whatever it raises is a bug, never a reason to crash
            return dataclasses.replace(outcome, render_error=self._bug(outcome, error, "rendering the children"))
        return dataclasses.replace(
            outcome,
            fingerprint=fingerprint,
            endpoint=endpoint,
            plan=plan,
            desired=desired,
            missing_api=guards.missing_api(service, desired, self.availability),
        )

    def _with_router_pods(
        self, namespace: str, name: str, revisions: Mapping[str, rollout.LiveRevision]
    ) -> Mapping[str, rollout.LiveRevision]:
        """`revisions`, with the routers being retired on an API server that counts no terminating pods (before
        Kubernetes 1.35) counted from a LIST of the service's router pods (`rollout.router_pods_needed`): the pools
        of a retiring revision go when its last router pod is gone, as with status.terminatingReplicas, not after a
        fixed wait. No LIST otherwise; a LIST the API server refuses leaves the fixed wait."""
        needed = rollout.router_pods_needed(revisions)
        if not needed:
            return revisions
        query = {"labelSelector": f"{c.LABEL_SERVICE}={name},{c.LABEL_ROLE}={c.ROLE_ROUTER}"}
        try:
            listed = self.client.request("GET", f"/api/v1/namespaces/{namespace}/pods", query=query)
        except apply.ApiError as error:
            log.warning(
                "%s/%s: cannot list the router pods (%s): a retiring revision waits its fixed time",
                namespace,
                name,
                error,
            )
            return revisions
        return rollout.with_router_pods(revisions, needed, listed.get("items") or [])

    def _bug(self, outcome: Outcome, error: Exception, stage: str) -> str:
        """Count and log (with the traceback, once per message) an exception of a pure stage; returns the message."""
        message = render_failure(error, stage)
        metrics.RENDER_FAILURES.inc()
        written = status.previous_condition(outcome.previous, c.CONDITION_SPEC_CONSISTENT)
        if written is None or written.message != message:
            namespace, name = outcome.key
            log.error("%s/%s: %s failed", namespace, name, stage, exc_info=error)
        return message

    # ---- 2. write -----------------------------------------------------------------------------------------------

    def _write(self, outcome: Outcome) -> Outcome:
        """Apply the decided children, unless a guard stops the pass."""
        hold = self.guards.hold(outcome.key, outcome.generation, applies=outcome.desired is not None)
        if outcome.missing_api is not None:
            return dataclasses.replace(outcome, failed=ApiMissing(outcome.missing_api))
        if outcome.desired is None or outcome.service is None:
            return outcome
        held_off = self.guards.held_off(hold)
        if hold is not None and held_off is not None:
            return dataclasses.replace(outcome, refused=hold.message, failed=held_off)
        return self._apply(outcome, outcome.service, outcome.desired)

    def _apply(self, outcome: Outcome, service: DisaggSpecService, desired: list[dict[str, Any]]) -> Outcome:
        namespace, name = outcome.key
        result = apply.SyncResult()
        live = outcome.live
        try:
            # A service never reconciled before (no status) has no children to find: skip the reads.
            if outcome.body.get("status"):
                live = live + apply.fetch_unseen(self.client, desired, live)
            guards.check_owner(
                outcome.body,
                lambda: self._read(namespace, name),
                confirmed=outcome.confirmed,
                creating=guards.creates(desired, live),
            )
            kept = outcome.plan.kept(outcome.revisions) if outcome.plan is not None else []
            # The scale targets are only read by the pass (their replicas belong to the autoscaler): never applied,
            # pruned with the other children once spec.autoscaling is unset.
            kept = [*kept, *(dict(target) for target in outcome.targets.values())] if outcome.sizes else kept
            apply.sync(self.client, outcome.body, desired, live, result=result, keep=kept)
            if outcome.sizes:
                pods = _pool_pods(outcome.revisions)
                result.applied.extend(
                    scaletargets.sync(self.client, outcome.body, service, outcome.targets, outcome.sizes, pods)
                )
        except apply.ChildrenRefused as error:
            how = childrefusal.ROLLED_BACK if error.rolled_back else childrefusal.NOTHING_APPLIED
            refused = childrefusal.explain(error.refusals, desired, outcome.body.get("spec"), how)
            if error.rolled_back_uids:
                self.guards.rolled_back(outcome.key, error.rolled_back_uids, outcome.generation, refused)
            outcome = dataclasses.replace(outcome, refused=refused, failed=error)
        except apply.ApiError as error:
            outcome = self._apply_failed(outcome, service, desired, error)
        else:
            self.guards.applied(outcome.key)
        metrics.CHILD_WRITES.labels("apply").inc(len(result.applied))
        metrics.CHILD_WRITES.labels("prune").inc(len(result.pruned) + len(result.rolled_back))
        return dataclasses.replace(outcome, live=live, result=result)

    def _apply_failed(
        self, outcome: Outcome, service: DisaggSpecService, desired: list[dict[str, Any]], error: apply.ApiError
    ) -> Outcome:
        """A request of the write failed: an optional API that went away before its informer noticed (it lists
        again every 30 s) is a missing API; anything else is an apply error."""
        missing_kind = guards.optional_kind_path(str(error)) if error.status == 404 else None
        if missing_kind is not None:
            self.availability.mark(missing_kind, present=False)
            absent = guards.missing_api(service, desired, self.availability)
            if absent is not None:
                return dataclasses.replace(outcome, missing_api=absent, failed=ApiMissing(absent))
        return dataclasses.replace(outcome, apply_error=str(error), failed=error)

    # ---- 3. observe ---------------------------------------------------------------------------------------------

    def _observe(self, outcome: Outcome) -> DisaggSpecServiceStatus:
        """The whole new status; a spec that was not applied keeps reporting what the children run (nothing, for a
        new service)."""
        previous, service = outcome.previous, outcome.service
        plan = outcome.plan if outcome.applied else None
        fingerprint = outcome.fingerprint if outcome.applied else (previous.spec_fingerprint if previous else None)
        endpoint = outcome.endpoint if outcome.applied else (previous.endpoint if previous else None)
        serving = outcome.revisions.get(fingerprint or "")
        namespace, name = outcome.key
        observation = status.Observation(
            outcome.generation,
            outcome.rejection,
            dict(serving.deployments) if serving is not None else {},
            fingerprint,
            endpoint,
            outcome.apply_error,
            namespace if outcome.denied else None,
            refused=outcome.refused,
            missing_api=outcome.missing_api,
            render_error=outcome.render_error,
            runtime=self.runtime_health(namespace, name),
            # Only for a spec that rendered: a rejected spec's Job name says nothing about the children that run.
            model_cache=model_cache_observation(service, outcome.live) if outcome.desired is not None else None,
            revisions=plan.status if plan is not None else tuple(previous.revisions if previous else ()),
            held=plan.held if plan is not None else None,
            draining=plan.draining if plan is not None else (),
            desired=rollout.desired_replicas(service) if plan is not None and service is not None else None,
            autoscaling=self._autoscaling_status(outcome) if outcome.sizes else None,
        )
        return status.compute(observation, previous, self.clock())

    def _autoscaling_status(self, outcome: Outcome) -> AutoscalingStatus:
        """The sizes, and the planner's last decision and learning (what status holds until this process has its
        own, so a restart or a failover keeps them)."""
        namespace, name = outcome.key
        decision, learned = self.planner(namespace, name)
        held = outcome.previous.autoscaling if outcome.previous is not None else None
        scaling = outcome.service.spec.autoscaling if outcome.service is not None else None
        return AutoscalingStatus(
            mode=scaling.mode if scaling is not None else None,
            prefill=outcome.sizes[c.ROLE_PREFILL].status(),
            decode=outcome.sizes[c.ROLE_DECODE].status(),
            last_decision=decision or (held.last_decision if held is not None else None),
            learned=learned or (held.learned if held is not None else None),
        )

    # ---- 4. publish ---------------------------------------------------------------------------------------------

    def _publish(self, outcome: Outcome, new: DisaggSpecServiceStatus) -> float | None:
        """Write the status if it changed, then metrics and Events; re-raise what the write stage failed with."""
        namespace, name = outcome.key
        written = status.changed(new, outcome.previous)
        if written:
            try:
                updated = self.client.patch_status(namespace, name, _status_patch(new, outcome.previous))
            except apply.ApiError as error:
                if error.status != 404:
                    raise
                # Deleted while this pass ran: never compute (or create children) for it again.
                log.info("%s/%s was deleted during its pass", namespace, name)
                self.services.delete(outcome.body)
                self.forget(namespace, name)
                return None
            self.services.put(updated)
        statuses: dict[str, str] = {cond.type: cond.status for cond in new.conditions}
        metrics.TALLY.record(f"{namespace}/{name}", statuses)
        metrics.record_runtime_conditions(namespace, name, statuses)
        pools = {role: getattr(new, role) for role in c.ROLES}
        metrics.record_pool_replicas(
            namespace, name, {role: (pool.replicas or 0, pool.ready_replicas or 0) for role, pool in pools.items()}
        )
        for event in events.transitions(outcome.previous, new, outcome.rejection, outcome.result):
            if event.reason == r.EVENT_SPEC_REJECTED:
                metrics.count_rejection(outcome.rejection.rules, "reconcile")
            self.emit(outcome.body, event.reason.type, event.reason.reason, event.message)
        result = outcome.result
        if result.changed or written:
            log.info(
                "reconciled %s/%s: applied=%s pruned=%s rolled_back=%s status_written=%s violations=%d",
                namespace,
                name,
                result.applied,
                result.pruned,
                result.rolled_back,
                written,
                len(outcome.rejection.problems),
            )
        if outcome.failed is not None:
            # Status and Events say what failed; raising hands the pass back to the work queue, which retries it
            # with backoff (or after the server's Retry-After) instead of waiting for the next event or resync.
            raise outcome.failed
        plan = outcome.plan if outcome.applied else None
        return plan.wake_after if plan is not None else None
