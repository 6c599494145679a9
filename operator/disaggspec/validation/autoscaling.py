"""Rules on spec.autoscaling: limits that hold a size, a planner where the planner drives, a ratio band that is one,
and initial replicas (spec.<pool>.replicas, the scale targets' first value) within the limits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from disaggspec.api.v1alpha1 import (
    AutoscalingSpec,
    DisaggSpecService,
    DisaggSpecServiceSpec,
    PoolScaleLimits,
    PoolSpec,
    PrefillDecodeRatio,
)
from disaggspec.constants import POOLS
from disaggspec.validation._core import Cel, Rule

_DEFAULT_MIN: Final = PoolScaleLimits.model_fields["min_replicas"].default
_DEFAULT_REPLICAS: Final = PoolSpec.model_fields["replicas"].default
_DEFAULT_RATIO_MIN: Final = PrefillDecodeRatio.model_fields["min"].default
_DEFAULT_RATIO_MAX: Final = PrefillDecodeRatio.model_fields["max"].default


def _limits(service: DisaggSpecService) -> Iterator[str]:
    scaling = service.spec.autoscaling
    if scaling is None:
        return
    for role in POOLS:
        limits: PoolScaleLimits = getattr(scaling, role)
        if limits.min_replicas > limits.max_replicas:
            yield f"spec.autoscaling.{role}.minReplicas"


LIMITS_ORDERED: Final = Rule(
    id="autoscaling-limits-ordered",
    fields=("spec.autoscaling.prefill.minReplicas", "spec.autoscaling.decode.minReplicas"),
    message="spec.autoscaling.<pool>.minReplicas is above maxReplicas: no size satisfies both; lower minReplicas or "
    "raise maxReplicas",
    check=_limits,
    cel=Cel(
        PoolScaleLimits,
        f"(has(self.minReplicas) ? self.minReplicas : {_DEFAULT_MIN}) <= self.maxReplicas",
        field_path=".minReplicas",
    ),
)


def _planner_mode(service: DisaggSpecService) -> Iterator[str]:
    scaling = service.spec.autoscaling
    if scaling is not None and (scaling.mode == "Planner") != (scaling.planner is not None):
        yield "spec.autoscaling.planner"


PLANNER_WITH_MODE: Final = Rule(
    id="autoscaling-planner-mode",
    fields=("spec.autoscaling.mode", "spec.autoscaling.planner"),
    message="spec.autoscaling.planner must be set exactly when spec.autoscaling.mode is Planner: the planner needs its "
    "TTFT and ITL targets (ttftMilliseconds, itlMilliseconds), and with mode External an HPA or KEDA sizes the pools "
    "and planner settings would do nothing; set mode Planner with a planner block, or mode External without one",
    check=_planner_mode,
    cel=Cel(AutoscalingSpec, "(self.mode == 'Planner') == has(self.planner)", field_path=".planner"),
)


def _ratio_band(service: DisaggSpecService) -> Iterator[str]:
    scaling = service.spec.autoscaling
    band = scaling.planner.prefill_decode_ratio if scaling is not None and scaling.planner is not None else None
    if band is not None and band.min > band.max:
        yield "spec.autoscaling.planner.prefillDecodeRatio.min"


RATIO_BAND_ORDERED: Final = Rule(
    id="autoscaling-ratio-band",
    fields=("spec.autoscaling.planner.prefillDecodeRatio",),
    message="spec.autoscaling.planner.prefillDecodeRatio.min is above its max: no prefill:decode ratio is inside the "
    "band; lower min or raise max",
    check=_ratio_band,
    cel=Cel(
        PrefillDecodeRatio,
        f"(has(self.min) ? self.min : {_DEFAULT_RATIO_MIN}) <= (has(self.max) ? self.max : {_DEFAULT_RATIO_MAX})",
        field_path=".min",
    ),
)


def _initial_replicas(service: DisaggSpecService) -> Iterator[str]:
    scaling = service.spec.autoscaling
    if scaling is None:
        return
    for role in POOLS:
        limits: PoolScaleLimits = getattr(scaling, role)
        pool: PoolSpec = getattr(service.spec, role)
        if not limits.min_replicas <= pool.replicas <= limits.max_replicas:
            yield f"spec.{role}.replicas"


def _initial_cel(role: str) -> Cel:
    replicas = f"(has(self.{role}.replicas) ? self.{role}.replicas : {_DEFAULT_REPLICAS})"
    limits = f"self.autoscaling.{role}"
    floor = f"(has({limits}.minReplicas) ? {limits}.minReplicas : {_DEFAULT_MIN})"
    return Cel(
        DisaggSpecServiceSpec,
        f"!has(self.autoscaling) || ({floor} <= {replicas} && {replicas} <= {limits}.maxReplicas)",
        field_path=f".{role}.replicas",
    )


INITIAL_REPLICAS_WITHIN: Final = Rule(
    id="autoscaling-initial-replicas",
    fields=("spec.prefill.replicas", "spec.decode.replicas", "spec.autoscaling"),
    message="spec.<pool>.replicas is outside spec.autoscaling.<pool>'s minReplicas..maxReplicas: with autoscaling it "
    "is the scale target's initial value, which the limits would clamp at once; set it within the limits",
    check=_initial_replicas,
    cel=tuple(_initial_cel(role) for role in POOLS),
)

RULES: Final = (LIMITS_ORDERED, PLANNER_WITH_MODE, RATIO_BAND_ORDERED, INITIAL_REPLICAS_WITHIN)
