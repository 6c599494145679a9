"""Integration fixtures: the CRD installed on the session cluster, and the real operator running against it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.support.fixtures import Cluster
from e2e.support.operator_install import wait_webhook_registered
from e2e.support.operator_process import WEBHOOK_CONFIGURATION, OperatorProcess


@pytest.fixture(scope="module")
def operator(installed_crd: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The operator with its admission webhook, registered in the cluster; removed again afterwards."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    process = OperatorProcess(installed_crd.kubeconfig, log).start()
    try:
        wait_webhook_registered(installed_crd, process)
        yield process
    finally:
        process.stop()
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            installed_crd.kubectl("delete", kind, WEBHOOK_CONFIGURATION, "--ignore-not-found")
        print(f"operator log: {log}\n{process.log_tail(60)}")
