"""One pool of SGLang servers (`spec.prefill`, `spec.decode`): replicas, tensor parallelism and the rest of its parallel
layout, GPUs per node and nodes per instance, scheduling, environment, extra arguments, its speculative overrides, its
start-up and drain budgets and its PodDisruptionBudget, together with the GPU bounds and defaults those fields are
checked against. The router shares `DisruptionSpec` and `SpreadMode`.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field

from disaggspec.api.v1alpha1.base import (
    _DNS_SUBDOMAIN,
    _MAX_ARG,
    _MAX_EXTRA_ARGS,
    _MAX_LIST,
    _MAX_NAME,
    _MAX_STR,
    SpecModel,
)
from disaggspec.api.v1alpha1.parallelism import ParallelismSpec
from disaggspec.api.v1alpha1.podspec import Affinity, EnvVar, ResourceRequirements, Toleration
from disaggspec.api.v1alpha1.speculative import PoolSpeculativeSpec

GPU_RESOURCE: Final = "nvidia.com/gpu"
"""The extended resource a pool's GPUs are requested as."""
MAX_GPUS_PER_POD: Final = 16
"""Upper bound of GPUs in one pool pod (one node): bounds gpusPerNode and the per-GPU ib device map."""
MAX_NODES_PER_INSTANCE: Final = 64
"""Upper bound of nodes one multi-node SGLang server spans (spec.<pool>.nodesPerInstance)."""
MAX_TENSOR_PARALLEL_SIZE: Final = MAX_NODES_PER_INSTANCE * MAX_GPUS_PER_POD
"""Upper bound of tensorParallelSize: every nodesPerInstance x gpusPerNode the schema allows (64 x 16 = 1024), far
beyond any real server (DeepSeek-R1 runs at 16 or 32); the rules bind it to the pool's GPUs."""
DEFAULT_GPUS_PER_NODE: Final = 8
"""GPUs on one node of the usual GPU server (HGX/DGX H100, H200, B200, MI300X): the default bound of a pod's GPUs."""
DEFAULT_DRAIN_SECONDS: Final = 600
"""How long a pool pod may take to finish its requests after it is asked to stop (terminationGracePeriodSeconds)."""

SpreadMode = Literal["Preferred", "Required", "Off"]
MaxUnavailable = int | Annotated[str, Field(max_length=4)]
"""A count or a percentage; its form is the rule `disruption-max-unavailable` (an int-or-string schema node keeps
no pattern or bounds, so the check is CEL)."""


class PoolLifecycle(SpecModel):
    """How long a server pod may take to start and to stop. The probes, the preStop pause, the grace period and the
    Deployment's progress deadline are all derived from these two numbers (docs/operator.md, "Production defaults of the
    pods")."""

    startup_seconds: int | None = Field(
        default=None,
        ge=60,
        le=86400,
        description="How long a server may take from start to ready (download and load weights, capture CUDA "
        "graphs) before the kubelet restarts it; the startup probe allows at least this long. Unset: 1800, or 3600 "
        "when a pod has 8 or more GPUs (a DeepSeek-class model, hundreds of GB of weights). The Deployment's "
        "progressDeadlineSeconds is startupSeconds + drainSeconds + 600, so a slow but healthy rollout is not "
        "reported as stuck (Degraded, RolloutStuck).",
    )
    drain_seconds: int = Field(
        default=DEFAULT_DRAIN_SECONDS,
        ge=30,
        le=86400,
        description="How long a server pod may take to stop (terminationGracePeriodSeconds): first a preStop pause "
        "that lets the router and the Service see the pod leave, then a wait (bounded so that pause and wait take at "
        "most half of drainSeconds) until no KV transfer or bootstrap room involving the server is in flight, by "
        "its own PD queue gauges, reported in its log; then SGLang's own drain on SIGTERM, which finishes "
        "the requests in flight before exiting. Long generations need a longer drain; SIGKILL ends whatever is "
        "left. The router's grace period is at least the larger drainSeconds of the two pools.",
    )


class DisruptionSpec(SpecModel):
    """The PodDisruptionBudget the operator renders for a pool (or the router): how many of its pods a voluntary
    disruption (a node drain, a cluster upgrade) may take down at once."""

    max_unavailable: MaxUnavailable = Field(
        default=1,
        description="Pods an eviction may leave unavailable at once: a count (0 blocks every voluntary eviction, so "
        "drains wait for you) or a percentage from 0% to 100% such as '25%'. Pods that are not ready (still "
        "starting, or crash-looping) may always be evicted (unhealthyPodEvictionPolicy AlwaysAllow), so a broken "
        "pod never blocks a node drain.",
    )


