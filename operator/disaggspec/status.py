"""Computes a DisaggSpecService's status from what reconcile saw; pure: no clock, no I/O.

Inputs are the spec generation, the spec's rejection (empty when it passed the rules), the live Deployments of the
two pools and the router, the model cache's fill Job (with spec.model.cache), and the outcome of applying the
children. Output is the whole status as the typed model `DisaggSpecServiceStatus` with the six conditions (the
runtime-health pair comes from `Observation.runtime`), plus ModelCached when a model cache is set, whose
reasons all come from `conditions`; the caller writes its
`to_wire()` JSON. A condition's `lastTransitionTime` is carried over from the previous status unless its `status`
changed, so a resync that sees nothing new computes exactly the previous status and the caller writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

from disaggspec import conditions as r
from disaggspec import constants as c
from disaggspec.api.v1alpha1 import (
    AutoscalingStatus,
    Condition,
    DisaggSpecServiceStatus,
    PoolStatus,
    RevisionStatus,
    SpecDecodeStatus,
)
from disaggspec.conditions import ConditionReason
from disaggspec.rejection import Rejection
from disaggspec.servinghealth.judge import NOT_MEASURED, Verdict

# The Deployment controller's own condition vocabulary (apps/v1), read to tell a stuck rollout; never written.
_DEPLOYMENT_PROGRESSING = "Progressing"
_DEPLOYMENT_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
_DEPLOYMENT_REPLICA_FAILURE = "ReplicaFailure"


_NOT_MEASURED = frozenset({r.SPEC_DECODE_NOT_MEASURED.reason, r.TRANSFER_NOT_MEASURED.reason})
_RUNTIME = frozenset({c.CONDITION_SPEC_DECODE_HEALTHY, c.CONDITION_TRANSFER_HEALTHY})

_JOB_COMPLETE = "Complete"
_JOB_FAILED = "Failed"


@dataclass(frozen=True)
class ModelCacheObservation:
    """The model cache as reconcile saw it."""

    job_name: str | None
    """The fill Job the spec renders; None for a node-local (hostPath) cache, which the pool pods fill themselves."""
    job: Mapping[str, Any] | None = None
    """That Job as live (None: not created yet, or not seen yet)."""


@dataclass(frozen=True)
class Observation:
    """Everything one reconcile pass learned, as plain data."""

    generation: int
    rejection: Rejection
    """Why the spec is refused; empty (`rejection.ACCEPTED`) when it is consistent."""
    deployments: Mapping[str, Mapping[str, Any] | None]
    """Live Deployment per role (None when absent)."""
    fingerprint: str | None
    endpoint: str | None
    apply_error: str | None = None
    denied_namespace: str | None = None
    """Set when the service's namespace is denied to the operator (no children are created there)."""
    refused: str | None = None
    missing_api: str | None = None
    """Why the spec cannot be applied: it needs an API the cluster does not serve (`runtime.availability`); nothing
    was applied."""
    """Why the API server refuses a child (`childrefusal.explain`), when it does; nothing of the pass was applied."""
    render_error: str | None = None
    """The error rendering raised (a bug), when it did; no child was changed."""
    runtime: Verdict = NOT_MEASURED
    """The latest runtime-health verdict on the running pods (`servinghealth`), measured off the reconcile path. A
    provisional judgement in it (no verdict from this operator process yet) keeps the condition status holds."""
    model_cache: ModelCacheObservation | None = None
    """The model cache and its fill Job; None when spec.model.cache is unset (no ModelCached condition)."""
    revisions: tuple[RevisionStatus, ...] = ()
    """Every revision with children, the current one first (`rollout.plan`); `deployments` are the current one's."""
    held: str | None = None
    """Why the rollout holds (`rollout.Plan.held`), or None."""
    draining: tuple[str, ...] = ()
    """Older revisions still present: the rollout is not finished."""
    desired: Mapping[str, int] | None = None
    """The spec's replicas per role; None: each current Deployment's own."""
    autoscaling: AutoscalingStatus | None = None
    """The pools' scale targets and the planner (`scaletargets`, `autoscale`); None without spec.autoscaling."""


