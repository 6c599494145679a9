"""The pod runner's pure parts (probe settings and thresholds, env resolution, status patches, back-off, grace
periods) and its process handling on this host (handlers against local sockets, recorded processes, the launcher
loader); no cluster."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.processes import alive
from e2e.cluster.proctable import (
    ProcessRecord,
    ProcessTable,
    reap_stale,
    session_members,
    start_ticks,
    stop_recorded,
)
from e2e.serving.events import EventRecorder, event_object
from e2e.serving.kubelet import Backoff, PodWorker, Runtime, Settings, exit_code_of, pod_grace, prestop_pause
from e2e.serving.plan import ProcessPlan, container_env, load_launcher
from e2e.serving.podenv import EnvError, expand, resolve_container, resolve_env
from e2e.serving.podstatus import ContainerView, running, status_patch, terminated, waiting
from e2e.serving.prober import (
    LIVENESS,
    READINESS,
    STARTUP,
    ProbeSpec,
    ProbeTracker,
    exec_command,
    http_get,
    probe_host,
    probes_of,
    resolve_port,
    tcp_socket,
)
from e2e.support.fakes import serve_http

POD: dict[str, Any] = {
    "metadata": {
        "name": "web-0",
        "namespace": "shop",
        "uid": "u-1",
        "labels": {"app": "web", "tier": "front"},
        "annotations": {"note": "x"},
    },
    "spec": {"nodeName": "gpu-node-1", "serviceAccountName": "runner", "containers": [{"name": "c"}]},
    "status": {"podIP": "127.98.0.7", "podIPs": [{"ip": "127.98.0.7"}], "hostIP": "127.0.0.1"},
}


# ---- probes: settings and thresholds -----------------------------------------------------------------------------


def test_probe_defaults_are_kubernetes_defaults() -> None:
    spec = ProbeSpec.parse(READINESS, {"httpGet": {"path": "/health", "port": "http"}})
    assert (spec.handler, spec.initial_delay, spec.period, spec.timeout) == ("httpGet", 0, 10, 1)
    assert (spec.success_threshold, spec.failure_threshold, spec.termination_grace) == (1, 3, None)
    tuned = ProbeSpec.parse(
        READINESS,
        {
            "tcpSocket": {"port": 80},
            "initialDelaySeconds": 2,
            "periodSeconds": 1,
            "timeoutSeconds": 4,
            "successThreshold": 2,
            "failureThreshold": 5,
        },
    )
    assert (tuned.handler, tuned.initial_delay, tuned.period, tuned.timeout) == ("tcpSocket", 2, 1, 4)
    assert (tuned.success_threshold, tuned.failure_threshold) == (2, 5)
    # Liveness and startup probes always succeed after one success (the API server allows nothing else).
    liveness = ProbeSpec.parse(
        LIVENESS, {"exec": {"command": ["x"]}, "successThreshold": 3, "terminationGracePeriodSeconds": 7}
    )
    assert (liveness.success_threshold, liveness.termination_grace) == (1, 7)
    assert set(probes_of({"readinessProbe": {"tcpSocket": {"port": 1}}, "livenessProbe": None})) == {READINESS}


def test_probe_thresholds_follow_the_kubelet_worker() -> None:
    readiness = ProbeTracker(ProbeSpec.parse(READINESS, {"httpGet": {}, "successThreshold": 2, "failureThreshold": 2}))
    assert readiness.result is False  # not ready until proven
    assert not readiness.record(True)
    assert readiness.record(True) and readiness.result is True
    assert not readiness.record(False)  # one failure is below the threshold
    assert readiness.result is True
    assert not readiness.record(True)  # a success breaks the run of failures
    assert not readiness.record(False)
    assert readiness.record(False) and readiness.result is False

    liveness = ProbeTracker(ProbeSpec.parse(LIVENESS, {"httpGet": {}}))
    assert liveness.result is True
    assert [liveness.record(False) for _ in range(3)] == [False, False, True]
    assert liveness.result is False

    startup = ProbeTracker(ProbeSpec.parse(STARTUP, {"httpGet": {}, "failureThreshold": 2}))
    assert startup.result is None
    assert startup.record(True) and startup.result is True


def test_probe_port_and_host() -> None:
    container = {"name": "c", "ports": [{"name": "http", "containerPort": 30000}]}
    assert resolve_port(8080, container) == 8080
    assert resolve_port("9090", container) == 9090
    assert resolve_port("http", container) == 30000
    with pytest.raises(ValueError, match="not the name of a port"):
        resolve_port("metrics", container)
    assert probe_host({}, "127.98.0.7") == "127.98.0.7"
    assert probe_host({"host": "127.0.0.1"}, "127.98.0.7") == "127.0.0.1"
    assert probe_host({"host": "10.0.0.1"}, "127.98.0.7") == "127.98.0.7"  # never leaves the host


@pytest.fixture
def http_server() -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = {"/ok": 200, "/moved": 302, "/slow": 200}.get(self.path, 500)
            if self.path == "/slow":
                time.sleep(1.5)
            if self.path == "/header" and self.headers.get("X-Probe") == "yes":
                code = 204
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serve_http(Handler) as port:
        yield port


def test_http_tcp_and_exec_handlers(http_server: int) -> None:
    port = http_server

    async def run() -> None:
        assert (await http_get("127.0.0.1", port, {"path": "/ok"}, 1)).success
        assert (await http_get("127.0.0.1", port, {"path": "/moved"}, 1)).success  # 3xx counts, not followed
        failed = await http_get("127.0.0.1", port, {"path": "/boom"}, 1)
        assert not failed.success and "statuscode: 500" in failed.message
        assert (
            await http_get(
                "127.0.0.1", port, {"path": "/header", "httpHeaders": [{"name": "X-Probe", "value": "yes"}]}, 1
            )
        ).success
        slow = await http_get("127.0.0.1", port, {"path": "/slow"}, 0.3)
        assert not slow.success and "deadline exceeded" in slow.message
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            free = closed.getsockname()[1]
        refused = await http_get("127.0.0.1", free, {"path": "/"}, 1)
        assert not refused.success and "connection refused" in refused.message
        assert (await tcp_socket("127.0.0.1", port, 1)).success
        assert not (await tcp_socket("127.0.0.1", free, 1)).success
        assert (await exec_command(["true"], {}, None, 1)).success
        failing = await exec_command([sys.executable, "-c", "print('nope'); raise SystemExit(4)"], {}, None, 5)
        assert not failing.success and "exited with 4" in failing.message and "nope" in failing.message
        hung = await exec_command(["sleep", "5"], {}, None, 0.3)
        assert not hung.success and "timed out" in hung.message

    asyncio.run(run())


# ---- environment -------------------------------------------------------------------------------------------------


def test_expand_follows_the_kubelet() -> None:
    env = {"A": "1", "B": "two"}
    assert expand("$(A)-$(B)", env) == "1-two"
    assert expand("$(MISSING) stays", env) == "$(MISSING) stays"
    assert expand("$$(A) is escaped, $$ is one $", env) == "$(A) is escaped, $ is one $"
    assert expand("plain $A and $(unclosed", env) == "plain $A and $(unclosed"
    assert expand("trailing $", env) == "trailing $"


def lookup(kind: str, namespace: str, name: str) -> dict[str, str] | None:
    assert namespace == "shop"
    sources = {
        ("ConfigMap", "settings"): {"MODE": "fast", "bad key": "x", "LEVEL": "3"},
        ("Secret", "token"): {"value": "s3cret"},
    }
    return sources.get((kind, name))


def test_env_resolution_every_source() -> None:
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
        "env": [
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "LABELS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}},
            {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['note']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
            {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "MODE"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "token", "key": "value"}}},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k", "optional": True}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "URL", "value": "http://$(IP):$(CFG_LEVEL)/$(POD)"},
        ],
        "command": ["serve", "--host", "$(IP)"],
        "args": ["--name=$(POD)", "$$(POD)"],
    }
    env, notes = resolve_env(POD, container, lookup)
    assert list(env)[:2] == ["CFG_LEVEL", "CFG_MODE"]  # envFrom first, in key order; "bad key" skipped
    assert env["POD"] == "web-0" and env["NS"] == "shop" and env["UID"] == "u-1"
    assert env["APP"] == "web" and env["LABELS"] == 'app="web"\ntier="front"' and env["NOTE"] == "x"
    assert env["IP"] == env["IPS"] == "127.98.0.7" and env["HOST"] == "127.0.0.1"
    assert env["NODE"] == "gpu-node-1" and env["SA"] == "runner"
    assert env["MODE"] == "fast" and env["TOKEN"] == "s3cret"
    assert "OPT" not in env and "CPU" not in env
    assert env["URL"] == "http://127.98.0.7:3/web-0"
    assert any("bad key" in note for note in notes) and any("resourceFieldRef" in note for note in notes)

    resolved = resolve_container(POD, container, lookup)
    assert resolved.container["command"] == ["serve", "--host", "127.98.0.7"]
    assert resolved.container["args"] == ["--name=web-0", "$(POD)"]
    assert "envFrom" not in resolved.container
    assert container_env(resolved.container) == resolved.env == env
    assert container["command"][2] == "$(IP)"  # the pod's own container is untouched


def test_missing_required_reference_is_a_config_error() -> None:
    with pytest.raises(EnvError, match='configmap "absent" not found'):
        resolve_env(
            POD, {"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}]}, lookup
        )
    with pytest.raises(EnvError, match="couldn't find key nope"):
        resolve_env(
            POD, {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "token", "key": "nope"}}}]}, lookup
        )
    with pytest.raises(EnvError, match='secret "absent" not found'):
        resolve_env(POD, {"envFrom": [{"secretRef": {"name": "absent"}}]}, lookup)
    assert resolve_env(POD, {"envFrom": [{"secretRef": {"name": "absent", "optional": True}}]}, lookup) == ({}, [])
    with pytest.raises(EnvError, match="unsupported fieldRef"):
        resolve_env(POD, {"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.hostname"}}}]}, lookup)


# ---- status ------------------------------------------------------------------------------------------------------


def test_status_patch_reports_readiness_and_keeps_transition_times() -> None:
    views = [
        ContainerView("a", "img", ready=True, started=True, state=running("T0")),
        ContainerView("b", "img", ready=False, started=True, state=running("T0"), container_id="process://42"),
    ]
    patch = status_patch(POD, views, {}, "T1")
    containers_ready, ready = patch["status"]["conditions"]
    assert containers_ready["type"] == "ContainersReady" and ready["type"] == "Ready"
    assert ready["status"] == "False" and ready["reason"] == "ContainersNotReady"
    assert ready["message"] == "containers with unready status: [b]" and ready["lastTransitionTime"] == "T1"
    statuses = patch["status"]["containerStatuses"]
    assert [s["name"] for s in statuses] == ["a", "b"] and statuses[1]["containerID"] == "process://42"
    assert statuses[0]["state"] == {"running": {"startedAt": "T0"}} and "phase" not in patch["status"]

    prior = {c["type"]: c for c in patch["status"]["conditions"]}
    again = status_patch(POD, views, prior, "T2")
    assert again == patch  # nothing changed: the same patch, no new transition time

    views[1].ready = True
    now_ready = status_patch(POD, views, prior, "T3")
    for cond in now_ready["status"]["conditions"]:
        assert (cond["status"], cond["reason"], cond["message"], cond["lastTransitionTime"]) == (
            "True",
            None,
            None,
            "T3",
        )


def test_status_patch_readiness_gates_and_terminal_phase() -> None:
    gated = {**POD, "spec": {**POD["spec"], "readinessGates": [{"conditionType": "example.com/lb"}]}}
    views = [ContainerView("a", "img", ready=True, started=True, state=running("T0"))]
    ready = status_patch(gated, views, {}, "T1")["status"]["conditions"][1]
    assert ready["status"] == "False" and ready["reason"] == "ReadinessGatesNotReady"
    gated["status"] = {**POD["status"], "conditions": [{"type": "example.com/lb", "status": "True"}]}
    assert status_patch(gated, views, {}, "T1")["status"]["conditions"][1]["status"] == "True"

    views = [ContainerView("a", "img", state=terminated(0, "T0", "T1", "process://7"))]
    done = status_patch(POD, views, {}, "T2", phase="Succeeded")["status"]
    assert done["phase"] == "Succeeded" and done["conditions"][1]["reason"] == "PodCompleted"
    state = done["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state["reason"], state["containerID"]) == (0, "Completed", "process://7")
    assert terminated(3, "T0", "T1")["terminated"]["reason"] == "Error"
    assert waiting("CrashLoopBackOff", "m") == {"waiting": {"reason": "CrashLoopBackOff", "message": "m"}}


def test_event_names_the_pod_and_container() -> None:
    event = event_object(POD, "c", "Warning", "BackOff", "Back-off restarting failed container c in pod web-0_shop")
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "shop",
        "name": "web-0",
        "uid": "u-1",
        "resourceVersion": "",
        "fieldPath": "spec.containers{c}",
    }
    assert event["metadata"]["name"].startswith("web-0.") and event["metadata"]["namespace"] == "shop"
    assert (event["type"], event["reason"], event["count"]) == ("Warning", "BackOff", 1)
    assert event["source"] == {"component": "pod-runner", "host": "gpu-node-1"}


# ---- restarts and grace periods ----------------------------------------------------------------------------------


def test_backoff_is_the_kubelets_with_a_short_cap() -> None:
    backoff = Backoff(initial=1, cap=10)
    waits = [backoff.on_exit(t) for t in (0, 1, 3, 7, 15, 25, 35)]
    assert waits == [0, 1, 2, 4, 8, 10, 10]
    assert backoff.on_exit(35 + 21) == 0  # more than 2 x cap since the last crash: start over
    assert backoff.on_exit(57) == 1


def test_grace_period_and_exit_codes() -> None:
    assert pod_grace({"metadata": {}, "spec": {}}) == 30
    assert pod_grace({"metadata": {}, "spec": {"terminationGracePeriodSeconds": 60}}) == 60
    assert (
        pod_grace({"metadata": {"deletionGracePeriodSeconds": 5}, "spec": {"terminationGracePeriodSeconds": 60}}) == 5
    )
    assert pod_grace({"metadata": {"deletionGracePeriodSeconds": 0}, "spec": {}}) == 2  # the kubelet's minimum
    assert exit_code_of(0) == 0 and exit_code_of(3) == 3
    assert exit_code_of(-signal.SIGKILL) == 137 and exit_code_of(-signal.SIGTERM) == 143


# ---- recorded processes ------------------------------------------------------------------------------------------


def _session_with_child() -> subprocess.Popen[bytes]:
    """A session leader (sh) with a `sleep` child that ignores SIGTERM."""
    script = "trap '' TERM; sleep 300 & wait"
    return subprocess.Popen(["sh", "-c", script], start_new_session=True)


def _record(proc: subprocess.Popen[bytes], ticks: int | None = None) -> ProcessRecord:
    deadline = time.monotonic() + 5
    while len(session_members(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    return ProcessRecord(proc.pid, ticks or start_ticks(proc.pid) or 0, ["sh"], "u-1", "shop", "web-0", "c")


def test_stale_processes_are_recognised_and_stopped(tmp_path: Path) -> None:
    proc = _session_with_child()
    try:
        record = _record(proc)
        members = session_members(proc.pid)
        assert len(members) == 2
        table = ProcessTable(tmp_path / "processes.json")
        table.add(record)
        assert ProcessTable(table.path).load() == [record]
        # A record whose start time differs is a recycled pid: never signalled.
        assert not stop_recorded(_record(proc, ticks=record.start_ticks + 1), grace=0.5)
        assert all(alive(pid) for pid in members)
        stopped = reap_stale(table, grace=0.5, say=lambda message: None)
        assert stopped == [record]
        proc.wait(timeout=5)
        deadline = time.monotonic() + 5
        while any(alive(pid) for pid in members) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(pid) for pid in members), "the SIGTERM-proof child must be SIGKILLed"
        assert ProcessTable(table.path).load() == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# ---- the launcher contract ---------------------------------------------------------------------------------------


def test_load_launcher() -> None:
    launcher = load_launcher("e2e.serving.tests.launcher:fake_server_launcher")
    container = {"name": "c", "command": ["fakeserver", "http"], "env": [{"name": "A", "value": "1"}]}
    plan = launcher.plan(POD, container)
    assert isinstance(plan, ProcessPlan)
    assert plan.argv[0] == sys.executable and plan.argv[-1] == "http"
    assert plan.env["A"] == "1" and plan.env["POD_IP"] == "127.98.0.7"
    assert launcher.plan(POD, {"name": "c", "command": ["nginx"]}) is None
    with pytest.raises(ValueError, match="expected module:attr"):
        load_launcher("e2e.serving.tests.launcher")
    with pytest.raises(ValueError, match="has no attribute"):
        load_launcher("e2e.serving.tests.launcher:nothing")
    with pytest.raises(ValueError, match="no plan"):
        load_launcher("e2e.serving.tests.launcher:Path")


# ---- the watch ---------------------------------------------------------------------------------------------------


class FakeApi:
    """LIST answers a numbered list; the first WATCH sends one event then 410 Gone, the second one stalls."""

    server = "https://fake"

    def __init__(self) -> None:
        self.lists = 0
        self.watched: list[str] = []

    def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        return [{"metadata": {"uid": f"list-{self.lists}", "resourceVersion": "10"}}], str(10 * self.lists)

    def watch(self, path: str, query: dict[str, Any], read_timeout: float) -> Iterator[dict[str, Any]]:
        self.watched.append(str(query["resourceVersion"]))
        if len(self.watched) == 1:
            yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "11"}}}
            yield {"type": "ADDED", "object": {"metadata": {"uid": "new", "resourceVersion": "12"}}}
            yield {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}
        else:
            time.sleep(0.2)


def test_watch_lists_again_after_410_gone() -> None:
    from e2e.serving.runner import PodWatcher

    async def run() -> list[tuple[str, Any]]:
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        api = FakeApi()
        watcher = PodWatcher(api, asyncio.get_running_loop(), queue)  # type: ignore[arg-type]
        watcher.start()
        try:
            return [await asyncio.wait_for(queue.get(), 5) for _ in range(3)]
        finally:
            watcher.stopping.set()

    items = asyncio.run(run())
    assert [kind for kind, _ in items] == ["SYNC", "ADDED", "SYNC"]
    assert items[0][1][0]["metadata"]["uid"] == "list-1" and items[2][1][0]["metadata"]["uid"] == "list-2"


def test_prestop_pause_reads_only_pausing_hooks() -> None:
    """The operator's `exec: [sleep, N]` and the `sleep` action pause; anything else is not run by the runner."""
    assert prestop_pause({"exec": {"command": ["sleep", "15"]}}) == 15.0
    assert prestop_pause({"sleep": {"seconds": 3}}) == 3.0
    assert prestop_pause({"exec": {"command": ["sh", "-c", "sleep 5"]}}) is None
    assert prestop_pause({"exec": {"command": ["sleep", "forever"]}}) is None
    assert prestop_pause(None) is None


