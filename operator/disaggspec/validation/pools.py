"""Pool rules: the resource name the children are named after, each pool's GPUs (a whole count, covering the tensor
parallel ranks, on one node; or a whole node per pod of a multi-node server), and what a pool's env may set (its
extraArgs: `extra_args.py`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from disaggspec.api.effective import pool
from disaggspec.api.v1alpha1 import (
    DEFAULT_GPUS_PER_NODE,
    GPU_RESOURCE,
    DisaggSpecService,
    DisaggSpecServiceSpec,
    DisruptionSpec,
    EnvVar,
    EnvVarSource,
    PoolSpec,
)
from disaggspec.constants import POOLS
from disaggspec.revision import REVISION_NAME_LENGTH
from disaggspec.sglang.profiles import RUST_SERVER_ENV, TRANSFER_DRAFT_PROBS_ENV
from disaggspec.validation._cel import quote, string_list
from disaggspec.validation._core import Cel, Rule, pool_spec_rule
from disaggspec.validation._places import env_vars, node_rule

MAX_NAME_LENGTH: Final = 44
"""Longest metadata.name: children are `<name>-prefill` (8 more characters), and a StatefulSet-style child adds a
`-<10-character hash>` to a label value limited to 63: 63 - 11 - 8 = 44. Deployments `<name>-prefill-<8 hex>` are
DNS subdomains (253) and fit."""

OWNED_ENV: Final = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "SGLANG_ENABLE_DISAGG_SAMPLING_MASK",
    TRANSFER_DRAFT_PROBS_ENV,
    RUST_SERVER_ENV,
    "MC_GID_INDEX",
    "NCCL_IB_GID_INDEX",
    "UCX_IB_GID_INDEX",
)
"""Environment variables a pool's env may never set: the GPU visibility the device plugin sets for the GPUs it
allocated (a user value points the servers at GPUs the pod does not have, or at every GPU of the node), what the
operator sets from typed fields (engine.disaggSamplingMask, speculative.transferDraftProbs, transfer.rdma.gidIndex),
and SGLANG_RUST_SERVER (the Rust bootstrap registry drops the speculative fingerprint: every prefill is refused)."""
RDMA_OWNED_ENV_PREFIXES: Final = ("MC_", "UCX_", "NCCL_IB_")
"""Variable families a pool's env may not set once spec.transfer.rdma is set. The whole MC_ (Mooncake) and UCX_ (nixl)
families, not only the names the operator renders (MC_GID_INDEX, UCX_NET_DEVICES, UCX_IB_GID_INDEX): every variable
of them configures the transfer engine whose two ends must agree (MC_FORCE_TCP, MC_IB_PORT on one pool alone break
the pairing), and they are too many to list. Of NCCL only NCCL_IB_*: the NIC selection the operator renders
(NCCL_IB_HCA, NCCL_IB_GID_INDEX); NCCL carries a pool's own tensor-parallel collectives, not the KV transfer, so
NCCL_DEBUG and the like stay the pool's business."""

_METADATA_ON_ROOT: Final = (
    "a CRD has no schema below metadata, so a fieldPath cannot name metadata.name; the rule sits on the object root "
    "and its message names the field"
)

MAX_GROUP_INDEX_DIGITS: Final = 4
"""Digits of a LeaderWorkerSet group index: replicas is at most 1024 and a rolling update surges at most as many
again (LWS caps maxSurge at replicas, sigs.k8s.io/lws v0.9.0 pkg/controllers/leaderworkerset_controller.go:307-310),
so an index < 2048."""
REVISION_SUFFIX_LENGTH: Final = REVISION_NAME_LENGTH
"""Hex characters of the fingerprint in a revision's workload name <name>-<role>-<8 hex> (`revision`)."""
CONTROLLER_REVISION_HASH_LENGTH: Final = 10
"""Longest hash a StatefulSet's ControllerRevision gets: the decimal FNV-32 sum, safe-encoded character by character
(kubernetes pkg/controller/history/controller_history.go:134-145), at most 10 characters."""
LABEL_VALUE_LENGTH: Final = 63


