"""Transfer rules: the RDMA settings (devices, their resources and GPU keys) and the bootstrap port of spec.transfer,
the tensor-parallel sizes the KV transfer can pair, and the router's port beside its metrics port."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from disaggspec.api.effective import pool
from disaggspec.api.v1alpha1 import (
    DEFAULT_GPUS_PER_NODE,
    GPU_RESOURCE,
    MAX_GPUS_PER_POD,
    ROUTER_METRICS_PORT,
    DisaggSpecService,
    DisaggSpecServiceSpec,
    PoolSpec,
    RdmaSpec,
    RouterSpec,
    TransferSpec,
)
from disaggspec.constants import POOLS
from disaggspec.sglang.args import DIST_INIT_PORT, SERVER_PORT
from disaggspec.sglang.profiles import PROFILES
from disaggspec.validation._cel import both, quote, string_list
from disaggspec.validation._core import Cel, Rule
from disaggspec.validation._syntax import (
    EXTENDED_RESOURCE,
    GPU_INDEX,
    RESERVED_RESOURCE,
    found,
    full,
    is_quantity_cel,
    quantity,
    quantity_cel,
)
from disaggspec.validation.pools import multi_node_cel, pool_gpus, pool_gpus_cel

_RDMA_LESS_BACKENDS: Final = ("fake", "mooncake_tcp")

_MISSING_GPUS: Final = f"{list(range(MAX_GPUS_PER_POD))}.filter(i, !(string(i) in self.transfer.rdma.ibDevicesPerGpu))"
"""CEL: the GPU indexes 0..MAX_GPUS_PER_POD-1 absent from the per-GPU ib device map, in ascending order."""


def _ib_map_covers(service: DisaggSpecService) -> Iterator[str]:
    """Map keys are process-visible GPU ids (0.5.23 sglang/srt/arg_groups/fields/disagg.py:84-87), and a GPU missing
    from the map makes the server fail at start with "No IB devices configured for GPU n" (0.5.23
    sglang/srt/distributed/device_communicators/mooncake_transfer_engine.py:78-107), so every GPU 0..n-1 of each
    pool's pods must be listed."""
    rdma = service.spec.transfer.rdma
    if rdma is None or not rdma.ib_devices_per_gpu:
        return
    for p in POOLS:
        if any(str(i) not in rdma.ib_devices_per_gpu for i in range(pool_gpus(pool(service.spec, p)))):
            yield "spec.transfer.rdma.ibDevicesPerGpu"
            return


IB_MAP_COVERS_GPUS: Final = Rule(
    id="transfer-rdma-ib-map-covers-gpus",
    fields=(
        "spec.transfer.rdma.ibDevicesPerGpu",
        "spec.prefill.tensorParallelSize",
        "spec.decode.tensorParallelSize",
        "spec.prefill.resources.limits",
        "spec.decode.resources.limits",
    ),
    message="spec.transfer.rdma.ibDevicesPerGpu must list every GPU index of both pools' pods ('0' up to GPUs per "
    "pod - 1): add the missing GPU indexes",
    check=_ib_map_covers,
    cel=Cel(
        DisaggSpecServiceSpec,
        "!has(self.transfer.rdma) || !has(self.transfer.rdma.ibDevicesPerGpu) || "
        "size(self.transfer.rdma.ibDevicesPerGpu) == 0 || "
        # The smallest GPU index missing from the map must be at least the pool's GPU count; filtering once and
        # comparing outside the loop keeps the CEL cost estimate within budget (CRD CEL has no cel.bind).
        + both(lambda p: f"size({_MISSING_GPUS}) == 0 || {_MISSING_GPUS}[0] >= {pool_gpus_cel('self.' + p)}"),
        ".transfer.rdma.ibDevicesPerGpu",
    ),
)


def _ib_map_whole_node(service: DisaggSpecService) -> Iterator[str]:
    """The map's keys are the pod's own GPU indexes (0..n-1 in the container's order), not the node's: a 4-GPU pod
    that the device plugin places on GPUs 4-7 of an 8-GPU node reads key '0' for node GPU 4, so a map written from
    `nvidia-smi topo -m` on the node sends its transfers to the other socket's NIC (sglang issue #39584: transfers
    time out). Only a pod that holds the whole node sees the node's numbering."""
    rdma = service.spec.transfer.rdma
    if rdma is None or not rdma.ib_devices_per_gpu:
        return
    if any(pool_gpus(pool(service.spec, p)) != pool(service.spec, p).gpus_per_node for p in POOLS):
        yield "spec.transfer.rdma.ibDevicesPerGpu"


