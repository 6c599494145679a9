"""Names shared by render, status, apply and the handlers: API coordinates, label and annotation keys, conditions.

Every key is a constant with a one-line doc so a grep finds each place that reads or writes it.
"""

from __future__ import annotations

from typing import Final, Literal

# ---- the API's coordinates (disaggspec.api.v1alpha1 re-exports them) -----------------------------------------------
GROUP: Final = "disaggspec.io"
"""The API group of the DisaggSpecService resource."""
VERSION: Final = "v1alpha1"
"""The API version the models of disaggspec.api.v1alpha1 describe."""
API_VERSION: Final = f"{GROUP}/{VERSION}"
"""apiVersion of a DisaggSpecService: group/version."""
KIND: Final = "DisaggSpecService"
"""kind of the resource."""
PLURAL: Final = "disaggspecservices"
"""The resource's plural name, as in its API path and the CRD's name (<plural>.<group>)."""
POOL_KIND: Final = "DisaggSpecPool"
"""The per-pool scale target of a service with spec.autoscaling (`disaggspec.scaletargets`)."""
POOL_PLURAL: Final = "disaggspecpools"

FIELD_MANAGER: Final = "disaggspec-operator"
"""The one server-side-apply field manager the operator writes every child with."""

MANAGED_BY: Final = "disaggspec-operator"
"""Value of app.kubernetes.io/managed-by on every child."""

# ---- labels --------------------------------------------------------------------------------------------------------
LABEL_NAME: Final = "app.kubernetes.io/name"
"""Always `sglang` for pools, `sglang-router` for the router."""
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
"""The DisaggSpecService name."""
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
"""`prefill`, `decode` or `router`."""
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
"""`disaggspec-operator`: what the operator lists and prunes."""
LABEL_VERSION: Final = "app.kubernetes.io/version"
"""On pool pods: the SGLang release they run (`spec.sglang.version`), so tools and the local serving simulation can
tell a pod's release without reading its owner."""
LABEL_SERVICE: Final = "disaggspec.io/service"
"""The owning DisaggSpecService name (selector for pruning and for the router's discovery)."""
LABEL_ROLE: Final = "disaggspec.io/role"
"""`prefill` or `decode` on pool pods; the router selects on it."""
LABEL_FINGERPRINT: Final = "disaggspec.io/spec-fingerprint"
"""Hash of every setting that must match across the pair; the router pairs only pods that carry the same one."""

# ---- LeaderWorkerSet (a pool with nodesPerInstance > 1; sigs.k8s.io/lws v0.9.0 api/leaderworkerset/v1) ----------
LWS_API_VERSION: Final = "leaderworkerset.x-k8s.io/v1"
"""apiVersion of a multi-node pool's workload."""
LWS_KIND: Final = "LeaderWorkerSet"
"""kind of a multi-node pool's workload (a Deployment for a single-node pool)."""
LWS_MIN_VERSION: Final = "v0.9.0"
"""The LeaderWorkerSet release the multi-node pools are built and tested against (the chart names it)."""
LWS_LABEL_NAME: Final = "leaderworkerset.sigs.k8s.io/name"
"""Set by the LeaderWorkerSet controller on a group's pods: the LeaderWorkerSet's name (SetNameLabelKey)."""
LWS_LABEL_GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
"""Set by the LeaderWorkerSet pod webhook: which group (server) of the set a pod belongs to (GroupIndexLabelKey)."""
LWS_LABEL_WORKER_INDEX: Final = "leaderworkerset.sigs.k8s.io/worker-index"
"""Set by the LeaderWorkerSet controller and pod webhook: 0 on a group's leader, 1..size-1 on its workers
(WorkerIndexLabelKey); the router selects `=0` in a multi-node pool so it discovers leaders only."""
LWS_ENV_LEADER_ADDRESS: Final = "LWS_LEADER_ADDRESS"
"""Injected by the LeaderWorkerSet pod webhook into every container: the leader pod's DNS name
(<lws>-<group>.<lws>.<namespace>), through the set's headless Service, which publishes not-ready addresses."""
LWS_ENV_WORKER_INDEX: Final = "LWS_WORKER_INDEX"
"""Injected by the LeaderWorkerSet pod webhook into every container: the pod's worker index (0 on the leader)."""

# ---- annotations ---------------------------------------------------------------------------------------------------
ANNOTATION_APPLIED_HASH: Final = "disaggspec.io/applied-hash"
"""Hash of the rendered manifest last applied: a changed render is re-applied even if only a field was dropped."""
ANNOTATION_BOOTSTRAP_PORT: Final = "sglang.ai/bootstrap-port"
"""On prefill pods: the disaggregation bootstrap port the router hands to decode."""
ANNOTATION_MULTUS_NETWORKS: Final = "k8s.v1.cni.cncf.io/networks"
"""Multus secondary networks (the RDMA NICs) attached to pool pods."""

# ---- roles ---------------------------------------------------------------------------------------------------------
ROLE_PREFILL: Final = "prefill"
ROLE_DECODE: Final = "decode"
ROLE_ROUTER: Final = "router"
PoolName = Literal["prefill", "decode"]
"""The role of a pool: the spec block it is declared in (`spec.prefill`, `spec.decode`)."""
Role = Literal["prefill", "decode", "router"]
"""The role of a workload of a service: one of the two pools, or the router."""
POOLS: Final[tuple[PoolName, PoolName]] = (ROLE_PREFILL, ROLE_DECODE)
"""The two pools, prefill first: the order rules, status, metrics and the rollout planner list them in."""
ROLES: Final[tuple[Role, Role, Role]] = (ROLE_PREFILL, ROLE_DECODE, ROLE_ROUTER)
"""Every role of a service's workloads: the two pools, then the router."""

# ---- conditions ----------------------------------------------------------------------------------------------------
CONDITION_READY: Final = "Ready"
"""Every pool and the router have all replicas updated and ready."""
CONDITION_SPEC_CONSISTENT: Final = "SpecConfigConsistent"
"""The spec passed the cross-pool rule table; False carries the failing rule's message."""
CONDITION_PROGRESSING: Final = "Progressing"
"""A rollout is under way (children applied but not all replicas updated and ready)."""
CONDITION_DEGRADED: Final = "Degraded"
"""A child cannot make progress (rollout deadline exceeded, replica failure) or applying it failed."""
CONDITION_SPEC_DECODE_HEALTHY: Final = "SpecDecodeHealthy"
"""The decode pods' mean speculative accept length over the health window is at or above the threshold."""
CONDITION_TRANSFER_HEALTHY: Final = "TransferHealthy"
"""The pools' KV-transfer bootstrap and transfer failures over the health window stay below the threshold."""
CONDITION_MODEL_CACHED: Final = "ModelCached"
"""The model cache holds the spec's model, draft and tokenizer revisions (only with spec.model.cache)."""

# ---- caches --------------------------------------------------------------------------------------------------------
MODEL_CACHE_ENV: Final = ("HF_HOME", "HF_HUB_OFFLINE", "HF_MODULES_CACHE")
"""What the operator sets on both pools with a model cache."""
COMPILE_CACHE_ENV: Final = (
    "SGLANG_CACHE_DIR",
    "SGLANG_DG_CACHE_DIR",
    "SGL_DG_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "FLASHINFER_WORKSPACE_BASE",
    "CUDA_CACHE_PATH",
)
"""Every variable the operator may set with a compile cache (the DeepGEMM one is named per release)."""