def multi_node_name_limit(role: str) -> int:
    """Longest metadata.name when the pool of `role` is multi-node. Its LeaderWorkerSet <name>-<role>-<8 hex> makes,
    per group g, a worker StatefulSet named <lws>-<g> (sigs.k8s.io/lws v0.9.0 pkg/controllers/pod_controller.go:434,
    StatefulSet(leaderPod.Name, ...), the leader pod being <lws>-<g>: leaderworkerset_controller.go:609), whose pods
    carry the label controller-revision-hash: <statefulset>-<hash> (kubernetes pkg/controller/statefulset/
    stateful_set_utils.go:505-511 with the revision named by controller_history.go:95-101). A label value is at most
    63 characters, so <name>-<role>-<8 hex>-<4 digits>-<10> must fit: 63 - 1 - len(role) - 1 - 8 - 1 - 4 - 1 - 10.
    That also covers the worker pod names <lws>-<g>-<w> (hostnames, 63) and the leader StatefulSet's revision label
    <lws>-<10>. 30 for prefill, 31 for decode."""
    suffix = 1 + len(role) + 1 + REVISION_SUFFIX_LENGTH + 1 + MAX_GROUP_INDEX_DIGITS + 1
    return LABEL_VALUE_LENGTH - suffix - CONTROLLER_REVISION_HASH_LENGTH


# ---- the resource name -------------------------------------------------------------------------------------------


def _name_length(service: DisaggSpecService) -> Iterator[str]:
    """Children are named `<name>-prefill`, `<name>-decode`, `<name>-router`; see MAX_NAME_LENGTH for the margin."""
    if len(service.metadata.name) > MAX_NAME_LENGTH:
        yield "metadata.name"


NAME_LENGTH: Final = Rule(
    id="name-length",
    fields=("metadata.name",),
    message=f"metadata.name must be at most {MAX_NAME_LENGTH} characters: the operator names children "
    "<name>-prefill, <name>-decode and <name>-router; choose a shorter name",
    check=_name_length,
    cel=Cel("root", f"self.metadata.name.size() <= {MAX_NAME_LENGTH}", on_node=_METADATA_ON_ROOT),
)


def _name_dns_label(service: DisaggSpecService) -> Iterator[str]:
    """Services are named after the resource and must be RFC 1035 labels (no dots, starting with a letter)."""
    name = service.metadata.name
    if name and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) is None:
        yield "metadata.name"


def _is_multi_node(pool_spec: PoolSpec) -> bool:
    return pool_spec.nodes_per_instance > 1


def multi_node_cel(prefix: str) -> str:
    """CEL: the pool spec at `prefix` spans several nodes."""
    return f"(has({prefix}.nodesPerInstance) && {prefix}.nodesPerInstance > 1)"


def _gpus_per_node_cel(prefix: str) -> str:
    return f"(has({prefix}.gpusPerNode) ? {prefix}.gpusPerNode : {DEFAULT_GPUS_PER_NODE})"


_PREFILL_NAME_LIMIT: Final = multi_node_name_limit(POOLS[0])
_DECODE_NAME_LIMIT: Final = multi_node_name_limit(POOLS[1])


def _name_length_multi_node(service: DisaggSpecService) -> Iterator[str]:
    """The LeaderWorkerSet's children carry longer names than a Deployment's: see `multi_node_name_limit`."""
    name = service.metadata.name
    if any(_is_multi_node(pool(service.spec, p)) and len(name) > multi_node_name_limit(p) for p in POOLS):
        yield "metadata.name"


NAME_LENGTH_MULTI_NODE: Final = Rule(
    id="name-length-multi-node",
    fields=("metadata.name", "spec.prefill.nodesPerInstance", "spec.decode.nodesPerInstance"),
    message=f"metadata.name must be at most {_PREFILL_NAME_LIMIT} characters when spec.prefill.nodesPerInstance > 1 "
    f"({_DECODE_NAME_LIMIT} when only spec.decode.nodesPerInstance > 1): a multi-node pool's LeaderWorkerSet "
    "<name>-<pool>-<8 hex> names a StatefulSet per group <set>-<group>, and its pods' controller-revision-hash "
    "label <statefulset>-<10 characters> must fit 63; choose a shorter name",
    check=_name_length_multi_node,
    cel=Cel(
        "root",
        f"(!{multi_node_cel('self.spec.prefill')} || self.metadata.name.size() <= {_PREFILL_NAME_LIMIT}) && "
        f"(!{multi_node_cel('self.spec.decode')} || self.metadata.name.size() <= {_DECODE_NAME_LIMIT})",
        on_node=_METADATA_ON_ROOT,
    ),
)


