"""What the fault test modules share: the `Plane` (a module's private control plane), the `operator` it runs (one
namespace, a resync every RESYNC seconds), services built from the llama example and applied with a bounded kubectl,
bounded waits, the status checks (Ready, every pool's counts equal to its live Deployment's) and the short
leader-election flags.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster.controlplane import LocalCluster
from e2e.support.fixtures import Cluster
from e2e.support.kube import POLL
from e2e.support.operator_install import wait_webhook_registered
from e2e.support.operator_process import OperatorProcess
from e2e.support.workloads import deployment, example, get, load

RESYNC = 5
"""DISAGGSPEC_RESYNC_SECONDS of every operator the fault tests start (but the chart's, in the burst test)."""
TEMPLATE = load(example("llama"))
STOP_GRACE = 5
"""Seconds the API server gets to stop before SIGKILL: with a SIGSTOPped client it can hang on that client's
connection for the full default 15 s; past 5 s the stop is a crash, which is just as good a fault."""
NODES = 16
"""GPU nodes of each module's plane: the burst's 50 services at once need 100 GPUs, 16 nodes of 8."""


@dataclass(frozen=True)
class Plane:
    """The module's private control plane: `local` to stop and start its components, `cluster` for kubectl/helm."""

    local: LocalCluster
    cluster: Cluster


@contextmanager
def operator(
    plane: Plane,
    namespace: str,
    log: Path,
    webhook: bool = False,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[OperatorProcess]:
    """The operator watching `namespace` only, resyncing every RESYNC seconds; its log tail printed afterwards."""
    process = OperatorProcess(
        plane.cluster.kubeconfig,
        log,
        webhook=webhook,
        # Runtime health off: its first verdicts would add status writes to the counts these tests compare.
        extra_env={"DISAGGSPEC_RESYNC_SECONDS": str(RESYNC), "DISAGGSPEC_HEALTH_SOURCE": "off", **(env or {})},
        extra_args=["--namespace", namespace, *(args or [])],
    ).start()
    try:
        if webhook:
            wait_webhook_registered(plane.cluster, process)
        yield process
    finally:
        process.stop()
        print(f"operator log {log}:\n{process.log_tail(40)}")


def service(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(json.dumps(TEMPLATE))
    obj["metadata"] = {"name": name}
    return obj


PER_OBJECT_SECONDS = 6
"""kubectl applies one object after the other and each create may wait out the webhook's 5 s timeout (a loaded 2-core
CI machine took over 3 s per admission for a 50-service burst): the apply's bound grows with the objects."""


def apply(cluster: Cluster, namespace: str, *objs: dict[str, Any]) -> None:
    timeout = max(120, PER_OBJECT_SECONDS * len(objs))
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(objs), timeout=timeout)


def wait(description: str, predicate: Callable[[], object], timeout: float, process: OperatorProcess) -> float:
    """Poll `predicate` (bounded); return the seconds it took, or fail with the operator's log tail."""
    started = time.monotonic()
    deadline = started + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic() - started
        time.sleep(POLL)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {description}\n{process.log_tail(60)}")


def maybe_json(cluster: Cluster, namespace: str, *what: str) -> dict[str, Any] | None:
    got = cluster.kubectl("get", *what, "-n", namespace, "-o", "json", check=False)
    if got.returncode != 0:
        return None
    out: dict[str, Any] = json.loads(got.stdout)
    return out


def ready_condition(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    dss = maybe_json(cluster, namespace, "dss", name)
    for cond in ((dss or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == "Ready":
            found: dict[str, Any] = cond
            return found
    return None


def is_ready(cluster: Cluster, namespace: str, name: str) -> bool:
    cond = ready_condition(cluster, namespace, name)
    return cond is not None and cond["status"] == "True"


def assert_status_truthful(cluster: Cluster, namespace: str, name: str) -> None:
    """Every pool's status counts are the live Deployment's (its one revision's: no rollout runs here)."""
    dss = get(cluster, namespace, "dss", name)
    assert dss["status"]["observedGeneration"] == dss["metadata"]["generation"]
    for role in ("prefill", "decode", "router"):
        live = deployment(cluster, namespace, name, role)["status"]
        reported = dss["status"][role]
        assert reported.get("readyReplicas", 0) == live.get("readyReplicas", 0), (role, reported, live)


def status_truthful(cluster: Cluster, namespace: str, name: str) -> bool:
    try:
        assert_status_truthful(cluster, namespace, name)
    except (AssertionError, LookupError):  # LookupError: a KeyError, or not exactly one Deployment of a role
        return False
    return True


LEASE_SECONDS = 6
"""The leader Lease's duration in `election_flags`."""


def election_flags(namespace: str, lease: str) -> list[str]:
    """Leader-election flags with short timings (lease LEASE_SECONDS, renew deadline 4 s, retry 1 s)."""
    return [
        "--leader-elect",
        "--leader-election-namespace",
        namespace,
        "--leader-election-id",
        lease,
        "--lease-duration-seconds",
        str(LEASE_SECONDS),
        "--renew-deadline-seconds",
        "4",
        "--retry-period-seconds",
        "1",
    ]
