"""End to end, as a user meets disaggspec: the Helm chart's operator, `kubectl apply`, `kubectl wait`, edits, deletes.

Runs on either backend (`--backend`, see e2e/support/fixtures.py). On `local` (CI) the chart is installed on the
embedded control plane and the operator runs here as the chart's ServiceAccount; every example must reach Ready=True
with its pods Running on the kwok GPU nodes and wired as the spec says. On `kind-gpu` the chart's in-cluster operator
is used, and the flows that need no GPU capacity (rejections, delete) run too; the serving checks are in
test_serving_gpu.py.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.support import workloads
from e2e.support.fixtures import Cluster
from e2e.support.operator_install import InstalledOperator, installed_operator

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def operator(
    installed_crd: Cluster, backend: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InstalledOperator]:
    cluster = installed_crd
    namespace = f"dss-e2e-system-{uuid.uuid4().hex[:6]}"
    if backend == "local":
        cluster.kubectl("create", "namespace", namespace)
    with installed_operator(cluster, backend, namespace, tmp_path_factory.mktemp("e2e-operator")) as installed:
        yield installed
    if backend == "local":
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")


def _apply(cluster: Cluster, namespace: str, obj: dict[str, Any], check: bool = True) -> Any:
    return cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj), check=check)


@pytest.mark.local_only
@pytest.mark.parametrize("path", workloads.EXAMPLES, ids=lambda p: p.stem)
def test_every_example_reaches_ready_with_wired_pods(
    operator: InstalledOperator, cluster: Cluster, namespace: str, path: Path
) -> None:
    obj = workloads.load(path)
    name = obj["metadata"]["name"]
    workloads.provide_model_claim(cluster, namespace, obj)
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))
    workloads.wait_ready(cluster, namespace, name)
    dss = workloads.check_service_status(cluster, namespace, obj)
    fingerprint = dss["status"]["specFingerprint"]
    assert workloads.child_names(cluster, namespace, name) == workloads.expected_children(name, fingerprint, obj)
    workloads.check_rendered_pods(cluster, namespace, obj, fingerprint)
    printed = cluster.kubectl("get", "dss", name, "-n", namespace).stdout
    assert "True" in printed.splitlines()[1], printed  # the Ready printer column


@pytest.mark.local_only
def test_editing_the_draft_rolls_both_pools_and_the_router_follows(
    operator: InstalledOperator, cluster: Cluster, namespace: str
) -> None:
    obj = workloads.load(workloads.example("topk"))
    name = obj["metadata"]["name"]
    _apply(cluster, namespace, obj)
    workloads.wait_ready(cluster, namespace, name)
    before = workloads.get(cluster, namespace, "dss", name)["status"]["specFingerprint"]
    old = {role: workloads.deployment(cluster, namespace, name, role)["metadata"] for role in workloads.ROLES}
    obj["spec"]["speculative"]["numDraftTokens"] += 2
    obj["spec"]["decode"]["replicas"] = 2
    _apply(cluster, namespace, obj)
    cluster.wait_for(
        "a new fingerprint in status",
        lambda: workloads.get(cluster, namespace, "dss", name)["status"].get("specFingerprint") not in (None, before),
    )
    workloads.wait_ready(cluster, namespace, name)
    dss = workloads.get(cluster, namespace, "dss", name)
    after = dss["status"]["specFingerprint"]
    assert dss["status"]["decode"]["readyReplicas"] == 2
    # The new spec ran as a new revision: new Deployments, named for its fingerprint; the old revision's are gone.
    assert workloads.child_names(cluster, namespace, name) == workloads.expected_children(name, after)
    deployments = {role: workloads.deployment(cluster, namespace, name, role) for role in workloads.ROLES}
    for role, deployment in deployments.items():
        assert deployment["metadata"]["uid"] != old[role]["uid"], role
    for role in ("prefill", "decode"):
        deployment = deployments[role]
        assert deployment["spec"]["template"]["metadata"]["labels"]["disaggspec.io/spec-fingerprint"] == after
        command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
        assert command[command.index("--speculative-num-draft-tokens") + 1] == str(
            obj["spec"]["speculative"]["numDraftTokens"]
        )
    router = deployments["router"]
    assert f"disaggspec.io/spec-fingerprint={after}" in router["spec"]["template"]["spec"]["containers"][0]["command"]
    # Every pod left is of the new spec once the old revision's pods are gone (the garbage collector removes them
    # after their Deployments, in the background).
    cluster.wait_for(
        "the old revision's pods to be gone",
        lambda: all(
            pod["metadata"]["labels"].get("disaggspec.io/spec-fingerprint") == after
            for pod in workloads.pods(cluster, namespace, name)
            if pod["metadata"]["labels"].get("disaggspec.io/role") in workloads.ROLES
        ),
        timeout=120,
    )
    workloads.check_rendered_pods(cluster, namespace, obj, after)


def _group_pods(cluster: Cluster, namespace: str, name: str, role: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The pods of a multi-node pool by (group index, worker index)."""
    found = {}
    for pod in workloads.pods(cluster, namespace, name):
        labels = pod["metadata"]["labels"]
        if labels.get("disaggspec.io/role") == role and not pod["metadata"].get("deletionTimestamp"):
            found[(labels[workloads.LWS_GROUP_INDEX], labels[workloads.LWS_WORKER_INDEX])] = pod
    return found