NAME_DNS_LABEL: Final = Rule(
    id="name-dns-label",
    fields=("metadata.name",),
    message="metadata.name must be a DNS label (lowercase letters, digits and '-', starting with a letter, no "
    "dots): the operator creates Services named after it",
    check=_name_dns_label,
    cel=Cel("root", "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')", on_node=_METADATA_ON_ROOT),
)


# ---- GPUs --------------------------------------------------------------------------------------------------------


def _is_whole(value: int | str) -> bool:
    return isinstance(value, int) or re.fullmatch(r"[0-9]+", value) is not None


def pool_gpus(pool_spec: PoolSpec) -> int:
    """GPUs one pod of the pool gets: resources.limits[nvidia.com/gpu] when set to a whole number, else what the
    renderer requests when the limit is unset: tensorParallelSize, or gpusPerNode for a multi-node pool (each pod of
    its group is one node)."""
    limit = pool_spec.resources.limits.get(GPU_RESOURCE)
    if limit is not None and _is_whole(limit):
        return int(limit)
    return pool_spec.gpus_per_node if _is_multi_node(pool_spec) else pool_spec.tensor_parallel_size


def _gpu_limit_cel(prefix: str) -> tuple[str, str]:
    """CEL: (the GPU limit is set to a whole number, that number) for the pool spec at `prefix`."""
    limits = f"{prefix}.resources.limits"
    key = quote(GPU_RESOURCE)
    has_limit = f"has({prefix}.resources) && has({limits}) && {key} in {limits}"
    whole = f"string({limits}[{key}]).matches('^[0-9]+$')"
    return f"{has_limit} && {whole}", f"int(string({limits}[{key}]))"


def pool_gpus_cel(prefix: str) -> str:
    """`pool_gpus` in CEL, for the pool spec at `prefix`."""
    has_whole_limit, limit = _gpu_limit_cel(prefix)
    unset = f"({multi_node_cel(prefix)} ? {_gpus_per_node_cel(prefix)} : {prefix}.tensorParallelSize)"
    return f"(({has_whole_limit}) ? {limit} : {unset})"


def _gpu_whole(pool_spec: PoolSpec) -> bool:
    """GPUs are counted devices; a fractional or suffixed quantity cannot be a GPU count."""
    limit = pool_spec.resources.limits.get(GPU_RESOURCE)
    return limit is None or _is_whole(limit)


GPU_COUNT_WHOLE: Final = pool_spec_rule(
    "pool-gpu-count-whole",
    ("spec.prefill.resources.limits", "spec.decode.resources.limits"),
    f"spec.<pool>.resources.limits[{GPU_RESOURCE}] must be a whole number of GPUs: give a count such as 1 or 8",
    wire="resources.limits",
    holds=_gpu_whole,
    cel=f"!has(self.resources) || !has(self.resources.limits) || !({quote(GPU_RESOURCE)} in self.resources.limits) || "
    f"string(self.resources.limits[{quote(GPU_RESOURCE)}]).matches('^[0-9]+$')",
)


def _gpus_cover_tp(pool_spec: PoolSpec) -> bool:
    """With one node per pod (nodesPerInstance 1: --nnodes is unset), a server starts tp_size scheduler processes,
    one per GPU id base_gpu_id + tp_rank (0.5.2 sglang/srt/entrypoints/engine.py:754-772; --tp-size at
    server_args.py:1124-1130; 0.5.23 sglang/srt/arg_groups/fields/parallel.py:45), so a pod needs at least
    tensorParallelSize GPUs. A multi-node pool is checked by `pool-multi-node-tp` and `pool-multi-node-gpu-limit`."""
    return _is_multi_node(pool_spec) or pool_gpus(pool_spec) >= pool_spec.tensor_parallel_size


