"""The root of the resource: the whole `spec` (`DisaggSpecServiceSpec`, one field per block, in the order the CRD and
the docs list them), the metadata the operator reads, the `DisaggSpecService` object itself, and the resource's
singular name, short names and categories (its group, version, kind and plural are in `disaggspec.constants`).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from disaggspec.api.v1alpha1.autoscaling import AutoscalingSpec
from disaggspec.api.v1alpha1.base import SpecModel
from disaggspec.api.v1alpha1.model import ModelSpec, SGLangSpec
from disaggspec.api.v1alpha1.pools import PoolSpec
from disaggspec.api.v1alpha1.router import RolloutSpec, RouterSpec
from disaggspec.api.v1alpha1.speculative import SpeculativeSpec
from disaggspec.api.v1alpha1.status import DisaggSpecServiceStatus
from disaggspec.api.v1alpha1.transfer import EngineSpec, TransferSpec
from disaggspec.constants import KIND

SINGULAR: Final = "disaggspecservice"
SHORT_NAMES: Final = ("dss",)
CATEGORIES: Final = ("all", "disaggspec")


class DisaggSpecServiceSpec(SpecModel):
    """A prefill pool and a decode pool of one model with one set of speculative settings, plus their router."""

    sglang: SGLangSpec = Field(description="SGLang image and release both pools run.")
    model: ModelSpec = Field(description="The target model.")
    speculative: SpeculativeSpec = Field(description="Speculative decoding settings shared by both pools.")
    transfer: TransferSpec = Field(
        default_factory=TransferSpec, description="Prefill-to-decode transfer: backend, bootstrap port, RDMA."
    )
    engine: EngineSpec = Field(default_factory=EngineSpec, description="Server settings identical on both pools.")
    prefill: PoolSpec = Field(description="The prefill pool.")
    decode: PoolSpec = Field(description="The decode pool.")
    router: RouterSpec = Field(default_factory=RouterSpec, description="The PD router.")
    rollout: RolloutSpec = Field(
        default_factory=RolloutSpec,
        description="How a change of the must-match settings rolls out as a new revision, and how a rolling update "
        "within one revision surges.",
    )
    autoscaling: AutoscalingSpec | None = Field(
        default=None,
        description="Size the pools with an autoscaler instead of spec.<pool>.replicas: per-pool DisaggSpecPool "
        "scale targets for kubectl scale, HPA or KEDA (mode External), or the operator's SLA planner (mode "
        "Planner). spec.<pool>.replicas is then only the scale target's initial value. Unset: no autoscaling.",
    )


class ObjectMeta(BaseModel):
    """The part of metadata the operator reads; everything else is kept as given."""

    model_config = ConfigDict(populate_by_name=True, extra="allow", frozen=True)

    name: str = Field(default="", description="Object name.")
    namespace: str | None = Field(default=None, description="Object namespace.")
    generation: int | None = Field(default=None, description="Spec generation.")
    uid: str | None = Field(default=None, description="Object UID.")


class DisaggSpecService(BaseModel):
    """The whole custom resource."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    api_version: Literal["disaggspec.io/v1alpha1"] = Field(default="disaggspec.io/v1alpha1", alias="apiVersion")
    kind: Literal["DisaggSpecService"] = Field(default=KIND)
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: DisaggSpecServiceSpec
    status: DisaggSpecServiceStatus | None = None