@pytest.mark.local_only
def test_a_multi_node_pool_runs_as_groups_and_a_lost_worker_recreates_its_group(
    operator: InstalledOperator, cluster: Cluster, namespace: str
) -> None:
    obj = workloads.load(workloads.example("multinode"))
    name = obj["metadata"]["name"]
    workloads.provide_model_claim(cluster, namespace, obj)  # the example ships a model cache on a claim
    _apply(cluster, namespace, obj)
    workloads.wait_ready(cluster, namespace, name, timeout=150)
    dss = workloads.get(cluster, namespace, "dss", name)
    for role in ("prefill", "decode"):
        size = workloads.nodes_per_instance(obj, role)
        assert size > 1, role
        groups = _group_pods(cluster, namespace, name, role)
        # Status counts instances (groups), each of `size` pods, one of them the leader.
        assert dss["status"][role]["readyReplicas"] == obj["spec"][role]["replicas"], dss["status"][role]
        assert len(groups) == obj["spec"][role]["replicas"] * size, sorted(groups)
        assert {worker for _, worker in groups} == {str(i) for i in range(size)}
        # The router's discovery selector (its own pods' labels, as the router lists them) matches the leaders only.
        router = workloads.deployment(cluster, namespace, name, "router")
        command = router["spec"]["template"]["spec"]["containers"][0]["command"]
        flag = command.index(f"--{role}-selector")
        selector = []
        for arg in command[flag + 1 :]:
            if arg.startswith("--"):
                break
            selector.append(arg)
        selected = workloads.get(cluster, namespace, "pods", "-l", ",".join(selector))["items"]
        leaders = {p["metadata"]["name"] for (_, worker), p in groups.items() if worker == "0"}
        assert {p["metadata"]["name"] for p in selected} == leaders, selector

    groups = _group_pods(cluster, namespace, name, "prefill")
    leader_uid = groups[("0", "0")]["metadata"]["uid"]
    cluster.kubectl("delete", "pod", groups[("0", "1")]["metadata"]["name"], "-n", namespace, "--wait=false")
    # RecreateGroupOnPodRestart: the LeaderWorkerSet controller replaces the whole group, leader included. Alone this
    # takes seconds; in make test on 2 cores (three suites, the SGLang patch tests) it once took over 60 s.
    cluster.wait_for(
        "the group's leader to be recreated",
        lambda: (
            (pod := _group_pods(cluster, namespace, name, "prefill").get(("0", "0"))) is not None
            and pod["metadata"]["uid"] != leader_uid
        ),
        timeout=180,
    )
    whole = obj["spec"]["prefill"]["replicas"] * workloads.nodes_per_instance(obj, "prefill")
    cluster.wait_for(
        "the recreated group to run whole",
        lambda: (
            len(pods := _group_pods(cluster, namespace, name, "prefill")) == whole
            and all(p["status"].get("phase") == "Running" for p in pods.values())
        ),
        timeout=90,
    )
    workloads.wait_ready(cluster, namespace, name, timeout=120)
    workloads.check_rendered_pods(cluster, namespace, obj, dss["status"]["specFingerprint"])


def test_deleting_a_service_garbage_collects_every_child(
    operator: InstalledOperator, cluster: Cluster, namespace: str
) -> None:
    obj = workloads.load(workloads.example("llama"))
    name = obj["metadata"]["name"]
    _apply(cluster, namespace, obj)

    # No Ready wait: on kind-gpu the 8B model may still be loading; what matters is that all children exist.
    def applied() -> bool:
        fingerprint = workloads.get(cluster, namespace, "dss", name).get("status", {}).get("specFingerprint")
        return bool(fingerprint) and (
            workloads.child_names(cluster, namespace, name) == workloads.expected_children(name, fingerprint)
        )

    cluster.wait_for("every child applied", applied, timeout=60)
    cluster.kubectl("delete", "dss", name, "-n", namespace, "--wait=true")
    cluster.wait_for(
        "children and pods garbage-collected",
        lambda: not workloads.children(cluster, namespace, name) and not workloads.pods(cluster, namespace, name),
        timeout=120,
    )


def test_a_mismatched_pair_is_rejected_at_apply_naming_the_field_and_the_fix(
    operator: InstalledOperator, cluster: Cluster, namespace: str
) -> None:
    obj = workloads.load(workloads.example("llama"))
    mismatched = copy.deepcopy(obj)
    mismatched["spec"]["decode"]["speculative"] = {"eagleTopk": 4, "numDraftTokens": 8}
    result = _apply(cluster, namespace, mismatched, check=False)
    assert result.returncode != 0
    assert "spec.decode.speculative" in result.stderr, result.stderr
    assert "eagleTopk" in result.stderr, result.stderr
    assert "remove" in result.stderr.lower() or "set" in result.stderr.lower(), result.stderr
    assert cluster.kubectl("get", "dss", "-n", namespace, "-o", "name").stdout.strip() == ""
    assert workloads.children(cluster, namespace, obj["metadata"]["name"]) == []


def test_an_unknown_sglang_flag_is_rejected_at_apply_by_the_webhook(
    operator: InstalledOperator, cluster: Cluster, namespace: str
) -> None:
    obj = workloads.load(workloads.example("llama"))
    obj["spec"]["decode"]["extraArgs"] = ["--no-such-sglang-flag"]
    result = _apply(cluster, namespace, obj, check=False)
    assert result.returncode != 0
    assert "admission webhook" in result.stderr, result.stderr
    assert "[pool-extra-args-known]" in result.stderr, result.stderr
    assert "spec.decode.extraArgs[0]" in result.stderr, result.stderr
    assert cluster.kubectl("get", "dss", "-n", namespace, "-o", "name").stdout.strip() == ""
    if operator.process is not None:
        metrics = operator.process.metrics()
        assert 'disaggspec_rule_rejections_total{rule="pool-extra-args-known",source="admission"}' in metrics
