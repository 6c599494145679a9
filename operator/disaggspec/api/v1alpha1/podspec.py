"""The Pod-spec pieces a pool passes through to its pods, typed as in a Pod (unknown fields refused) so their shape is
checked at admission with no operator running: container resources, environment variables and their `valueFrom`
sources, tolerations, and node, pod and anti-affinity with their selectors.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field

from disaggspec.api.v1alpha1.base import _MAX_ARG, _MAX_NAME, ConfigKey, Name, Quantity, QuantityMap, SpecModel


class ResourceRequirements(SpecModel):
    """Compute resources of one container, as in a Pod spec."""

    limits: QuantityMap = Field(
        default_factory=dict,
        description="Maximum resources, for example {nvidia.com/gpu: 8, memory: 200Gi}. nvidia.com/gpu defaults to "
        "tensorParallelSize. Keys are cpu, memory, ephemeral-storage, hugepages-<size> or a domain-prefixed extended "
        "resource; values are non-negative quantities, whole numbers for extended resources.",
    )
    requests: QuantityMap = Field(
        default_factory=dict,
        description="Minimum resources the scheduler reserves, at most the limit. An extended resource or hugepages "
        "requested must be limited to the same quantity; hugepages need a cpu or memory request or limit.",
    )


class KeySelector(SpecModel):
    """One key of a Secret or ConfigMap in the service's namespace."""

    name: Name = Field(description="Name of the Secret or ConfigMap (a DNS subdomain).")
    key: ConfigKey = Field(description="The key: letters, digits, '-', '_' and '.'.")
    optional: bool | None = Field(default=None, description="Start the container even if the key is missing.")


class ObjectFieldSelector(SpecModel):
    """A field of the pool pod, as the Downward API exposes it to environment variables."""

    api_version: Literal["v1"] | None = Field(default=None, description="Version of the field path's schema (v1).")
    field_path: str = Field(
        max_length=_MAX_NAME,
        pattern=r"^(metadata\.(name|namespace|uid)|metadata\.(labels|annotations)\['[^']+'\]"
        r"|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs))$",
        description="metadata.name, metadata.namespace, metadata.uid, metadata.labels['<key>'], "
        "metadata.annotations['<key>'], spec.nodeName, spec.serviceAccountName, status.hostIP(s) or status.podIP(s).",
    )


class ResourceFieldSelector(SpecModel):
    """A resource limit or request of the SGLang container."""

    container_name: str | None = Field(
        default=None, max_length=63, description="Container whose resource is read; the SGLang container when unset."
    )
    resource: Literal[
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
    ] = Field(description="The resource: limits. or requests. followed by cpu, memory or ephemeral-storage.")
    divisor: Quantity | None = Field(default=None, description="Unit the value is expressed in (default 1).")


class EnvVarSource(SpecModel):
    """Where an environment variable's value comes from: exactly one source, as in a Pod."""

    secret_key_ref: KeySelector | None = Field(default=None, description="A key of a Secret.")
    config_map_key_ref: KeySelector | None = Field(default=None, description="A key of a ConfigMap.")
    field_ref: ObjectFieldSelector | None = Field(default=None, description="A field of the pod.")
    resource_field_ref: ResourceFieldSelector | None = Field(
        default=None, description="A resource limit or request of the container."
    )


ENV_NAME_PATTERN: Final = r"^[ -<>-~]+$"
"""Printable ASCII (space to '~') but '=' (0x3d): two ranges, space to '<' and '>' to '~'."""


class EnvVar(SpecModel):
    """An environment variable of the SGLang container."""

    name: str = Field(
        min_length=1,
        max_length=_MAX_NAME,
        # What the API server accepts: any printable ASCII character but '=' (KEP-4369, RelaxedEnvironmentVariable-
        # Validation: beta and on by default from Kubernetes 1.32, GA in 1.34; apimachinery IsRelaxedEnvVarName).
        # A cluster of 1.30 or 1.31 with the gate off refuses more (IsEnvVarName: letters, digits, '_', '-', '.'), and
        # the webhook's dry-run of the rendered pool workload then says so with the API server's message.
        pattern=ENV_NAME_PATTERN,
        description="Variable name: printable ASCII characters other than '=' (what Kubernetes accepts since 1.32; "
        "1.30 and 1.31 without RelaxedEnvironmentVariableValidation accept only letters, digits, '_', '-' and '.', "
        "not starting with a digit), e.g. MY_VAR or my.dotted-name. Rejected: CUDA_VISIBLE_DEVICES and "
        "NVIDIA_VISIBLE_DEVICES (the device plugin sets them), names the operator sets from typed fields "
        "(SGLANG_ENABLE_DISAGG_SAMPLING_MASK, MC_GID_INDEX, "
        "NCCL_IB_GID_INDEX, UCX_IB_GID_INDEX, HF_TOKEN with model.hfTokenSecretRef, HF_HOME, HF_HUB_OFFLINE and "
        "HF_MODULES_CACHE with model.cache, the compile cache variables with engine.compileCache), and with "
        "spec.transfer.rdma set the MC_*, UCX_* and NCCL_IB_* families the transfer engines read.",
    )
    value: str | None = Field(default=None, max_length=_MAX_ARG, description="Literal value.")
    value_from: EnvVarSource | None = Field(
        default=None,
        description="Source of the value: exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef.",
    )


