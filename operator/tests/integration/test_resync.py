"""The periodic resync: with no event at all, every service is reconciled again each period, and a converged
service's resync writes nothing.

Its own module, so no other operator process (the module-scoped one of test_reconcile) runs at the same time.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from e2e.support.fixtures import Cluster
from e2e.support.operator_process import OperatorProcess
from e2e.support.workloads import child_versions, example, get, load, wait_ready

pytestmark = pytest.mark.integration


def test_periodic_resync_reconciles_without_events_and_writes_nothing(
    installed_crd: Cluster, namespace: str, tmp_path: Path
) -> None:
    cluster = installed_crd
    path = example("llama")
    name = load(path)["metadata"]["name"]
    # Watching only this test's namespace: services other tests left behind must not add passes or writes.
    process = OperatorProcess(
        cluster.kubeconfig,
        tmp_path / "operator.log",
        webhook=False,
        # Runtime health off: a first verdict landing in the measured seconds is a (legitimate) status write.
        extra_env={"DISAGGSPEC_RESYNC_SECONDS": "1", "DISAGGSPEC_HEALTH_SOURCE": "off"},
        extra_args=["--namespace", namespace],
    ).start()
    try:
        cluster.kubectl("apply", "-n", namespace, "-f", str(path))
        wait_ready(cluster, namespace, name)
        time.sleep(2)  # let the last rollout events pass
        versions = child_versions(cluster, namespace, name)
        service_version = get(cluster, namespace, "dss", name)["metadata"]["resourceVersion"]
        passes, writes = process.passes(), process.writes()
        time.sleep(4.5)
        # Nothing changed on the cluster, yet the service was reconciled about once a second...
        assert process.passes() >= passes + 3, process.log_tail()
        # ...and none of those passes wrote anything: no child, no status.
        assert process.writes() == writes
        now = child_versions(cluster, namespace, name)
        assert now == versions
        assert get(cluster, namespace, "dss", name)["metadata"]["resourceVersion"] == service_version
    finally:
        process.stop()


def _health_measured(cluster: Cluster, namespace: str, name: str) -> bool:
    conditions = get(cluster, namespace, "dss", name).get("status", {}).get("conditions") or []
    health = [c for c in conditions if c["type"] in ("SpecDecodeHealthy", "TransferHealthy")]
    return len(health) == 2 and all(c["reason"] != "NotMeasured" for c in health)


def test_a_restart_with_runtime_health_on_writes_no_status(
    installed_crd: Cluster, namespace: str, tmp_path: Path
) -> None:
    """Issue 29, item 5: a restarted (or newly elected) operator has no runtime-health verdict of its own yet; it
    keeps the conditions status holds until a verdict of its own differs, so a service whose state did not change
    gets no write, neither from the first passes nor from the first measurements."""
    cluster = installed_crd
    path = example("llama")
    name = load(path)["metadata"]["name"]
    health = {"DISAGGSPEC_HEALTH_INTERVAL_SECONDS": "1", "DISAGGSPEC_HEALTH_WINDOW_SECONDS": "4"}

    def operator(log: str) -> OperatorProcess:
        return OperatorProcess(
            cluster.kubeconfig,
            tmp_path / log,
            webhook=False,
            extra_env=health,
            extra_args=["--namespace", namespace],
        ).start()

    first = operator("first.log")
    try:
        cluster.kubectl("apply", "-n", namespace, "-f", str(path))
        wait_ready(cluster, namespace, name)
        cluster.wait_for("the first runtime-health verdicts", lambda: _health_measured(cluster, namespace, name))
        version, since = get(cluster, namespace, "dss", name)["metadata"]["resourceVersion"], time.monotonic()
        while time.monotonic() - since < 3:  # quiet: no write for 3 s
            time.sleep(0.5)
            now = get(cluster, namespace, "dss", name)["metadata"]["resourceVersion"]
            if now != version:
                version, since = now, time.monotonic()
    finally:
        first.stop()
    held = get(cluster, namespace, "dss", name)
    second = operator("second.log")
    try:
        cluster.wait_for("the restarted operator's first pass", lambda: second.passes() >= 1, timeout=60)
        # Past its first measurements and a whole window of them (4 s at 1 s), and a few resyncs' worth of passes.
        time.sleep(8)
        assert second.metric_total("disaggspec_reconcile_duration_seconds_count") >= 1
        assert second.writes() == 0, second.log_tail()
        after = get(cluster, namespace, "dss", name)
        assert after["metadata"]["resourceVersion"] == held["metadata"]["resourceVersion"]
        assert after["status"]["conditions"] == held["status"]["conditions"]
        health_gauge = second.metric("disaggspec_spec_decode_healthy", namespace=namespace, service=name)
        spec_decode = next(c for c in held["status"]["conditions"] if c["type"] == "SpecDecodeHealthy")
        assert health_gauge == {"True": 1, "False": 0, "Unknown": -1}[spec_decode["status"]]
    finally:
        second.stop()
