"""Never half-apply (issue 15): a child the API server refuses leaves no child behind, and status says which and why.

Against the session's real API server, in namespaces whose ResourceQuota refuses one child:
- `services.nodeports: "0"` refuses the router Service of a spec with `router.serviceType: NodePort`, and only
  it: the dry-run before the first write sees the refusal, so not one child is ever written;
- `count/deployments.apps: "2"` refuses the third Deployment of a new service. Quota admission does judge dry-run
  requests, but each one against the current usage (found on v1.37: three Deployments each pass a dry-run against a
  quota of two), so only the real third create is refused: the pass then deletes what it created.
A LimitRange would not do here: it constrains Pods (and containers), which the Deployment controller creates later,
never the Deployment the operator writes.

The webhook is down for the reconcile tests (its configuration is left pointing at a stopped operator, failurePolicy
Ignore), so specs only the webhook would refuse reach reconcile; with the webhook up, the same spec is refused at
`kubectl apply` with the message reconcile writes. Every wait is bounded.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from disaggspec.api import parse_service
from disaggspec.render import fingerprint
from disaggspec.revision import revision_name
from e2e.support.fixtures import Cluster, fresh_namespace
from e2e.support.operator_install import wait_webhook_registered
from e2e.support.operator_process import WEBHOOK_CONFIGURATION, OperatorProcess
from e2e.support.workloads import EXAMPLES, children, example, expected_children, get, load, wait_ready

pytestmark = [pytest.mark.integration, pytest.mark.local_only]

RESYNC = 5
TEMPLATE = load(example("llama"))


def service(name: str, **router: Any) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(json.dumps(TEMPLATE))
    obj["metadata"] = {"name": name}
    obj["spec"].setdefault("router", {}).update(router)
    return obj


def every_child(obj: dict[str, Any]) -> list[str]:
    """`Kind/name` of every child of `obj`, sorted: its Deployments carry the revision of its fingerprint."""
    return expected_children(obj["metadata"]["name"], fingerprint(parse_service(obj)))


def apply(cluster: Cluster, namespace: str, *objs: dict[str, Any], check: bool = True) -> Any:
    return cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(objs), check=check)


def quota(cluster: Cluster, namespace: str, hard: dict[str, str]) -> None:
    obj = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "children"}, "spec": {"hard": hard}}
    apply(cluster, namespace, obj)


def conditions(cluster: Cluster, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    got = cluster.kubectl("get", "dss", name, "-n", namespace, "-o", "json", check=False)
    if got.returncode != 0:
        return {}
    status = json.loads(got.stdout).get("status") or {}
    return {cond["type"]: cond for cond in status.get("conditions") or []}


def reason(cluster: Cluster, namespace: str, name: str, type_: str) -> str | None:
    return conditions(cluster, namespace, name).get(type_, {}).get("reason")


def events(cluster: Cluster, namespace: str, name: str, why: str) -> list[str]:
    listed = get(cluster, namespace, "events", "--field-selector", f"involvedObject.name={name},reason={why}")
    return [str(item["message"]) for item in listed["items"]]


def wait(description: str, predicate: Callable[[], object], timeout: float, process: OperatorProcess) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {description}\n{process.log_tail(60)}")


@pytest.fixture(scope="module")
def namespaces(installed_crd: Cluster) -> Iterator[dict[str, str]]:
    """One namespace per scenario (the reconciling operator watches exactly these)."""
    with (
        fresh_namespace(installed_crd, "nohalf-nodeport") as nodeport,
        fresh_namespace(installed_crd, "nohalf-deploys") as deploys,
        fresh_namespace(installed_crd, "nohalf-webhook") as webhook,
    ):
        quota(installed_crd, nodeport, {"services.nodeports": "0"})
        quota(installed_crd, deploys, {"count/deployments.apps": "2"})
        quota(installed_crd, webhook, {"services.nodeports": "0"})
        yield {"nodeport": nodeport, "deploys": deploys, "webhook": webhook}


def _operator(cluster: Cluster, log: Path, webhook: bool, watch: list[str]) -> OperatorProcess:
    args = [arg for namespace in watch for arg in ("--namespace", namespace)]
    env = {"DISAGGSPEC_RESYNC_SECONDS": str(RESYNC)}
    return OperatorProcess(cluster.kubeconfig, log, webhook=webhook, extra_env=env, extra_args=args).start()


@pytest.fixture(scope="module")
def webhook_down(
    installed_crd: Cluster, namespaces: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator reconciling the scenario namespaces without serving its webhook, while the webhook configuration
    is registered but points at a stopped operator (so writes are admitted after CEL only, as during an outage)."""
    logs = tmp_path_factory.mktemp("no-half-apply")
    stopped = _operator(installed_crd, logs / "stopped-webhook.log", webhook=True, watch=[namespaces["webhook"]])
    wait_webhook_registered(installed_crd, stopped)
    stopped.stop()
    process = _operator(installed_crd, logs / "operator.log", webhook=False, watch=list(namespaces.values()))
    try:
        yield process
    finally:
        process.stop()
        installed_crd.kubectl("delete", "validatingwebhookconfiguration", WEBHOOK_CONFIGURATION, "--ignore-not-found")
        print(f"operator log: {process.log_path}\n{process.log_tail(40)}")