class Toleration(SpecModel):
    """A taint a pool pod tolerates, as in a Pod spec."""

    key: str | None = Field(
        default=None,
        max_length=317,
        description="Taint key (a label key); unset or empty matches every key and then needs operator Exists.",
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists (any value; no value given) or Equal (the default)."
    )
    value: str | None = Field(default=None, max_length=63, description="Taint value for operator Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; unset matches every effect."
    )
    toleration_seconds: int | None = Field(
        default=None, description="With effect NoExecute only: how long the pod stays bound once tainted."
    )


_MAX_TERMS: Final = 8
"""Bound on affinity terms and requirement lists: ample for a pool, and keeps the CRD's CEL cost estimate finite."""
LabelKey = Annotated[str, Field(min_length=1, max_length=317)]
LabelValue = Annotated[str, Field(max_length=63)]


class NodeSelectorRequirement(SpecModel):
    """One node label (or field) test of a node selector term."""

    key: LabelKey = Field(description="Node label key (matchFields: the field name, metadata.name).")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(
        description="In and NotIn need values; Exists and DoesNotExist take none; Gt and Lt take one integer."
    )
    values: list[LabelValue] = Field(default_factory=list, max_length=64, description="Values the operator tests.")


class NodeSelectorTerm(SpecModel):
    """Requirements a node must all meet (the terms of a selector are ORed)."""

    match_expressions: list[NodeSelectorRequirement] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Requirements on node labels."
    )
    match_fields: list[NodeSelectorRequirement] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Requirements on node fields."
    )


class NodeSelector(SpecModel):
    """A required node selector: at least one term."""

    node_selector_terms: list[NodeSelectorTerm] = Field(
        min_length=1, max_length=_MAX_TERMS, description="Terms, ORed; at least one."
    )


class PreferredSchedulingTerm(SpecModel):
    """A weighted preferred node term."""

    weight: int = Field(ge=1, le=100, description="Weight of the term, 1-100.")
    preference: NodeSelectorTerm = Field(description="The node term.")


class NodeAffinity(SpecModel):
    """Node affinity, as in a Pod spec."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        default=None, description="Nodes a pool pod may run on."
    )
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Nodes a pool pod prefers."
    )


class LabelSelectorRequirement(SpecModel):
    """One pod label test of a label selector."""

    key: LabelKey = Field(description="Pod label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In and NotIn need values; Exists and DoesNotExist take none."
    )
    values: list[LabelValue] = Field(default_factory=list, max_length=64, description="Values the operator tests.")


class LabelSelector(SpecModel):
    """A pod label selector."""

    match_labels: Annotated[dict[str, LabelValue], Field(max_length=32)] = Field(
        default_factory=dict, description="Labels a pod must have."
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Label requirements, ANDed."
    )


class PodAffinityTerm(SpecModel):
    """Pods (by label, in some namespaces) a pool pod is placed with or away from, per topology domain."""

    label_selector: LabelSelector | None = Field(default=None, description="The pods.")
    namespace_selector: LabelSelector | None = Field(default=None, description="Namespaces of the pods, by label.")
    namespaces: list[Annotated[str, Field(max_length=63)]] = Field(
        default_factory=list, max_length=32, description="Namespaces of the pods; the pool's own when unset."
    )
    topology_key: LabelKey = Field(description="Node label whose value defines the domain (required).")
    match_label_keys: list[LabelKey] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Pod label keys whose values are matched too."
    )
    mismatch_label_keys: list[LabelKey] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Pod label keys whose values must differ."
    )


class WeightedPodAffinityTerm(SpecModel):
    """A weighted preferred pod term."""

    weight: int = Field(ge=1, le=100, description="Weight of the term, 1-100.")
    pod_affinity_term: PodAffinityTerm = Field(description="The pod term.")


class PodAffinity(SpecModel):
    """Pod affinity or anti-affinity, as in a Pod spec."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Terms a pool pod must meet."
    )
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Terms a pool pod prefers."
    )


class Affinity(SpecModel):
    """Scheduling affinity of pool pods, typed as in a Pod spec (unknown fields refused) so its shape is checked at
    admission; what needs the scheduler's view is left to the API server's validation of the rendered pool."""

    node_affinity: NodeAffinity | None = Field(default=None, description="Node affinity, as in a Pod spec.")
    pod_affinity: PodAffinity | None = Field(default=None, description="Pod affinity, as in a Pod spec.")
    pod_anti_affinity: PodAffinity | None = Field(default=None, description="Pod anti-affinity, as in a Pod spec.")
