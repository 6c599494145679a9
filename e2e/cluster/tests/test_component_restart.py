"""Fault injection on the local control plane: one component stopped and started again keeps its flags, ports and
data (objects written before a restart of the API server are still there afterwards), through the API and the CLI."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.cluster import build, processes
from e2e.cluster.controlplane import ClusterError, LocalCluster, NodeShape
from e2e.support.fixtures import needs_built

# Far from the session cluster's, the demo's and test_cluster_lifecycle's ports.
PORT_BASE = 18479
REPO = Path(__file__).resolve().parents[3]

pytestmark = [
    pytest.mark.integration,
    needs_built(build.ETCD, build.KUBERNETES, build.KWOK),
]


@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("restart") / "state")
    cluster.up(port_base=PORT_BASE, nodes=NodeShape(count=1), timeout=120)
    try:
        yield cluster
    finally:
        cluster.down(quiet=True)


def test_restart_apiserver_keeps_objects_flags_and_port(small_cluster: LocalCluster) -> None:
    cluster = small_cluster
    cluster.kubectl("create", "namespace", "kept")
    cluster.kubectl("create", "configmap", "kept", "-n", "kept", "--from-literal=answer=42")
    before = cluster.require_state()
    old_pid = before.pids["kube-apiserver"]
    old_argv = processes.cmdline(old_pid)

    cluster.stop_component("apiserver")
    assert not processes.alive(old_pid)
    assert cluster.running()["kube-apiserver"] is False
    assert cluster.kubectl("get", "namespaces", check=False).returncode != 0
    with pytest.raises(ClusterError, match="unknown component"):
        cluster.start_component("api-server")

    started = time.monotonic()
    cluster.start_component("apiserver")
    assert time.monotonic() - started < 90
    after = cluster.require_state()
    new_pid = after.pids["kube-apiserver"]
    assert new_pid != old_pid
    assert processes.cmdline(new_pid)[1:] == old_argv[1:]
    assert after.ports == before.ports
    assert cluster.is_up()  # healthy on return, every other component untouched
    got = cluster.kubectl("get", "configmap", "kept", "-n", "kept", "-o", "jsonpath={.data.answer}")
    assert got.stdout == "42"
    with pytest.raises(ClusterError, match="already running"):
        cluster.start_component("apiserver")


def test_cli_restart_of_kwok_and_etcd(small_cluster: LocalCluster) -> None:
    cluster = small_cluster
    for component in ("kwok", "etcd"):
        old_pid = cluster.require_state().pids[component]
        result = subprocess.run(
            [sys.executable, "-m", "e2e.cluster", "--dir", str(cluster.directory), "restart", component],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr + result.stdout
        assert f"{component} started" in result.stdout
        assert cluster.require_state().pids[component] != old_pid
    # The API server reconnects to the restarted etcd and still serves what was stored before.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not cluster.is_up():
        time.sleep(0.5)
    assert cluster.is_up()
    assert cluster.kubectl("get", "nodes", "--no-headers").stdout.count("gpu-node-") == 1
