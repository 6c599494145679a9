"""Per-pod ports of host-network pool pods that share a node (render/ports.py, runtime/pod_ports.py): which pools get
them, the slots' layout, what the webhook writes into a pod, and how the allocator hands slots out."""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any, cast

import kopf
import pytest

from disaggspec import constants as c
from disaggspec.api import parse_service
from disaggspec.config import OperatorConfig
from disaggspec.render import ports, render
from disaggspec.runtime import pod_ports
from disaggspec.sglang.args import DIST_INIT_PORT, SERVER_PORT
from disaggspec.validation import validate
from tests.unit.dss_cases import edited


def _service(version: str = "0.5.23", host_network: bool = True, **pools: Any) -> Any:
    obj = edited(
        {
            "spec.sglang.version": version,
            "spec.transfer": {"rdma": {"hostNetwork": host_network}},
            "spec.prefill.replicas": 2,
            "spec.decode.replicas": 2,
            **{f"spec.{p}.{k}": v for p, fields in pools.items() for k, v in fields.items()},
        }
    )
    obj["metadata"]["namespace"] = "ns"
    service = parse_service(obj)
    assert validate(service) == []
    return service


def _templates(service: Any) -> dict[str, dict[str, Any]]:
    out = {}
    for manifest in render(service, OperatorConfig()):
        if manifest["kind"] == "Deployment" and manifest["metadata"]["labels"][c.LABEL_ROLE] in c.POOLS:
            out[manifest["metadata"]["labels"][c.LABEL_ROLE]] = manifest["spec"]["template"]
    return out


def _pod(template: dict[str, Any], namespace: str = "ns") -> dict[str, Any]:
    pod = copy.deepcopy(template)
    pod["metadata"]["namespace"] = namespace
    return pod


def test_only_host_network_pods_on_part_of_a_node_with_smg_get_the_label() -> None:
    for role, template in _templates(_service()).items():
        assert template["metadata"]["labels"][ports.LABEL_HOST_PORTS] == ports.ALLOCATE, role
    unlabelled = [
        _service(version="0.5.2"),  # sglang-router 0.1.9 reads one port for every pod
        _service(host_network=False),
        _service(prefill={"tensorParallelSize": 8}, decode={"tensorParallelSize": 8}),  # whole 8-GPU nodes
    ]
    for service in unlabelled:
        for template in _templates(service).values():
            assert ports.LABEL_HOST_PORTS not in template["metadata"]["labels"]


def test_slots_stay_clear_of_the_ports_sglang_and_the_node_use() -> None:
    bound: dict[int, set[int]] = {}
    for slot in range(ports.SLOTS):
        http = ports.http_port(slot)
        assert ports.slot_of(http) == ports.slot_of(ports.bootstrap_port(slot)) == slot
        # HTTP, bootstrap, and with DP attention the handshake (+13) and the derived ZMQ ports (+233..238).
        bound[slot] = {http, http + 1, http + 13, *range(http + 233, http + 239)}
        assert max(bound[slot]) < DIST_INIT_PORT  # below the rendezvous, NCCL's 22000-29999, NodePorts, ephemeral
        assert SERVER_PORT not in bound[slot]
    for a, b in itertools.combinations(range(ports.SLOTS), 2):
        assert not bound[a] & {ports.http_port(b), ports.bootstrap_port(b), ports.http_port(b) + 13}
        assert not bound[b] & {ports.http_port(a), ports.bootstrap_port(a), ports.http_port(a) + 13}
    assert ports.slot_of(ports.http_port(0) + 2) is None
    assert ports.slot_of(ports.http_port(ports.SLOTS)) is None


def test_assign_writes_ports_flags_and_the_routers_annotations() -> None:
    templates = _templates(_service())
    prefill, decode = _pod(templates["prefill"]), _pod(templates["decode"])
    ports.assign(prefill, 3)
    ports.assign(decode, 4)
    http, bootstrap = ports.http_port(3), ports.bootstrap_port(3)
    (container,) = prefill["spec"]["containers"]
    assert container["ports"] == [
        {"name": "http", "containerPort": http, "hostPort": http, "protocol": "TCP"},
        {"name": "bootstrap", "containerPort": bootstrap, "hostPort": bootstrap, "protocol": "TCP"},
    ]
    command = container["command"]
    assert command[command.index("--port") + 1] == str(http)
    assert command[command.index("--disaggregation-bootstrap-port") + 1] == str(bootstrap)
    assert prefill["metadata"]["annotations"] == {
        c.ANNOTATION_BOOTSTRAP_PORT: str(bootstrap),
        ports.ANNOTATION_WORKER_PORTS: str(http),
    }
    # Probes name the port, so they follow it; the preStop drain wait reads the server's metrics on the new port.
    assert container["readinessProbe"]["httpGet"]["port"] == "http"
    hook = container["lifecycle"]["preStop"]["exec"]["command"]
    assert hook[hook.index("--port") + 1] == str(http)
    (container,) = decode["spec"]["containers"]
    assert container["ports"] == [
        {"name": "http", "containerPort": ports.http_port(4), "hostPort": ports.http_port(4), "protocol": "TCP"}
    ]
    # Decode binds no bootstrap server; its --disaggregation-bootstrap-port (the fallback) stays the spec's.
    assert container["command"][container["command"].index("--disaggregation-bootstrap-port") + 1] == "8998"
    assert decode["metadata"]["annotations"] == {ports.ANNOTATION_WORKER_PORTS: str(ports.http_port(4))}
    assert ports.pod_slots(prefill) == {3} and ports.pod_slots(decode) == {4}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_allocator_gives_each_pod_of_a_service_its_own_slot_until_they_run_out() -> None:
    template = _templates(_service())["decode"]
    live: list[dict[str, Any]] = []
    allocator = pod_ports.PortAllocator(lambda: live, rng=random.Random(1))
    slots = []
    for _ in range(ports.SLOTS):
        slot = allocator.allocate(_pod(template))
        assert slot not in slots
        slots.append(slot)
    with pytest.raises(pod_ports.NoFreeSlot, match="hold all 73 slots"):
        allocator.allocate(_pod(template))
    # Another service has its own slots.
    other = _pod(template, namespace="other")
    assert allocator.allocate(other) in range(ports.SLOTS)


