"""Runs the real operator (`python -m disaggspec`) as a local subprocess against a cluster, for the test suites.

On the local backend the kwok nodes run no containers, so the operator the chart deploys never starts: the suites run
this process instead, with the admin kubeconfig or (e2e) a token of the chart's ServiceAccount.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

REPO = Path(__file__).resolve().parents[2]
WEBHOOK_CONFIGURATION = "disaggspec.io"
START_SECONDS = 90
"""How long a started operator may take to answer its health endpoint."""


def operator_source() -> str:
    """Where the operator's package is imported from: this tree's `operator/`, or `DISAGGSPEC_OPERATOR_SOURCE` (to
    run the suites against another checkout, e.g. a `git worktree` of an older commit, and see a test fail there)."""
    return os.environ.get("DISAGGSPEC_OPERATOR_SOURCE") or str(REPO / "operator")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OperatorProcess:
    """The operator with its webhook on 127.0.0.1 (the API server runs on this host), logging to a file."""

    def __init__(
        self,
        kubeconfig: Path,
        log_path: Path,
        webhook: bool = True,
        extra_env: dict[str, str] | None = None,
        extra_args: list[str] | None = None,
    ):
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.webhook = webhook
        self.extra_env = extra_env or {}
        self.extra_args = extra_args or []
        self.metrics_port = free_port()
        self.webhook_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    def start(self) -> OperatorProcess:
        args = [
            sys.executable,
            "-m",
            "disaggspec",
            "--metrics-addr",
            "127.0.0.1",
            "--metrics-port",
            str(self.metrics_port),
        ]
        if self.webhook:
            args += [
                "--webhook-addr",
                "127.0.0.1",
                "--webhook-host",
                "127.0.0.1",
                "--webhook-port",
                str(self.webhook_port),
            ]
        else:
            args += ["--webhook", "off"]
        args += self.extra_args
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONPATH": operator_source(), **self.extra_env}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        log.close()
        # Importing the operator (kopf, the Kubernetes client, pydantic) takes a few seconds alone, but make test runs
        # three suites and the SGLang patch tests on 2 cores: one start once took over 30 s there, with nothing wrong.
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited {self.proc.returncode}:\n{self.log_tail()}")
            if self._healthy():
                return self
            time.sleep(0.2)
        raise RuntimeError(f"operator not ready after {START_SECONDS}s:\n{self.log_tail()}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/healthz", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    @property
    def pid(self) -> int:
        assert self.proc is not None, "operator not started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets and state but answers nothing (a hung or partitioned operator)."""
        assert self.alive(), "operator not running"
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        assert self.alive(), "operator not running"
        os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def probe(self, path: str) -> int:
        """The HTTP status of GET `path` on the metrics port (/healthz, /readyz), 0 when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=2) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
        except OSError:
            return 0

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels` (all samples without `labels`)."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            metric_name, _, rest = series.partition("{")
            if metric_name != name:
                continue
            have = dict(part.split("=", 1) for part in rest.rstrip("}").split(",") if "=" in part)
            if all(have.get(k, "").strip('"') == v for k, v in labels.items()):
                total += float(value)
        return total

    def child_writes(self) -> int:
        """Writes to children (server-side applies and prunes), not counting status writes and Events."""
        return int(self.metric_total("disaggspec_child_writes_total"))

    def is_leader(self) -> bool:
        return self.metric("disaggspec_leader") == 1

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    def metric_total(self, name: str) -> float:
        """The sum of every sample of the metric `name` (all label sets), 0 when it has none yet."""
        total = 0.0
        for line in self.metrics().splitlines():
            series = line.split(" ", 1)[0]
            if series == name or series.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def passes(self) -> int:
        """Reconcile passes the operator has finished."""
        return int(self.metric_total("disaggspec_reconcile_duration_seconds_count"))

    def writes(self) -> int:
        """Write requests the operator has sent to the API server."""
        return int(self.metric_total("disaggspec_api_writes_total"))

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, kill: bool = False) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.paused and not kill:
            self.resume()  # a stopped process would hold SIGTERM until SIGCONT
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