def test_webhook_down_no_child_is_ever_written_for_a_refused_spec(
    installed_crd: Cluster, namespaces: dict[str, str], webhook_down: OperatorProcess
) -> None:
    cluster, ns, process = installed_crd, namespaces["nodeport"], webhook_down
    unknown_flag = service("unknown-flag")
    unknown_flag["spec"]["decode"]["extraArgs"] = ["--no-such-sglang-flag"]
    refused = service("nodeport", serviceType="NodePort")
    apply(cluster, ns, unknown_flag, refused)  # admitted: the webhook does not answer

    wait(
        "both services to report why they get no children",
        lambda: (
            reason(cluster, ns, "unknown-flag", "SpecConfigConsistent") == "RuleViolated"
            and reason(cluster, ns, "nodeport", "Degraded") == "ChildRefused"
        ),
        30,
        process,
    )
    time.sleep(2 * RESYNC)  # resyncs and backoff retries: still nothing
    # Dry-runs are not writes: this counter counts every apply and prune the operator ever sent.
    assert process.child_writes() == 0, process.log_tail()
    assert children(cluster, ns, "unknown-flag") == [] and children(cluster, ns, "nodeport") == []

    status = conditions(cluster, ns, "nodeport")
    message = status["Degraded"]["message"]
    assert message.startswith("the API server refuses Service nodeport-router: exceeded quota: children"), message
    assert "services.nodeports" in message and message.endswith("nothing was applied")
    assert "HTTP" not in message and "PATCH" not in message
    assert (status["Ready"]["reason"], status["Progressing"]["reason"]) == ("ChildRefused", "ChildRefused")
    assert events(cluster, ns, "nodeport", "ChildRefused") == [message]
    assert "pool-extra-args-known" in conditions(cluster, ns, "unknown-flag")["SpecConfigConsistent"]["message"]

    # The namespace allows it now (the router Service has two ports: two node ports): the backoff retry converges.
    quota(cluster, ns, {"services.nodeports": "2"})
    wait(
        "every child once the quota allows them",
        lambda: (
            sorted(f"{o['kind']}/{o['metadata']['name']}" for o in children(cluster, ns, "nodeport"))
            == every_child(refused)
        ),
        75,
        process,
    )
    wait_ready(cluster, ns, "nodeport", timeout=60)
    assert reason(cluster, ns, "nodeport", "Degraded") == "AsExpected"
    assert process.alive()


def test_a_quota_that_fits_two_of_three_deployments_leaves_no_child(
    installed_crd: Cluster, namespaces: dict[str, str], webhook_down: OperatorProcess
) -> None:
    cluster, ns, process = installed_crd, namespaces["deploys"], webhook_down
    three = service("three")
    apply(cluster, ns, three)
    wait("Degraded=ChildRefused", lambda: reason(cluster, ns, "three", "Degraded") == "ChildRefused", 30, process)
    message = conditions(cluster, ns, "three")["Degraded"]["message"]
    revision = revision_name(fingerprint(parse_service(three)))
    assert re.match(
        rf"the API server refuses Deployment three-(prefill|decode|router)-{revision}: exceeded quota: children",
        message,
    ), message
    assert message.endswith("so nothing is half-applied"), message
    # The children the pass created were deleted again (deletion is asynchronous: wait for them to go).
    wait("no child left", lambda: children(cluster, ns, "three") == [], 30, process)
    assert events(cluster, ns, "three", "ChildRefused")

    quota(cluster, ns, {"count/deployments.apps": "3"})
    wait(
        "every child once the quota allows three Deployments",
        lambda: (
            sorted(f"{o['kind']}/{o['metadata']['name']}" for o in children(cluster, ns, "three")) == every_child(three)
        ),
        75,
        process,
    )
    wait_ready(cluster, ns, "three", timeout=60)


def test_webhook_refuses_a_spec_whose_child_the_api_server_refuses(
    installed_crd: Cluster, namespaces: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    cluster, ns = installed_crd, namespaces["webhook"]
    log = tmp_path_factory.mktemp("no-half-apply-webhook") / "operator.log"
    # Serves the webhook; reconciles a namespace of its own (no other operator may reconcile the same services).
    with fresh_namespace(cluster, "nohalf-idle") as idle:
        process = _operator(cluster, log, webhook=True, watch=[idle])
        try:
            wait_webhook_registered(cluster, process)
            got = apply(cluster, ns, service("refused", serviceType="NodePort"), check=False)
            assert got.returncode != 0
            assert "the API server refuses Service refused-router: exceeded quota: children" in got.stderr, got.stderr
            assert cluster.kubectl("get", "dss", "refused", "-n", ns, check=False).returncode != 0
            assert process.metric("disaggspec_rule_rejections_total", rule="child-refused") == 1

            # What the children's dry-run adds to an admission: every example, server-side dry-run (kubectl's own
            # round trip included), five times each.
            for path in EXAMPLES:
                obj = load(path)
                if obj["spec"].get("model", {}).get("volume", {}).get("persistentVolumeClaim"):
                    continue  # needs its claim; the others cover the same children
                took = []
                for _ in range(5):
                    started = time.monotonic()
                    result = cluster.kubectl(
                        "apply", "--dry-run=server", "-n", ns, "-f", "-", input=yaml.safe_dump(obj), check=False
                    )
                    took.append(time.monotonic() - started)
                    assert result.returncode == 0, result.stderr
                print(f"admission of {path.name} with the children's dry-run: median {statistics.median(took):.3f}s")
        finally:
            process.stop()
            cluster.kubectl("delete", "validatingwebhookconfiguration", WEBHOOK_CONFIGURATION, "--ignore-not-found")
            print(f"operator log: {log}\n{process.log_tail(30)}")
