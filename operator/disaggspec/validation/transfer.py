"""Transfer rules: the RDMA device settings and the bootstrap port of spec.transfer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from disaggspec.api.effective import POOL_NAMES, pool
from disaggspec.api.v1alpha1 import MAX_GPUS_PER_POD, DisaggSpecService, DisaggSpecServiceSpec, RdmaSpec, TransferSpec
from disaggspec.sglang.args import SERVER_PORT
from disaggspec.validation._cel import both, string_list
from disaggspec.validation._core import Cel, Rule
from disaggspec.validation.pools import pool_gpus, pool_gpus_cel

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
    for p in POOL_NAMES:
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
    ),
)


def _ib_exclusive(service: DisaggSpecService) -> Iterator[str]:
    """--disaggregation-ib-device takes one form: a comma list or a per-GPU map (0.5.23 fields/disagg.py:84-87)."""
    rdma = service.spec.transfer.rdma
    if rdma is not None and rdma.ib_devices and rdma.ib_devices_per_gpu:
        yield "spec.transfer.rdma"


IB_DEVICES_EXCLUSIVE: Final = Rule(
    id="transfer-rdma-ib-devices-exclusive",
    fields=("spec.transfer.rdma.ibDevices", "spec.transfer.rdma.ibDevicesPerGpu"),
    message="set either spec.transfer.rdma.ibDevices or spec.transfer.rdma.ibDevicesPerGpu, not both",
    check=_ib_exclusive,
    cel=Cel(
        RdmaSpec,
        "!(has(self.ibDevices) && size(self.ibDevices) > 0 && has(self.ibDevicesPerGpu) && "
        "size(self.ibDevicesPerGpu) > 0)",
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