def pool_status(
    deployment: Mapping[str, Any] | None, desired: int | None = None, older_ready: int = 0, older_available: int = 0
) -> PoolStatus:
    """Replica counts of one role, plus `ready` as "ready/desired" for the printer columns: `deployment` is the
    current revision's, `older_*` what older revisions still add during a rollout (they serve too); `updated` counts
    the current revision's pods only."""
    spec = (deployment or {}).get("spec", {})
    status = (deployment or {}).get("status", {})
    if desired is None:
        desired = int(spec.get("replicas", 1)) if deployment is not None else 0
    ready = int(status.get("readyReplicas", 0)) + older_ready
    return PoolStatus(
        replicas=desired,
        ready_replicas=ready,
        updated_replicas=int(status.get("updatedReplicas", 0)),
        available_replicas=int(status.get("availableReplicas", 0)) + older_available,
        ready=f"{ready}/{desired}",
    )


def rolled_out(deployment: Mapping[str, Any] | None) -> bool:
    """The Deployment controller has seen the latest template and every replica is updated, ready and available."""
    if deployment is None:
        return False
    status = deployment.get("status", {})
    want = int(deployment.get("spec", {}).get("replicas", 1))
    observed = int(status.get("observedGeneration", 0)) >= int(deployment.get("metadata", {}).get("generation", 1))
    counts = (status.get(k, 0) for k in ("updatedReplicas", "readyReplicas", "availableReplicas", "replicas"))
    return observed and all(int(n) == want for n in counts)


def stuck(deployment: Mapping[str, Any] | None) -> str | None:
    """Why a Deployment cannot make progress, or None."""
    if deployment is None:
        return None
    for condition in deployment.get("status", {}).get("conditions", []):
        kind = condition.get("type")
        if kind == _DEPLOYMENT_PROGRESSING and condition.get("reason") == _DEPLOYMENT_DEADLINE_EXCEEDED:
            return str(condition.get("message", "progress deadline exceeded"))
        if kind == _DEPLOYMENT_REPLICA_FAILURE and condition.get("status") == "True":
            return str(condition.get("message", "replica failure"))
    return None


