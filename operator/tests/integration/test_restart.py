"""Operator restarts: killed in the middle of its first pass, a new process converges with no duplicate objects.

Its own module, so no other operator process (the module-scoped one of test_reconcile) runs at the same time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from e2e.support.fixtures import Cluster
from e2e.support.operator_process import OperatorProcess
from e2e.support.workloads import children, example, expected_children, get, load, wait_ready

pytestmark = pytest.mark.integration


def test_operator_restart_mid_reconcile_converges_without_duplicates(
    installed_crd: Cluster, namespace: str, tmp_path: Path
) -> None:
    cluster = installed_crd
    obj = load(example("topk"))
    name = obj["metadata"]["name"]
    first = OperatorProcess(cluster.kubeconfig, tmp_path / "first.log", webhook=False).start()
    try:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj))
        # Kill it hard as soon as it has written the first child, before the pass can finish.
        try:
            cluster.wait_for(
                "the first child", lambda: bool(children(cluster, namespace, name)), timeout=30, interval=0.02
            )
        except AssertionError as error:
            raise AssertionError(f"{error}\noperator log:\n{first.log_tail()}") from None
    finally:
        first.stop(kill=True)
    second = OperatorProcess(cluster.kubeconfig, tmp_path / "second.log", webhook=False).start()
    try:
        wait_ready(cluster, namespace, name)
        owned = children(cluster, namespace, name)
        fingerprint = get(cluster, namespace, "dss", name)["status"]["specFingerprint"]
        assert sorted(f"{o['kind']}/{o['metadata']['name']}" for o in owned) == expected_children(name, fingerprint)
        assert len({(o["kind"], o["metadata"]["name"]) for o in owned}) == len(owned)
        replica_sets = get(cluster, namespace, "replicasets", "-l", f"disaggspec.io/service={name}")["items"]
        assert len(replica_sets) == 3, [r["metadata"]["name"] for r in replica_sets]
        for child in owned:
            owners = child["metadata"]["ownerReferences"]
            assert len(owners) == 1 and owners[0]["controller"] is True and owners[0]["name"] == name
    finally:
        second.stop()