IB_MAP_WHOLE_NODE: Final = Rule(
    id="transfer-rdma-ib-map-whole-node",
    fields=(
        "spec.transfer.rdma.ibDevicesPerGpu",
        "spec.prefill.gpusPerNode",
        "spec.decode.gpusPerNode",
        "spec.prefill.tensorParallelSize",
        "spec.decode.tensorParallelSize",
        "spec.prefill.resources.limits",
        "spec.decode.resources.limits",
    ),
    message="spec.transfer.rdma.ibDevicesPerGpu is a static map by GPU index inside the pod, which matches the "
    "node's GPUs only when every pod of both pools takes a whole node (GPUs per pod equal to spec.<pool>.gpusPerNode): "
    "use the automatic mapping (remove ibDevicesPerGpu; ibDeviceMapping Auto picks each GPU's nearest NIC at start), "
    "or give the pools whole nodes",
    check=_ib_map_whole_node,
    cel=Cel(
        DisaggSpecServiceSpec,
        "!has(self.transfer.rdma) || !has(self.transfer.rdma.ibDevicesPerGpu) || "
        "size(self.transfer.rdma.ibDevicesPerGpu) == 0 || "
        + both(
            lambda p: (
                f"{pool_gpus_cel('self.' + p)} == "
                f"(has(self.{p}.gpusPerNode) ? self.{p}.gpusPerNode : {DEFAULT_GPUS_PER_NODE})"
            )
        ),
        ".transfer.rdma.ibDevicesPerGpu",
    ),
)


def _ib_map_static(service: DisaggSpecService) -> Iterator[str]:
    """Auto computes each GPU's devices at start; a per-GPU map alongside it would be silently ignored."""
    rdma = service.spec.transfer.rdma
    if rdma is not None and rdma.ib_device_mapping == "Auto" and rdma.ib_devices_per_gpu:
        yield "spec.transfer.rdma.ibDeviceMapping"


IB_MAP_STATIC: Final = Rule(
    id="transfer-rdma-ib-map-static",
    fields=("spec.transfer.rdma.ibDeviceMapping", "spec.transfer.rdma.ibDevicesPerGpu"),
    message="spec.transfer.rdma.ibDevicesPerGpu is a Static mapping's input, but spec.transfer.rdma.ibDeviceMapping "
    "is Auto: remove ibDevicesPerGpu (Auto maps each GPU itself; ibDevices limits its choice), or set "
    "ibDeviceMapping to Static",
    check=_ib_map_static,
    cel=Cel(
        RdmaSpec,
        "!(has(self.ibDeviceMapping) && self.ibDeviceMapping == 'Auto' && has(self.ibDevicesPerGpu) && "
        "size(self.ibDevicesPerGpu) > 0)",
        ".ibDeviceMapping",
    ),
)


def _ib_exclusive(service: DisaggSpecService) -> Iterator[str]:
    """--disaggregation-ib-device takes one form: a comma list or a per-GPU map (0.5.23 fields/disagg.py:84-87)."""
    rdma = service.spec.transfer.rdma
    if rdma is not None and rdma.ib_devices and rdma.ib_devices_per_gpu:
        yield "spec.transfer.rdma.ibDevicesPerGpu"


IB_DEVICES_EXCLUSIVE: Final = Rule(
    id="transfer-rdma-ib-devices-exclusive",
    fields=("spec.transfer.rdma.ibDevices", "spec.transfer.rdma.ibDevicesPerGpu"),
    message="set either spec.transfer.rdma.ibDevices or spec.transfer.rdma.ibDevicesPerGpu, not both: remove one",
    check=_ib_exclusive,
    cel=Cel(
        RdmaSpec,
        "!(has(self.ibDevices) && size(self.ibDevices) > 0 && has(self.ibDevicesPerGpu) && "
        "size(self.ibDevicesPerGpu) > 0)",
        ".ibDevicesPerGpu",
    ),
)


