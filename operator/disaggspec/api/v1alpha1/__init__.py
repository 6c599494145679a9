"""The `DisaggSpecService` API, version `disaggspec.io/v1alpha1`: pydantic models of the spec and status.

These models are the API. The CRD (OpenAPI schema, `kubectl explain` descriptions, defaults, printer columns) is
generated from them by the build-time `tools.crd` (operator/tools), and the cross-field rules live in
`disaggspec.validation`. Field names are snake_case in Python and camelCase on the wire (`populate_by_name`, so both
parse). Spec models forbid unknown fields; the status model ignores them so an older operator can read a newer status.
Settings that exist once in the spec (model, sglang, engine, transfer, the shared `speculative` block) are identical
on both pools by construction; only what a pool may override (its `speculative` block) is cross-checked by the rules.

One module per block of the spec, each importing only the blocks below it: `base` (base models, bounds, shared types),
`model` (spec.sglang, spec.model), `speculative`, `podspec` (the Pod-spec pieces a pool passes through), `parallelism`
(a pool's DP attention and expert parallelism), `pools` (spec.prefill, spec.decode), `transfer` (spec.transfer,
spec.engine), `router` (spec.router, spec.rollout), `status`, and `service` (the spec root and the object). Import from
here, never from a block module: this package is the API's one public path, and every model's `__module__` says so (as
`collections.abc` does for its classes), so class reprs and the tools that collect the models by module (`tools.crd`,
`tools.docs`) see one module. The API's group, version, kind and plural are defined in `disaggspec.constants` and
re-exported here.
"""

from __future__ import annotations

from disaggspec.api.v1alpha1.base import (
    ConfigKey,
    FreeForm,
    Name,
    Quantity,
    QuantityMap,
    SpecModel,
    StatusModel,
)
from disaggspec.api.v1alpha1.model import (
    CacheClaim,
    CacheVolume,
    HostPathVolume,
    LocalObjectReference,
    ModelDtype,
    ModelSpec,
    ModelVolume,
    PersistentVolumeClaimVolume,
    PullPolicy,
    SecretKeyRef,
    SGLangSpec,
)
from disaggspec.api.v1alpha1.parallelism import (
    MAX_PARALLEL_SIZE,
    MAX_REDUNDANT_EXPERTS,
    A2ABackend,
    DataParallelAttention,
    DeepEPMode,
    ExpertLoadBalancing,
    ExpertParallel,
    ParallelismSpec,
)
from disaggspec.api.v1alpha1.podspec import (
    Affinity,
    EnvVar,
    EnvVarSource,
    KeySelector,
    LabelKey,
    LabelSelector,
    LabelSelectorRequirement,
    LabelValue,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectFieldSelector,
    PodAffinity,
    PodAffinityTerm,
    PreferredSchedulingTerm,
    ResourceFieldSelector,
    ResourceRequirements,
    Toleration,
    WeightedPodAffinityTerm,
)
from disaggspec.api.v1alpha1.pools import (
    DEFAULT_DRAIN_SECONDS,
    DEFAULT_GPUS_PER_NODE,
    GPU_RESOURCE,
    MAX_GPUS_PER_POD,
    MAX_NODES_PER_INSTANCE,
    MAX_TENSOR_PARALLEL_SIZE,
    DisruptionSpec,
    MaxUnavailable,
    PoolLifecycle,
    PoolSpec,
    SpreadMode,
)
from disaggspec.api.v1alpha1.router import (
    DEFAULT_ROUTER_PORT,
    ROUTER_METRICS_PORT,
    RolloutSpec,
    RouterPolicy,
    RouterSpec,
    ServiceType,
)
from disaggspec.api.v1alpha1.service import (
    CATEGORIES,
    SHORT_NAMES,
    SINGULAR,
    DisaggSpecService,
    DisaggSpecServiceSpec,
    ObjectMeta,
)
from disaggspec.api.v1alpha1.speculative import (
    Algorithm,
    DraftKvCacheDtype,
    DraftModel,
    PoolSpeculativeSpec,
    SpeculativeSpec,
)
from disaggspec.api.v1alpha1.status import (
    Condition,
    ConditionStatus,
    DisaggSpecServiceStatus,
    PoolStatus,
    RevisionPoolStatus,
    RevisionStatus,
    RevisionTraffic,
    SpecDecodeStatus,
)
from disaggspec.api.v1alpha1.transfer import (
    DEFAULT_BOOTSTRAP_PORT,
    EngineSpec,
    IbDeviceMapping,
    KvCacheDtype,
    RdmaSpec,
    TransferBackend,
    TransferSpec,
)
from disaggspec.constants import API_VERSION, GROUP, KIND, PLURAL, VERSION

__all__ = [
    "API_VERSION",
    "CATEGORIES",
    "DEFAULT_BOOTSTRAP_PORT",
    "DEFAULT_DRAIN_SECONDS",
    "DEFAULT_GPUS_PER_NODE",
    "DEFAULT_ROUTER_PORT",
    "GPU_RESOURCE",
    "GROUP",
    "KIND",
    "MAX_GPUS_PER_POD",
    "MAX_NODES_PER_INSTANCE",
    "MAX_PARALLEL_SIZE",
    "MAX_REDUNDANT_EXPERTS",
    "MAX_TENSOR_PARALLEL_SIZE",
    "PLURAL",
    "ROUTER_METRICS_PORT",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "A2ABackend",
    "Affinity",
    "Algorithm",
    "CacheClaim",
    "CacheVolume",
    "Condition",
    "ConditionStatus",
    "ConfigKey",
    "DataParallelAttention",
    "DeepEPMode",
    "DisaggSpecService",
    "DisaggSpecServiceSpec",
    "DisaggSpecServiceStatus",
    "DisruptionSpec",
    "DraftKvCacheDtype",
    "DraftModel",
    "EngineSpec",
    "EnvVar",
    "EnvVarSource",
    "ExpertLoadBalancing",
    "ExpertParallel",
    "FreeForm",
    "HostPathVolume",
    "IbDeviceMapping",
    "KeySelector",
    "KvCacheDtype",
    "LabelKey",
    "LabelSelector",
    "LabelSelectorRequirement",
    "LabelValue",
    "LocalObjectReference",
    "MaxUnavailable",
    "ModelDtype",
    "ModelSpec",
    "ModelVolume",
    "Name",
    "NodeAffinity",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "ObjectFieldSelector",
    "ObjectMeta",
    "ParallelismSpec",
    "PersistentVolumeClaimVolume",
    "PodAffinity",
    "PodAffinityTerm",
    "PoolLifecycle",
    "PoolSpec",
    "PoolSpeculativeSpec",
    "PoolStatus",
    "PreferredSchedulingTerm",
    "PullPolicy",
    "Quantity",
    "QuantityMap",
    "RdmaSpec",
    "ResourceFieldSelector",
    "ResourceRequirements",
    "RevisionPoolStatus",
    "RevisionStatus",
    "RevisionTraffic",
    "RolloutSpec",
    "RouterPolicy",
    "RouterSpec",
    "SGLangSpec",
    "SecretKeyRef",
    "ServiceType",
    "SpecDecodeStatus",
    "SpecModel",
    "SpeculativeSpec",
    "SpreadMode",
    "StatusModel",
    "Toleration",
    "TransferBackend",
    "TransferSpec",
    "WeightedPodAffinityTerm",
]

for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type) and _value.__module__.startswith(f"{__name__}."):
        _value.__module__ = __name__
del _name, _value
