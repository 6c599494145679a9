"""Multi-node pools (spec.<pool>.nodesPerInstance > 1): rendered as a LeaderWorkerSet of leader/worker groups, the
router discovering leaders only, the fingerprint carrying the node layout, and the name limit of their children."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from disaggspec import constants as c
from disaggspec.api import parse_service
from disaggspec.api.v1alpha1 import GPU_RESOURCE
from disaggspec.config import OperatorConfig
from disaggspec.ib_device_map import IMAGE_PATH
from disaggspec.render import fingerprint, names, render
from disaggspec.render import pool as pool_render
from disaggspec.render.rdma import server_command
from disaggspec.revision import REVISION_NAME_LENGTH
from disaggspec.sglang.args import DIST_INIT_PORT, server_args
from disaggspec.validation import validate
from disaggspec.validation.pools import (
    CONTROLLER_REVISION_HASH_LENGTH,
    LABEL_VALUE_LENGTH,
    MAX_GROUP_INDEX_DIGITS,
    REVISION_SUFFIX_LENGTH,
    multi_node_name_limit,
)
from tests.unit.dss_cases import edited

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "deepseek-r1-tp16-multinode.yaml"
MIXED = REPO / "operator" / "tests" / "golden" / "mixed-multinode-prefill" / "input.yaml"
LLAMA = REPO / "examples" / "llama-3.1-8b-eagle3.yaml"
LLAMA_GOLDEN_FINGERPRINT = "9c20c58d5e553f62"
"""The fingerprint of examples/llama-3.1-8b-eagle3.yaml in operator/tests/golden/llama-3.1-8b-eagle3/expected.yaml."""
LEADER_ADDRESS = f"$({c.LWS_ENV_LEADER_ADDRESS}):{DIST_INIT_PORT}"


def _load(path: Path) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(path.read_text())
    obj["metadata"]["namespace"] = "ns"
    return obj


def _workloads(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each pool's and the router's workload, by role."""
    return {m["metadata"]["labels"][c.LABEL_ROLE]: m for m in manifests if m["kind"] in ("Deployment", c.LWS_KIND)}


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _container(template: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = template["spec"]["containers"][0]
    return container


def test_example_and_mixed_case_are_valid() -> None:
    for path in (EXAMPLE, MIXED):
        assert validate(parse_service(_load(path))) == [], path


def test_a_multi_node_pool_is_a_leader_worker_set_shaped_like_its_deployment() -> None:
    service = parse_service(_load(MIXED))
    fp = fingerprint(service)
    workloads = _workloads(render(service, OperatorConfig()))
    lws, decode = workloads[c.ROLE_PREFILL], workloads[c.ROLE_DECODE]
    assert (lws["apiVersion"], lws["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    assert (decode["apiVersion"], decode["kind"]) == ("apps/v1", "Deployment")  # the single-node pool
    # Named, labelled and annotated as the Deployment of the pool would be.
    assert lws["metadata"] == names.revision_metadata(service, c.ROLE_PREFILL, fp)
    assert lws["metadata"]["name"] == names.deployment_name(service, c.ROLE_PREFILL, fp)
    assert lws["metadata"]["labels"][c.LABEL_FINGERPRINT] == fp
    stored = json.loads(lws["metadata"]["annotations"][names.REVISION_SPEC_ANNOTATION])
    assert parse_service({**_load(MIXED), "spec": stored}).spec == service.spec
    spec = lws["spec"]
    assert spec["replicas"] == 2
    assert spec["startupPolicy"] == "LeaderCreated"
    assert spec["rolloutStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
    }
    group = spec["leaderWorkerTemplate"]
    assert group["size"] == 2
    assert group["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert set(group) == {"size", "restartPolicy", "leaderTemplate", "workerTemplate"}
    # No Deployment-only fields.
    assert set(spec) == {"replicas", "startupPolicy", "rolloutStrategy", "leaderWorkerTemplate"}
    # The replicas argument means what it means for a Deployment.
    assert pool_render.workload(service, c.ROLE_PREFILL, fp, 5)["spec"]["replicas"] == 5
    assert pool_render.workload(service, c.ROLE_DECODE, fp, 5) == pool_render.deployment(service, c.ROLE_DECODE, fp, 5)


def test_leader_and_worker_commands_join_one_server() -> None:
    service = parse_service(_load(MIXED))
    group = _workloads(render(service, OperatorConfig()))[c.ROLE_PREFILL]["spec"]["leaderWorkerTemplate"]
    leader = _container(group["leaderTemplate"])["command"]
    worker = _container(group["workerTemplate"])["command"]
    for argv in (leader, worker):
        assert _flag(argv, "--tp-size") == "16"
        assert _flag(argv, "--nnodes") == "2"
        assert _flag(argv, "--dist-init-addr") == LEADER_ADDRESS == "$(LWS_LEADER_ADDRESS):20000"
        assert argv.count("--nnodes") == argv.count("--node-rank") == argv.count("--dist-init-addr") == 1
    assert _flag(leader, "--node-rank") == "0"
    assert _flag(worker, "--node-rank") == "$(LWS_WORKER_INDEX)"
    # Apart from the rank, the very same server.
    rank = leader.index("--node-rank") + 1
    assert leader[:rank] + leader[rank + 1 :] == worker[:rank] + worker[rank + 1 :]
    assert leader == server_args(service, "prefill")
    # The single-node pool renders no multi-node flag.
    decode = server_args(service, "decode")
    assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & set(decode)


def test_only_the_leader_serves_and_every_pod_is_watched() -> None:
    service = parse_service(_load(EXAMPLE))
    workloads = _workloads(render(service, OperatorConfig()))
    for role in (c.ROLE_PREFILL, c.ROLE_DECODE):
        group = workloads[role]["spec"]["leaderWorkerTemplate"]
        leader, worker = _container(group["leaderTemplate"]), _container(group["workerTemplate"])
        assert {"startupProbe", "readinessProbe", "livenessProbe"} <= set(leader)
        # The worker: liveness on its dummy /health, a startup probe that holds liveness off while it loads, no
        # readiness of its own.
        assert "readinessProbe" not in worker
        assert worker["livenessProbe"] == leader["livenessProbe"]
        assert worker["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}
        assert worker["startupProbe"]["failureThreshold"] == leader["startupProbe"]["failureThreshold"]
        assert [p["name"] for p in worker["ports"]] == ["http"]
        leader_annotations = group["leaderTemplate"]["metadata"].get("annotations", {})
        worker_annotations = group["workerTemplate"]["metadata"].get("annotations", {})
        assert c.ANNOTATION_BOOTSTRAP_PORT not in worker_annotations
        if role == c.ROLE_PREFILL:
            assert leader_annotations[c.ANNOTATION_BOOTSTRAP_PORT] == "8998"
            assert [p["name"] for p in leader["ports"]] == ["http", "bootstrap"]
        else:
            assert c.ANNOTATION_BOOTSTRAP_PORT not in leader_annotations
            assert [p["name"] for p in leader["ports"]] == ["http"]
        # The Multus networks reach every pod of the group.
        assert leader_annotations[c.ANNOTATION_MULTUS_NETWORKS] == worker_annotations[c.ANNOTATION_MULTUS_NETWORKS]


@pytest.mark.parametrize("gpus_per_node", [8, 4])
def test_every_pod_of_a_group_takes_a_whole_node(gpus_per_node: int) -> None:
    obj = edited({"spec.prefill": {"tensorParallelSize": 2 * gpus_per_node, "nodesPerInstance": 2}})
    obj["spec"]["prefill"]["gpusPerNode"] = gpus_per_node
    obj["metadata"]["namespace"] = "ns"
    service = parse_service(obj)
    assert validate(service) == []
    group = _workloads(render(service, OperatorConfig()))[c.ROLE_PREFILL]["spec"]["leaderWorkerTemplate"]
    for template in (group["leaderTemplate"], group["workerTemplate"]):
        resources = _container(template)["resources"]
        assert resources["limits"][GPU_RESOURCE] == resources["requests"][GPU_RESOURCE] == gpus_per_node
    assert pool_render.pod_gpus(service, c.ROLE_PREFILL) == gpus_per_node


def test_both_pod_templates_carry_everything_a_pool_pod_has() -> None:
    service = parse_service(_load(MIXED))
    fp = fingerprint(service)
    server = pool_render.pod_template(service, c.ROLE_PREFILL, fp, "server")
    group = _workloads(render(service, OperatorConfig()))[c.ROLE_PREFILL]["spec"]["leaderWorkerTemplate"]
    for template in (group["leaderTemplate"], group["workerTemplate"]):
        assert template["metadata"]["labels"] == server["metadata"]["labels"]
        assert template["metadata"]["labels"][c.LABEL_FINGERPRINT] == fp
        assert template["metadata"]["labels"][c.LABEL_VERSION] == "0.5.2"
        assert template["metadata"]["annotations"]["example.com/owner"] == "inference"
        # The pod spec is the single-node server's but for the container's rank, ports and probes.
        assert {k: v for k, v in template["spec"].items() if k != "containers"} == {
            k: v for k, v in server["spec"].items() if k != "containers"
        }
        same = ("image", "imagePullPolicy", "resources", "securityContext", "volumeMounts", "env")
        for key in same:
            assert _container(template).get(key) == _container(server).get(key), key
    # The leader waits for its KV transfers before SIGTERM; a worker, which serves no API, only pauses.
    assert group["leaderTemplate"]["spec"]["containers"][0]["lifecycle"] == _container(server)["lifecycle"]
    assert _container(group["workerTemplate"])["lifecycle"] == {"preStop": {"exec": {"command": ["sleep", "5"]}}}
    leader = group["leaderTemplate"]
    assert leader["metadata"] == server["metadata"]
    assert {k: v for k, v in _container(leader).items() if k != "command"} == {
        k: v for k, v in _container(server).items() if k != "command"
    }
    spread = leader["spec"]["topologySpreadConstraints"][0]
    assert spread["whenUnsatisfiable"] == "DoNotSchedule"
    assert leader["spec"]["priorityClassName"] == "inference-critical"


def test_rdma_auto_mapping_wraps_leader_and_worker() -> None:
    service = parse_service(_load(EXAMPLE))
    group = _workloads(render(service, OperatorConfig()))[c.ROLE_DECODE]["spec"]["leaderWorkerTemplate"]
    for template, rank in ((group["leaderTemplate"], "0"), (group["workerTemplate"], "$(LWS_WORKER_INDEX)")):
        command = _container(template)["command"]
        assert command[:2] == ["python3", IMAGE_PATH]
        argv = server_command(command)
        assert _flag(argv, "--node-rank") == rank
        assert _flag(argv, "--tp-size") == "16"
        assert _container(template)["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"]}


def test_router_discovers_the_leaders_of_a_multi_node_pool_only() -> None:
    service = parse_service(_load(MIXED))
    fp = fingerprint(service)
    command = _container(_workloads(render(service, OperatorConfig()))[c.ROLE_ROUTER]["spec"]["template"])["command"]
    prefill = command[command.index("--prefill-selector") + 1 : command.index("--decode-selector")]
    decode = command[command.index("--decode-selector") + 1 : command.index("--policy")]
    worker_index = f"{c.LWS_LABEL_WORKER_INDEX}=0"
    assert worker_index == "leaderworkerset.sigs.k8s.io/worker-index=0"
    assert worker_index in prefill and f"{c.LABEL_FINGERPRINT}={fp}" in prefill
    assert not any(arg.startswith(c.LWS_LABEL_WORKER_INDEX) for arg in decode)
    single = parse_service(_load(LLAMA))
    router = _container(_workloads(render(single, OperatorConfig()))[c.ROLE_ROUTER]["spec"]["template"])
    assert not any(c.LWS_LABEL_WORKER_INDEX in arg for arg in router["command"])


def test_shared_children_are_those_of_a_single_node_pool() -> None:
    multi = parse_service(_load(MIXED))
    obj = _load(MIXED)
    obj["spec"]["prefill"].update({"nodesPerInstance": 1, "tensorParallelSize": 8})
    single = parse_service(obj)
    assert validate(single) == []

    def shared(service: Any) -> list[dict[str, Any]]:
        return [m for m in render(service, OperatorConfig()) if m["kind"] not in ("Deployment", c.LWS_KIND)]

    # The headless Services and the budgets select the role's pods, leaders and workers alike.
    assert shared(multi) == shared(single)
    kinds = [m["kind"] for m in render(multi, OperatorConfig())]
    assert kinds.count(c.LWS_KIND) == 1 and kinds.count("Deployment") == 2


def test_single_node_fingerprint_is_unchanged() -> None:
    service = parse_service(_load(LLAMA))
    assert fingerprint(service) == LLAMA_GOLDEN_FINGERPRINT
    explicit = _load(LLAMA)
    for role in ("prefill", "decode"):
        explicit["spec"][role]["nodesPerInstance"] = 1
    assert fingerprint(parse_service(explicit)) == LLAMA_GOLDEN_FINGERPRINT


def test_the_node_layout_keys_a_new_revision() -> None:
    single = edited({})
    prefill_multi = edited({"spec.prefill": {"tensorParallelSize": 16, "nodesPerInstance": 2}})
    decode_multi = edited({"spec.decode": {"tensorParallelSize": 16, "nodesPerInstance": 2}})
    wider = edited({"spec.prefill": {"tensorParallelSize": 32, "nodesPerInstance": 4}})
    prints = {fingerprint(parse_service(obj)) for obj in (single, prefill_multi, decode_multi, wider)}
    assert len(prints) == 4
    # Within one layout, what need not match across the pools stays out of it, as for single-node pools.
    narrow_nodes = edited({"spec.prefill": {"tensorParallelSize": 8, "nodesPerInstance": 2, "gpusPerNode": 4}})
    more = edited({"spec.prefill": {"tensorParallelSize": 16, "nodesPerInstance": 2, "replicas": 3}})
    assert fingerprint(parse_service(narrow_nodes)) == fingerprint(parse_service(prefill_multi))
    assert fingerprint(parse_service(more)) == fingerprint(parse_service(prefill_multi))


def test_name_limit_is_what_the_longest_child_label_allows() -> None:
    assert REVISION_SUFFIX_LENGTH == REVISION_NAME_LENGTH
    assert (multi_node_name_limit("prefill"), multi_node_name_limit("decode")) == (30, 31)
    for role in ("prefill", "decode"):
        service_name = "a" * multi_node_name_limit(role)
        lws = f"{service_name}-{role}-{'f' * REVISION_NAME_LENGTH}"
        worker_statefulset = f"{lws}-{'9' * MAX_GROUP_INDEX_DIGITS}"
        revision_label = f"{worker_statefulset}-{'x' * CONTROLLER_REVISION_HASH_LENGTH}"
        assert len(revision_label) == LABEL_VALUE_LENGTH
        # Worker pod names (their hostnames) fit too: the worker index has at most two digits (size <= 64).
        assert len(f"{worker_statefulset}-63") <= 63
    service = parse_service(
        edited({"metadata.name": "a" * 30, "spec.prefill": {"tensorParallelSize": 16, "nodesPerInstance": 2}})
    )
    assert validate(service) == []
