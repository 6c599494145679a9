"""Multi-node pools against a cluster without, then with, the LeaderWorkerSet API: the operator says what is missing
and applies nothing, then applies the spec by itself once the API is installed (no edit, no restart).

The session cluster runs the LeaderWorkerSet controller; the test removes its CRD for a while and installs the same
file again (`e2e.cluster.build.LWS`), so it must not run beside another test that uses LeaderWorkerSets (pytest runs
the session's tests one at a time).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.cluster import build
from e2e.support.fixtures import Cluster
from e2e.support.operator_process import OperatorProcess
from e2e.support.workloads import (
    CHILD_KINDS,
    child_names,
    condition,
    example,
    get,
    load,
    provide_model_claim,
    wait_ready,
)

pytestmark = pytest.mark.integration

LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
LWS_CRD_FILE = build.LWS.directory / "crds" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
"""The CRD the local control plane installs, from the pinned LeaderWorkerSet module."""


@pytest.fixture
def without_lws(installed_crd: Cluster) -> Iterator[Cluster]:
    """The cluster with the LeaderWorkerSet CRD removed; the test installs it again (and so does teardown)."""
    if not installed_crd.local:
        pytest.skip("removes a cluster-wide CRD: only on the local control plane")
    assert LWS_CRD_FILE.is_file(), LWS_CRD_FILE
    installed_crd.kubectl("delete", "crd", LWS_CRD, "--wait=true")
    try:
        yield installed_crd
    finally:
        installed_crd.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(LWS_CRD_FILE))
        installed_crd.kubectl("wait", "--for=condition=Established", f"crd/{LWS_CRD}", "--timeout=60s")


def test_a_multi_node_service_waits_for_the_leaderworkerset_api_and_then_applies(
    operator: OperatorProcess, without_lws: Cluster, namespace: str
) -> None:
    cluster = without_lws
    obj = load(example("multinode"))
    name = obj["metadata"]["name"]
    provide_model_claim(cluster, namespace, obj)  # the example ships a model cache on a claim
    cluster.kubectl("apply", "-n", namespace, "-f", str(example("multinode")))

    def degraded_reason() -> str | None:
        status = get(cluster, namespace, "dss", name).get("status") or {}
        found = [c for c in status.get("conditions") or [] if c["type"] == "Degraded"]
        return str(found[0]["reason"]) if found else None

    cluster.wait_for("Degraded=True with reason ApiMissing", lambda: degraded_reason() == "ApiMissing", timeout=90)
    dss = get(cluster, namespace, "dss", name)
    message = condition(dss, "Degraded")["message"]
    assert "spec.prefill.nodesPerInstance is 2" in message and "LeaderWorkerSet" in message, message
    assert "v0.9.0" in message and "set nodesPerInstance to 1" in message, message
    assert condition(dss, "Ready")["reason"] == "ApiMissing"
    # Without the CRD, `kubectl get leaderworkersets` itself fails: every other kind the operator creates is empty.
    other_kinds = CHILD_KINDS.replace("leaderworkersets,", "")
    applied = get(cluster, namespace, other_kinds, "-l", f"disaggspec.io/service={name}")["items"]
    assert applied == [], "nothing of the spec may be applied without the API"
    reasons = [e["reason"] for e in get(cluster, namespace, "events")["items"]]
    assert "ApiMissing" in reasons, reasons

    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(LWS_CRD_FILE))
    # The informer lists the kind again every 30 s; the service is retried as often.
    wait_ready(cluster, namespace, name, timeout=150)
    kinds = {entry.split("/")[0] for entry in child_names(cluster, namespace, name)}
    assert "LeaderWorkerSet" in kinds, kinds
