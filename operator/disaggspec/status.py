"""Computes a DisaggSpecService's status from what reconcile saw; pure: no clock, no I/O.

Inputs are the spec generation, the rule-table violations, the live Deployments of the two pools and the router,
and the outcome of applying the children. Output is the whole `status` object with the four conditions. A
condition's `lastTransitionTime` is carried over from the previous status unless its `status` changed, so a
resync that sees nothing new computes exactly the previous status and the caller writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from disaggspec import constants as c

POOLS: tuple[str, ...] = (c.ROLE_PREFILL, c.ROLE_DECODE, c.ROLE_ROUTER)


@dataclass(frozen=True)
class Observation:
    """Everything one reconcile pass learned, as plain data."""

    generation: int
    violations: Sequence[tuple[str, str]]
    """(rule id, message) of every failed rule; empty when the spec is consistent."""
    deployments: Mapping[str, Mapping[str, Any] | None]
    """Live Deployment per role (None when absent)."""
    fingerprint: str | None
    endpoint: str | None
    apply_error: str | None = None


def pool_status(deployment: Mapping[str, Any] | None) -> dict[str, Any]:
    """Replica counts of one Deployment, plus `ready` as "ready/desired" for the printer columns."""
    spec = (deployment or {}).get("spec", {})
    status = (deployment or {}).get("status", {})
    replicas = int(spec.get("replicas", 1)) if deployment is not None else 0
    ready = int(status.get("readyReplicas", 0))
    return {
        "replicas": replicas,
        "readyReplicas": ready,
        "updatedReplicas": int(status.get("updatedReplicas", 0)),
        "availableReplicas": int(status.get("availableReplicas", 0)),
        "ready": f"{ready}/{replicas}",
    }


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
        if condition.get("type") == "Progressing" and condition.get("reason") == "ProgressDeadlineExceeded":
            return str(condition.get("message", "progress deadline exceeded"))
        if condition.get("type") == "ReplicaFailure" and condition.get("status") == "True":
            return str(condition.get("message", "replica failure"))
    return None


def _condition(type_: str, ok: bool, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


def conditions(observation: Observation) -> list[dict[str, Any]]:
    gen = observation.generation
    deployments = observation.deployments
    pending = [role for role in POOLS if not rolled_out(deployments.get(role))]
    blocked = {role: why for role in POOLS if (why := stuck(deployments.get(role))) is not None}

    if observation.violations:
        text = "; ".join(f"[{rule}] {message}" for rule, message in observation.violations)
        consistent = _condition(c.CONDITION_SPEC_CONSISTENT, False, "RuleViolated", text, gen)
    else:
        consistent = _condition(c.CONDITION_SPEC_CONSISTENT, True, "AllRulesPassed", "prefill and decode agree", gen)

    if observation.apply_error is not None:
        degraded = _condition(c.CONDITION_DEGRADED, True, "ApplyFailed", observation.apply_error, gen)
    elif blocked:
        text = "; ".join(f"{role}: {why}" for role, why in blocked.items())
        degraded = _condition(c.CONDITION_DEGRADED, True, "RolloutStuck", text, gen)
    else:
        degraded = _condition(c.CONDITION_DEGRADED, False, "AsExpected", "no failures", gen)

    if observation.violations:
        progressing = _condition(c.CONDITION_PROGRESSING, False, "InvalidSpec", "children left unchanged", gen)
        ready = _condition(c.CONDITION_READY, False, "InvalidSpec", "fix the spec: see SpecConfigConsistent", gen)
    elif pending:
        waiting = ", ".join(pending)
        progressing = _condition(c.CONDITION_PROGRESSING, True, "RollingOut", f"waiting for {waiting}", gen)
        ready = _condition(c.CONDITION_READY, False, "RolloutInProgress", f"not all replicas ready: {waiting}", gen)
    else:
        progressing = _condition(c.CONDITION_PROGRESSING, False, "RolloutComplete", "all replicas updated", gen)
        if observation.apply_error is None:
            ready = _condition(c.CONDITION_READY, True, "AllReplicasReady", "prefill, decode and router ready", gen)
        else:
            ready = _condition(c.CONDITION_READY, False, "ApplyFailed", observation.apply_error, gen)
    return [ready, consistent, progressing, degraded]


def compute(observation: Observation, previous: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    """The full status; `now` (RFC 3339) stamps only conditions whose status changed since `previous`."""
    before = {cond["type"]: cond for cond in (previous or {}).get("conditions", [])}
    stamped = []
    for condition in conditions(observation):
        old = before.get(condition["type"])
        same = old is not None and old.get("status") == condition["status"]
        condition["lastTransitionTime"] = old["lastTransitionTime"] if same and old else now
        stamped.append(condition)
    status: dict[str, Any] = {
        "observedGeneration": observation.generation,
        "conditions": stamped,
        **{role: pool_status(observation.deployments.get(role)) for role in POOLS},
    }
    if observation.fingerprint is not None:
        status["specFingerprint"] = observation.fingerprint
    if observation.endpoint is not None:
        status["endpoint"] = observation.endpoint
    return status


def changed(new: Mapping[str, Any], previous: Mapping[str, Any] | None) -> bool:
    """True when writing `new` would change what the API server already holds in `previous`."""
    if previous is None:
        return True
    return any(previous.get(key) != value for key, value in new.items())
