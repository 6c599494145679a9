"""The Helm chart on a real API server: install, the operator running as the chart's ServiceAccount, upgrade, uninstall.

The operator process runs locally (the cluster's kwok nodes run no containers) with a kubeconfig holding a token of
the chart's ServiceAccount and nothing else, so every request it makes is authorized by the chart's RBAC alone:
reconciling an example to Ready, with the webhook registered, proves that RBAC is sufficient.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.support import workloads
from e2e.support.fixtures import Cluster, fresh_namespace
from e2e.support.operator_install import (
    CHART,
    WEBHOOK_KINDS,
    clear_foreign_webhook_configurations,
    fullname,
    service_account_kubeconfig,
    wait_webhook_registered,
)
from e2e.support.operator_process import WEBHOOK_CONFIGURATION, OperatorProcess
from e2e.support.workloads import example

pytestmark = pytest.mark.integration

EXAMPLE = example("llama")
RELEASE = "dss-chart"
FULLNAME = fullname(RELEASE)
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}


def _json(cluster: Cluster, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(cluster.kubectl(*args, "-o", "json").stdout)
    return out


def _manifest(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    text = cluster.helm("get", "manifest", RELEASE, "-n", namespace).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _exists(cluster: Cluster, kind: str, name: str, namespace: str | None) -> bool:
    args = ["get", kind, name] + (["-n", namespace] if namespace else [])
    return cluster.kubectl(*args, check=False).returncode == 0


@pytest.fixture
def workload_namespace(cluster: Cluster) -> Iterator[str]:
    """A second namespace, for the workloads, beside `namespace` (which holds the release)."""
    with fresh_namespace(cluster, "chart-workload") as name:
        yield name


def test_chart_installs_runs_the_operator_least_privilege_upgrades_and_uninstalls(
    installed_crd: Cluster, namespace: str, workload_namespace: str, tmp_path: Path
) -> None:
    cluster = installed_crd
    clear_foreign_webhook_configurations(cluster)
    cluster.helm("install", RELEASE, str(CHART), "-n", namespace, "--wait", "--timeout=60s")
    try:
        # 1. Every object the chart renders exists.
        installed = _manifest(cluster, namespace)
        assert {o["kind"] for o in installed} >= {"ServiceAccount", "ClusterRole", "Deployment", "Service"} | (
            CLUSTER_SCOPED
        )
        for obj in installed:
            scope = None if obj["kind"] in CLUSTER_SCOPED else namespace
            assert _exists(cluster, obj["kind"], obj["metadata"]["name"], scope), obj["kind"]

        # 2. The operator as the chart's ServiceAccount: only the chart's RBAC authorizes its requests.
        kubeconfig = service_account_kubeconfig(cluster, namespace, FULLNAME, tmp_path / "sa.kubeconfig")
        as_operator = Cluster(kubeconfig, local=cluster.local)
        assert as_operator.kubectl("auth", "can-i", "patch", "deployments", "-A").stdout.strip() == "yes"
        for forbidden in (["get", "secrets"], ["get", "configmaps"], ["update", "deployments"], ["create", "pods"]):
            assert as_operator.kubectl("auth", "can-i", *forbidden, "-A", check=False).stdout.strip() == "no"
        log = tmp_path / "operator.log"
        with OperatorProcess(kubeconfig, log) as operator:
            wait_webhook_registered(
                cluster,
                operator,
                "the operator's webhook registration (kopf's create and patch, as the ServiceAccount)",
            )
            cluster.kubectl("apply", "-n", workload_namespace, "-f", str(EXAMPLE))
            cluster.kubectl(
                "wait", "-n", workload_namespace, "--for=condition=Ready", "dss/llama-eagle3", "--timeout=60s"
            )
            children = _json(cluster, "get", "deployments,services,roles,rolebindings", "-n", workload_namespace)
            assert len(children["items"]) == 8
        text = log.read_text(errors="replace")
        assert "Forbidden" not in text and " 403 " not in text and "HTTP 403" not in text, operator.log_tail(80)

        # 3. Upgrade with changed values: args, RBAC and webhook objects follow.
        cluster.helm(
            "upgrade",
            RELEASE,
            str(CHART),
            "-n",
            namespace,
            "--wait",
            "--timeout=60s",
            "--set",
            "logLevel=WARNING",
            "--set",
            "webhook.enabled=false",
            "--set",
            f"watchNamespaces={{{workload_namespace}}}",
        )
        deployment = _json(cluster, "get", "deployment", FULLNAME, "-n", namespace)
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--log-level=WARNING" in args and "--webhook=off" in args
        assert f"--namespace={workload_namespace}" in args
        rules = _json(cluster, "get", "clusterrole", FULLNAME)["rules"]
        assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]} in rules
        assert not any("admissionregistration.k8s.io" in r["apiGroups"] for r in rules)
        for kind in WEBHOOK_KINDS:
            assert not _exists(cluster, kind, WEBHOOK_CONFIGURATION, None)
        assert not _exists(cluster, "service", f"{FULLNAME}-webhook", namespace)

        # 4. Namespaced: workload rights only inside the watched namespace, and they are enough to reconcile there.
        assert not _exists(cluster, "clusterrolebinding", f"{FULLNAME}-workloads", None)
        assert _exists(cluster, "rolebinding", f"{FULLNAME}-workloads", workload_namespace)
        can = as_operator.kubectl
        assert can("auth", "can-i", "patch", "deployments", "-n", workload_namespace).stdout.strip() == "yes"
        for elsewhere in (["-n", namespace], ["-A"]):
            for verb, resource in (("patch", "deployments"), ("list", "disaggspecservices"), ("list", "pods")):
                answer = can("auth", "can-i", verb, resource, *elsewhere, check=False).stdout.strip()
                assert answer == "no", (verb, resource, elsewhere)
        log = tmp_path / "operator-namespaced.log"
        with OperatorProcess(kubeconfig, log, webhook=False, extra_args=["--namespace", workload_namespace]):
            found = workloads.deployment(cluster, workload_namespace, "llama-eagle3", "router")["metadata"]
            router, uid = found["name"], found["uid"]
            cluster.kubectl("delete", "deployment", router, "-n", workload_namespace, "--wait=true")

            def recreated() -> bool:
                live = cluster.kubectl("get", "deployment", router, "-n", workload_namespace, "-o", "json", check=False)
                return live.returncode == 0 and json.loads(live.stdout)["metadata"]["uid"] != uid

            cluster.wait_for("the router Deployment recreated by the namespaced operator", recreated, timeout=30)
            cluster.kubectl(
                "wait", "-n", workload_namespace, "--for=condition=Ready", "dss/llama-eagle3", "--timeout=60s"
            )
        text = log.read_text(errors="replace")
        assert "Forbidden" not in text and " 403 " not in text and "HTTP 403" not in text, text[-4000:]
    finally:
        # 5. Uninstall leaves nothing but the CRD (and what users created).
        cluster.helm("uninstall", RELEASE, "-n", namespace, "--wait", "--timeout=60s", check=False)
    for kind, name, scope in [
        ("clusterrole", FULLNAME, None),
        ("clusterrolebinding", FULLNAME, None),
        ("clusterrole", f"{FULLNAME}-workloads", None),
        ("clusterrolebinding", f"{FULLNAME}-workloads", None),
        ("rolebinding", f"{FULLNAME}-workloads", workload_namespace),
        *[(kind, WEBHOOK_CONFIGURATION, None) for kind in WEBHOOK_KINDS],
        ("serviceaccount", FULLNAME, namespace),
        ("deployment", FULLNAME, namespace),
        ("service", f"{FULLNAME}-metrics", namespace),
        ("service", f"{FULLNAME}-webhook", namespace),
    ]:
        assert not _exists(cluster, kind, name, scope), f"{kind}/{name} left behind"
    leftovers = cluster.kubectl(
        "get",
        "all,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings",
        "-A",
        "-l",
        f"app.kubernetes.io/instance={RELEASE}",
        "-o",
        "name",
    ).stdout.split()
    assert leftovers == []
    assert _exists(cluster, "crd", "disaggspecservices.disaggspec.io", None)
    assert cluster.helm("list", "-n", namespace, "-q").stdout.strip() == ""