def _job_condition(job: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for condition in job.get("status", {}).get("conditions") or []:
        if condition.get("type") == type_ and condition.get("status") == "True":
            return dict(condition)
    return None


def model_cached(cache: ModelCacheObservation) -> tuple[ConditionReason, str]:
    """ModelCached's reason and message, from the fill Job alone (the Job controller's own conditions)."""
    if cache.job_name is None:
        return r.MODEL_CACHED_NODE_LOCAL, "hostPath cache: each pool pod fills its node's directory before it starts"
    job = cache.job
    if job is None:
        return r.MODEL_CACHED_FILLING, f"Job {cache.job_name} is not created yet"
    if _job_condition(job, _JOB_COMPLETE) is not None:
        return r.MODEL_CACHED_FILLED, f"Job {cache.job_name} completed"
    failed = _job_condition(job, _JOB_FAILED)
    if failed is not None:
        why = failed.get("message") or failed.get("reason") or "failed"
        return r.MODEL_CACHED_FILL_FAILED, f"Job {cache.job_name} failed: {failed.get('reason', 'Failed')}: {why}"
    status = job.get("status", {})
    attempts = int(status.get("failed", 0))
    retry = f", {attempts} failed attempt(s)" if attempts else ""
    return r.MODEL_CACHED_FILLING, f"Job {cache.job_name} is downloading ({int(status.get('active', 0))} active{retry})"


def _condition(reason: ConditionReason, message: str, generation: int) -> Condition:
    return Condition(
        type=reason.condition,
        status=reason.status,
        reason=reason.reason,
        message=message,
        observed_generation=generation,
    )


def conditions(observation: Observation) -> list[Condition]:
    """The six conditions, without transition times: Ready, SpecConfigConsistent, Progressing, Degraded, then the
    runtime-health pair SpecDecodeHealthy and TransferHealthy (straight from the verdict); then ModelCached when a
    model cache is set."""
    gen = observation.generation
    cache = None if observation.model_cache is None else model_cached(observation.model_cache)
    filling = cache is not None and cache[0] == r.MODEL_CACHED_FILLING
    progressing, ready = _progressing_and_ready(observation)
    runtime = [
        _condition(judgement.reason, judgement.message, gen)
        for judgement in (observation.runtime.spec_decode, observation.runtime.transfer)
    ]
    cached = [] if cache is None else [_condition(cache[0], cache[1], gen)]
    return [ready, _consistent(observation), progressing, _degraded(observation, filling), *runtime, *cached]


def _consistent(observation: Observation) -> Condition:
    gen = observation.generation
    if observation.rejection:
        return _condition(r.CONSISTENT_RULE_VIOLATED, observation.rejection.text, gen)
    if observation.render_error is not None:
        return _condition(r.CONSISTENT_RENDER_FAILED, observation.render_error, gen)
    return _condition(r.CONSISTENT_ALL_RULES_PASSED, "prefill and decode agree", gen)


def _degraded(observation: Observation, filling: bool) -> Condition:
    """Degraded; `filling`: the model cache is being filled."""
    gen = observation.generation
    # While the cache fills, the pool pods wait by design: a progress deadline passed then is not a stuck rollout.
    deployments = observation.deployments
    blocked = {} if filling else {role: why for role in c.ROLES if (why := stuck(deployments.get(role))) is not None}
    if observation.missing_api is not None:
        return _condition(r.DEGRADED_API_MISSING, observation.missing_api, gen)
    if observation.refused is not None:
        return _condition(r.DEGRADED_CHILD_REFUSED, observation.refused, gen)
    if observation.apply_error is not None:
        return _condition(r.DEGRADED_APPLY_FAILED, observation.apply_error, gen)
    if blocked:
        return _condition(r.DEGRADED_ROLLOUT_STUCK, "; ".join(f"{role}: {why}" for role, why in blocked.items()), gen)
    return _condition(r.DEGRADED_AS_EXPECTED, "no failures", gen)


def _pending(observation: Observation) -> list[str]:
    """The roles whose current workload is not rolled out at the spec's replicas."""
    deployments, wanted = observation.deployments, observation.desired or {}
    return [
        role
        for role in c.ROLES
        if not rolled_out(deployments.get(role))
        # Mid-rollout the current revision's Deployment may be rolled out at fewer replicas than the spec's.
        or (role in wanted and int((deployments.get(role) or {}).get("spec", {}).get("replicas", 1)) != wanted[role])
    ]


def _progressing_and_ready(observation: Observation) -> tuple[Condition, Condition]:
    gen = observation.generation
    if observation.denied_namespace is not None:
        return _condition(r.PROGRESSING_NAMESPACE_DENIED, "no children in a denied namespace", gen), _condition(
            r.READY_NAMESPACE_DENIED,
            f"namespace {observation.denied_namespace} is denied to the operator (chart value deniedNamespaces): "
            "no children are created here; use another namespace",
            gen,
        )
    if observation.rejection:
        return _condition(r.PROGRESSING_INVALID_SPEC, "children left unchanged", gen), _condition(
            r.READY_INVALID_SPEC, "fix the spec: see SpecConfigConsistent", gen
        )
    if observation.render_error is not None:
        return _condition(r.PROGRESSING_RENDER_FAILED, "children left unchanged", gen), _condition(
            r.READY_RENDER_FAILED, "the operator could not render the children: see SpecConfigConsistent", gen
        )
    if observation.missing_api is not None:
        return _condition(r.PROGRESSING_API_MISSING, "nothing applied while a needed API is missing", gen), _condition(
            r.READY_API_MISSING, "the spec is not applied: see Degraded", gen
        )
    if observation.refused is not None:
        return _condition(r.PROGRESSING_CHILD_REFUSED, "nothing applied while a child is refused", gen), _condition(
            r.READY_CHILD_REFUSED, "the spec is not applied: a child is refused, see Degraded", gen
        )
    if observation.held is not None:
        return _condition(r.PROGRESSING_ROLLOUT_HELD, observation.held, gen), _condition(
            r.READY_ROLLOUT_IN_PROGRESS, "the rollout holds: see Progressing", gen
        )
    pending = _pending(observation)
    if pending or observation.draining:
        waiting = ", ".join(pending + [f"revision {name} to drain" for name in observation.draining])
        return _condition(r.PROGRESSING_ROLLING_OUT, f"waiting for {waiting}", gen), _condition(
            r.READY_ROLLOUT_IN_PROGRESS, f"not all replicas ready: {waiting}", gen
        )
    complete = _condition(r.PROGRESSING_ROLLOUT_COMPLETE, "all replicas updated", gen)
    if observation.apply_error is None:
        return complete, _condition(r.READY_ALL_REPLICAS, "prefill, decode and router ready", gen)
    return complete, _condition(r.READY_APPLY_FAILED, observation.apply_error, gen)


def parse_previous(wire: Mapping[str, Any] | None) -> DisaggSpecServiceStatus | None:
    """The status as the API server holds it (its JSON), as the typed model; None when there is none, or when it
    cannot be read (edited by hand into something invalid): the pass then computes and writes it afresh."""
    if not wire:
        return None
    try:
        return DisaggSpecServiceStatus.model_validate(wire)
    except pydantic.ValidationError:
        return None


def previous_condition(previous: DisaggSpecServiceStatus | None, type_: str) -> Condition | None:
    """The condition `type_` as last written, if any."""
    return next((cond for cond in previous.conditions if cond.type == type_), None) if previous else None


def compute(observation: Observation, previous: DisaggSpecServiceStatus | None, now: str) -> DisaggSpecServiceStatus:
    """The full status; `now` (RFC 3339) stamps only conditions whose status changed since `previous`, the status
    as last written (`parse_previous`).

    Runtime health (issue 29): a condition whose judgement is provisional (the operator just started or became the
    leader and has no verdict of its own yet) is kept as `previous` holds it, and so is the learned baseline until the
    monitor has one. A fresh judgement with the reason `previous` holds keeps the held message too unless the status
    is written anyway: its numbers ride along with a write, they never cause one. So a restart, a failover or a
    resync writes nothing for a service whose state did not change."""
    provisional = {
        judgement.reason.condition
        for judgement in (observation.runtime.spec_decode, observation.runtime.transfer)
        if judgement.provisional
    }
    fresh, quiet = [], []
    for condition in conditions(observation):
        old = previous_condition(previous, condition.type)
        # A provisional judgement never replaces a verdict status holds; over NotMeasured (none held) it is written.
        if old is not None and condition.type in provisional and old.reason not in _NOT_MEASURED:
            kept = old.model_copy(update={"observed_generation": observation.generation})
            fresh.append(kept)
            quiet.append(kept)
            continue
        since = old.last_transition_time if old is not None and old.status == condition.status else now
        stamped = condition.model_copy(update={"last_transition_time": since})
        fresh.append(stamped)
        same = old is not None and (old.status, old.reason, old.observed_generation) == (
            stamped.status,
            stamped.reason,
            stamped.observed_generation,
        )
        quiet.append(old if same and old is not None and condition.type in _RUNTIME else stamped)
    baseline = observation.runtime.baseline
    spec_decode = (
        SpecDecodeStatus(
            baseline_accept_length=round(baseline.accept_length, 3),
            baseline_verify_steps=int(baseline.verify_steps),
            spec_fingerprint=baseline.fingerprint,
        )
        if baseline is not None
        else (previous.spec_decode if previous is not None else None)
    )
    unchanged = _status(observation, quiet, spec_decode)
    if previous is not None and not changed(unchanged, previous):
        return unchanged
    return _status(observation, fresh, spec_decode)


def _status(
    observation: Observation, conditions_: list[Condition], spec_decode: SpecDecodeStatus | None
) -> DisaggSpecServiceStatus:
    return DisaggSpecServiceStatus(
        observed_generation=observation.generation,
        conditions=conditions_,
        prefill=_pool_of(observation, c.ROLE_PREFILL),
        decode=_pool_of(observation, c.ROLE_DECODE),
        router=_pool_of(observation, c.ROLE_ROUTER),
        spec_fingerprint=observation.fingerprint,
        endpoint=observation.endpoint,
        spec_decode=spec_decode,
        revisions=list(observation.revisions),
        autoscaling=observation.autoscaling,
    )


def _pool_of(observation: Observation, role: str) -> PoolStatus:
    older = observation.revisions[1:]
    ready = sum(getattr(revision, role).ready_replicas for revision in older)
    desired = None if observation.desired is None else observation.desired.get(role)
    # An older revision's ready pods are available too (the Deployments' minReadySeconds is 0).
    return pool_status(observation.deployments.get(role), desired, ready, ready)


def changed(new: DisaggSpecServiceStatus, previous: DisaggSpecServiceStatus | None) -> bool:
    """True when writing `new` would change what the API server already holds as `previous`. A status write is a
    merge patch of `new.to_wire()`, so only the fields `new` sets are compared."""
    if previous is None:
        return True
    held = previous.to_wire()
    return any(held.get(key) != value for key, value in new.to_wire().items())
