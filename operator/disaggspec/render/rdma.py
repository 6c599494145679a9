"""RDMA wiring of a pool pod: extended resources, Multus networks, IPC_LOCK, host network and NCCL/UCX/Mooncake env.

Never privileged: RDMA needs only the device (from the RDMA device plugin's extended resource), the NIC in the pod
(a Multus network, or the host network), and IPC_LOCK so the transfer engine can pin memory for registration.
"""

from __future__ import annotations

from typing import Any

from disaggspec import constants as c
from disaggspec.api.v1alpha1 import RdmaSpec, TransferSpec
from disaggspec.sglang.args import gpu_key_order

# UCX (used by the nixl backend) names a device together with its port.
UCX_DEFAULT_PORT = 1


def devices(rdma: RdmaSpec) -> list[str]:
    """Every InfiniBand device a pod may use, in first-seen order (from the list or the per-GPU map)."""
    if rdma.ib_devices_per_gpu:
        ordered = sorted(rdma.ib_devices_per_gpu.items(), key=lambda item: gpu_key_order(item[0]))
        found = [device for _, group in ordered for device in group.split(",")]
    else:
        found = list(rdma.ib_devices)
    return list(dict.fromkeys(found))


def env(transfer: TransferSpec) -> list[dict[str, Any]]:
    rdma = transfer.rdma
    if rdma is None:
        return []
    out: list[dict[str, Any]] = []
    names = devices(rdma)
    if names:
        out.append({"name": "NCCL_IB_HCA", "value": ",".join(names)})
        if transfer.backend == "nixl":
            out.append({"name": "UCX_NET_DEVICES", "value": ",".join(f"{d}:{UCX_DEFAULT_PORT}" for d in names)})
    if rdma.gid_index is not None:
        out.append({"name": "NCCL_IB_GID_INDEX", "value": str(rdma.gid_index)})
        # Mooncake's transfer engine reads its RoCE GID index from MC_GID_INDEX.
        out.append({"name": "MC_GID_INDEX", "value": str(rdma.gid_index)})
    return out


def pod_annotations(transfer: TransferSpec) -> dict[str, str]:
    if transfer.rdma is None or not transfer.rdma.networks:
        return {}
    return {c.ANNOTATION_MULTUS_NETWORKS: ",".join(transfer.rdma.networks)}


def resources(transfer: TransferSpec) -> dict[str, Any]:
    return dict(transfer.rdma.resources) if transfer.rdma is not None else {}


def security_context(transfer: TransferSpec) -> dict[str, Any]:
    context: dict[str, Any] = {"privileged": False, "allowPrivilegeEscalation": False}
    if transfer.rdma is not None:
        context["capabilities"] = {"add": ["IPC_LOCK"]}
    return context


def host_network(transfer: TransferSpec) -> dict[str, Any]:
    if transfer.rdma is None or not transfer.rdma.host_network:
        return {}
    return {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}
