"""The local control plane's failure handling: busy ports, stale state, a component dying during start, `down`."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.cluster import build, controlplane, processes
from e2e.cluster.controlplane import ClusterError, LocalCluster, Ports
from e2e.support.fixtures import needs_built

# Far from the session cluster's and the demo cluster's ports.
PORT_BASE = 18379


@pytest.fixture
def scratch_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path / "state")
    yield cluster
    cluster.down(quiet=True)


def test_busy_port_is_named_and_nothing_starts(scratch_cluster: LocalCluster) -> None:
    ports = Ports.from_base(PORT_BASE)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", ports.apiserver))
        holder.listen()
        with pytest.raises(ClusterError, match=rf"ports already in use on 127\.0\.0\.1: apiserver={ports.apiserver}"):
            scratch_cluster.up(port_base=PORT_BASE)
    assert scratch_cluster.state() is None
    assert not scratch_cluster.directory.exists()


def test_stale_state_directory_is_refused_with_the_fix(scratch_cluster: LocalCluster) -> None:
    scratch_cluster.directory.mkdir(parents=True)
    dead_pid = 2**22 + 17  # above the default pid_max of 4194304: never a live process
    state = controlplane.State(scratch_cluster.directory, Ports.from_base(PORT_BASE), pids={"etcd": dead_pid})
    state.save()
    with pytest.raises(ClusterError, match=r"stale state directory .* \(not running: etcd\); run `make cluster-down`"):
        scratch_cluster.up(port_base=PORT_BASE)
    scratch_cluster.down(quiet=True)
    assert not scratch_cluster.directory.exists()


def test_non_cluster_directory_is_refused(scratch_cluster: LocalCluster) -> None:
    scratch_cluster.directory.mkdir(parents=True)
    (scratch_cluster.directory / "leftover").write_text("x")
    with pytest.raises(ClusterError, match="is not empty but holds no cluster"):
        scratch_cluster.up(port_base=PORT_BASE)


@needs_built(build.ETCD, build.KUBERNETES)
def test_component_dying_during_start_leaves_nothing_running(
    scratch_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = Ports.from_base(PORT_BASE)
    # Hold the API server's port after the pre-flight check, so kube-apiserver really starts and then dies on bind.
    monkeypatch.setattr(controlplane, "port_free", lambda port: True)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", ports.apiserver))
        holder.listen()
        recorded: dict[str, int] = {}
        real_save = controlplane.State.save

        def spy(self: controlplane.State) -> None:
            recorded.update(self.pids)
            real_save(self)

        monkeypatch.setattr(controlplane.State, "save", spy)
        with pytest.raises(ClusterError, match=r"kube-apiserver exited with code \d+ during start"):
            scratch_cluster.up(port_base=PORT_BASE, timeout=60)
    assert set(recorded) == {"etcd", "kube-apiserver"}
    for pid in recorded.values():
        assert not processes.alive(pid), f"pid {pid} survived a failed start"
    assert not scratch_cluster.directory.exists()


def test_down_is_idempotent_and_never_signals_foreign_pids(scratch_cluster: LocalCluster) -> None:
    scratch_cluster.directory.mkdir(parents=True)
    # Our own PID is alive but its command line does not name the state directory: `down` must leave it alone.
    state = controlplane.State(scratch_cluster.directory, Ports.from_base(PORT_BASE), pids={"etcd": os.getpid()})
    state.save()
    assert json.loads((scratch_cluster.directory / "cluster.json").read_text())["pids"] == {"etcd": os.getpid()}
    scratch_cluster.down(quiet=True)
    scratch_cluster.down(quiet=True)
    assert not scratch_cluster.directory.exists()
