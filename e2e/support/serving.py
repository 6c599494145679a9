"""The serving simulation from a test's (or the demo's) side: the pod runner around a block, services that serve.

`pod_runner(cluster_dir, kubeconfig)` starts the kubelet double of serving mode (`python -m e2e.serving start`) and
stops it when the block ends, then proves that none of the processes it started is left. `deploy` applies an example
(model claim and Hugging Face token Secret included) and waits until the service is Ready, which in serving mode
means its router pod passed its readiness probe: a healthy prefill and a healthy decode to route to. `router_url`
is the router pod's own loopback address (EndpointSlices refuse loopback IPs, so Services have no endpoints here).
The whole serving plane of a suite (cluster, operator, runner) is `planes.serving_plane`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster.processes import alive
from e2e.cluster.proctable import ProcessTable
from e2e.cluster.servingdir import TABLE, serving_dir
from e2e.support.kube import Cluster
from e2e.support.workloads import get, provide_model_claim, wait_ready

REPO = Path(__file__).resolve().parents[2]
DEFAULT_ROUTER_PORT = 30000


class LeftoverProcesses(AssertionError):
    """The pod runner stopped but a process it started is still alive."""


def _runner(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "operator")])}
    return subprocess.run(
        [sys.executable, "-m", "e2e.serving", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def tracked_pids(state_dir: Path) -> list[int]:
    """The pids the runner records as started and not yet reaped."""
    return [record.pid for record in ProcessTable(serving_dir(state_dir) / TABLE).load()]


@contextmanager
def pod_runner(state_dir: Path, kubeconfig: Path) -> Iterator[Path]:
    """The pod runner for the cluster whose state is in `state_dir`; yields its log directory."""
    started = _runner("start", "--kubeconfig", str(kubeconfig), "--state-dir", str(state_dir))
    if started.returncode != 0:
        raise RuntimeError(f"pod runner did not start:\n{started.stdout}\n{started.stderr}")
    seen: set[int] = set()
    try:
        yield serving_dir(state_dir) / "logs"
    finally:
        seen.update(tracked_pids(state_dir))
        stopped = _runner("stop", "--state-dir", str(state_dir), timeout=120)
        left = [pid for pid in sorted(seen) if alive(pid)]
        if stopped.returncode != 0 or left:
            raise LeftoverProcesses(
                f"pod runner stop rc={stopped.returncode}, still alive: {left}\n{stopped.stdout}\n{stopped.stderr}"
            )


def served_model(obj: dict[str, Any]) -> str:
    """The model name requests must carry: servedModelName, else the model path (SGLang's own default)."""
    model = obj["spec"]["model"]
    return str(model.get("servedModelName") or model["path"])


def apply_service(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Apply service `obj` in `namespace` with what its example needs (model claim, Hugging Face token Secret);
    return it as applied, without waiting."""
    obj = json.loads(json.dumps(obj))
    obj["metadata"]["namespace"] = namespace
    provide_model_claim(cluster, namespace, obj)
    secret = obj["spec"]["model"].get("hfTokenSecretRef")
    if secret:
        token = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret["name"], "namespace": namespace},
            "stringData": {secret.get("key", "token"): "hf_emulated_token"},
        }
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(token))
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
    return obj


def deploy(cluster: Cluster, namespace: str, obj: dict[str, Any], timeout: int = 120) -> dict[str, Any]:
    """`apply_service`, then wait until the service is Ready."""
    obj = apply_service(cluster, namespace, obj)
    wait_ready(cluster, namespace, obj["metadata"]["name"], timeout=timeout)
    return obj


def ready_pods(cluster: Cluster, namespace: str, name: str, role: str) -> list[dict[str, Any]]:
    """Pods of service `name` in `role` that are Ready and not terminating."""
    found: list[dict[str, Any]] = get(
        cluster, namespace, "pods", "-l", f"disaggspec.io/service={name},disaggspec.io/role={role}"
    )["items"]
    return [
        p
        for p in found
        if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions") or [])
    ]


def router_url(cluster: Cluster, namespace: str, obj: dict[str, Any], timeout: float = 60) -> str:
    """http://<router pod IP>:<port> of a Ready router pod of `obj`."""
    name = obj["metadata"]["name"]
    port = obj["spec"].get("router", {}).get("port", DEFAULT_ROUTER_PORT)
    deadline = time.monotonic() + timeout
    while True:
        pods = ready_pods(cluster, namespace, name, "router")
        if pods:
            return f"http://{pods[0]['status']['podIP']}:{port}"
        if time.monotonic() > deadline:
            raise AssertionError(f"no Ready router pod of {namespace}/{name} after {timeout}s")
        time.sleep(0.5)