def test_reservations_expire_and_live_pods_hold_their_slots() -> None:
    template = _templates(_service())["prefill"]
    clock = Clock()
    live: list[dict[str, Any]] = []
    allocator = pod_ports.PortAllocator(lambda: live, reservation_seconds=30, rng=random.Random(2), clock=clock)
    first = allocator.allocate(_pod(template))
    pod = _pod(template)
    ports.assign(pod, first)
    live.append(pod)  # stored and listed now
    clock.now = 60  # the reservation expired; the live pod still holds the slot
    assert allocator.allocate(_pod(template), reserve=False) != first
    # A dry run reserves nothing: the same draw twice in a row is possible, a real one is not.
    dry = {allocator.allocate(_pod(template), reserve=False) for _ in range(200)}
    assert first not in dry and len(dry) > 1
    pod["status"] = {"phase": "Failed"}  # an ended pod holds nothing
    assert first in {allocator.allocate(_pod(template), reserve=False) for _ in range(500)}


def test_allocator_prefers_slots_other_services_do_not_hold() -> None:
    template = _templates(_service())["decode"]
    others = []
    for slot in range(ports.SLOTS - 1):  # another service holds every slot but the last
        pod = _pod(template, namespace="other")
        ports.assign(pod, slot)
        others.append(pod)
    allocator = pod_ports.PortAllocator(lambda: others, rng=random.Random(3))
    assert allocator.allocate(_pod(template)) == ports.SLOTS - 1
    # Once that is taken, a slot another service holds is still fine (the scheduler keeps equal host ports apart).
    assert allocator.allocate(_pod(template)) in range(ports.SLOTS - 1)


def test_the_webhook_handler_patches_the_pod() -> None:
    template = _templates(_service())["prefill"]
    body = kopf.Body(cast(kopf.RawBody, _pod(template)))
    patch = kopf.Patch(body=body)
    allocator = pod_ports.PortAllocator(lambda: [], rng=random.Random(4))
    pod_ports.mutate(body=body, patch=patch, memo=kopf.Memo(ports=allocator), dryrun=False)
    ops = patch.as_json_patch()
    changed = {op["path"] for op in ops}
    assert "/metadata/annotations/smg.ai~1worker-ports" in changed
    assert any(path.startswith("/spec/containers/0/ports") for path in changed)
    assert any(path.startswith("/spec/containers/0/command") for path in changed)
    with pytest.raises(kopf.AdmissionError):
        pod_ports.mutate(body=body, patch=kopf.Patch(body=body), memo=kopf.Memo(), dryrun=False)


def test_routers_that_read_pod_ports_are_exactly_the_ones_validation_allows_to_share_nodes() -> None:
    from disaggspec.sglang.profiles import PROFILES
    from disaggspec.validation import transfer

    for profile in PROFILES.values():
        assert (profile.router.package in ports.PER_POD_PORT_ROUTERS) != (
            profile.router.package in transfer._FIXED_PORT_ROUTERS
        )


def test_runtime_health_scrapes_each_pod_at_its_own_http_port() -> None:
    from disaggspec.config import HealthSettings
    from disaggspec.servinghealth.monitor import Monitor

    template = _templates(_service())["decode"]
    listed = []
    for slot, ip in ((5, "10.0.0.1"), (6, "10.0.0.1")):  # two host-network pods of one node
        pod = _pod(template)
        pod["metadata"]["name"] = f"decode-{slot}"
        ports.assign(pod, slot)
        pod["status"] = {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}
        listed.append(pod)
    requested: list[str] = []

    def fetch(url: str, timeout: float) -> bytes:
        requested.append(url)
        return b""

    name = listed[0]["metadata"]["labels"][c.LABEL_SERVICE]
    monitor = Monitor(
        HealthSettings(),
        list_pods=lambda: listed,
        services=lambda: [("ns", name)],
        requeue=lambda keys: None,
        fetch=fetch,
        clock=lambda: 0.0,
    )
    monitor.run_once()
    assert sorted(requested) == [f"http://10.0.0.1:{ports.http_port(s)}/metrics" for s in (5, 6)]
