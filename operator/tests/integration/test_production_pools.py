"""Production defaults of the pods on a real API server (issue 17): QoS class, disruption budgets that hold.

Against the session's control plane (kube-controller-manager runs the disruption controller; kwok marks the pods
Running and Ready): the llama example's pool and router pods are Burstable, as the API server computes
`status.qosClass` from the rendered requests; with two decode replicas and the default `maxUnavailable: 1`, the
eviction API lets one decode pod go and refuses the next one with 429 until a replacement is ready, which is what
`kubectl drain` relies on; a Guaranteed pool comes from limits equal to the requests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from e2e.support.fixtures import Cluster
from e2e.support.operator_process import OperatorProcess
from e2e.support.workloads import example, get, load, pods, wait_ready

pytestmark = pytest.mark.integration


def _apply_ready(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> str:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj))
    name = str(obj["metadata"]["name"])
    wait_ready(cluster, namespace, name)
    return name


def _role(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"]["disaggspec.io/role"])


def _evict(cluster: Cluster, namespace: str, pod: str) -> tuple[int, str]:
    """POST an Eviction for `pod`; (0, "") when accepted, else (1, the API server's message)."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
    result = cluster.kubectl(
        "create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", "-f", "-",
        input=json.dumps(body), check=False,
    )  # fmt: skip
    return result.returncode, result.stderr


def test_pool_and_router_pods_are_burstable_and_guaranteed_on_request(
    operator: OperatorProcess, cluster: Cluster, namespace: str
) -> None:
    obj = load(example("llama"))
    # The decode pool asks for limits equal to its requests (cpu and memory): Guaranteed.
    obj["spec"]["decode"]["resources"] = {
        "requests": {"cpu": "8", "memory": "72Gi"},
        "limits": {"cpu": "8", "memory": "72Gi"},
    }
    name = _apply_ready(cluster, namespace, obj)
    running = pods(cluster, namespace, name)
    by_role = {role: [p for p in running if _role(p) == role] for role in ("prefill", "decode", "router")}
    assert all(by_role.values()), {role: len(found) for role, found in by_role.items()}
    qos = {role: {p["status"].get("qosClass") for p in found} for role, found in by_role.items()}
    assert qos == {"prefill": {"Burstable"}, "decode": {"Guaranteed"}, "router": {"Burstable"}}, qos
    prefill = by_role["prefill"][0]["spec"]["containers"][0]["resources"]["requests"]
    # One GPU: cpu 4 + 4, memory 32Gi shm + 16Gi + 24Gi, and storage for the download (the example has no volume).
    assert (prefill["cpu"], prefill["memory"], prefill["ephemeral-storage"]) == ("8", "72Gi", "112Gi"), prefill


def test_the_decode_budget_lets_one_pod_go_and_refuses_the_next(
    operator: OperatorProcess, cluster: Cluster, namespace: str
) -> None:
    obj = load(example("llama"))
    obj["spec"]["decode"]["replicas"] = 2
    name = _apply_ready(cluster, namespace, obj)
    budget = f"{name}-decode"
    cluster.wait_for(
        f"the disruption controller to allow one eviction of {budget}",
        lambda: get(cluster, namespace, "pdb", budget).get("status", {}).get("disruptionsAllowed") == 1,
        timeout=60,
    )
    first, second = sorted(p["metadata"]["name"] for p in pods(cluster, namespace, name) if _role(p) == "decode")
    # As `kubectl drain` does, cordon first: the evicted pod's replacement then stays Pending (kwok would otherwise
    # make it Ready within milliseconds and the budget would allow the next eviction at once).
    nodes = [n.removeprefix("node/") for n in cluster.kubectl("get", "nodes", "-o", "name").stdout.split()]
    for node in nodes:
        cluster.kubectl("cordon", node)
    try:
        code, message = _evict(cluster, namespace, first)
        assert code == 0, message
        code, message = _evict(cluster, namespace, second)
        assert code != 0 and "disruption budget" in message, message
        # Still refused once the disruption controller has recounted: one decode pod ready, one replacement Pending.
        cluster.wait_for(
            f"{budget} to count one healthy pod",
            lambda: get(cluster, namespace, "pdb", budget).get("status", {}).get("currentHealthy") == 1,
            timeout=30,
        )
        code, message = _evict(cluster, namespace, second)
        assert code != 0 and "disruption budget" in message, message
    finally:
        for node in nodes:
            cluster.kubectl("uncordon", node)
    # The prefill pool (one replica) may lose its only pod to a drain: maxUnavailable 1 allows it.
    assert get(cluster, namespace, "pdb", f"{name}-prefill")["spec"]["maxUnavailable"] == 1