GPUS_COVER_TP: Final = pool_spec_rule(
    "pool-gpus-cover-tp",
    (
        "spec.prefill.tensorParallelSize",
        "spec.prefill.resources.limits",
        "spec.decode.tensorParallelSize",
        "spec.decode.resources.limits",
    ),
    f"spec.<pool>.resources.limits[{GPU_RESOURCE}] must be at least spec.<pool>.tensorParallelSize (one GPU per "
    "rank) when spec.<pool>.nodesPerInstance is 1: raise the GPU limit or lower tensorParallelSize, or set "
    "nodesPerInstance to span several nodes",
    wire="resources.limits",
    holds=_gpus_cover_tp,
    cel=f"{multi_node_cel('self')} || {pool_gpus_cel('self')} >= self.tensorParallelSize",
)


def _gpus_fit_node(pool_spec: PoolSpec) -> bool:
    """With nodesPerInstance 1 a pool pod is one SGLang server (--nnodes is the operator's, forbidden in extraArgs)
    and one Pod, which the scheduler places on one node: more GPUs than a node has leave it Pending forever. A server
    over several nodes is a LeaderWorkerSet group (nodesPerInstance > 1), checked by `pool-multi-node-tp`."""
    return _is_multi_node(pool_spec) or pool_gpus(pool_spec) <= pool_spec.gpus_per_node


GPUS_FIT_NODE: Final = pool_spec_rule(
    "pool-gpus-per-node",
    (
        "spec.prefill.tensorParallelSize",
        "spec.prefill.resources.limits",
        "spec.prefill.gpusPerNode",
        "spec.decode.tensorParallelSize",
        "spec.decode.resources.limits",
        "spec.decode.gpusPerNode",
    ),
    f"spec.<pool>.tensorParallelSize (and resources.limits[{GPU_RESOURCE}]) must fit on one node when "
    f"spec.<pool>.nodesPerInstance is 1: at most spec.<pool>.gpusPerNode (default {DEFAULT_GPUS_PER_NODE}); lower "
    "tensorParallelSize, raise gpusPerNode if your nodes have more GPUs, or set nodesPerInstance to span several "
    "nodes",
    wire="tensorParallelSize",
    holds=_gpus_fit_node,
    cel=f"{multi_node_cel('self')} || {pool_gpus_cel('self')} <= {_gpus_per_node_cel('self')}",
)


def _multi_node_tp(pool_spec: PoolSpec) -> bool:
    """A multi-node server runs tp_size / nnodes ranks on each node, one per GPU 0..n-1 (see
    `disaggspec.sglang.args.multi_node_args`), and each pod of its group requests gpusPerNode GPUs: fewer ranks than
    GPUs leave GPUs idle, more do not fit. Pipeline parallelism and data-parallel replicas are forbidden in extraArgs
    (pp = 1, one replica), and DP attention splits the tensor-parallel ranks rather than adding any, so the server's
    ranks are exactly its tensor-parallel ones."""
    return not _is_multi_node(pool_spec) or (
        pool_spec.tensor_parallel_size == pool_spec.nodes_per_instance * pool_spec.gpus_per_node
    )


MULTI_NODE_TP: Final = pool_spec_rule(
    "pool-multi-node-tp",
    (
        "spec.prefill.tensorParallelSize",
        "spec.prefill.nodesPerInstance",
        "spec.prefill.gpusPerNode",
        "spec.decode.tensorParallelSize",
        "spec.decode.nodesPerInstance",
        "spec.decode.gpusPerNode",
    ),
    "spec.<pool>.tensorParallelSize must be spec.<pool>.nodesPerInstance x spec.<pool>.gpusPerNode when "
    "nodesPerInstance > 1 (each node of the server runs one rank per GPU; pipeline parallelism and data-parallel "
    "replicas are not available and DP attention splits the tensor-parallel ranks, so every rank is a tensor-parallel "
    "one): set tensorParallelSize to that product, or change "
    "nodesPerInstance or gpusPerNode",
    wire="tensorParallelSize",
    holds=_multi_node_tp,
    cel=f"!{multi_node_cel('self')} || self.tensorParallelSize == self.nodesPerInstance * {_gpus_per_node_cel('self')}",
)


