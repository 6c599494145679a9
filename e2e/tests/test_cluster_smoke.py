"""Proof that the session cluster is a real one: scheduling on kwok GPU nodes, GC, RBAC, real versions."""

from __future__ import annotations

import json

import pytest
import yaml

from e2e.cluster import versions
from e2e.support.fixtures import Cluster

pytestmark = pytest.mark.integration


def _gpu_deployment(name: str, gpus: int) -> str:
    container = {"name": "main", "image": "noop:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}},
            },
        }
    )


def test_gpu_deployment_is_scheduled_on_a_kwok_gpu_node_and_becomes_available(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=_gpu_deployment("eight-gpus", 8))
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Available", "deployment/eight-gpus", "--timeout=60s")
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    assert len(pods) == 1
    node = json.loads(cluster.kubectl("get", "node", pods[0]["spec"]["nodeName"], "-o", "json").stdout)
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert pods[0]["status"]["phase"] == "Running"


def test_pod_asking_for_nine_gpus_stays_pending_with_insufficient_gpu(cluster: Cluster, namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nine-gpus"},
        "spec": {"containers": [{"name": "main", "image": "noop:1", "resources": {"limits": {"nvidia.com/gpu": 9}}}]},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(pod))

    def unschedulable() -> bool:
        got = json.loads(cluster.kubectl("get", "pod", "nine-gpus", "-n", namespace, "-o", "json").stdout)
        conditions = {c["type"]: c for c in got["status"].get("conditions", [])}
        scheduled = conditions.get("PodScheduled", {})
        return scheduled.get("reason") == "Unschedulable" and "Insufficient nvidia.com/gpu" in scheduled["message"]

    cluster.wait_for("PodScheduled=False with Insufficient nvidia.com/gpu", unschedulable, timeout=30)
    got = json.loads(cluster.kubectl("get", "pod", "nine-gpus", "-n", namespace, "-o", "json").stdout)
    assert got["status"]["phase"] == "Pending"


def test_deleting_a_namespace_garbage_collects_its_objects(cluster: Cluster) -> None:
    name = "gc-probe"
    cluster.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=true")
    cluster.kubectl("create", "namespace", name)
    cluster.wait_for(
        "default ServiceAccount",
        lambda: cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
    )
    cluster.kubectl("apply", "-n", name, "-f", "-", input=_gpu_deployment("doomed", 1))
    cluster.kubectl("wait", "-n", name, "--for=condition=Available", "deployment/doomed", "--timeout=60s")
    cluster.kubectl("delete", "namespace", name, "--wait=true", "--timeout=90s")
    assert cluster.kubectl("get", "namespace", name, check=False).returncode != 0
    leftovers = cluster.kubectl("get", "pods,replicasets,deployments", "-n", name, "--no-headers").stdout
    assert leftovers.strip() == ""


def test_rbac_denies_an_impersonated_service_account_what_its_role_lacks(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    cluster.kubectl("create", "role", "pod-reader", "--verb=get,list", "--resource=pods", "-n", namespace)
    cluster.kubectl(
        "create", "rolebinding", "reader", "--role=pod-reader", f"--serviceaccount={namespace}:reader", "-n", namespace
    )
    identity = f"--as=system:serviceaccount:{namespace}:reader"
    allowed = cluster.kubectl("get", "pods", "-n", namespace, identity)
    assert allowed.returncode == 0
    denied = cluster.kubectl("create", "configmap", "nope", "-n", namespace, identity, check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr
    assert f'User "system:serviceaccount:{namespace}:reader" cannot create resource "configmaps"' in denied.stderr
    other = cluster.kubectl("get", "pods", "-n", "default", identity, check=False)
    assert other.returncode != 0 and "forbidden" in other.stderr


def test_kubectl_and_helm_report_their_real_versions(cluster: Cluster) -> None:
    reported = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    if cluster.local:
        assert reported["serverVersion"]["gitVersion"] == versions.KUBERNETES
    assert reported["clientVersion"]["gitVersion"] == versions.KUBERNETES
    helm = cluster.helm("version", "--template", "{{.Version}}").stdout.strip()
    assert helm == versions.HELM