def _rdma_backend(service: DisaggSpecService) -> Iterator[str]:
    """RDMA devices are used by mooncake, nixl, mori and ascend; `fake` moves nothing and `mooncake_tcp` is TCP
    (0.5.23 sglang/srt/arg_groups/choices.py:122-129)."""
    if service.spec.transfer.rdma is not None and service.spec.transfer.backend in _RDMA_LESS_BACKENDS:
        yield "spec.transfer.backend"


RDMA_BACKEND: Final = Rule(
    id="transfer-rdma-backend",
    fields=("spec.transfer.rdma", "spec.transfer.backend"),
    message="spec.transfer.rdma needs an RDMA transfer backend: set spec.transfer.backend to mooncake, nixl or mori, "
    "or remove spec.transfer.rdma",
    check=_rdma_backend,
    cel=Cel(
        DisaggSpecServiceSpec,
        f"!has(self.transfer.rdma) || !(self.transfer.backend in {string_list(_RDMA_LESS_BACKENDS)})",
        ".transfer.backend",
    ),
)


def _bootstrap_port_free(service: DisaggSpecService) -> Iterator[str]:
    """The prefill server binds its HTTP port and, separately, the bootstrap server on --disaggregation-bootstrap-port
    (0.5.2 sglang/srt/disaggregation/common/conn.py:51 reads the port for the bootstrap server); one port cannot be
    both."""
    if service.spec.transfer.bootstrap_port == SERVER_PORT:
        yield "spec.transfer.bootstrapPort"


BOOTSTRAP_PORT_FREE: Final = Rule(
    id="transfer-bootstrap-port-free",
    fields=("spec.transfer.bootstrapPort",),
    message=f"spec.transfer.bootstrapPort must differ from the server's HTTP port {SERVER_PORT}: pick another "
    "bootstrap port (the default is 8998)",
    check=_bootstrap_port_free,
    cel=Cel(TransferSpec, f"self.bootstrapPort != {SERVER_PORT}", ".bootstrapPort"),
)


def _bootstrap_port_off_dist_init(service: DisaggSpecService) -> Iterator[str]:
    """A multi-node prefill leader binds the bootstrap server and the ranks' rendezvous (--dist-init-addr, port
    DIST_INIT_PORT) in one pod; a multi-node decode leader, the rendezvous, while decode dials the bootstrap port of
    prefill on that port number (the same spec.transfer.bootstrapPort on both pools)."""
    multi = any(pool(service.spec, p).nodes_per_instance > 1 for p in POOLS)
    if multi and service.spec.transfer.bootstrap_port == DIST_INIT_PORT:
        yield "spec.transfer.bootstrapPort"


BOOTSTRAP_PORT_DIST_INIT: Final = Rule(
    id="transfer-bootstrap-port-dist-init",
    fields=("spec.transfer.bootstrapPort", "spec.prefill.nodesPerInstance", "spec.decode.nodesPerInstance"),
    message=f"spec.transfer.bootstrapPort must differ from {DIST_INIT_PORT}, the port a multi-node server's ranks "
    "rendezvous on at its leader (--dist-init-addr), when spec.prefill.nodesPerInstance or "
    "spec.decode.nodesPerInstance is above 1: pick another bootstrap port (the default is 8998)",
    check=_bootstrap_port_off_dist_init,
    cel=Cel(
        DisaggSpecServiceSpec,
        f"!({multi_node_cel('self.prefill')} || {multi_node_cel('self.decode')}) || "
        f"self.transfer.bootstrapPort != {DIST_INIT_PORT}",
        ".transfer.bootstrapPort",
    ),
)


# ---- RDMA content ------------------------------------------------------------------------------------------------


def _rdma_resource_ok(name: str, value: int | str) -> bool:
    """A NIC is a counted device: a domain-prefixed extended resource (not the GPU resource the operator sizes from
    tensorParallelSize, which this map would override) with a positive whole quantity."""
    amount = quantity(value)
    return (
        full(EXTENDED_RESOURCE, name)
        and not found(RESERVED_RESOURCE, name)
        and name != GPU_RESOURCE
        and amount is not None
        and amount > 0
        and amount.denominator == 1
    )


def _rdma_resources(service: DisaggSpecService) -> Iterator[str]:
    rdma = service.spec.transfer.rdma
    if rdma is not None and not all(_rdma_resource_ok(k, v) for k, v in rdma.resources.items()):
        yield "spec.transfer.rdma.resources"


