"""What the suites read and check on a cluster: examples, DisaggSpecServices, their children and rendered pods.

Shared by the operator's integration tests and the end-to-end suite so both assert the same contract: the twelve
children a service owns, and the wiring of every prefill/decode pod (disaggregation mode, bootstrap port and
annotation, fingerprint label, GPU and RDMA resources, IPC_LOCK without privileged, Multus networks).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from disaggspec.revision import revision_name
from e2e.cluster.controlplane import RDMA_RESOURCE
from e2e.support.kube import Cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
CHILD_KINDS = "deployments,leaderworkersets,services,poddisruptionbudgets,serviceaccounts,roles,rolebindings"
DEFAULT_BOOTSTRAP_PORT = 8998
DEFAULT_ROUTER_PORT = 30000


ROLES = ("prefill", "decode", "router")
"""The roles of the pods that serve (pool and router pods)."""


def example(fragment: str) -> Path:
    """The one example whose file name contains `fragment`."""
    found = [p for p in EXAMPLES if fragment in p.name]
    if len(found) != 1:
        raise LookupError(f"{len(found)} examples match {fragment!r}: {[p.name for p in EXAMPLES]}")
    return found[0]


def load(path: Path) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(path.read_text())
    return obj


def get(cluster: Cluster, namespace: str, *what: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(cluster.kubectl("get", *what, "-n", namespace, "-o", "json").stdout)
    return out


def wait_ready(cluster: Cluster, namespace: str, name: str, timeout: int = 90) -> None:
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", f"dss/{name}", f"--timeout={timeout}s")


def children(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get(cluster, namespace, CHILD_KINDS, "-l", f"disaggspec.io/service={name}")["items"]
    return items


def child_versions(cluster: Cluster, namespace: str, name: str) -> dict[str, str]:
    """uid -> resourceVersion of every child: the same map later means no child was written, deleted or recreated."""
    return {o["metadata"]["uid"]: o["metadata"]["resourceVersion"] for o in children(cluster, namespace, name)}


def pods(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get(cluster, namespace, "pods", "-l", f"disaggspec.io/service={name}")["items"]
    return items


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in obj["status"]["conditions"] if c["type"] == type_)
    return found


def deployment(cluster: Cluster, namespace: str, service_name: str, role: str) -> dict[str, Any]:
    """The one Deployment of `role` of service `service_name`, found by its labels: its name carries the revision
    (`<service>-<role>-<8 hex of the fingerprint>`, `names.deployment_name`). Raises unless there is exactly one
    (there are two while a rollout runs the new revision beside the old one)."""
    selector = f"disaggspec.io/service={service_name},disaggspec.io/role={role}"
    items: list[dict[str, Any]] = get(cluster, namespace, "deployments", "-l", selector)["items"]
    if len(items) != 1:
        found = sorted(item["metadata"]["name"] for item in items)
        raise LookupError(f"{len(items)} Deployments match {selector} in {namespace}, expected one: {found}")
    return items[0]


def nodes_per_instance(obj: dict[str, Any], role: str) -> int:
    """spec.<role>.nodesPerInstance of a service manifest (1 when unset, and for the router)."""
    return int((obj["spec"].get(role) or {}).get("nodesPerInstance", 1)) if role in ("prefill", "decode") else 1


def workload_kind(obj: dict[str, Any], role: str) -> str:
    """The kind a role of service `obj` runs as: a LeaderWorkerSet for a multi-node pool, else a Deployment."""
    return "LeaderWorkerSet" if nodes_per_instance(obj, role) > 1 else "Deployment"


def expected_children(name: str, fingerprint: str, obj: dict[str, Any] | None = None) -> list[str]:
    """`Kind/name` of everything the operator creates for service `name` whose spec has `fingerprint`, sorted: the
    workloads of that revision (`<name>-<role>-<revision>`: Deployments, or LeaderWorkerSets for the multi-node pools
    of `obj`) and the children the revisions share."""
    revision = revision_name(fingerprint)
    kinds = {r: workload_kind(obj, r) if obj is not None else "Deployment" for r in ("prefill", "decode", "router")}
    return sorted(
        [f"{kinds[r]}/{name}-{r}-{revision}" for r in ("prefill", "decode", "router")]
        + [f"Service/{name}-{r}" for r in ("prefill", "decode", "router")]
        + [f"PodDisruptionBudget/{name}-{r}" for r in ("prefill", "decode", "router")]
        + [f"{k}/{name}-router" for k in ("ServiceAccount", "Role", "RoleBinding")]
    )


def child_names(cluster: Cluster, namespace: str, name: str) -> list[str]:
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in children(cluster, namespace, name))


def _claims(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(claim name, access mode) of each claim an example's model reads: the weights volume, the model cache."""
    model = obj["spec"]["model"]
    found = []
    volume = ((model.get("volume") or {}).get("persistentVolumeClaim") or {}).get("claimName")
    if volume:
        found.append((volume, "ReadOnlyMany"))
    cache = ((model.get("cache") or {}).get("persistentVolumeClaim") or {}).get("claimName")
    if cache:
        found.append((cache, "ReadWriteMany"))
    return found


