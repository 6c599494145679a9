"""Start-time GPU-to-HCA mapper: the SGLang container's entrypoint wrapper when spec.transfer.rdma.ibDeviceMapping is
Auto. It finds the GPUs allocated to this container (NVIDIA_VISIBLE_DEVICES, then CUDA_VISIBLE_DEVICES, as UUIDs or
indexes, resolved to PCI addresses through /proc/driver/nvidia/gpus or nvidia-smi), the RDMA devices under
/sys/class/infiniband, and gives each GPU, in the order the server numbers them, its nearest HCA: behind the same
PCIe switch first (the longest common PCI path), else on the same NUMA node, else any. It then adds
`--disaggregation-ib-device` (a per-GPU JSON map, or a comma list for releases without the map form), exports
NCCL_IB_HCA (and UCX_NET_DEVICES where nixl reads no flag) and execs the real server command. Standard library only:
it is copied into the SGLang image as /opt/disaggspec/ib_device_map.py and never imports the operator.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

IMAGE_PATH = "/opt/disaggspec/ib_device_map.py"
"""Where the SGLang image carries this file (images/sglang/Dockerfile); the operator renders commands through it."""
UCX_PORT = 1
"""UCX names a device with its port; the port the operator already renders for nixl."""

Form = Literal["map", "list"]


def log(message: str) -> None:
    """One line on stderr, which the pod log keeps: the chosen devices, or why none were chosen."""
    print(f"ib_device_map: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Gpu:
    """One GPU as the driver lists it."""

    bus_id: str
    uuid: str


@dataclass(frozen=True)
class Hca:
    """One RDMA device: its name, the PCI path from the root complex down to it, and its NUMA node (-1: unknown)."""

    name: str
    pci_path: tuple[str, ...]
    numa: int


def normalize_bus_id(bus_id: str) -> str:
    """PCI address as sysfs spells it: nvidia-smi prints an 8-digit upper-case domain (00000000:1A:00.0), sysfs and
    /proc a 4-digit lower-case one (0000:1a:00.0)."""
    text = bus_id.strip().lower()
    parts = text.split(":")
    if len(parts) == 3:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    return f"0000:{text}" if len(parts) == 2 else text


def proc_gpus(proc_root: Path) -> list[Gpu]:
    """Every GPU /proc/driver/nvidia/gpus lists (inside a container the toolkit shows only the container's)."""
    base = proc_root / "driver" / "nvidia" / "gpus"
    if not base.is_dir():
        return []
    found: list[Gpu] = []
    for entry in sorted(base.iterdir()):
        info = entry / "information"
        if not info.is_file():
            continue
        fields = dict(
            (key.strip(), value.strip())
            for key, _, value in (line.partition(":") for line in info.read_text().splitlines())
            if value
        )
        bus = fields.get("Bus Location", entry.name)
        found.append(Gpu(normalize_bus_id(bus), fields.get("GPU UUID", "")))
    return sorted(found, key=lambda g: g.bus_id)


def smi_gpus(run: Callable[[Sequence[str]], str] | None = None) -> list[Gpu]:
    """The GPUs nvidia-smi reports, when /proc/driver/nvidia is not mounted; empty if it cannot run."""
    command = ["nvidia-smi", "--query-gpu=pci.bus_id,uuid", "--format=csv,noheader"]
    try:
        out = (
            run(command)
            if run is not None
            else subprocess.run(command, capture_output=True, text=True, check=True).stdout
        )
    except (OSError, subprocess.CalledProcessError):
        return []
    gpus = [
        Gpu(normalize_bus_id(bus), uuid.strip())
        for bus, _, uuid in (line.partition(",") for line in out.splitlines())
        if uuid
    ]
    return sorted(gpus, key=lambda g: g.bus_id)


def _select(gpus: list[Gpu], value: str | None) -> list[Gpu]:
    """Apply one visible-devices variable to `gpus` (in PCI order): UUIDs pick by UUID, indexes by position. Unset,
    'all', or a value with a token naming no GPU here (the device plugin's volume-mounts strategy writes a path;
    MIG ids are not GPUs) keeps them all."""
    if value is None or value.strip() in ("", "all"):
        return gpus
    by_uuid = {g.uuid: g for g in gpus}
    picked: list[Gpu] = []
    for token in (t.strip() for t in value.split(",") if t.strip()):
        if token in by_uuid:
            picked.append(by_uuid[token])
        elif token.isdigit() and int(token) < len(gpus):
            picked.append(gpus[int(token)])
        else:
            log(f"cannot resolve visible device {token!r}: taking every listed GPU")
            return gpus
    return picked


def container_gpus(environ: Mapping[str, str], listed: list[Gpu]) -> list[Gpu]:
    """This container's GPUs in the order CUDA numbers them (the per-GPU map's keys). NVIDIA_VISIBLE_DEVICES names
    node GPUs (indexes are node indexes in PCI order); when the driver listing already holds exactly that many GPUs
    it is the container's own view and is taken as is. The container sees its GPUs in PCI order (the wrapper pins
    CUDA_DEVICE_ORDER=PCI_BUS_ID), and CUDA_VISIBLE_DEVICES, if set, picks and orders among those."""
    nvidia = environ.get("NVIDIA_VISIBLE_DEVICES")
    tokens = [t for t in (nvidia or "").split(",") if t.strip()]
    if nvidia is not None and nvidia.strip() in ("none", "void"):
        return []
    mine = listed if len(tokens) == len(listed) else _select(listed, nvidia)
    return _select(sorted(mine, key=lambda g: g.bus_id), environ.get("CUDA_VISIBLE_DEVICES"))


def _pci_path(device: Path) -> tuple[str, ...]:
    """The PCI path of a sysfs device link, from the root complex (pci0000:00) down to the device itself."""
    parts = device.resolve().parts
    for i, part in enumerate(parts):
        if part.startswith("pci") and ":" in part:
            return tuple(parts[i:])
    return ()


def _numa(device: Path) -> int:
    try:
        return int((device / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return -1


def rdma_devices(sys_root: Path, allowed: Sequence[str] = ()) -> list[Hca]:
    """The RDMA devices of /sys/class/infiniband that sit on PCI (soft devices like rxe have no PCI path), limited to
    `allowed` when it names any."""
    base = sys_root / "class" / "infiniband"
    if not base.is_dir():
        return []
    found: list[Hca] = []
    for entry in sorted(base.iterdir()):
        if allowed and entry.name not in allowed:
            continue
        path = _pci_path(entry / "device")
        if path:
            found.append(Hca(entry.name, path, _numa(entry / "device")))
    return found


def _closeness(gpu_path: tuple[str, ...], gpu_numa: int, hca: Hca) -> tuple[int, int]:
    """Lower is closer. Sharing more than the root complex means sharing a root port, hence a PCIe switch below it
    (nvidia-smi topo's PIX/PXB); then the same NUMA node (NODE, or PHB: same root complex); then anything (SYS)."""
    common = 0
    for a, b in zip(gpu_path[:-1], hca.pci_path[:-1], strict=False):
        if a != b:
            break
        common += 1
    if common >= 2:
        return (0, -common)
    if common == 1 or (gpu_numa >= 0 and gpu_numa == hca.numa):
        return (1, 0)
    return (2, 0)


def nearest(gpus: Sequence[Gpu], hcas: Sequence[Hca], sys_root: Path) -> list[str]:
    """Each GPU's nearest HCA, in GPU order. Equally near HCAs take turns (fewest GPUs so far, then name), so two
    NICs of one socket split that socket's GPUs instead of one NIC carrying all of them."""
    load = {h.name: 0 for h in hcas}
    chosen: list[str] = []
    for gpu in gpus:
        device = sys_root / "bus" / "pci" / "devices" / gpu.bus_id
        path, numa = _pci_path(device), _numa(device)
        best = min(hcas, key=lambda h: (_closeness(path, numa, h), load[h.name], h.name))
        load[best.name] += 1
        chosen.append(best.name)
    return chosen


@dataclass(frozen=True)
class Choice:
    """What the wrapper adds: the `--disaggregation-ib-device` value (None: no flag) and environment variables."""

    flag: str | None
    env: dict[str, str]


def choose(
    environ: Mapping[str, str],
    *,
    sys_root: Path,
    proc_root: Path,
    allowed: Sequence[str] = (),
    form: Form = "map",
    backend: str = "mooncake",
    smi: Callable[[Sequence[str]], str] | None = None,
) -> Choice:
    """The device flag and env for this container. Without topology (no GPU or no PCI HCA found) the allowed list,
    if any, is passed as a shared list; with neither, no flag, so the transfer engine discovers devices itself."""
    gpus = container_gpus(environ, proc_gpus(proc_root) or smi_gpus(smi))
    hcas = rdma_devices(sys_root, allowed)
    if not gpus or not hcas:
        what = (
            "no GPU of this container"
            if not gpus
            else "no RDMA device on PCI" + (f" among {list(allowed)}" if allowed else "")
        )
        if not allowed:
            log(f"{what} found: no --disaggregation-ib-device, the transfer engine picks devices itself")
            return Choice(None, {})
        log(f"{what} found: passing the allowed devices {','.join(allowed)} to every GPU")
        return _rendered(list(allowed), None, form, backend)
    per_gpu = nearest(gpus, hcas, sys_root)
    for index, (gpu, hca) in enumerate(zip(gpus, per_gpu, strict=True)):
        log(f"GPU {index} ({gpu.bus_id}) -> {hca}")
    return _rendered(list(dict.fromkeys(per_gpu)), per_gpu, form, backend)


def _rendered(names: list[str], per_gpu: list[str] | None, form: Form, backend: str) -> Choice:
    # A leading `=` makes NCCL match the names exactly, not as prefixes (mlx5_1 would also select mlx5_10..19: NCCL
    # docs, NCCL_IB_HCA); the same form as a Static mapping renders (disaggspec.render.rdma.nccl_ib_hca).
    env = {"NCCL_IB_HCA": "=" + ",".join(names)}
    if per_gpu is not None and form == "map":
        flag = json.dumps({str(i): name for i, name in enumerate(per_gpu)}, separators=(",", ":"))
    else:
        flag = ",".join(names)
    # A release whose nixl reads the per-GPU flag lets a non-empty UCX_NET_DEVICES override it (0.5.23
    # disaggregation/nixl/conn.py:564-572), so it is set only where nixl reads no flag (0.5.2, the list form).
    if backend == "nixl" and form == "list":
        # UCX matches `device:port` as a whole: exact already.
        env["UCX_NET_DEVICES"] = ",".join(n if ":" in n else f"{n}:{UCX_PORT}" for n in names)
    return Choice(flag, env)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Map each GPU to its nearest HCA, then exec the server command.")
    parser.add_argument("--allow", action="append", default=[], help="an HCA the mapping may use (repeatable)")
    parser.add_argument("--form", choices=("map", "list"), default="map", help="the release's ib-device flag form")
    parser.add_argument("--backend", default="mooncake", help="the transfer backend")
    parser.add_argument("--sys-root", type=Path, default=Path("/sys"))
    parser.add_argument("--proc-root", type=Path, default=Path("/proc"))
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the server command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    env = dict(os.environ if environ is None else environ)
    # CUDA's default order ranks GPUs by speed, which for the identical GPUs of a node is PCI order in practice;
    # pinning it makes the map's keys (PCI order of the container's GPUs) exact.
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    choice = choose(
        env, sys_root=args.sys_root, proc_root=args.proc_root, allowed=args.allow, form=args.form, backend=args.backend
    )
    env.update(choice.env)
    if choice.flag is not None:
        command = [*command, "--disaggregation-ib-device", choice.flag]
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    sys.exit(main())
