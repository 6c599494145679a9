"""Per-pod HTTP and bootstrap ports of host-network pool pods that share a node; pure.

Under `spec.transfer.rdma.hostNetwork` a pool pod binds its ports on the node itself: the HTTP port (`--port`, 30000)
and, on prefill, the bootstrap server (`--disaggregation-bootstrap-port`; 0.5.23 starts it on prefill only,
sglang/srt/managers/disagg_service.py:21-51). Two pool pods with the same ports cannot share a node: the API server
defaults each host-network container port's hostPort to its containerPort, and the scheduler's NodePorts filter keeps
two pods asking for one hostPort off one node. So without per-pod ports a node takes one pool pod.

The router of 0.5.23, smg 1.13.0, reads each discovered pod's worker port from the annotation `smg.ai/worker-ports`
(a comma list; absent: the single `--service-discovery-port`) and a prefill's bootstrap port from
`sglang.ai/bootstrap-port`, both fixed names (smg/router_args.py:125-126 and 2479-2481 of the wheel; the Rust side's
`resolve_worker_ports`/`resolve_bootstrap_ports`, whose log strings "invalid {} annotation '{}', falling back to port"
and "does not align with {} worker port(s)" are in the wheel's smg_rs.abi3.so). sglang-router 0.1.9 (0.5.2) builds
every worker URL from the one `--service-discovery-port` (sglang_router/router.py:44-45, launch_router.py:245-248):
it cannot route to per-pod ports, and a rule refuses what would need them there.

So, where a pool's pods take part of a node on a release whose router reads per-pod ports (`allocates`), the pod
template carries the label `LABEL_HOST_PORTS`, and the operator's mutating admission webhook
(`runtime.pod_ports`) gives each pod at creation a free slot of `SLOTS`: its HTTP port and bootstrap port, written
into the container's ports (named, with hostPort, so the scheduler enforces no collision and probes by name follow),
the server's `--port`/`--disaggregation-bootstrap-port`, and the router's annotations (`assign`). Whole-node pods
(and multi-node groups, whose pods are whole nodes) never share a node with another pool pod and keep the fixed
ports.

The slots avoid the ports 0.5.23 picks for itself or derives from `--port`: its NCCL port is drawn from 22000-29999
(sglang/srt/utils/network.py:205-224, `get_free_port_below_ephemeral`), NodePorts are 30000-32767, the kernel's
ephemeral range starts at 32768, a multi-node leader's rendezvous is 20000 and up (sglang.args.DIST_INIT_PORT); with
DP attention a single-node server also binds `--port` + 13 and `--port` + 233..238 (server_args.py:728-729 and
815-845). Slot i is `FIRST_HTTP_PORT + SLOT_STRIDE * i` (HTTP) and the next port (bootstrap); a stride of 24 keeps
those derived ports of any slot off the HTTP, bootstrap and handshake ports of every other slot, and the last slot's
+238 below 20000.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final

from disaggspec import constants as c
from disaggspec.api.v1alpha1 import DisaggSpecServiceSpec, PoolSpec
from disaggspec.render import lifecycle
from disaggspec.sglang.profiles import profile_for

LABEL_HOST_PORTS: Final = "disaggspec.io/host-ports"
"""Pool pod label: `allocate` asks the operator's mutating webhook for the pod's own HTTP and bootstrap ports."""
ALLOCATE: Final = "allocate"
ANNOTATION_WORKER_PORTS: Final = "smg.ai/worker-ports"
"""Pod annotation smg reads a discovered pod's worker (HTTP) ports from (smg/router_args.py:126)."""
PER_POD_PORT_ROUTERS: Final = frozenset({"smg"})
"""Router packages that read per-pod ports from pod annotations (smg 1.13.0; not sglang-router 0.1.9)."""

FIRST_HTTP_PORT: Final = 18000
SLOT_STRIDE: Final = 24
SLOTS: Final = 73
"""Slots 0..72: HTTP ports 18000, 18024, ..., 19728 (+238 = 19966 < 20000)."""

CONTAINER: Final = "sglang"
HTTP_FLAG: Final = "--port"
BOOTSTRAP_FLAG: Final = "--disaggregation-bootstrap-port"


def router_reads_pod_ports(spec: DisaggSpecServiceSpec) -> bool:
    """Whether the release's router takes each pod's ports from its annotations."""
    return profile_for(spec.sglang.version).router.package in PER_POD_PORT_ROUTERS


def shares_node(pool: PoolSpec, pod_gpus: int) -> bool:
    """Whether another pool pod may land beside one of this pool's pods: a single-node server on part of a node."""
    return pool.nodes_per_instance == 1 and pod_gpus < pool.gpus_per_node


