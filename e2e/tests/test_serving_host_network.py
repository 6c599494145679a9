"""Host-network pool pods sharing one node (issue 30, item 5) in the serving simulation.

SGLang 0.5.23 with `spec.transfer.rdma.hostNetwork`: two prefill and two decode pods of two GPUs each, pinned to one
node, each get their own HTTP and bootstrap ports from the operator's mutating webhook, and serve through the real
smg router, which reads them from the pods' annotations. The pod runner gives host-network pods their node's own
loopback address (`e2e.serving.runner.node_ip`), so the four emulators share one IP and two binding one port would
fail as on a real node. SGLang 0.5.2 (sglang-router 0.1.9 reads one port for every pod) refuses a spec that pins
two pool pods to one node, at `kubectl apply` (the rule's CEL twin).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from disaggspec.render import ports
from e2e.serving.runner import node_ip
from e2e.serving.traffic import Load, Report, send
from e2e.support.fixtures import fresh_namespace
from e2e.support.planes import ServingPlane, serving_plane
from e2e.support.serving import apply_service, ready_pods, router_url, served_model
from e2e.support.workloads import host_network_service, wait_ready

pytestmark = [pytest.mark.integration, pytest.mark.local_only]

NODE = "gpu-node-1"
"""The node every pool pod of the 0.5.23 service is pinned to (8 GPUs: four 2-GPU pods fit)."""
NODES = 2


@pytest.fixture(scope="module")
def plane() -> Iterator[ServingPlane]:
    if os.environ.get("DISAGGSPEC_TEST_KUBECONFIG"):
        pytest.skip("serving mode needs the local control plane and its pod runner")
    with serving_plane("host-network", nodes=NODES) as plane:
        yield plane


def _service(name: str, version: str) -> dict[str, Any]:
    return host_network_service(name, version, replicas=2, prefill_node=NODE, decode_node=NODE)


def _describe(report: Report) -> str:
    return json.dumps(report.summary(), indent=1)


def _container_ports(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {port["name"]: port for port in pod["spec"]["containers"][0]["ports"]}


def _flag(pod: dict[str, Any], flag: str) -> int:
    command = pod["spec"]["containers"][0]["command"]
    return int(command[command.index(flag) + 1])


def test_two_prefill_and_two_decode_pods_share_one_node_and_serve(plane: ServingPlane) -> None:
    cluster = plane.cluster
    with fresh_namespace(cluster, "hostnet") as namespace:
        obj = apply_service(cluster, namespace, _service("shared-node", "0.5.23"))
        name = obj["metadata"]["name"]
        wait_ready(cluster, namespace, name, timeout=110)
        pods = {role: ready_pods(cluster, namespace, name, role) for role in ("prefill", "decode")}
        assert [len(pods["prefill"]), len(pods["decode"])] == [2, 2], pods
        every = pods["prefill"] + pods["decode"]

        # One node, one address: the node's own, shared by the four pods.
        state = plane.local.state()
        assert state is not None
        address = node_ip(NODE, state.pod_cidr)
        assert {p["spec"]["nodeName"] for p in every} == {NODE}
        assert {p["status"]["podIP"] for p in every} == {address}
        assert all(p["spec"]["hostNetwork"] for p in every)

        # Each pod its own ports, as the server binds them, the scheduler sees them and the router reads them.
        http = [_container_ports(p)["http"]["hostPort"] for p in every]
        assert len(set(http)) == 4, http
        for pod in every:
            found = _container_ports(pod)
            assert found["http"]["containerPort"] == found["http"]["hostPort"] == _flag(pod, "--port")
            assert ports.slot_of(found["http"]["hostPort"]) is not None
            assert pod["metadata"]["annotations"][ports.ANNOTATION_WORKER_PORTS] == str(found["http"]["hostPort"])
        bootstrap = []
        for pod in pods["prefill"]:
            port = _container_ports(pod)["bootstrap"]["hostPort"]
            assert port == _flag(pod, "--disaggregation-bootstrap-port")
            assert pod["metadata"]["annotations"]["sglang.ai/bootstrap-port"] == str(port)
            bootstrap.append(port)
        assert len(set(bootstrap) | set(http)) == 6

        url = router_url(cluster, namespace, obj)
        report = send(Load(url=url, model=served_model(obj), streams=4, requests=60, duration=90))
        assert len(report.outcomes) == 60, _describe(report)
        assert not report.failures, _describe(report)
        by_name = {p["metadata"]["name"]: p for p in every}
        for outcome in report.outcomes:
            prefill = by_name[str(outcome.prefill_pod)]
            # The decode dialled the bootstrap port the router read from this prefill's annotation.
            assert outcome.bootstrap_port == _container_ports(prefill)["bootstrap"]["hostPort"], outcome
        assert set(report.served_by("prefill")) <= {p["metadata"]["name"] for p in pods["prefill"]}
        assert len(report.served_by("decode")) == 2, _describe(report)  # round robin reaches both decode pods


def test_release_whose_router_reads_one_port_refuses_two_pool_pods_on_one_node(plane: ServingPlane) -> None:
    cluster = plane.cluster
    with fresh_namespace(cluster, "hostnet-052") as namespace:
        obj = _service("shared-node-052", "0.5.2")
        obj["metadata"]["namespace"] = namespace
        result = cluster.kubectl("apply", "-f", "-", input=json.dumps(obj), check=False)
        assert result.returncode != 0, result.stdout
        assert "its router (sglang-router 0.1.9) cannot use per-pod ports" in result.stderr, result.stderr
        assert "use spec.sglang.version 0.5.23" in result.stderr, result.stderr
        # One pool pod per node is fine.
        for role in ("prefill", "decode"):
            obj["spec"][role]["replicas"] = 1
        obj["spec"]["decode"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-node-0"}
        cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))