def _multi_node_gpu_limit(pool_spec: PoolSpec) -> bool:
    """Every pod of a multi-node group is one whole node: its GPU limit is gpusPerNode (the renderer's default), and
    another count would give its ranks fewer GPUs than they address, or hold GPUs no rank uses. A non-whole limit is
    `pool-gpu-count-whole`'s."""
    limit = pool_spec.resources.limits.get(GPU_RESOURCE)
    if not _is_multi_node(pool_spec) or limit is None or not _is_whole(limit):
        return True
    return int(limit) == pool_spec.gpus_per_node


MULTI_NODE_GPU_LIMIT: Final = pool_spec_rule(
    "pool-multi-node-gpu-limit",
    (
        "spec.prefill.resources.limits",
        "spec.prefill.gpusPerNode",
        "spec.decode.resources.limits",
        "spec.decode.gpusPerNode",
    ),
    f"spec.<pool>.resources.limits[{GPU_RESOURCE}] must equal spec.<pool>.gpusPerNode when "
    "spec.<pool>.nodesPerInstance > 1 (the GPUs of each pod of the group, one node each): remove the GPU limit (it "
    "defaults to gpusPerNode) or set it to gpusPerNode",
    wire="resources.limits",
    holds=_multi_node_gpu_limit,
    cel=f"!{multi_node_cel('self')} || !({_gpu_limit_cel('self')[0]}) || "
    f"{_gpu_limit_cel('self')[1]} == {_gpus_per_node_cel('self')}",
)


# ---- disruption budgets ------------------------------------------------------------------------------------------

MAX_UNAVAILABLE_FORM: Final = r"^([0-9]+|(100|[1-9]?[0-9])%)$"
"""What a PodDisruptionBudget's maxUnavailable takes: a non-negative count or a percentage up to 100%."""


def disruption_places(service: DisaggSpecService) -> Iterator[tuple[str, DisruptionSpec]]:
    """The disruption block of both pools and of the router."""
    for p in POOLS:
        yield f"spec.{p}.disruption", pool(service.spec, p).disruption
    yield "spec.router.disruption", service.spec.router.disruption


MAX_UNAVAILABLE: Final = node_rule(
    "disruption-max-unavailable",
    ("spec.prefill.disruption", "spec.decode.disruption", "spec.router.disruption"),
    "spec.<pool>.disruption.maxUnavailable and spec.router.disruption.maxUnavailable must be a non-negative count "
    "or a percentage from 0% to 100% (for example 1 or '25%'): fix the value",
    checks=(
        (
            DisruptionSpec,
            disruption_places,
            lambda d: re.fullmatch(MAX_UNAVAILABLE_FORM, str(d.max_unavailable)) is not None,
            f"!has(self.maxUnavailable) || string(self.maxUnavailable).matches({quote(MAX_UNAVAILABLE_FORM)})",
            ".maxUnavailable",
        ),
    ),
)


# ---- env -------------------------------------------------------------------------------------------------------------


def _env_not_owned(service: DisaggSpecService) -> Iterator[str]:
    """Variables rendered from typed fields (0.5.23 sglang/srt/environ.py:756 for the sampling mask) or set by the
    NVIDIA device plugin for the GPUs it allocated."""
    for path, env in env_vars(service):
        if env.name in OWNED_ENV:
            yield f"{path}.name"


ENV_OWNED: Final = Rule(
    id="pool-env-owned",
    fields=("spec.prefill.env", "spec.decode.env"),
    message="spec.<pool>.env[].name may not be CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES (the device plugin "
    "sets them for the GPUs it allocated) nor SGLANG_ENABLE_DISAGG_SAMPLING_MASK, SGLANG_DISAGG_TRANSFER_DRAFT_PROBS, "
    "MC_GID_INDEX, NCCL_IB_GID_INDEX or UCX_IB_GID_INDEX, nor SGLANG_RUST_SERVER (the Rust bootstrap registry carries "
    "no speculative fingerprint, so every decode would refuse every prefill): remove the entry; size GPUs with "
    "tensorParallelSize and resources.limits, and use spec.engine.disaggSamplingMask, "
    "spec.speculative.transferDraftProbs and spec.transfer.rdma.gidIndex",
    check=_env_not_owned,
    cel=Cel(EnvVar, f"!(self.name in {string_list(OWNED_ENV)})", ".name"),
)