def provide_model_claim(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> None:
    """Create the PersistentVolume and claim an example's model volume or model cache names (statically bound, no
    provisioner)."""
    manifests: list[dict[str, Any]] = []
    for claim, mode in _claims(obj):
        volume = f"{namespace}-{claim}"[:63]
        manifests += [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": volume},
                "spec": {
                    "capacity": {"storage": "1Ti"},
                    "accessModes": [mode],
                    "storageClassName": "",
                    "hostPath": {"path": "/models"},
                    "claimRef": {"namespace": namespace, "name": claim},
                },
            },
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": namespace},
                "spec": {
                    "accessModes": [mode],
                    "storageClassName": "",
                    "volumeName": volume,
                    "resources": {"requests": {"storage": "1Ti"}},
                },
            },
        ]
    if manifests:
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(manifests))


def check_service_status(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Assert a Ready service's status (generation observed, consistent spec, endpoint) and return it."""
    name = obj["metadata"]["name"]
    dss = get(cluster, namespace, "dss", name)
    assert dss["status"]["observedGeneration"] == dss["metadata"]["generation"]
    assert condition(dss, "SpecConfigConsistent")["status"] == "True"
    port = obj["spec"].get("router", {}).get("port", DEFAULT_ROUTER_PORT)
    assert dss["status"]["endpoint"] == f"http://{name}-router.{namespace}.svc:{port}"
    return dss


def check_rendered_pods(
    cluster: Cluster, namespace: str, obj: dict[str, Any], fingerprint: str, node_prefix: str | None = "gpu-node-"
) -> list[dict[str, Any]]:
    """Assert the wiring of every pod of service `obj` (see the module docstring); return the pods."""
    name = obj["metadata"]["name"]
    # The serving pods only: a model-cache fill Job's pods carry the service label too.
    found = [p for p in pods(cluster, namespace, name) if p["metadata"]["labels"].get("disaggspec.io/role") in ROLES]
    assert {p["metadata"]["labels"]["disaggspec.io/role"] for p in found} == set(ROLES)
    transfer = obj["spec"].get("transfer", {})
    bootstrap = str(transfer.get("bootstrapPort", DEFAULT_BOOTSTRAP_PORT))
    for pod in found:
        role = pod["metadata"]["labels"]["disaggspec.io/role"]
        where = f"pod {pod['metadata']['name']} ({role})"
        if node_prefix is not None:
            assert pod["spec"]["nodeName"].startswith(node_prefix), where
        assert pod["status"]["phase"] == "Running", where
        container = pod["spec"]["containers"][0]
        if nodes_per_instance(obj, role) > 1:
            check_group_member(pod, obj, role)
            if pod["metadata"]["labels"][LWS_WORKER_INDEX] != "0":
                continue  # a worker serves no API: no bootstrap port, annotation or disaggregation to check
        if role == "prefill":
            assert pod["metadata"]["annotations"]["sglang.ai/bootstrap-port"] == bootstrap, where
            # Under hostNetwork the API server also defaults each port's hostPort to its containerPort.
            ports = [{k: v for k, v in port.items() if k != "hostPort"} for port in container["ports"]]
            assert {"name": "bootstrap", "containerPort": int(bootstrap), "protocol": "TCP"} in ports, where
        if role == "router":
            continue
        command = container["command"]
        assert command[command.index("--disaggregation-mode") + 1] == role, where
        assert command[command.index("--disaggregation-bootstrap-port") + 1] == bootstrap, where
        assert pod["metadata"]["labels"]["disaggspec.io/spec-fingerprint"] == fingerprint, where
        assert container["securityContext"].get("privileged") is False, where
        assert int(container["resources"]["limits"]["nvidia.com/gpu"]) >= 1, where
        if nodes_per_instance(obj, role) > 1:
            gpus_per_node = int(obj["spec"][role].get("gpusPerNode", 8))
            assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == gpus_per_node, where
        rdma = transfer.get("rdma")
        if rdma:
            assert "IPC_LOCK" in container["securityContext"]["capabilities"]["add"], where
            for resource, count in rdma.get("resources", {}).items():
                assert str(container["resources"]["limits"][resource]) == str(count), where
            if rdma.get("networks"):
                annotation = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
                assert annotation == ",".join(rdma["networks"]), where
    return found


LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"


def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def kubelet_expand(value: str, env: dict[str, str]) -> str:
    """`$(VAR)` references in a container argument expanded as kubelet does (unknown names are left as written)."""
    for key, replacement in env.items():
        value = value.replace(f"$({key})", replacement)
    return value


def check_group_member(pod: dict[str, Any], obj: dict[str, Any], role: str) -> None:
    """Assert that a pod of a multi-node pool runs its rank of the group: `--nnodes`, `--node-rank` (the LWS worker
    index, after kubelet's `$(VAR)` expansion of the env the LeaderWorkerSet webhook injected), `--dist-init-addr` at
    the group leader's stable name, and the same `--tp-size` as every other pod of the group."""
    labels, where = pod["metadata"]["labels"], f"pod {pod['metadata']['name']} ({role})"
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    command = [kubelet_expand(arg, env) for arg in container["command"]]
    lws, group, namespace = labels[LWS_NAME], labels[LWS_GROUP_INDEX], pod["metadata"]["namespace"]
    assert _flag(command, "--nnodes") == str(nodes_per_instance(obj, role)), where
    assert _flag(command, "--node-rank") == labels[LWS_WORKER_INDEX] == env["LWS_WORKER_INDEX"], where
    host, _, port = _flag(command, "--dist-init-addr").rpartition(":")
    assert host == f"{lws}-{group}.{lws}.{namespace}" == env["LWS_LEADER_ADDRESS"], where
    assert port.isdigit(), where
    assert _flag(command, "--tp-size") == str(obj["spec"][role].get("tensorParallelSize", 1)), where


def host_network_service(
    name: str, version: str, *, replicas: int, prefill_node: str, decode_node: str
) -> dict[str, Any]:
    """Llama 3.1 8B with EAGLE3 on the host network (mooncake over RDMA): `replicas` 2-GPU pods per pool, the
    prefill's pinned to `prefill_node` and the decode's to `decode_node` (by kubernetes.io/hostname), so that a
    suite can put several pool pods on one node (per-pod ports on 0.5.23) or one per node."""

    def pool(node: str) -> dict[str, Any]:
        return {"replicas": replicas, "tensorParallelSize": 2, "nodeSelector": {"kubernetes.io/hostname": node}}

    return {
        "apiVersion": "disaggspec.io/v1alpha1",
        "kind": "DisaggSpecService",
        "metadata": {"name": name},
        "spec": {
            "sglang": {"image": f"disaggspec/sglang:v{version}-disaggspec", "version": version},
            "model": {"path": "meta-llama/Llama-3.1-8B-Instruct", "servedModelName": "llama"},
            "speculative": {
                "algorithm": "EAGLE3",
                "draftModel": {"path": "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"},
                "numSteps": 1,
                "eagleTopk": 1,
                "numDraftTokens": 2,
            },
            "transfer": {"backend": "mooncake", "rdma": {"resources": {RDMA_RESOURCE: 1}, "hostNetwork": True}},
            "prefill": pool(prefill_node),
            "decode": pool(decode_node),
            "router": {"policy": "round_robin"},
        },
    }
