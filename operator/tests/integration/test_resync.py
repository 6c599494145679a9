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
