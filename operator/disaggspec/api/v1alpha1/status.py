"""What the operator writes to `status`: the conditions, each pool's and the router's replica counts, the spec
fingerprint, the endpoint and every revision with children (its traffic role, readiness and rollout clock). Status
models ignore unknown fields, so an older operator can read a newer operator's status.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from disaggspec.api.v1alpha1.base import _MAX_STR, StatusModel

ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(StatusModel):
    """One observation of the service's state (Ready, SpecConfigConsistent, Progressing, Degraded)."""

    type: str = Field(
        max_length=316, description="Condition type: Ready, SpecConfigConsistent, Progressing or Degraded."
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str | None = Field(default=None, max_length=1024, description="CamelCase reason of the last change.")
    message: str | None = Field(
        default=None,
        max_length=32768,
        description="Human-readable details; with SpecConfigConsistent=False every failing rule as "
        "[rule] field: message.",
    )
    last_transition_time: str | None = Field(
        default=None, description="When status last changed (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The spec generation this condition was computed from."
    )


class PoolStatus(StatusModel):
    """Replica counts of one pool (or the router)."""

    replicas: int = Field(default=0, ge=0, description="Desired replicas.")
    ready_replicas: int = Field(default=0, ge=0, description="Replicas whose server is ready.")
    updated_replicas: int = Field(default=0, ge=0, description="Replicas running the current spec.")
    available_replicas: int = Field(default=0, ge=0, description="Replicas ready for at least minReadySeconds.")
    ready: str | None = Field(default=None, max_length=32, description="readyReplicas/replicas, for kubectl get.")


RevisionTraffic = Literal["Active", "Rolling", "Draining", "Failed"]


class RevisionPoolStatus(StatusModel):
    """One pool (or the router) of one revision."""

    replicas: int = Field(default=0, ge=0, description="Pods the operator currently asks this revision for.")
    ready_replicas: int = Field(default=0, ge=0, description="Of those, ready.")


class RevisionStatus(StatusModel):
    """One revision: the children of one spec fingerprint."""

    fingerprint: str = Field(max_length=128, description="The spec fingerprint of this revision.")
    name: str = Field(max_length=32, description="The suffix of its Deployment names: <service>-<pool>-<name>.")
    created: str | None = Field(
        default=None,
        description="When its first Deployment was created (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    traffic: RevisionTraffic = Field(
        description="Active: the only revision, rolled out. Rolling: the current spec, growing while an older one "
        "still serves. Draining: an older spec, shrinking as the current one grows. Failed: the current spec's "
        "rollout is held (see the Progressing condition)."
    )
    serving: bool = Field(
        default=False, description="Its router has a ready prefill and a ready decode, so it takes requests."
    )
    prefill: RevisionPoolStatus = Field(default_factory=RevisionPoolStatus, description="Its prefill pool.")
    decode: RevisionPoolStatus = Field(default_factory=RevisionPoolStatus, description="Its decode pool.")
    router: RevisionPoolStatus = Field(default_factory=RevisionPoolStatus, description="Its router.")
    last_progress_time: str | None = Field(
        default=None,
        description="When another of its pods last became ready, or last had none pending (RFC 3339); the rollout "
        "deadline counts from it.",
        json_schema_extra={"format": "date-time"},
    )
    retiring_since: str | None = Field(
        default=None,
        description="An older revision: when its router was scaled to zero (RFC 3339); its pools go once the router "
        "pods are gone.",
        json_schema_extra={"format": "date-time"},
    )
    traffic_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="During a rollout: its share of the requests, the fraction of the ready router pods of serving "
        "revisions that are its own (the router Service spreads new connections evenly over them), counting a "
        "router's ready pods up to the replicas this pass asks (the others are being removed); 0 while it does not "
        "serve. Unset outside a rollout (the only revision takes every request).",
    )
    capacity_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="During a rollout: its share of the serving capacity (per revision the smaller of its ready pods "
        "staying per pool over the pool's replicas; for an older revision, those its scale-down under way leaves "
        "it), which its router's replicas were sized by; unset for a revision whose router is being removed or "
        "that is kept as it is (no readable spec), and outside a rollout.",
    )


