"""Multi-node servers (`--nnodes N --node-rank R --dist-init-addr HOST:PORT`, one server over a LeaderWorkerSet
group): the leader waits for its workers, a worker serves only the dummy health-check server, a lost node kills the
server, the leader's drain ends the group, and a worker finds its leader by pod DNS name through the cluster-DNS
stand-in (a fake API server here)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from e2e.serving.emulator.tests.harness import REPO, Proc, Stack, request, sglang_args, wait_for
from e2e.support.fakes import serve_http

DIST_PORT = 20000
LEADER, WORKER = 1, 2


def node_args(leader: str, rank: int, *, nnodes: int = 2, tp: int = 2, extra: Sequence[str] = ()) -> list[str]:
    """A pool pod's arguments as a LeaderWorkerSet renders them once the kubelet expanded `$(LWS_*)`."""
    group = ["--tp-size", str(tp), "--nnodes", str(nnodes), "--node-rank", str(rank)]
    group += ["--dist-init-addr", f"{leader}:{DIST_PORT}"]
    return sglang_args("decode", extra=[*group, *extra])


def exits(proc: Proc, timeout: float = 15.0) -> int:
    try:
        return proc.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{proc.name} still runs after {timeout}s:\n{proc.output()}") from None


def wait_output(proc: Proc, text: str, timeout: float = 30.0) -> None:
    """Wait until `proc` has logged `text` (a loaded 2-core machine may take seconds to start a Python process)."""
    deadline = time.monotonic() + timeout
    while text not in proc.output():
        if time.monotonic() > deadline:
            raise AssertionError(f"{proc.name} did not log {text!r} within {timeout}s:\n{proc.output()}")
        time.sleep(0.1)


def url(stack: Stack, host: int, path: str) -> str:
    return f"http://{stack.ip(host)}:30000{path}"


@pytest.mark.parametrize("version", ["0.5.2", "0.5.23"])
def test_leader_waits_for_its_worker_and_dies_with_it(stack: Stack, version: str) -> None:
    leader = stack.emulator(version, "leader", LEADER, args=node_args(stack.ip(LEADER), 0))
    wait_output(leader, "waiting for 1 node(s)")
    # The group is not complete: the leader has not "loaded the model", its HTTP port is still closed.
    for path in ("/health", "/health_generate", "/get_model_info"):
        assert request("GET", url(stack, LEADER, path), timeout=2)[0] == 0, path
    assert leader.popen.poll() is None

    worker = stack.emulator(version, "worker", WORKER, args=node_args(stack.ip(LEADER), 1))
    wait_for(url(stack, LEADER, "/health"), timeout=30, proc=leader)
    wait_for(url(stack, WORKER, "/health"), timeout=10, proc=worker)
    # The worker's dummy health-check server: its routes answer 200, anything else is FastAPI's 404.
    routes = {"/health", "/health_generate"} | ({"/ping"} if version == "0.5.23" else set())
    for path in routes:
        assert request("GET", url(stack, WORKER, path))[0] == 200, path
    for path in ("/generate", "/v1/models", "/get_model_info") + (("/ping",) if version == "0.5.2" else ()):
        status, body, _ = request("GET", url(stack, WORKER, path))
        assert (status, json.loads(body)) == (404, {"detail": "Not Found"}), path
    assert request("POST", url(stack, WORKER, "/generate"), {"text": "x"})[0] == 404
    assert request("GET", url(stack, WORKER, "/metrics"))[0] == 200  # --enable-metrics mounts the exporter
    # The leader serves the API, and knows it spans two nodes.
    info_path = "/get_server_info" if version == "0.5.2" else "/server_info"
    info = json.loads(request("GET", url(stack, LEADER, info_path))[1])
    assert (info["nnodes"], info["node_rank"], info["dist_init_addr"]) == (2, 0, f"{stack.ip(LEADER)}:{DIST_PORT}")

    # A lost node kills the server: the leader dies like a scheduler whose collective failed.
    worker.popen.kill()
    assert exits(leader) == -signal.SIGKILL
    assert "Scheduler hit an exception" in leader.output() and "node rank 1" in leader.output()


@pytest.mark.parametrize("version", ["0.5.2", "0.5.23"])
def test_sigterm_in_a_group(stack: Stack, version: str) -> None:
    fast = ("drain-poll-seconds=0.2",)
    leader = stack.emulator(version, "leader", LEADER, emulate=fast, args=node_args(stack.ip(LEADER), 0))
    worker = stack.emulator(version, "worker", WORKER, emulate=fast, args=node_args(stack.ip(LEADER), 1))
    wait_for(url(stack, LEADER, "/health"), timeout=30, proc=leader)
    wait_for(url(stack, WORKER, "/health"), timeout=10, proc=worker)
    worker.popen.send_signal(signal.SIGTERM)
    if version == "0.5.23":
        # engine.py:1264-1273: a ready worker node only logs SIGTERM and waits for rank 0's ShutdownReq.
        wait_output(worker, "waiting for the rank-0 ShutdownReq broadcast")
        assert worker.popen.poll() is None
        assert request("GET", url(stack, WORKER, "/health"))[0] == 200
        leader.popen.send_signal(signal.SIGTERM)
        assert exits(leader) == 0
        assert exits(worker) == 0  # the ShutdownReq broadcast stops every rank
        assert "ShutdownReq" in worker.output()
    else:
        # 0.5.2: no SGLang handler on a worker node, it goes; the leader has lost a node.
        assert exits(worker) == 0
        assert exits(leader) == -signal.SIGKILL


