"""RDMA wiring of a pool pod: extended resources, Multus networks, IPC_LOCK, host network, NCCL/UCX/Mooncake env,
and with ibDeviceMapping Auto the start-time wrapper (disaggspec.ib_device_map) in front of the server command.

Never privileged: RDMA needs only the device (from the RDMA device plugin's extended resource), the NIC in the pod
(a Multus network, or the host network), and IPC_LOCK so the transfer engine can pin memory for registration.
"""

from __future__ import annotations

from typing import Any

from disaggspec import constants as c
from disaggspec.api.v1alpha1 import RdmaSpec, TransferSpec
from disaggspec.ib_device_map import IMAGE_PATH
from disaggspec.sglang.args import gpu_key_order

# UCX (used by the nixl backend) names a device together with its port.
UCX_DEFAULT_PORT = 1


def nccl_ib_hca(names: list[str]) -> str:
    """NCCL_IB_HCA naming exactly `names`. NCCL reads each token as a name *prefix* unless the list starts with `=`
    (NCCL docs, Environment Variables, NCCL_IB_HCA: "mlx5_1" alone also selects mlx5_10 to mlx5_19; `^` excludes,
    `:N` names a port; src/transport/net_ib.cc strips a leading `^`, then `=`, and matches with strcmp instead of a
    prefix strncmp): a node with mlx5_1 and mlx5_10 would otherwise put mlx5_10 in the pool's collectives too."""
    return "=" + ",".join(names)


def ucx_net_devices(names: list[str]) -> str:
    """UCX_NET_DEVICES naming exactly `names` with their port: UCX matches each entry against `device:port` as a
    whole (ucs_config_names_search, fnmatch without wildcards here), so `mlx5_1:1` never selects mlx5_10; a name
    that already carries a port (`mlx5_0:2`) keeps it."""
    return ",".join(d if ":" in d else f"{d}:{UCX_DEFAULT_PORT}" for d in names)


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
    # With Auto the wrapper exports the device env it computes at start; these are a Static mapping's.
    names = devices(rdma) if rdma.effective_mapping() == "Static" else []
    if names:
        out.append({"name": "NCCL_IB_HCA", "value": nccl_ib_hca(names)})
        # nixl on a release that reads the per-GPU map (0.5.23; the map is refused on 0.5.2) ignores that map when
        # UCX_NET_DEVICES is set (0.5.23 disaggregation/nixl/conn.py:564-572), so a map leaves it unset.
        if transfer.backend == "nixl" and not rdma.ib_devices_per_gpu:
            out.append({"name": "UCX_NET_DEVICES", "value": ucx_net_devices(names)})
    if rdma.gid_index is not None:
        out.append({"name": "NCCL_IB_GID_INDEX", "value": str(rdma.gid_index)})
        # Mooncake's transfer engine reads its RoCE GID index from MC_GID_INDEX.
        out.append({"name": "MC_GID_INDEX", "value": str(rdma.gid_index)})
        if transfer.backend == "nixl":
            # nixl moves the KV cache over UCX, whose RoCE GID index is UCX_IB_GID_INDEX (UCX's default picks the
            # first RoCE v2 GID, which is not the configured one on every fabric).
            out.append({"name": "UCX_IB_GID_INDEX", "value": str(rdma.gid_index)})
    return out


def launcher(transfer: TransferSpec, per_gpu_map: bool) -> list[str]:
    """The wrapper argv in front of the server command with ibDeviceMapping Auto (empty otherwise): it maps each GPU
    to its nearest HCA at start, among ibDevices when given, and renders the flag in the release's form (a per-GPU
    map where `per_gpu_map`, else a list)."""
    rdma = transfer.rdma
    if rdma is None or rdma.effective_mapping() != "Auto":
        return []
    argv = ["python3", IMAGE_PATH, "--form", "map" if per_gpu_map else "list", "--backend", transfer.backend]
    for device in rdma.ib_devices:
        argv += ["--allow", device]
    return [*argv, "--"]


def server_command(command: list[str]) -> list[str]:
    """A pool container's command without the wrapper: the server command the wrapper execs (less the device flag
    it adds at start)."""
    if command[:2] == ["python3", IMAGE_PATH] and "--" in command:
        return command[command.index("--") + 1 :]
    return command


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
