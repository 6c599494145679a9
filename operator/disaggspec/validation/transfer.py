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
    RdmaSpec,
    RouterSpec,
    TransferSpec,
)
from disaggspec.constants import POOLS
from disaggspec.sglang.args import DIST_INIT_PORT, SERVER_PORT
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


def _tp_divisible(service: DisaggSpecService) -> Iterator[str]:
    """Decode maps its ranks onto prefill's by integer division of the two attention TP sizes: with decode larger,
    `attn_tp_size // prefill_attn_tp_size` decode ranks read one prefill rank, with prefill larger each decode rank
    reads `prefill_attn_tp_size // attn_tp_size` prefill ranks (0.5.2 sglang/srt/disaggregation/mooncake/conn.py:
    1270-1310; 0.5.23 sglang/srt/disaggregation/common/conn.py:1452-1490), and the KV head slices are cut the same
    way (0.5.2 mooncake/conn.py:449-466). Unless one size divides the other, ranks are skipped or counted twice and
    transfers never complete; 0.5.23 says so outright for replicated state ("One attention TP size must divide the
    other", sglang/srt/disaggregation/utils.py:890-895). Without DP attention (an extraArgs matter) the attention TP
    size is tensorParallelSize."""
    prefill, decode = service.spec.prefill.tensor_parallel_size, service.spec.decode.tensor_parallel_size
    if max(prefill, decode) % min(prefill, decode) != 0:
        yield "spec.decode.tensorParallelSize"


TP_DIVISIBLE: Final = Rule(
    id="transfer-tp-divisible",
    fields=("spec.prefill.tensorParallelSize", "spec.decode.tensorParallelSize"),
    message="spec.prefill.tensorParallelSize and spec.decode.tensorParallelSize must divide one another (the larger "
    "a multiple of the smaller, for example 4 and 2, or 2 and 8): the KV transfer maps ranks and head slices by "
    "their quotient; change one of the two sizes",
    check=_tp_divisible,
    cel=Cel(
        DisaggSpecServiceSpec,
        "self.prefill.tensorParallelSize % self.decode.tensorParallelSize == 0 || "
        "self.decode.tensorParallelSize % self.prefill.tensorParallelSize == 0",
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