class PoolSpec(SpecModel):
    """One pool of SGLang servers (prefill or decode): size, parallelism, scheduling and its draft overrides."""

    replicas: int = Field(
        default=1,
        ge=0,
        le=1024,
        description="Number of servers in the pool: pods, or with nodesPerInstance > 1 groups of nodesPerInstance "
        "pods.",
    )
    tensor_parallel_size: int = Field(
        default=1,
        ge=1,
        le=MAX_TENSOR_PARALLEL_SIZE,
        description="GPUs one server shards the model over (--tp-size). With nodesPerInstance 1 at most gpusPerNode; "
        "with nodesPerInstance > 1 exactly nodesPerInstance x gpusPerNode (the server's ranks over all its nodes).",
    )
    parallelism: ParallelismSpec | None = Field(
        default=None,
        description="How this pool's servers split the model beyond tensor parallelism: data-parallel attention, "
        "expert parallelism (DeepEP), the dense-MLP TP size, the DP LM head, two-batch overlap and EPLB. Each pool "
        "has its own; a prefill and a decode of different layouts pair correctly. Unset: tensor parallelism only.",
    )
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements,
        description="Resources of the SGLang container. Unset cpu, memory and ephemeral-storage requests are sized "
        "from the pod's GPUs (cpu 4 + 4 per GPU; memory the /dev/shm size + 16Gi + 24Gi per GPU; without "
        "model.volume or model.cache, ephemeral-storage 16Gi + 96Gi per GPU for the downloaded weights); each key "
        "given here wins. No cpu or memory limit is set unless given (Burstable); limits equal to the requests make "
        "the pods Guaranteed.",
    )
    node_selector: Annotated[dict[str, Annotated[str, Field(max_length=63)]], Field(max_length=32)] = Field(
        default_factory=dict, description="Node labels a pool pod requires: label keys and label values."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=_MAX_LIST, description="Tolerations of pool pods, as in a Pod spec."
    )
    affinity: Affinity | None = Field(
        default=None, description="Affinity of pool pods: nodeAffinity, podAffinity and podAntiAffinity, as in a Pod."
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=_MAX_LIST, description="Extra environment of the SGLang container."
    )
    extra_args: list[Annotated[str, Field(max_length=_MAX_STR)]] = Field(
        default_factory=list,
        max_length=_MAX_EXTRA_ARGS,
        description="Extra SGLang server arguments of this pool only, checked against the release's parser: only "
        "options safe to differ between the pools (scheduling, memory, CUDA graphs, logging, ...). Options the "
        "operator renders, forbids, or that must match across the pools (those go in spec.engine.extraArgs) are "
        "rejected (docs/extra-args.md).",
    )
    pod_labels: Annotated[dict[str, Annotated[str, Field(max_length=63)]], Field(max_length=32)] = Field(
        default_factory=dict,
        description="Extra labels on pool pods: keys are qualified names ([DNS subdomain/]name, the name at most 63 "
        "characters of letters, digits, '-', '_' and '.', alphanumeric at both ends), values label values.",
    )
    pod_annotations: Annotated[dict[str, Annotated[str, Field(max_length=_MAX_ARG)]], Field(max_length=32)] = Field(
        default_factory=dict, description="Extra annotations on pool pods; keys are qualified names as for podLabels."
    )
    speculative: PoolSpeculativeSpec | None = Field(
        default=None,
        description="This pool's overrides of spec.speculative; its effective settings must match the other pool's.",
    )
    gpus_per_node: int = Field(
        default=DEFAULT_GPUS_PER_NODE,
        ge=1,
        le=MAX_GPUS_PER_POD,
        description="GPUs on one node this pool runs on. With nodesPerInstance 1 a pool pod is one SGLang server on "
        "one node, so its GPUs (tensorParallelSize, or resources.limits[nvidia.com/gpu]) may not exceed it. With "
        "nodesPerInstance > 1 every pod of a server's group takes exactly gpusPerNode GPUs.",
    )
    nodes_per_instance: int = Field(
        default=1,
        ge=1,
        le=MAX_NODES_PER_INSTANCE,
        description="Nodes one SGLang server spans. 1: each replica is one pod of a Deployment. More: each replica "
        "is a group of that many pods, one per node (a leader, which serves HTTP and the bootstrap port, and "
        "workers), rendered as a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1), which needs the LeaderWorkerSet "
        "controller v0.9.0 or later installed in the cluster; tensorParallelSize must then be nodesPerInstance x "
        "gpusPerNode, --nnodes, --node-rank and --dist-init-addr are set by the operator, and the router pairs "
        "leaders only. The group restarts as a whole when any of its pods or containers restarts (LeaderWorkerSet "
        "restartPolicy RecreateGroupOnPodRestart): the ranks of one server cannot rejoin one by one. replicas counts "
        "servers (groups), not pods.",
    )
    lifecycle: PoolLifecycle = Field(
        default_factory=PoolLifecycle, description="Start-up and drain budgets of this pool's server pods."
    )
    disruption: DisruptionSpec = Field(
        default_factory=DisruptionSpec, description="The PodDisruptionBudget of this pool."
    )
    priority_class_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_NAME,
        pattern=_DNS_SUBDOMAIN,
        description="PriorityClass of this pool's pods (a DNS subdomain), so the scheduler may preempt less "
        "important pods for them; unset uses the cluster's default priority.",
    )
    spread: SpreadMode = Field(
        default="Preferred",
        description="How this pool's replicas spread over nodes (a topology spread constraint on "
        "kubernetes.io/hostname, maxSkew 1): Preferred (the scheduler tries; ScheduleAnyway), Required (a replica "
        "waits rather than share a node; DoNotSchedule) or Off. Replicas on different nodes survive the loss of one.",
    )
