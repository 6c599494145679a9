"""The LeaderWorkerSet controller in the local control plane: its webhook configurations as rendered from the module
(no cluster), and on a cluster of its own, a LeaderWorkerSet becomes a leader and a worker pod on the kwok nodes with
the labels and env the pod webhook sets, gets Ready, recreates its group when a pod goes, and the controller can be
stopped and started as a fault injection."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.cluster import build, lws, processes
from e2e.cluster.controlplane import ClusterError, LocalCluster, NodeShape
from e2e.support.fixtures import PRIVATE_PORT_BASE, _free_port_base, needs_built
from e2e.support.kube import wait_for

LWS_LABEL = "leaderworkerset.sigs.k8s.io"
BUILT = needs_built(build.ETCD, build.KUBERNETES, build.KWOK, build.LWS)


@BUILT
def test_webhooks_point_at_loopback_with_the_module_paths_and_selectors() -> None:
    configurations = lws.webhook_configurations(26385, b"PEM")
    assert [c["metadata"]["name"] for c in configurations] == [
        "lws-mutating-webhook-configuration",
        "lws-validating-webhook-configuration",
    ]
    webhooks = {w["name"]: w for c in configurations for w in c["webhooks"]}
    assert set(webhooks) == {"mleaderworkerset.kb.io", "mpod.kb.io", "vleaderworkerset.kb.io", "vpod.kb.io",
                             "vdisaggregatedset.kb.io"}  # fmt: skip
    for webhook in webhooks.values():
        assert set(webhook["clientConfig"]) == {"url", "caBundle"}
        assert webhook["clientConfig"]["url"].startswith("https://127.0.0.1:26385/")
        assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == b"PEM"
    assert webhooks["mpod.kb.io"]["clientConfig"]["url"].endswith(lws.POD_MUTATING_PATH)
    # The kustomize patches of the module: the pod webhooks only see LWS pods, so other pods never depend on them.
    only_lws_pods = {"matchExpressions": [{"key": f"{LWS_LABEL}/name", "operator": "Exists"}]}
    assert webhooks["mpod.kb.io"]["objectSelector"] == only_lws_pods
    assert webhooks["vpod.kb.io"]["objectSelector"] == only_lws_pods


@pytest.fixture(scope="module")
def lws_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # A free port range above the pytest session clusters': never a fixed base another run may hold.
    cluster = LocalCluster(tmp_path_factory.mktemp("lws") / "state")
    cluster.up(port_base=_free_port_base(PRIVATE_PORT_BASE), nodes=NodeShape(count=2), timeout=180)
    try:
        yield cluster
    finally:
        cluster.down(quiet=True)


def leader_worker_set(name: str, size: int = 2) -> dict[str, Any]:
    template = {
        "spec": {
            "nodeSelector": {"type": "kwok"},
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"]}],
        }
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": size,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "workerTemplate": template,
            },
        },
    }


def pods(cluster: LocalCluster, namespace: str) -> dict[str, dict[str, Any]]:
    items = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


def running_group(cluster: LocalCluster, namespace: str, name: str) -> dict[str, dict[str, Any]] | None:
    """The leader and the worker of group 0, once both are Running."""
    current = pods(cluster, namespace)
    group = {key: current.get(key) for key in (f"{name}-0", f"{name}-0-1")}
    if all(p is not None and p["status"].get("phase") == "Running" for p in group.values()):
        return {key: p for key, p in group.items() if p is not None}
    return None


def ready_replicas(cluster: LocalCluster, namespace: str, name: str) -> int:
    got = cluster.kubectl("get", "leaderworkerset", name, "-n", namespace, "-o", "jsonpath={.status.readyReplicas}")
    return int(got.stdout or 0)


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


@pytest.mark.integration
@BUILT
def test_group_pods_get_lws_labels_env_readiness_and_recreate(lws_cluster: LocalCluster) -> None:
    cluster, namespace, name = lws_cluster, "lws-group", "demo"
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(leader_worker_set(name)))

    group = wait_for("the leader and the worker pod to run", lambda: running_group(cluster, namespace, name))
    leader, worker = group[f"{name}-0"], group[f"{name}-0-1"]
    for pod, index in ((leader, "0"), (worker, "1")):
        labels = pod["metadata"]["labels"]
        assert labels[f"{LWS_LABEL}/worker-index"] == index
        assert labels[f"{LWS_LABEL}/group-index"] == "0"
        assert labels[f"{LWS_LABEL}/name"] == name
        assert env(pod)["LWS_LEADER_ADDRESS"] == f"{name}-0.{name}.{namespace}"
        assert env(pod)["LWS_GROUP_SIZE"] == "2"
        assert env(pod)["LWS_WORKER_INDEX"] == index
        assert pod["spec"]["nodeName"].startswith("gpu-node-")
    wait_for("readyReplicas 1", lambda: ready_replicas(cluster, namespace, name) == 1)

    # RecreateGroupOnPodRestart: a worker that goes takes its leader, and so the whole group, with it.
    old_leader_uid = leader["metadata"]["uid"]
    cluster.kubectl("delete", "pod", f"{name}-0-1", "-n", namespace, "--wait=false")

    def recreated() -> dict[str, dict[str, Any]] | None:
        group = running_group(cluster, namespace, name)
        return group if group and group[f"{name}-0"]["metadata"]["uid"] != old_leader_uid else None

    group = wait_for("the group to be recreated with a new leader", recreated)
    assert group[f"{name}-0-1"]["metadata"]["uid"] != worker["metadata"]["uid"]
    wait_for("readyReplicas 1 after the recreate", lambda: ready_replicas(cluster, namespace, name) == 1)


@pytest.mark.integration
@BUILT
def test_stopped_controller_refuses_lws_objects_only_and_comes_back(lws_cluster: LocalCluster) -> None:
    cluster, namespace = lws_cluster, "lws-restart"
    cluster.kubectl("create", "namespace", namespace)
    before = cluster.require_state()
    old_pid = before.pids["lws-controller"]
    old_argv = processes.cmdline(old_pid)

    cluster.stop_component("lws")
    assert cluster.running()["lws-controller"] is False
    # The pod webhooks select LWS pods only: every other pod is created as usual while the webhook server is down.
    cluster.kubectl("run", "plain", "-n", namespace, "--image=busybox", "--restart=Never", "--", "sleep", "1")
    # LWS objects are refused (failurePolicy Fail), as in a cluster whose LWS webhook is down.
    manifest = yaml.safe_dump(leader_worker_set("after"))
    with pytest.raises(ClusterError, match="failed calling webhook"):
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=manifest)

    cluster.start_component("lws")
    after = cluster.require_state()
    assert after.pids["lws-controller"] != old_pid
    assert processes.cmdline(after.pids["lws-controller"])[1:] == old_argv[1:]
    assert after.ports == before.ports
    assert cluster.is_up()
    # Healthy on return means its webhooks serve: the same object is admitted at once, and its group comes up.
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=manifest)
    group = wait_for(
        "the group of the LWS created after the restart", lambda: running_group(cluster, namespace, "after")
    )
    assert group["after-0-1"]["metadata"]["labels"][f"{LWS_LABEL}/worker-index"] == "1"
    wait_for("readyReplicas 1", lambda: ready_replicas(cluster, namespace, "after") == 1)
