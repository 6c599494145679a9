"""The pod network on loopback and serving mode's kwok stages: derived per port base, stored in the state file (old
state files still load), and the stage list of each mode; no cluster."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster import build, controlplane
from e2e.cluster.controlplane import (
    LEGACY_POD_CIDR,
    OWN_STAGES,
    SERVING_POD_STAGE,
    Ports,
    State,
    kwok_stage_documents,
    pod_cidr_for,
)
from e2e.support.fixtures import PORTS_PER_CLUSTER, PRIVATE_PORT_BASE, TEST_PORT_BASE, needs_built

LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")


def test_pod_cidr_is_a_loopback_slash_16_per_port_base() -> None:
    assert pod_cidr_for(16379) == "127.121.0.0/16"
    # Every base a cluster of this repository may run on at the same time as another: all different networks.
    bases = [
        16379,  # make cluster-up / make demo
        *range(TEST_PORT_BASE, TEST_PORT_BASE + 50 * PORTS_PER_CLUSTER, PORTS_PER_CLUSTER),  # pytest sessions
        *range(PRIVATE_PORT_BASE, PRIVATE_PORT_BASE + 50 * PORTS_PER_CLUSTER, PORTS_PER_CLUSTER),  # private ones
        18379,
        18479,  # e2e/cluster/tests
        18679,  # e2e/serving/tests
    ]
    networks = [ipaddress.IPv4Network(pod_cidr_for(base)) for base in bases]
    assert len(set(networks)) == len(bases)
    for network in networks:
        assert network.subnet_of(LOOPBACK) and network.prefixlen == 16
        second = int(str(network.network_address).split(".")[1])
        assert 2 <= second <= 254  # never 127.0/16 or 127.1/16 (127.0.0.1, 127.0.0.53) nor the 127/8 broadcast
    for base in range(0, 70000, 7):
        assert 2 <= int(pod_cidr_for(base).split(".")[1]) <= 254


def test_state_records_pod_cidr_and_mode(tmp_path: Path) -> None:
    state = State(tmp_path, Ports.from_base(18679), serving=True)
    assert state.pod_cidr == pod_cidr_for(18679)
    state.save()
    loaded = State.load(tmp_path)
    assert loaded is not None and (loaded.pod_cidr, loaded.serving) == (pod_cidr_for(18679), True)


def test_state_file_from_before_loopback_pod_ips_still_loads(tmp_path: Path) -> None:
    old = {
        "ports": {"etcd_client": 16379, "etcd_peer": 16380, "apiserver": 16381, "controller_manager": 16382,
                  "scheduler": 16383, "kwok": 16384},
        "nodes": {"count": 4, "gpus": 8, "rdma_devices": 8, "cpu": "96", "memory": "1Ti",
                  "gpu_product": "NVIDIA-H100-80GB-HBM3"},
        "pids": {"etcd": 123},
    }  # fmt: skip
    (tmp_path / controlplane.STATE_FILE).write_text(json.dumps(old))
    loaded = State.load(tmp_path)
    assert loaded is not None
    # Its kwok was started with the old network: a restart of kwok must keep it.
    assert (loaded.pod_cidr, loaded.serving, loaded.pids) == (LEGACY_POD_CIDR, False, {"etcd": 123})


def _stage(document: str) -> Any:
    return yaml.safe_load(document)


@needs_built(build.KWOK, reason="needs kwok's stage files (make cluster-build)")
def test_stage_lists_of_each_mode() -> None:
    default = [_stage(d)["metadata"] for d in kwok_stage_documents(serving=False)]
    assert [m["name"] for m in default] == [
        "node-initialize", "node-heartbeat", "pod-ready", "pod-complete", "pod-delete"
    ]  # fmt: skip
    serving = [_stage(d) for d in kwok_stage_documents(serving=True)]
    # No pod-complete in serving mode: a Job's pod (the model cache's fill stand-in) completes when the pod runner's
    # process for it exits 0.
    assert [s["metadata"]["name"] for s in serving] == [
        "node-initialize", "node-heartbeat", "pod-running-unready"
    ]  # fmt: skip
    # Same selector as kwok's pod-ready: the stage applies to the same pods, it only leaves them unready.
    kwok_ready = _stage((build.KWOK.directory / "stage" / "pod" / "fast" / "pod-ready.yaml").read_text())
    ours = _stage((OWN_STAGES / SERVING_POD_STAGE).read_text())
    assert ours["spec"]["selector"] == kwok_ready["spec"]["selector"]
    template = ours["spec"]["next"]["statusTemplate"]
    assert "ready: false" in template and "started: true" in template and "phase: Running" in template
    assert "PodIPsWith .spec.nodeName" in template and "ContainersNotReady" in template
    assert "delete" not in ours["spec"]["next"]