_RDMA_VALUE: Final = "self.resources[k]"

RDMA_RESOURCES: Final = Rule(
    id="transfer-rdma-resources",
    fields=("spec.transfer.rdma.resources",),
    message=f"spec.transfer.rdma.resources keys must be domain-prefixed extended resources (for example "
    f"rdma/hca_shared_devices_a; not kubernetes.io, not {GPU_RESOURCE}, which tensorParallelSize sizes) and values "
    "positive whole numbers: use the resource name and count the RDMA device plugin advertises",
    check=_rdma_resources,
    cel=Cel(
        RdmaSpec,
        "!has(self.resources) || self.resources.all(k, "
        f"k.matches({quote(EXTENDED_RESOURCE)}) && !k.matches({quote(RESERVED_RESOURCE)}) && "
        f"k != {quote(GPU_RESOURCE)} && {is_quantity_cel(_RDMA_VALUE)} && {quantity_cel(_RDMA_VALUE)}.isInteger() && "
        f"{quantity_cel(_RDMA_VALUE)}.compareTo(quantity('0')) > 0)",
        ".resources",
    ),
)


def _ib_map_keys(service: DisaggSpecService) -> Iterator[str]:
    """SGLang reads the map as JSON with int() keys (0.5.23 sglang/srt/arg_groups/fields/disagg.py:84-87): '00', '+1',
    ' 2', '1_0' and non-ASCII digits would alias or invent GPU indexes, words would fail; only the canonical form
    names one GPU once."""
    rdma = service.spec.transfer.rdma
    if rdma is not None and not all(full(GPU_INDEX, key) for key in rdma.ib_devices_per_gpu):
        yield "spec.transfer.rdma.ibDevicesPerGpu"


IB_MAP_KEYS: Final = Rule(
    id="transfer-rdma-ib-map-keys",
    fields=("spec.transfer.rdma.ibDevicesPerGpu",),
    message="spec.transfer.rdma.ibDevicesPerGpu keys must be GPU indexes written as plain decimals ('0', '1', ... "
    "without sign, spaces or leading zeros): rename the key",
    check=_ib_map_keys,
    cel=Cel(
        RdmaSpec,
        f"!has(self.ibDevicesPerGpu) || self.ibDevicesPerGpu.all(k, k.matches({quote(GPU_INDEX)}))",
        ".ibDevicesPerGpu",
    ),
)


# ---- prefill and decode tensor parallelism -----------------------------------------------------------------------


FULL_TP_MUST_DIVIDE: Final[dict[str, bool]] = {
    "0.5.2": True,  # sglang/srt/server_args.py:828-834, 2382-2388: the prefill asserts it against decode's tp
    "0.5.23": False,  # no such check; only the attention TP sizes meet (disaggregation/common/conn.py:1452-1490)
}
"""Whether a release also makes the pools' whole tensorParallelSizes divide one another, beside their attention TP
sizes. 0.5.2's prefill asserts it at start against --disaggregation-decode-tp (which the operator renders from the
decode pool whenever a pool uses DP attention, and which defaults to the prefill's own tp otherwise)."""


def attention_tp(pool_spec: PoolSpec) -> int | None:
    """A pool's attention TP size: tensorParallelSize over its DP-attention size (tensorParallelSize without DP
    attention); None when the DP size does not divide tp (`parallelism-dp-attention-divides-tp` reports that)."""
    par = pool_spec.parallelism
    dp = par.data_parallel_attention.size if par is not None and par.data_parallel_attention is not None else 1
    tp = pool_spec.tensor_parallel_size
    return tp // dp if tp % dp == 0 else None


def _divide(a: int, b: int) -> bool:
    return max(a, b) % min(a, b) == 0