def test_leader_drain_in_0_5_2_leaves_the_worker_to_fail(stack: Stack) -> None:
    fast = ("drain-poll-seconds=0.2",)
    leader = stack.emulator("0.5.2", "leader", LEADER, emulate=fast, args=node_args(stack.ip(LEADER), 0))
    worker = stack.emulator("0.5.2", "worker", WORKER, args=node_args(stack.ip(LEADER), 1))
    wait_for(url(stack, WORKER, "/health"), timeout=30, proc=worker)
    wait_for(url(stack, LEADER, "/health"), timeout=30, proc=leader)
    leader.popen.send_signal(signal.SIGTERM)
    assert exits(leader) == 0
    assert exits(worker) == -signal.SIGKILL  # no ShutdownReq in 0.5.2: the worker sees its leader lost
    assert "leader" in worker.output() and "was lost" in worker.output()


def test_a_node_the_leader_refuses_exits(stack: Stack) -> None:
    leader = stack.emulator("0.5.23", "leader", LEADER, args=node_args(stack.ip(LEADER), 0))
    wrong = stack.emulator("0.5.23", "worker", WORKER, args=node_args(stack.ip(LEADER), 2))  # ranks are 0..1
    assert exits(wrong) == 1
    assert "node rank 2 is not in 1..1" in wrong.output()
    assert leader.popen.poll() is None  # a refused node never joined: nothing lost


@pytest.mark.parametrize("version", ["0.5.2", "0.5.23"])
def test_tp_not_divisible_by_nodes_fails_like_sglang(version: str) -> None:
    argv = [sys.executable, "-m", "e2e.serving.emulator", "--sglang-version", version, "--bind", "127.0.0.1", "--"]
    argv += node_args("127.0.0.1", 0, tp=3)
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "AssertionError: tp_size must be divisible by number of nodes" in done.stderr


# --- the worker finds its leader by name ----------------------------------------------------------------------------


class FakeApi:
    """The two reads of the cluster-DNS stand-in: the headless Service `grp` and the pods of namespace `ns`."""

    def __init__(self) -> None:
        self.leader_ip = ""
        self.paths: list[str] = []
        self.service = {
            "metadata": {"name": "grp", "namespace": "ns"},
            "spec": {
                "clusterIP": "None",
                "selector": {"leaderworkerset.sigs.k8s.io/name": "grp"},
                "publishNotReadyAddresses": True,
            },
        }

    def pods(self) -> list[dict[str, Any]]:
        labels = {"leaderworkerset.sigs.k8s.io/name": "grp", "leaderworkerset.sigs.k8s.io/worker-index": "0"}
        status: dict[str, Any] = {"phase": "Running" if self.leader_ip else "Pending"}
        if self.leader_ip:
            status["podIP"] = self.leader_ip
        leader = {
            "metadata": {"name": "grp-0", "namespace": "ns", "labels": labels},
            "spec": {"hostname": "grp-0", "subdomain": "grp"},
            "status": status,
        }
        return [leader]


@pytest.fixture
def fake_api(stack: Stack, tmp_path: Path) -> Iterator[tuple[FakeApi, Path]]:
    api = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            api.paths.append(self.path)
            if parts.path == "/api/v1/namespaces/ns/services/grp":
                body: Any = api.service
            elif parts.path == "/api/v1/namespaces/ns/pods":
                assert parse_qs(parts.query)["labelSelector"] == ["leaderworkerset.sigs.k8s.io/name=grp"]
                body = {"items": api.pods()}
            else:
                self.send_response(404)
                self.end_headers()
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    with serve_http(Handler, host=stack.ip(9)) as port:
        kubeconfig = tmp_path / "kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "clusters": [{"name": "fake", "cluster": {"server": f"http://{stack.ip(9)}:{port}"}}],
            "users": [{"name": "fake", "user": {"token": "t"}}],
        }
        kubeconfig.write_text(json.dumps(config))  # JSON is YAML
        yield api, kubeconfig


def test_worker_started_first_finds_its_leader_by_name_once_it_has_an_ip(
    stack: Stack, fake_api: tuple[FakeApi, Path]
) -> None:
    api, kubeconfig = fake_api
    options = ["--namespace", "ns", "--kubeconfig", str(kubeconfig)]
    # $(LWS_LEADER_ADDRESS) as the LWS webhook sets it: <lws>-<group>.<subdomain>.<namespace>.
    worker = stack.emulator("0.5.23", "worker", WORKER, options=options, args=node_args("grp-0.grp.ns", 1))
    wait_output(worker, "grp-0.grp.ns does not resolve (yet)")  # the leader pod has no IP yet
    assert worker.popen.poll() is None
    assert request("GET", url(stack, WORKER, "/health"), timeout=2)[0] == 0  # not in the group: no health server

    leader = stack.emulator("0.5.23", "leader", LEADER, args=node_args("grp-0.grp.ns", 0))
    wait_output(leader, "waiting for 1 node(s)")
    assert "cannot connect" not in worker.output()  # still unresolved: the name is not published yet
    api.leader_ip = stack.ip(LEADER)  # the pod got its IP (kwok set Running)
    wait_for(url(stack, LEADER, "/health"), timeout=30, proc=leader)
    wait_for(url(stack, WORKER, "/health"), timeout=10, proc=worker)
    assert f"joined the group at grp-0.grp.ns ({stack.ip(LEADER)}:{DIST_PORT})" in worker.output()
    assert f"from {stack.ip(WORKER)}:" in leader.output()  # the worker connects from its own pod IP
    assert any(path.startswith("/api/v1/namespaces/ns/services/grp") for path in api.paths)