# ---- a pod with a liveness probe only (a LeaderWorkerSet worker) --------------------------------------------------


class StatusApi:
    """What a PodWorker calls on the API server: status patches (recorded), Events (accepted), no ConfigMaps."""

    def __init__(self, uid: str) -> None:
        self.uid = uid
        self.patches: list[dict[str, Any]] = []

    def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(patch)
        return {"metadata": {"uid": self.uid}, "status": patch["status"]}

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        return {}

    def source_data(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        return None


def test_a_container_with_only_a_liveness_probe_is_ready_once_it_runs(tmp_path: Path) -> None:
    """What the kubelet does without a readiness (or startup) probe, e.g. for a worker pod of a multi-node server,
    whose operator renders a liveness probe only: the container is started and ready as soon as it runs; its
    liveness probe runs meanwhile and does not gate readiness."""
    from e2e.serving.tests.launcher import FakeServerLauncher

    with socket.socket() as free:
        free.bind(("127.98.0.8", 0))
        port = free.getsockname()[1]
    liveness = {"httpGet": {"path": "/health", "port": port}, "periodSeconds": 1, "initialDelaySeconds": 3}
    pod: dict[str, Any] = {
        "metadata": {"name": "llama-decode-0-1", "namespace": "ns", "uid": "u-lws"},
        "spec": {
            "containers": [
                {"name": "sglang", "command": ["fakeserver", "http", "--port", str(port)], "livenessProbe": liveness}
            ]
        },
        "status": {"phase": "Running", "podIP": "127.98.0.8"},
    }
    api = StatusApi("u-lws")

    def ready_in(patch: dict[str, Any]) -> bool:
        conditions = {c["type"]: c["status"] for c in patch["status"]["conditions"]}
        return conditions["Ready"] == "True" and patch["status"]["containerStatuses"][0]["ready"] is True

    async def run() -> float:
        runtime = Runtime(
            api,  # type: ignore[arg-type]
            FakeServerLauncher(),
            EventRecorder(api),  # type: ignore[arg-type]
            ProcessTable(tmp_path / "processes.json"),
            tmp_path / "logs",
            Settings(),
        )
        worker = PodWorker(runtime, pod)
        started = time.monotonic()
        worker.start()
        try:
            while not any(ready_in(patch) for patch in api.patches):
                assert time.monotonic() - started < 10, api.patches
                await asyncio.sleep(0.05)
            return time.monotonic() - started
        finally:
            worker.shutdown(2.0)
            await worker.wait()

    took = asyncio.run(run())
    assert took < 3, "ready before the liveness probe's first run (initialDelaySeconds 3)"


# ---- the runner's stop: nothing of a pod outlives it -------------------------------------------------------------


class DeletingApi(StatusApi):
    """A StatusApi for pods of several names (uid `<namespace>/<name>`, pod IP kept as the API server would) that also
    records the final deletes a worker sends."""

    def __init__(self, ips: dict[str, str]) -> None:
        super().__init__("")
        self.ips = ips
        self.deletes: list[str] = []

    def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(patch)
        status = {"phase": "Running", "podIP": self.ips[name], **patch["status"]}
        return {"metadata": {"uid": f"{namespace}/{name}"}, "status": status}

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> bool:
        self.deletes.append(name)
        return True


def _free_port(host: str) -> int:
    with socket.socket() as free:
        free.bind((host, 0))
        port: int = free.getsockname()[1]
    return port


def _stubborn_pod(name: str, ip: str, markers: Path, prestop: int | None) -> dict[str, Any]:
    """A running pod whose only container ignores SIGTERM (as a server in a long drain), with a preStop pause or not."""
    port = _free_port(ip)
    spec: dict[str, Any] = {
        "name": "server",
        "command": ["fakeserver", "http", "--port", str(port), "--ignore-sigterm"],
        "env": [{"name": "MARKER_DIR", "value": str(markers)}, {"name": "POD_NAME", "value": name}],
        "ports": [{"containerPort": port}],
    }
    if prestop is not None:
        spec["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", str(prestop)]}}}
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"ns/{name}"},
        "spec": {"terminationGracePeriodSeconds": 120, "containers": [spec]},
        "status": {"phase": "Running", "podIP": ip},
    }