class SpecDecodeStatus(StatusModel):
    """What SpecDecodeHealthy judges against when spec.speculative.expectedAcceptLength is unset: the accept length
    the operator learned from the service's own healthy traffic (kept here so a restarted operator keeps it)."""

    baseline_accept_length: float = Field(
        ge=1,
        le=1025,
        description="The learned mean accept length (tokens per verify step, bonus included): a step-weighted, "
        "exponentially weighted mean over healthy windows only (frozen while SpecDecodeHealthy is False).",
    )
    baseline_verify_steps: int = Field(
        ge=0, description="How many verify steps of the decode pods the baseline is based on (two significant digits)."
    )
    spec_fingerprint: str | None = Field(
        default=None,
        max_length=128,
        description="The spec fingerprint the baseline was learned under; a new fingerprint starts a new baseline.",
    )


class PoolScaleStatus(StatusModel):
    """One pool under autoscaling: what its scale target asks and what the pool runs."""

    target: int | None = Field(
        default=None, ge=0, description="The DisaggSpecPool's spec.replicas (unset until the scale target exists)."
    )
    replicas: int = Field(default=0, ge=0, description="What the pool runs: target clamped to the limits.")
    min_replicas: int = Field(default=1, ge=0, description="spec.autoscaling.<pool>.minReplicas.")
    max_replicas: int = Field(default=1, ge=0, description="spec.autoscaling.<pool>.maxReplicas.")


class PlannerDecisionStatus(StatusModel):
    """The planner's last change of a pool's size."""

    time: str = Field(description="When it decided (RFC 3339).", json_schema_extra={"format": "date-time"})
    message: str = Field(max_length=_MAX_STR, description="What it changed and the inputs that drove it.")


class AutoscalingStatus(StatusModel):
    """The pools' sizes under spec.autoscaling, and the planner's last decision and what it learned."""

    mode: str | None = Field(default=None, max_length=32, description="spec.autoscaling.mode, as last applied.")
    prefill: PoolScaleStatus | None = Field(default=None, description="The prefill pool.")
    decode: PoolScaleStatus | None = Field(default=None, description="The decode pool.")
    last_decision: PlannerDecisionStatus | None = Field(
        default=None, description="The planner's last change (mode Planner)."
    )
    learned: dict[str, Any] | None = Field(
        default=None,
        description="What the planner learned of the servers' capacity from the service's own traffic, kept here "
        "so a restarted operator or a new leader keeps it (mode Planner).",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class DisaggSpecServiceStatus(StatusModel):
    """What the operator last observed."""

    observed_generation: int | None = Field(default=None, ge=0, description="The spec generation last reconciled.")
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        description="Current conditions.",
        # One entry per type, merged by type under server-side apply (as for Pod conditions).
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    prefill: PoolStatus | None = Field(default=None, description="The prefill pool's replicas.")
    decode: PoolStatus | None = Field(default=None, description="The decode pool's replicas.")
    router: PoolStatus | None = Field(default=None, description="The router's replicas.")
    spec_fingerprint: str | None = Field(
        default=None, max_length=128, description="Hash of every setting that must match across the pools."
    )
    endpoint: str | None = Field(default=None, max_length=_MAX_STR, description="URL of the router's Service.")
    spec_decode: SpecDecodeStatus | None = Field(
        default=None,
        description="The learned speculative-decoding baseline (absent until learned, and while "
        "spec.speculative.expectedAcceptLength is set it is still learned but not judged against).",
    )
    revisions: list[RevisionStatus] = Field(
        default_factory=list,
        max_length=16,
        description="Every revision with children, the current one first: during a rollout the new revision and the "
        "ones it replaces.",
    )
    autoscaling: AutoscalingStatus | None = Field(
        default=None, description="The pools' scale targets and the planner (only with spec.autoscaling)."
    )

    def to_wire(self) -> dict[str, Any]:
        """The status as JSON for the API server: camelCase keys, unset (None) fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
