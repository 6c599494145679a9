"""The start-time GPU-to-HCA mapper on fixture sysfs and procfs trees built in a temp dir: the PCI hierarchy under
sys/devices, the sys/bus/pci/devices and sys/class/infiniband/*/device links into it, NUMA nodes, and the driver's
/proc/driver/nvidia/gpus/<bus id>/information files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from disaggspec import ib_device_map as m


class Node:
    """A fake node: `pci(path, numa)` creates a device at a PCI path (root complex first), `gpu` and `hca` also
    register it with the driver listing or the InfiniBand class."""

    def __init__(self, root: Path) -> None:
        self.sys = root / "sys"
        self.proc = root / "proc"
        (self.sys / "bus" / "pci" / "devices").mkdir(parents=True)
        (self.sys / "class" / "infiniband").mkdir(parents=True)
        self.gpus = 0

    def pci(self, path: str, numa: int) -> Path:
        device = self.sys / "devices" / path
        device.mkdir(parents=True, exist_ok=True)
        (device / "numa_node").write_text(f"{numa}\n")
        (self.sys / "bus" / "pci" / "devices" / device.name).symlink_to(
            os.path.relpath(device, self.sys / "bus" / "pci" / "devices")
        )
        return device

    def gpu(self, path: str, numa: int) -> str:
        device = self.pci(path, numa)
        uuid = f"GPU-0000000{self.gpus}-aaaa-bbbb-cccc-dddddddddddd"
        self.gpus += 1
        info = self.proc / "driver" / "nvidia" / "gpus" / device.name
        info.mkdir(parents=True)
        (info / "information").write_text(
            f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nGPU UUID: \t {uuid}\nBus Type: \t PCIe\n"
            f"Bus Location: \t {device.name}\nDevice Minor: \t {self.gpus - 1}\n"
        )
        return uuid

    def hca(self, name: str, path: str, numa: int) -> None:
        device = self.pci(path, numa)
        entry = self.sys / "class" / "infiniband" / name
        entry.mkdir()
        (entry / "device").symlink_to(os.path.relpath(device, entry))

    def choose(self, env: dict[str, str], **kwargs: object) -> m.Choice:
        return m.choose(env, sys_root=self.sys, proc_root=self.proc, **kwargs)  # type: ignore[arg-type]


def _eight_gpu_node(root: Path) -> tuple[Node, list[str]]:
    """Two sockets; on each, two PCIe switches, each with two GPUs and one HCA (mlx5_0..3 in socket order)."""
    node = Node(root)
    uuids: list[str] = []
    for socket, complex_ in enumerate(("pci0000:00", "pci0000:80")):
        base = int(complex_[-2:], 16)
        for switch in range(2):
            port = f"{complex_}/0000:{base:02x}:0{switch + 1}.0/0000:{base + 1 + switch * 16:02x}:00.0"
            bus = base + 2 + switch * 16
            for g in range(2):
                uuids.append(node.gpu(f"{port}/0000:{bus:02x}:0{g}.0/0000:{bus + 1 + g:02x}:00.0", socket))
            node.hca(f"mlx5_{socket * 2 + switch}", f"{port}/0000:{bus:02x}:08.0/0000:{bus + 8:02x}:00.0", socket)
    return node, uuids


def _flag_map(choice: m.Choice) -> dict[str, str]:
    assert choice.flag is not None
    return dict(json.loads(choice.flag))


def test_pod_on_the_second_socket_gets_the_second_sockets_hcas(tmp_path: Path) -> None:
    node, uuids = _eight_gpu_node(tmp_path)
    choice = node.choose({"NVIDIA_VISIBLE_DEVICES": ",".join(uuids[4:])})
    # Container GPU 0 is node GPU 4: the map's keys are container indexes.
    assert _flag_map(choice) == {"0": "mlx5_2", "1": "mlx5_2", "2": "mlx5_3", "3": "mlx5_3"}
    assert choice.env == {"NCCL_IB_HCA": "=mlx5_2,mlx5_3"}


def test_index_form_names_node_gpus(tmp_path: Path) -> None:
    node, _ = _eight_gpu_node(tmp_path)
    choice = node.choose({"NVIDIA_VISIBLE_DEVICES": "4,5,6,7"})
    assert _flag_map(choice) == {"0": "mlx5_2", "1": "mlx5_2", "2": "mlx5_3", "3": "mlx5_3"}


def test_uuid_order_does_not_change_container_order(tmp_path: Path) -> None:
    # CUDA numbers the container's GPUs in PCI order (CUDA_DEVICE_ORDER=PCI_BUS_ID), whatever order the plugin wrote.
    node, uuids = _eight_gpu_node(tmp_path)
    choice = node.choose({"NVIDIA_VISIBLE_DEVICES": ",".join([uuids[7], uuids[0]])})
    assert _flag_map(choice) == {"0": "mlx5_0", "1": "mlx5_3"}


def test_container_view_of_the_driver_listing_is_taken_as_is(tmp_path: Path) -> None:
    # Inside a container the toolkit lists only the container's GPUs; node index 6 then is not a position in it.
    node, _ = _eight_gpu_node(tmp_path)
    gpus_dir = node.proc / "driver" / "nvidia" / "gpus"
    for entry in sorted(gpus_dir.iterdir())[:6]:
        (entry / "information").unlink()
        entry.rmdir()
    choice = node.choose({"NVIDIA_VISIBLE_DEVICES": "6,7"})
    assert _flag_map(choice) == {"0": "mlx5_3", "1": "mlx5_3"}


def test_same_switch_beats_same_numa(tmp_path: Path) -> None:
    node = Node(tmp_path)
    # mlx5_0 sorts first and shares the NUMA node; mlx5_1 shares the GPU's PCIe switch.
    node.hca("mlx5_0", "pci0000:00/0000:00:01.0/0000:01:00.0", 0)
    node.gpu("pci0000:00/0000:00:02.0/0000:02:00.0/0000:03:00.0/0000:04:00.0", 0)
    node.hca("mlx5_1", "pci0000:00/0000:00:02.0/0000:02:00.0/0000:03:08.0/0000:05:00.0", 0)
    assert _flag_map(node.choose({})) == {"0": "mlx5_1"}


def test_same_numa_beats_another_numa(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.hca("mlx5_0", "pci0000:00/0000:00:01.0/0000:01:00.0", 0)
    node.hca("mlx5_1", "pci0000:40/0000:40:01.0/0000:41:00.0", 1)
    node.gpu("pci0000:60/0000:60:01.0/0000:61:00.0", 1)
    assert _flag_map(node.choose({})) == {"0": "mlx5_1"}


def test_equally_near_hcas_take_turns(tmp_path: Path) -> None:
    node = Node(tmp_path)
    for i in range(2):
        node.hca(f"mlx5_{i}", f"pci0000:0{i}/0000:0{i}:01.0/0000:1{i}:00.0", 0)
    for g in range(4):
        node.gpu(f"pci0000:2{g}/0000:2{g}:01.0/0000:3{g}:00.0", 0)
    assert _flag_map(node.choose({})) == {"0": "mlx5_0", "1": "mlx5_1", "2": "mlx5_0", "3": "mlx5_1"}


def test_allowed_list_limits_the_candidates(tmp_path: Path) -> None:
    node, uuids = _eight_gpu_node(tmp_path)
    choice = node.choose({"NVIDIA_VISIBLE_DEVICES": ",".join(uuids[:2])}, allowed=["mlx5_1", "mlx5_3"])
    assert _flag_map(choice) == {"0": "mlx5_1", "1": "mlx5_1"}


def test_no_hca_means_no_flag_and_a_log_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = Node(tmp_path)
    node.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0)
    assert node.choose({}) == m.Choice(None, {})
    assert "no --disaggregation-ib-device" in capsys.readouterr().err


def test_no_topology_passes_the_allowed_list(tmp_path: Path) -> None:
    node = Node(tmp_path)
    assert node.choose({}, allowed=["mlx5_0", "mlx5_1"]) == m.Choice("mlx5_0,mlx5_1", {"NCCL_IB_HCA": "=mlx5_0,mlx5_1"})


def test_list_form_and_nixl(tmp_path: Path) -> None:
    node, uuids = _eight_gpu_node(tmp_path)
    env = {"NVIDIA_VISIBLE_DEVICES": ",".join(uuids[4:])}
    listed = node.choose(env, form="list", backend="nixl")
    assert listed.flag == "mlx5_2,mlx5_3"
    assert listed.env == {"NCCL_IB_HCA": "=mlx5_2,mlx5_3", "UCX_NET_DEVICES": "mlx5_2:1,mlx5_3:1"}
    # With the map form nixl reads the flag per GPU, and a UCX_NET_DEVICES would override it.
    assert "UCX_NET_DEVICES" not in node.choose(env, backend="nixl").env


def test_nvidia_smi_fallback_and_bus_id_spelling(tmp_path: Path) -> None:
    node, _ = _eight_gpu_node(tmp_path)
    listing = node.proc / "driver"
    for info in sorted(listing.rglob("information")):
        info.unlink()
    out = "00000000:93:00.0, GPU-y\n00000000:83:00.0, GPU-x\n"
    choice = node.choose({"NVIDIA_VISIBLE_DEVICES": "GPU-x,GPU-y"}, smi=lambda _cmd: out)
    assert _flag_map(choice) == {"0": "mlx5_2", "1": "mlx5_3"}
    assert m.normalize_bus_id("00000000:1A:00.0") == "0000:1a:00.0"


def test_main_appends_the_flag_and_execs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node, uuids = _eight_gpu_node(tmp_path)
    seen: dict[str, object] = {}

    def fake_exec(file: str, args: list[str], env: dict[str, str]) -> None:
        seen.update(file=file, args=args, env=env)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execvpe", fake_exec)
    argv = ["--sys-root", str(node.sys), "--proc-root", str(node.proc), "--", "python3", "-m", "sglang.launch_server"]
    with pytest.raises(SystemExit):
        m.main(argv, {"NVIDIA_VISIBLE_DEVICES": uuids[0]})
    assert seen["args"] == ["python3", "-m", "sglang.launch_server", "--disaggregation-ib-device", '{"0":"mlx5_0"}']
    env = seen["env"]
    assert isinstance(env, dict)
    assert env["NCCL_IB_HCA"] == "=mlx5_0"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