def _tp_divisible(service: DisaggSpecService) -> Iterator[str]:
    """Decode maps its ranks onto prefill's by integer division of the two attention TP sizes: with decode larger,
    `attn_tp_size // prefill_attn_tp_size` decode ranks read one prefill rank, with prefill larger each decode rank
    reads `prefill_attn_tp_size // attn_tp_size` prefill ranks (0.5.2 sglang/srt/disaggregation/mooncake/conn.py:
    1270-1310; 0.5.23 sglang/srt/disaggregation/common/conn.py:1452-1490), and the KV head slices are cut the same
    way (0.5.2 mooncake/conn.py:449-466). Unless one size divides the other, ranks are skipped or counted twice and
    transfers never complete; 0.5.23 says so outright for replicated state ("One attention TP size must divide the
    other", sglang/srt/disaggregation/utils.py:890-895). The attention TP size is tensorParallelSize over the pool's
    DP-attention size; on 0.5.2 the whole sizes must divide too (FULL_TP_MUST_DIVIDE). So on 0.5.23 a DP-attention
    prefill of tp 32 pairs with a decode of tp 72, as in the SGLang team's 4 + 9 node deployment (attention TP 1 on
    both sides)."""
    spec = service.spec
    prefill_attn, decode_attn = attention_tp(spec.prefill), attention_tp(spec.decode)
    attention_apart = prefill_attn is not None and decode_attn is not None and not _divide(prefill_attn, decode_attn)
    whole_apart = FULL_TP_MUST_DIVIDE[spec.sglang.version] and not _divide(
        spec.prefill.tensor_parallel_size, spec.decode.tensor_parallel_size
    )
    if attention_apart or whole_apart:
        yield "spec.decode.tensorParallelSize"


def _attention_tp_cel(p: str) -> str:
    dpa = f"self.{p}.parallelism.dataParallelAttention"
    tp = f"self.{p}.tensorParallelSize"
    return f"(has(self.{p}.parallelism) && has({dpa}) ? {tp} / {dpa}.size : {tp})"


def _divide_cel(a: str, b: str) -> str:
    # A zero attention TP (DP size above tp) is another rule's finding; it must not divide by zero here.
    return f"({a} == 0 || {b} == 0 || {a} % {b} == 0 || {b} % {a} == 0)"


TP_DIVISIBLE: Final = Rule(
    id="transfer-tp-divisible",
    fields=(
        "spec.prefill.tensorParallelSize",
        "spec.decode.tensorParallelSize",
        "spec.prefill.parallelism.dataParallelAttention.size",
        "spec.decode.parallelism.dataParallelAttention.size",
        "spec.sglang.version",
    ),
    message="the pools' attention tensor-parallel sizes (spec.<pool>.tensorParallelSize divided by "
    "spec.<pool>.parallelism.dataParallelAttention.size, or tensorParallelSize without DP attention) must divide one "
    "another, and on SGLang 0.5.2 spec.prefill.tensorParallelSize and spec.decode.tensorParallelSize too (the larger "
    "a multiple of the smaller, for example 4 and 2, or 2 and 8): the KV transfer maps ranks and head slices by "
    "their quotient; change one of the sizes",
    check=_tp_divisible,
    cel=Cel(
        DisaggSpecServiceSpec,
        _divide_cel(_attention_tp_cel("prefill"), _attention_tp_cel("decode"))
        + " && ("
        + " || ".join(
            f"self.sglang.version == {quote(v)}" for v, full in sorted(FULL_TP_MUST_DIVIDE.items()) if not full
        )
        + " || "
        + _divide_cel("self.prefill.tensorParallelSize", "self.decode.tensorParallelSize")
        + ")",
        ".decode.tensorParallelSize",
    ),
)


# ---- the router --------------------------------------------------------------------------------------------------


def _router_port_free(service: DisaggSpecService) -> Iterator[str]:
    """The router binds its HTTP port and, separately, its Prometheus port (disaggspec/render/router.py renders
    --port and --prometheus-port, and a Service port of each); one port cannot be both."""
    if service.spec.router.port == ROUTER_METRICS_PORT:
        yield "spec.router.port"


ROUTER_PORT_FREE: Final = Rule(
    id="router-port-free",
    fields=("spec.router.port",),
    message=f"spec.router.port must differ from the router's metrics port {ROUTER_METRICS_PORT}: pick another port "
    "(the default is 30000)",
    check=_router_port_free,
    cel=Cel(RouterSpec, f"self.port != {ROUTER_METRICS_PORT}", ".port"),
)


# ---- host network ------------------------------------------------------------------------------------------------

HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
"""The node label naming one node (a pool pinned to it puts all its pods on that node)."""
_FIXED_PORT_ROUTERS: Final = frozenset({"sglang-router"})
"""Routers that build every worker URL from the one --service-discovery-port (sglang-router 0.1.9:
sglang_router/router.py:44-45, launch_router.py:245-248); smg reads per-pod ports (render/ports.py)."""


