"""The pod runner on a real local control plane in serving mode (kwok nodes, pods as local processes).

A private cluster of its own (port base 18679, pod IPs in 127.98.0.0/16) with the runner started as `start` does it,
using the test launcher (`launcher.py`: containers whose command is `fakeserver` run `fakeserver.py`). Proven here:
loopback pod IPs that a process binds; readiness from an httpGet probe (not Ready until the process listens); the
resolved env; a crashing container reported and restarted with back-off and a Warning Event; a liveness failure
restarts; deletion sends SIGTERM, waits at most the grace period, SIGKILLs and then removes the pod; processes left
by a crashed runner are stopped by the next one; `stop` leaves no process behind.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster import build
from e2e.cluster.controlplane import LocalCluster, NodeShape, State, pod_cidr_for
from e2e.cluster.processes import alive
from e2e.cluster.proctable import ProcessTable
from e2e.cluster.servingdir import TABLE, runner_pid, serving_dir, stop_runner
from e2e.serving.daemon import start_runner
from e2e.support.fixtures import fresh_namespace, needs_built
from e2e.support.kube import Cluster

PORT_BASE = 18679
"""Far from the session clusters (17379+), the private ones (17879+) and e2e/cluster/tests (18379, 18479)."""
LAUNCHER = "e2e.serving.tests.launcher:fake_server_launcher"
FAST = ["--backoff-initial=0.5", "--backoff-max=2", "--shutdown-grace=3"]

pytestmark = [
    pytest.mark.integration,
    needs_built(build.ETCD, build.KUBERNETES, build.KWOK),
]


class Env:
    """The serving cluster, its runner and the directory the fake servers write their markers to."""

    def __init__(self, local: LocalCluster, state: State, markers: Path) -> None:
        self.local, self.state, self.markers = local, state, markers
        self.kube = Cluster(state.kubeconfig, local=True)

    def start_runner(self) -> int:
        return start_runner(self.state.directory, launcher=LAUNCHER, extra=FAST)

    def records(self) -> list[dict[str, Any]]:
        path = serving_dir(self.state.directory) / TABLE
        return [asdict(r) for r in ProcessTable(path).load()]

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        got = self.kube.kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
        return json.loads(got.stdout) if got.returncode == 0 else None

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        got = self.kube.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
        items: list[dict[str, Any]] = json.loads(got.stdout)["items"]
        return items

    def events(self, namespace: str, pod: str) -> list[dict[str, Any]]:
        got = self.kube.kubectl(
            "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={pod}", "-o", "json"
        )
        items: list[dict[str, Any]] = json.loads(got.stdout)["items"]
        return items

    def marks(self, pod: str) -> list[str]:
        path = self.markers / f"{pod}.events"
        return path.read_text().splitlines() if path.exists() else []

    def apply(self, *objects: dict[str, Any]) -> None:
        self.kube.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("serving")
    markers = root / "markers"
    markers.mkdir()
    local = LocalCluster(root / "state")
    state = local.up(port_base=PORT_BASE, nodes=NodeShape(count=2), timeout=120, serving=True)
    try:
        handle = Env(local, state, markers)
        handle.start_runner()
        yield handle
    finally:
        local.down(quiet=True)  # stops the runner and its processes first


@pytest.fixture
def namespace(env: Env) -> Iterator[str]:
    with fresh_namespace(env.kube, "srv") as name:
        yield name


def container(env: Env, command: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": "server",
        "image": "example.com/fake:1",
        "command": command,
        "ports": [{"name": "http", "containerPort": 8080}],
        "env": [
            {"name": "MARKER_DIR", "value": str(env.markers)},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        **extra,
    }


def pod(name: str, namespace: str, spec_container: dict[str, Any], grace: int = 30) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"type": "kwok"},
            "terminationGracePeriodSeconds": grace,
            "containers": [spec_container],
        },
    }


def condition(pod_object: dict[str, Any] | None, kind: str) -> str | None:
    for item in ((pod_object or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return str(item.get("status"))
    return None


def recorded_pid(env: Env, namespace: str, name: str) -> int:
    pids = [r["pid"] for r in env.records() if r["namespace"] == namespace and r["pod"] == name]
    assert len(pids) == 1, env.records()
    return int(pids[0])


def wait_ready(env: Env, namespace: str, name: str, timeout: float = 30) -> dict[str, Any]:
    env.kube.wait_for(
        f"{namespace}/{name} Ready", lambda: condition(env.pod(namespace, name), "Ready") == "True", timeout
    )
    found = env.pod(namespace, name)
    assert found is not None
    return found


def test_deployment_pods_get_loopback_ips_and_become_ready_once_serving(env: Env, namespace: str) -> None:
    network = ipaddress.ip_network(pod_cidr_for(PORT_BASE))
    assert env.state.pod_cidr == str(network)
    server = container(
        env,
        ["fakeserver", "http", "--port", "8080", "--delay", "4"],
        readinessProbe={"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
    )
    server["env"] += [
        {"name": "FROM_CONFIGMAP", "valueFrom": {"configMapKeyRef": {"name": "greeting", "key": "text"}}},
        {"name": "GREETING", "value": "hello $(POD_NAME)"},
    ]
    env.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "greeting", "namespace": namespace},
            "data": {"text": "from a configmap"},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"nodeSelector": {"type": "kwok"}, "containers": [server]},
                },
            },
        },
    )

    def running_with_ip() -> list[dict[str, Any]]:
        pods = env.pods(namespace, "app=web")
        ok = len(pods) == 2 and all(p.get("status", {}).get("podIP") for p in pods)
        return pods if ok else []

    env.kube.wait_for("2 pods with an IP", running_with_ip, timeout=30)
    pods = running_with_ip()
    ips = [ipaddress.ip_address(p["status"]["podIP"]) for p in pods]
    assert all(ip in network for ip in ips) and len(set(ips)) == 2
    # The process waits 4 s before it listens: until then the readiness probe fails and the pod is not Ready.
    assert all(condition(p, "Ready") == "False" for p in pods)
    assert all(p["status"]["phase"] == "Running" for p in pods)

    for item in pods:
        ready = wait_ready(env, namespace, item["metadata"]["name"])
        status = ready["status"]["containerStatuses"][0]
        assert status["ready"] is True and status["started"] is True and status["restartCount"] == 0
        pid = recorded_pid(env, namespace, item["metadata"]["name"])
        assert status["containerID"] == f"process://{pid}" and alive(pid)
        # The process binds the pod IP itself and answers there, with the env the runner resolved.
        url = f"http://{ready['status']['podIP']}:8080/"
        with urllib.request.urlopen(url, timeout=5) as response:
            answer = json.loads(response.read())
        name = item["metadata"]["name"]
        assert answer == {
            "POD_NAME": name,
            "POD_IP": ready["status"]["podIP"],
            "GREETING": f"hello {name}",
            "FROM_CONFIGMAP": "from a configmap",
        }
        log = serving_dir(env.state.directory) / "logs" / f"{namespace}_{name}_server.log"
        assert "listening on" in log.read_text()
    env.kube.wait_for(
        "the Deployment to count 2 available replicas",
        lambda: (
            env.kube.kubectl(
                "get", "deployment", "web", "-n", namespace, "-o", "jsonpath={.status.availableReplicas}"
            ).stdout
            == "2"
        ),
    )


def test_crashing_container_is_reported_and_restarted_with_backoff(env: Env, namespace: str) -> None:
    env.apply(pod("crasher", namespace, container(env, ["fakeserver", "crash", "--code", "3", "--after", "0.2"])))

    backing_off: list[dict[str, Any]] = []

    def restarted_twice_and_backing_off() -> bool:
        # Between restarts the container runs for 0.2 s, and a running container without a readiness probe is ready:
        # a snapshot taken then (a loaded machine makes that likely) shows ready, so wait for the backoff itself, and
        # check that very snapshot: the backoff is 0.5-2 s here, so a second read may already see the next start.
        found = env.pod(namespace, "crasher")
        statuses = ((found or {}).get("status") or {}).get("containerStatuses") or [{}]
        if int(statuses[0].get("restartCount", 0)) >= 2 and "running" not in statuses[0].get("state", {}):
            backing_off.append(found or {})
            return True
        return False

    env.kube.wait_for("restartCount >= 2, backing off", restarted_twice_and_backing_off, timeout=30)
    found = backing_off[-1]
    status = found["status"]["containerStatuses"][0]
    last = status["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (3, "Error")
    assert status["ready"] is False and condition(found, "Ready") == "False"
    assert set(status["state"]) <= {"waiting", "terminated"}
    events = env.events(namespace, "crasher")
    backoff = [e for e in events if e["reason"] == "BackOff"]
    assert backoff and backoff[0]["type"] == "Warning"
    assert "crasher" in backoff[0]["message"] and "exit code 3" in backoff[0]["message"]
    assert backoff[0]["involvedObject"]["kind"] == "Pod" and backoff[0]["involvedObject"]["name"] == "crasher"
    starts = [m for m in env.marks("crasher") if m.startswith("start")]
    assert len(starts) >= 2  # restartCount counts a restart from the moment it is decided (then backing off)


def test_liveness_failure_restarts_the_process(env: Env, namespace: str) -> None:
    probe = {"httpGet": {"path": "/missing", "port": 8080}, "periodSeconds": 1, "failureThreshold": 2}
    spec = container(env, ["fakeserver", "http", "--port", "8080"], livenessProbe=probe)
    env.apply(pod("unwell", namespace, spec, grace=2))

    def restarted() -> bool:
        found = env.pod(namespace, "unwell")
        return (
            int((((found or {}).get("status") or {}).get("containerStatuses") or [{}])[0].get("restartCount", 0)) >= 1
        )

    env.kube.wait_for("a restart after liveness failures", restarted, timeout=30)
    marks = env.marks("unwell")
    assert marks[0].startswith("start") and any(m.startswith("sigterm") for m in marks)
    reasons = {(e["type"], e["reason"]) for e in env.events(namespace, "unwell")}
    assert ("Warning", "Unhealthy") in reasons and ("Normal", "Killing") in reasons


def test_deletion_sends_sigterm_then_removes_the_pod(env: Env, namespace: str) -> None:
    env.apply(pod("graceful", namespace, container(env, ["fakeserver", "http", "--port", "8080"]), grace=20))
    wait_ready(env, namespace, "graceful")
    pid = recorded_pid(env, namespace, "graceful")
    started = time.monotonic()
    env.kube.kubectl("delete", "pod", "graceful", "-n", namespace, "--wait=false")
    env.kube.wait_for("the pod to be gone", lambda: env.pod(namespace, "graceful") is None, timeout=15)
    # Gone as soon as its process exited on SIGTERM, long before the 20 s grace period.
    assert time.monotonic() - started < 10
    assert f"sigterm {pid}" in env.marks("graceful")
    assert not alive(pid)
    assert all(r["pod"] != "graceful" for r in env.records())


def test_process_ignoring_sigterm_is_killed_after_the_grace_period(env: Env, namespace: str) -> None:
    spec = container(env, ["fakeserver", "http", "--port", "8080", "--ignore-sigterm"])
    env.apply(pod("stubborn", namespace, spec, grace=3))
    wait_ready(env, namespace, "stubborn")
    pid = recorded_pid(env, namespace, "stubborn")
    started = time.monotonic()
    env.kube.kubectl("delete", "pod", "stubborn", "-n", namespace, "--wait=false")
    env.kube.wait_for("SIGTERM to arrive", lambda: f"sigterm-ignored {pid}" in env.marks("stubborn"), timeout=15)
    terminating = env.pod(namespace, "stubborn")
    assert terminating is not None and terminating["metadata"].get("deletionTimestamp")
    assert condition(terminating, "Ready") == "False" and alive(pid)
    env.kube.wait_for("the pod to be gone", lambda: env.pod(namespace, "stubborn") is None, timeout=15)
    elapsed = time.monotonic() - started
    assert 3 <= elapsed < 20, elapsed  # bounds a loaded 2-core machine (make test runs 3 planes)
    assert not alive(pid)


def test_processes_of_a_crashed_runner_are_stopped_by_the_next_one(env: Env, namespace: str) -> None:
    env.apply(pod("survivor", namespace, container(env, ["fakeserver", "http", "--port", "8080"])))
    wait_ready(env, namespace, "survivor")
    old = recorded_pid(env, namespace, "survivor")
    runner = runner_pid(env.state.directory)
    assert runner is not None
    os.kill(runner, signal.SIGKILL)
    env.kube.wait_for("the runner to die", lambda: not alive(runner), timeout=10)
    assert alive(old)  # a crashed runner leaves its processes behind...
    env.start_runner()
    assert not alive(old)  # ...and the next one stops them before it starts anything
    env.kube.wait_for(
        "a new process for the pod",
        lambda: any(r["pod"] == "survivor" and r["pid"] != old for r in env.records()),
        timeout=15,
    )
    wait_ready(env, namespace, "survivor")


def test_stop_leaves_no_process_behind(env: Env, namespace: str) -> None:
    spec = container(env, ["fakeserver", "http", "--port", "8080", "--spawn-child"])
    env.apply(pod("family", namespace, spec))
    wait_ready(env, namespace, "family")
    env.kube.wait_for("the child to be recorded", lambda: any(m.startswith("child") for m in env.marks("family")))
    child = int(next(m for m in env.marks("family") if m.startswith("child")).split()[1])
    pids = [int(r["pid"]) for r in env.records()]
    assert pids and alive(child)
    stop_runner(env.state.directory)
    assert runner_pid(env.state.directory) is None
    assert env.records() == []
    survivors = [pid for pid in [*pids, child] if Path(f"/proc/{pid}").exists() and alive(pid)]
    assert survivors == [], f"still running after stop: {survivors}"
    env.start_runner()  # for whatever runs after this test
