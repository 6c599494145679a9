"""Integration fixtures: the CRD installed on the session cluster, and the real operator running against it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from e2e.support.fixtures import Cluster
from e2e.support.operator_install import wait_webhook_registered
from e2e.support.operator_process import WEBHOOK_CONFIGURATION, OperatorProcess


@contextmanager
def running_operator(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory, env: dict[str, str] | None = None
) -> Iterator[OperatorProcess]:
    """The operator (with `env`) and its admission webhook, registered in the cluster; removed again afterwards."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    process = OperatorProcess(cluster.kubeconfig, log, extra_env=env).start()
    try:
        wait_webhook_registered(cluster, process)
        yield process
    finally:
        process.stop()
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            cluster.kubectl("delete", kind, WEBHOOK_CONFIGURATION, "--ignore-not-found")
        print(f"operator log: {log}\n{process.log_tail(60)}")


@pytest.fixture(scope="module")
def operator(installed_crd: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The operator with its admission webhook, registered in the cluster; removed again afterwards."""
    with running_operator(installed_crd, tmp_path_factory) as process:
        yield process