def _deleting(pod: dict[str, Any]) -> dict[str, Any]:
    metadata = {**pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 120}
    return {**pod, "metadata": metadata}


def _marks(markers: Path, pod: str) -> list[str]:
    path = markers / f"{pod}.events"
    return path.read_text().split("\n")[:-1] if path.exists() else []


async def _until(what: str, check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def _listening(ip: str, pod: dict[str, Any]) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex((ip, pod["spec"]["containers"][0]["ports"][0]["containerPort"])) == 0


def test_runner_stop_kills_pods_in_their_prestop_pause_or_drain_and_starts_nothing(tmp_path: Path) -> None:
    """Issue 29: pods deleted just before the runner stops (the demo's rollout retires a revision) are in their
    preStop pause (60 s here) or in a drain that ignores SIGTERM (grace period 120 s). The runner's stop must end
    both within its own shutdown grace period, by SIGKILL, wait for them, restart nothing and leave the table empty;
    before the fix the pause went on, the fallback reap killed the processes, their containers restarted at once and
    the new processes outlived the runner, unrecorded."""
    from e2e.serving.runner import Runner
    from e2e.serving.tests.launcher import FakeServerLauncher

    markers = tmp_path / "markers"
    markers.mkdir()
    pods = {
        "paused": _stubborn_pod("paused", "127.98.0.9", markers, prestop=60),
        "draining": _stubborn_pod("draining", "127.98.0.10", markers, prestop=None),
    }
    api = DeletingApi({name: pod["status"]["podIP"] for name, pod in pods.items()})
    runner = Runner(api, FakeServerLauncher(), tmp_path / "state", Settings(shutdown_grace=1.0))  # type: ignore[arg-type]

    async def run() -> tuple[dict[str, int], float]:
        for pod in pods.values():
            runner._add_worker(pod)
        await _until("both servers listening", lambda: all(_listening(p["status"]["podIP"], p) for p in pods.values()))
        pids = {r.pod: r.pid for r in runner.table.load()}
        assert set(pids) == set(pods)
        for pod in pods.values():
            runner.workers[pod["metadata"]["uid"]].update(_deleting(pod))
        await _until(
            "the drain to begin", lambda: any(m.startswith("sigterm-ignored") for m in _marks(markers, "draining"))
        )
        await asyncio.sleep(0.5)
        assert not any(m.startswith("sigterm") for m in _marks(markers, "paused")), "still in its preStop pause"
        assert all(alive(pid) for pid in pids.values())
        started = time.monotonic()
        await runner._shutdown()
        took = time.monotonic() - started
        await asyncio.sleep(1.0)  # the loop lives on a little (the runner drains its Events): no restart meanwhile
        return pids, took

    pids, took = asyncio.run(run())
    assert took < 8, f"the stop took {took:.1f}s: the pause or the drain was not cut short"
    assert not any(alive(pid) for pid in pids.values()), pids
    for name in pods:
        assert [m for m in _marks(markers, name) if m.startswith("start")] == [f"start {pids[name]}"], "restarted"
    assert runner.table.load() == []
    assert api.deletes == [], "a pod being deleted is left for the next runner to finalise"


def test_no_container_restarts_once_the_runner_stops(tmp_path: Path) -> None:
    """A container whose process ends while the runner is stopping (killed by its fallback reap, say) is not
    started again: a process the runner does not know of would outlive it."""
    from e2e.serving.tests.launcher import FakeServerLauncher

    markers = tmp_path / "markers"
    markers.mkdir()
    pod = _stubborn_pod("crashing", "127.98.0.11", markers, prestop=None)
    api = DeletingApi({"crashing": "127.98.0.11"})
    table = ProcessTable(tmp_path / "processes.json")
    runtime = Runtime(
        api,  # type: ignore[arg-type]
        FakeServerLauncher(),
        EventRecorder(api),  # type: ignore[arg-type]
        table,
        tmp_path / "logs",
        Settings(backoff_initial=0.1),
    )

    async def run() -> int:
        worker = PodWorker(runtime, pod)
        worker.start()
        try:
            await _until("the server to listen", lambda: _listening("127.98.0.11", pod))
            (record,) = table.load()
            runtime.stopping = True
            os.kill(record.pid, signal.SIGKILL)
            await _until("the exit to be seen", lambda: table.load() == [])
            await asyncio.sleep(1.0)  # the first restart after a crash is immediate
            return record.pid
        finally:
            worker.shutdown(1.0)
            await worker.wait()

    pid = asyncio.run(run())
    assert [m for m in _marks(markers, "crashing") if m.startswith("start")] == [f"start {pid}"]
    assert table.load() == []


def test_a_recycled_pid_in_the_table_is_left_alone(tmp_path: Path) -> None:
    """What a runner does on start (and `stop_runner` after it): stop what the table records, but only processes it
    started. A record whose pid now belongs to another process (another start time) is dropped, that process is not
    signalled; a record that still is the process it started is stopped, its whole session with it."""
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    ours = _session_with_child()
    try:
        mine = _record(ours)
        ticks = start_ticks(stranger.pid)
        assert ticks is not None
        # The pid of an earlier container that exited; the kernel gave it to `stranger` since.
        recycled = ProcessRecord(
            stranger.pid, ticks - 1, ["python", "-m", "e2e.serving.emulator"], "u-0", "ns", "old", "c"
        )
        table = ProcessTable(tmp_path / "processes.json")
        table.replace([recycled, mine])
        said: list[str] = []
        stopped = reap_stale(table, grace=0.5, say=said.append)
        assert stopped == [mine]
        assert stranger.poll() is None and alive(stranger.pid), "a recycled pid must never be signalled"
        assert ours.wait(timeout=5) is not None
        assert ProcessTable(table.path).load() == []
        assert not any(str(stranger.pid) in line for line in said)
    finally:
        for proc in (stranger, ours):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