def _fixed_port_versions() -> list[str]:
    return sorted(v for v, p in PROFILES.items() if p.router.package in _FIXED_PORT_ROUTERS)


def _pinned_replicas(service: DisaggSpecService) -> dict[str, int]:
    """Pool pods per node name, of the pools whose nodeSelector pins them to one node."""
    per_host: dict[str, int] = {}
    for p in POOLS:
        spec = pool(service.spec, p)
        host = spec.node_selector.get(HOSTNAME_LABEL)
        if host is not None:
            per_host[host] = per_host.get(host, 0) + spec.replicas
    return per_host


def _host_network_shared_node(service: DisaggSpecService) -> Iterator[str]:
    """With the host network every pool pod of a release whose router reads no per-pod ports (0.5.2) binds the same
    HTTP port (30000) and, on prefill, the bootstrap port on its node; the API server defaults each such container
    port's hostPort to it (Kubernetes v1.37.2 pkg/apis/core/v1/defaults.go:214-217, 440-447), and the scheduler's
    NodePorts filter refuses a node where the hostPort is taken (pkg/scheduler/framework/plugins/nodeports/
    node_ports.go:155-187). So pools pinned to one node with more than one pod between them never all schedule."""
    spec = service.spec
    rdma = spec.transfer.rdma
    if rdma is None or not rdma.host_network or spec.sglang.version not in _fixed_port_versions():
        return
    per_host = _pinned_replicas(service)
    for p in POOLS:
        host = pool(spec, p).node_selector.get(HOSTNAME_LABEL)
        if host is not None and per_host[host] > 1:
            yield f"spec.{p}.nodeSelector"


def _replicas_cel(p: str) -> str:
    return f"(has(self.{p}.replicas) ? self.{p}.replicas : 1)"


def _pinned_cel(p: str) -> str:
    return f"(has(self.{p}.nodeSelector) && {quote(HOSTNAME_LABEL)} in self.{p}.nodeSelector)"


def _shared_node_cel(p: str, q: str) -> str:
    """CEL: pool `p` pins no more than its one pod to its node, counting pool `q`'s pods pinned to the same node."""
    host = quote(HOSTNAME_LABEL)
    return (
        f"!(self.sglang.version in {string_list(_fixed_port_versions())} && has(self.transfer.rdma) && "
        "has(self.transfer.rdma.hostNetwork) && self.transfer.rdma.hostNetwork) || "
        f"!{_pinned_cel(p)} || ({_replicas_cel(p)} <= 1 && !({_pinned_cel(q)} && "
        f"self.{p}.nodeSelector[{host}] == self.{q}.nodeSelector[{host}] && "
        f"{_replicas_cel(p)} + {_replicas_cel(q)} > 1))"
    )


HOST_NETWORK_SHARED_NODE: Final = Rule(
    id="transfer-host-network-shared-node",
    fields=(
        "spec.transfer.rdma.hostNetwork",
        "spec.sglang.version",
        "spec.prefill.nodeSelector",
        "spec.decode.nodeSelector",
        "spec.prefill.replicas",
        "spec.decode.replicas",
    ),
    message=f"with spec.transfer.rdma.hostNetwork on SGLang 0.5.2 every pool pod binds the same HTTP port "
    f"({SERVER_PORT}) and bootstrap port on its node, and its router (sglang-router 0.1.9) cannot use per-pod ports, "
    f"so no two pool pods can share a node; but spec.prefill.nodeSelector / spec.decode.nodeSelector pin more than "
    f"one pool pod (spec.<pool>.replicas) to one node ({HOSTNAME_LABEL}): use spec.sglang.version 0.5.23 (its "
    "router reads per-pod ports, which the operator assigns), turn spec.transfer.rdma.hostNetwork off, or pin at "
    "most one pool pod to each node",
    check=_host_network_shared_node,
    # One CEL rule per pool, so the API server names the pool's own nodeSelector as the Python twin does.
    cel=tuple(
        Cel(DisaggSpecServiceSpec, _shared_node_cel(p, q), f".{p}.nodeSelector")
        for p, q in (POOLS, (POOLS[1], POOLS[0]))
    ),
)