_RDMA_OWNED_ENV_RE: Final = "^(" + "|".join(RDMA_OWNED_ENV_PREFIXES) + ")"


def _env_not_rdma_owned(service: DisaggSpecService) -> Iterator[str]:
    """With RDMA the operator renders the NIC env of the transfer engines (disaggspec/render/rdma.py) and both ends of
    a transfer must read the same settings; see RDMA_OWNED_ENV_PREFIXES for why these families."""
    if service.spec.transfer.rdma is None:
        return
    for path, env in env_vars(service):
        if env.name.startswith(RDMA_OWNED_ENV_PREFIXES):
            yield f"{path}.name"


ENV_RDMA_OWNED: Final = Rule(
    id="pool-env-rdma-owned",
    fields=("spec.prefill.env", "spec.decode.env", "spec.transfer.rdma"),
    message="with spec.transfer.rdma set, spec.<pool>.env may not set MC_*, UCX_* or NCCL_IB_* variables: the "
    "operator renders the transfer engines' NIC settings and both pools must read the same ones; remove the entry "
    "and use spec.transfer.rdma (ibDeviceMapping, ibDevices, ibDevicesPerGpu, gidIndex)",
    check=_env_not_rdma_owned,
    # One CEL rule per pool (on the spec node, which sees spec.transfer.rdma) naming that pool's env.
    cel=tuple(
        Cel(
            DisaggSpecServiceSpec,
            f"!has(self.transfer.rdma) || !has(self.{p}.env) || "
            f"self.{p}.env.all(e, !e.name.matches({quote(_RDMA_OWNED_ENV_RE)}))",
            f".{p}.env",
        )
        for p in POOLS
    ),
)


def _env_value_exclusive(service: DisaggSpecService) -> Iterator[str]:
    """As in a Pod, an EnvVar with both value and valueFrom is invalid; rejecting here names the field earlier."""
    for p in POOLS:
        for index, env in enumerate(pool(service.spec, p).env):
            if env.value is not None and env.value_from is not None:
                yield f"spec.{p}.env[{index}].valueFrom"


ENV_VALUE_EXCLUSIVE: Final = Rule(
    id="env-value-exclusive",
    fields=("spec.prefill.env", "spec.decode.env"),
    message="spec.<pool>.env[] sets either value or valueFrom, not both: remove one",
    check=_env_value_exclusive,
    cel=Cel(EnvVar, "!(has(self.value) && has(self.valueFrom))", ".valueFrom"),
)

_ENV_SOURCES: Final = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")


def _env_one_source(service: DisaggSpecService) -> Iterator[str]:
    """As in a Pod, a valueFrom names exactly one source; an empty or doubled one makes the child Deployment fail."""
    for path, env in env_vars(service):
        source = env.value_from
        if source is None:
            continue
        given = (source.secret_key_ref, source.config_map_key_ref, source.field_ref, source.resource_field_ref)
        if sum(part is not None for part in given) != 1:
            yield f"{path}.valueFrom"


ENV_ONE_SOURCE: Final = Rule(
    id="env-value-from-one-source",
    fields=("spec.prefill.env", "spec.decode.env"),
    message="spec.<pool>.env[].valueFrom needs exactly one of secretKeyRef, configMapKeyRef, fieldRef or "
    "resourceFieldRef: keep one source",
    check=_env_one_source,
    cel=Cel(
        EnvVarSource,
        " + ".join(f"(has(self.{source}) ? 1 : 0)" for source in _ENV_SOURCES) + " == 1",
        on_node="the rule is about how many of the node's sources are set, so it names the valueFrom itself",
    ),
)