def allocates(spec: DisaggSpecServiceSpec, pool: PoolSpec, pod_gpus: int) -> bool:
    """Whether the pool's pods get per-pod ports: host network, part of a node, and a router that reads them."""
    rdma = spec.transfer.rdma
    return rdma is not None and rdma.host_network and shares_node(pool, pod_gpus) and router_reads_pod_ports(spec)


def http_port(slot: int) -> int:
    return FIRST_HTTP_PORT + SLOT_STRIDE * slot


def bootstrap_port(slot: int) -> int:
    return http_port(slot) + 1


def slot_of(port: int) -> int | None:
    """The slot whose HTTP or bootstrap port `port` is, or None."""
    offset = port - FIRST_HTTP_PORT
    if offset < 0 or offset % SLOT_STRIDE > 1 or offset // SLOT_STRIDE >= SLOTS:
        return None
    return offset // SLOT_STRIDE


def pod_slots(pod: Mapping[str, Any]) -> set[int]:
    """The slots a pod holds: those of its containers' host ports (containerPort for a port without one)."""
    found: set[int] = set()
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            slot = slot_of(int(port.get("hostPort") or port.get("containerPort") or 0))
            if slot is not None:
                found.add(slot)
    return found


def choose_slot(taken: set[int], elsewhere: Counter[int], rng: random.Random) -> int | None:
    """A slot not in `taken` (the service's own pods and reservations), preferring the slots fewest pods of other
    services hold (they may land on the same node: the scheduler keeps equal host ports apart, so a shared slot only
    costs placement), at random among those (so replicas choosing at once rarely agree); None when all are taken."""
    free = [slot for slot in range(SLOTS) if slot not in taken]
    if not free:
        return None
    fewest = min(elsewhere[slot] for slot in free)
    return rng.choice([slot for slot in free if elsewhere[slot] == fewest])


def _set_flag(argv: list[str], flag: str, value: int) -> list[str]:
    """`argv` with the value after the first `flag` replaced (the operator renders each of these flags once, before
    any extraArgs, which may not carry them)."""
    out = list(argv)
    if flag in out and out.index(flag) + 1 < len(out):
        out[out.index(flag) + 1] = str(value)
    return out


def assign(pod: dict[str, Any], slot: int) -> None:
    """Give `pod` (a pool pod body, changed in place) the ports of `slot`: the server container's named ports with
    hostPort, its `--port` (and on prefill `--disaggregation-bootstrap-port`), the `--port` its preStop hook reads the
    server's metrics on, and the router's annotations. A pod is prefill when its template has a bootstrap port."""
    http, bootstrap = http_port(slot), bootstrap_port(slot)
    metadata = pod.setdefault("metadata", {})
    annotations = metadata.setdefault("annotations", {})
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") != CONTAINER:
            continue
        prefill = any(port.get("name") == "bootstrap" for port in container.get("ports") or [])
        ports = [{"name": "http", "containerPort": http, "hostPort": http, "protocol": "TCP"}]
        command = _set_flag(list(container.get("command") or []), HTTP_FLAG, http)
        if prefill:
            ports.append({"name": "bootstrap", "containerPort": bootstrap, "hostPort": bootstrap, "protocol": "TCP"})
            command = _set_flag(command, BOOTSTRAP_FLAG, bootstrap)
            annotations[c.ANNOTATION_BOOTSTRAP_PORT] = str(bootstrap)
        container["ports"] = ports
        container["command"] = command
        hook = ((container.get("lifecycle") or {}).get("preStop") or {}).get("exec")
        if hook:  # the drain wait reads the server's /metrics on its HTTP port (`lifecycle.server_prestop`)
            hook["command"] = _set_flag(list(hook.get("command") or []), lifecycle.DRAIN_WAIT_PORT_FLAG, http)
    annotations[ANNOTATION_WORKER_PORTS] = str(http)


def template_labels(spec: DisaggSpecServiceSpec, pool: PoolSpec, pod_gpus: int) -> dict[str, str]:
    """The label that sends the pool's pods to the port webhook (none when the pool keeps the fixed ports)."""
    return {LABEL_HOST_PORTS: ALLOCATE} if allocates(spec, pool, pod_gpus) else {}


def service_of(pod: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, service name) of a pool pod, from its namespace and the service label."""
    metadata = pod.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str((metadata.get("labels") or {}).get(c.LABEL_SERVICE, ""))


def held_slots(pods: Iterable[Mapping[str, Any]], owner: tuple[str, str]) -> tuple[set[int], Counter[int]]:
    """The slots the live pods of `owner` hold, and how many pods of other services hold each slot. Pods that ended
    (Succeeded, Failed) hold nothing; terminating pods still hold theirs until they are gone."""
    own: set[int] = set()
    others: Counter[int] = Counter()
    for pod in pods:
        if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            continue
        slots = pod_slots(pod)
        if service_of(pod) == owner:
            own |= slots
        else:
            others.update(slots)
    return own, others
