"""Autoscaling (`spec.autoscaling`) and the per-pool scale target (`DisaggSpecPool`).

With `spec.autoscaling` set, each pool's size is read from a `DisaggSpecPool` (`<service>-prefill`,
`<service>-decode`) that the operator creates once, owned by the service: a small object with the `/scale`
subresource, stable across revisions, that `kubectl scale`, a HorizontalPodAutoscaler, a KEDA ScaledObject or the
operator's own planner (mode Planner) sets. `spec.<pool>.replicas` is then only the scale target's initial value;
the pool runs the scale target's replicas clamped to the pool's [minReplicas, maxReplicas], and the operator never
writes the scale target's replicas itself unless its planner drives it. The anchors: LeaderWorkerSet's
DisaggregatedSet role scaler and RBG's scaling adapter give HPA a per-role `/scale` target the same way; a scale
subresource on the service itself would give one pool only (a CRD has one specReplicasPath).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from disaggspec.api.v1alpha1.base import _MAX_STR, SpecModel, StatusModel

POOL_SINGULAR: Final = "disaggspecpool"
POOL_SHORT_NAMES: Final = ("dsp",)
MAX_POOL_REPLICAS: Final = 1024

AutoscalingMode = Literal["External", "Planner"]


class PoolScaleLimits(SpecModel):
    """The floor and ceiling of one pool's replicas while autoscaling is on."""

    min_replicas: int = Field(
        default=1,
        ge=1,
        le=MAX_POOL_REPLICAS,
        description="Fewest servers (pods, or groups of nodesPerInstance pods) the pool runs, whatever the scale "
        "target asks.",
    )
    max_replicas: int = Field(
        ge=1,
        le=MAX_POOL_REPLICAS,
        description="Most servers the pool runs, whatever the scale target asks: the GPU budget of the pool.",
    )


class PrefillDecodeRatio(SpecModel):
    """A band for prefill replicas over decode replicas."""

    min: float = Field(default=0.0, ge=0, le=64, description="Lowest prefill/decode replica ratio.")
    max: float = Field(default=64.0, ge=0, le=64, description="Highest prefill/decode replica ratio.")


class PlannerSpec(SpecModel):
    """The operator's SLA planner: sizes both pools from the servers' own metrics to meet the latency targets."""

    ttft_milliseconds: int = Field(
        ge=1,
        le=3_600_000,
        description="Time-to-first-token target: the planner sizes prefill so the queueing wait plus the prefill of "
        "a mean prompt stays under it.",
    )
    itl_milliseconds: int = Field(
        ge=1,
        le=60_000,
        description="Inter-token latency target: the planner sizes decode so each server's batch keeps its step "
        "time over the measured accept length under it (a lower accept length means fewer requests per server).",
    )
    prefill_decode_ratio: PrefillDecodeRatio | None = Field(
        default=None,
        description="Keep prefill/decode replicas within this band: the smaller pool is raised (within its "
        "maxReplicas), a needed server is never removed for it. Unset: no band.",
    )
    scale_up_lead_seconds: int = Field(
        default=60,
        ge=0,
        le=3600,
        description="How far ahead scale-up looks: the time a new server takes to load the model and become ready. "
        "The planner scales for the demand its window's trend predicts that far ahead.",
    )
    scale_down_stabilization_seconds: int = Field(
        default=300,
        ge=0,
        le=86400,
        description="A pool shrinks only to the highest size the planner recommended over this window (prefill's "
        "for its arrivals once the queue it was clearing has cleared: a backlog's servers do not wait it out), and "
        "never during a rollout.",
    )


class AutoscalingSpec(SpecModel):
    """Who sizes the pools: an external autoscaler through the per-pool scale targets, or the operator's planner."""

    mode: AutoscalingMode = Field(
        description="External: the DisaggSpecPool scale targets are set by kubectl scale, an HPA or a KEDA "
        "ScaledObject, and the operator never writes their replicas. Planner: the operator's SLA planner "
        "(spec.autoscaling.planner) sets them; do not point another autoscaler at them as well.",
    )
    prefill: PoolScaleLimits = Field(description="Limits of the prefill pool.")
    decode: PoolScaleLimits = Field(description="Limits of the decode pool.")
    planner: PlannerSpec | None = Field(default=None, description="The planner's targets; required with mode Planner.")


class DisaggSpecPoolSpec(SpecModel):
    """What the scale target asks for."""

    replicas: int = Field(
        ge=0,
        le=MAX_POOL_REPLICAS,
        description="Servers the pool should run (pods, or groups of nodesPerInstance pods); the service's "
        "spec.autoscaling.<pool> limits clamp it.",
    )


class DisaggSpecPoolStatus(StatusModel):
    """What the pool runs, for the scale subresource and kubectl get."""

    replicas: int = Field(default=0, ge=0, description="Servers the pool runs now (every revision).")
    ready_replicas: int = Field(default=0, ge=0, description="Of those, ready.")
    desired_replicas: int = Field(
        default=0, ge=0, description="What the operator runs the pool at: spec.replicas clamped to the limits."
    )
    selector: str | None = Field(
        default=None,
        max_length=_MAX_STR,
        description="Label selector of the pool's pods (every revision), for an HPA's Pods and Resource metrics.",
    )
    message: str | None = Field(
        default=None, max_length=_MAX_STR, description="Why desiredReplicas differs from spec.replicas, if it does."
    )
    observed_generation: int | None = Field(default=None, ge=0, description="The generation last observed.")
