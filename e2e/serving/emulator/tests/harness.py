"""Processes for the emulator's tests: emulators and real routers on loopback IPs of their own, always cleaned up.

`Stack` is a context manager: every process it starts is SIGTERMed, then SIGKILLed, when the block ends (a test
failure included). Each stack takes a fresh /24 of loopback addresses (127.<250..254>.<n>.x, the second octet from
the xdist worker, else from the pid), so tests never share an address and every process can use SGLang's fixed port
numbers.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from disaggspec.sglang.profiles import PROFILES
from e2e.serving.routers import ensure_router_venv

REPO: Final = Path(__file__).resolve().parents[4]
HTTP_PORT: Final = 30000
BOOTSTRAP_PORT: Final = 8998
ROUTER_PORT: Final = 30000
PROMETHEUS_PORT: Final = 29000
_SUBNETS: Final = itertools.count(1)
INCOMPLETE: Final = "x-test-incomplete-body"
"""Set in `http`'s headers when the connection dropped before the body ended (a truncated chunked response)."""


def sglang_args(
    role: str,
    *,
    bootstrap_port: int = BOOTSTRAP_PORT,
    speculative: Sequence[str] = (
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B",
        "--speculative-num-steps",
        "1",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "2",
    ),
    extra: Sequence[str] = (),
) -> list[str]:
    """A pool pod's SGLang arguments as the operator renders them (operator/disaggspec/sglang/args.py)."""
    return [
        "--model-path",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--dtype",
        "float16",
        "--served-model-name",
        "llama-emulated",
        "--tp-size",
        "1",
        "--host",
        "0.0.0.0",
        "--port",
        str(HTTP_PORT),
        "--enable-metrics",
        "--disaggregation-mode",
        role,
        "--disaggregation-bootstrap-port",
        str(bootstrap_port),
        "--disaggregation-transfer-backend",
        "mooncake",
        "--page-size",
        "1",
        "--kv-cache-dtype",
        "auto",
        *speculative,
        *extra,
    ]


def _second_octet() -> int:
    """250-254: one per pytest-xdist worker (gw0..gw4), so that two workers never share a subnet; a process outside
    xdist takes one from its pid."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        return 250 + int(worker[2:]) % 5
    return 250 + os.getpid() % 5


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    graceful: bool = True
    """Whether cleanup asks first (SIGINT) or kills (routers: smg waits 5 s for load balancers on SIGTERM)."""

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Stack:
    """Processes of one test; use as a context manager."""

    workdir: Path
    subnet: str = field(default_factory=lambda: f"127.{_second_octet()}.{next(_SUBNETS) % 250 + 1}")
    procs: list[Proc] = field(default_factory=list)

    def ip(self, host: int) -> str:
        return f"{self.subnet}.{host}"

    def __enter__(self) -> Stack:
        self.workdir.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def spawn(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None, graceful: bool = True) -> Proc:
        log = self.workdir / f"{name}.log"
        full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "operator")])}
        full_env["PYTHONUNBUFFERED"] = "1"
        full_env.update(env or {})
        with log.open("wb") as out:
            popen = subprocess.Popen(
                list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env, cwd=REPO
            )
        proc = Proc(name, popen, log, graceful)
        self.procs.append(proc)
        return proc

    def emulator(
        self,
        version: str,
        role: str,
        host: int,
        *,
        emulate: Sequence[str] = (),
        args: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        drain_timeout: float | None = None,
        options: Sequence[str] = (),
    ) -> Proc:
        """An emulator on `ip(host)`; `options` go before `--` (e.g. `--namespace`, `--kubeconfig`)."""
        ip = self.ip(host)
        argv = [sys.executable, "-m", "e2e.serving.emulator", "--sglang-version", version, "--bind", ip]
        argv += ["--pod-name", f"{role}-{host}", *options]
        for item in emulate:
            argv += ["--emulate", item]
        if drain_timeout is not None:
            argv += ["--drain-timeout", str(drain_timeout)]
        argv += ["--", *(args if args is not None else sglang_args(role))]
        return self.spawn(f"{role}-{host}", argv, env)

    def router(
        self,
        version: str,
        prefill_host: int,
        decode_host: int,
        host: int,
        *,
        bootstrap_port: int = BOOTSTRAP_PORT,
        extra: Sequence[str] = (),
    ) -> Proc:
        router = PROFILES[version].router  # type: ignore[index]
        python = ensure_router_venv(router) / "bin" / "python"
        ip = self.ip(host)
        argv = [
            str(python),
            *router.launch[1:],
            "--pd-disaggregation",
            "--prefill",
            f"http://{self.ip(prefill_host)}:{HTTP_PORT}",
            str(bootstrap_port),
            "--decode",
            f"http://{self.ip(decode_host)}:{HTTP_PORT}",
            "--host",
            ip,
            "--port",
            str(ROUTER_PORT),
            "--prometheus-host",
            ip,
            "--prometheus-port",
            str(PROMETHEUS_PORT),
            *extra,
        ]
        env = {k: "" for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
        return self.spawn(f"router-{host}", argv, env, graceful=False)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is None:
                # Emulators stop at once on SIGINT (SIGTERM would drain); routers need no grace at all.
                proc.popen.send_signal(signal.SIGINT if proc.graceful else signal.SIGKILL)
        deadline = time.monotonic() + 5
        for proc in self.procs:
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(timeout=5)

    def logs(self) -> str:
        return "\n".join(f"===== {p.name} (rc={p.popen.poll()})\n{p.output()[-4000:]}" for p in self.procs)


def request(
    method: str, url: str, body: Any = None, *, timeout: float = 30, headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    """(status, body, headers); status 0 when the connection failed."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        req.add_header(key, value)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as response:
            try:
                return response.status, response.read(), dict(response.headers)
            except http.client.IncompleteRead as exc:
                return response.status, exc.partial, {**dict(response.headers), INCOMPLETE: "1"}
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, b"", {}


def metric(text: str, name: str) -> float:
    """Sum of the samples of `name` (any labels)."""
    values = [float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, flags=re.M)]
    return sum(values)


def wait_for(url: str, *, status: int = 200, timeout: float = 30.0, proc: Proc | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        if proc is not None and proc.popen.poll() is not None:
            raise AssertionError(
                f"{proc.name} exited ({proc.popen.returncode}) while waiting for {url}:\n{proc.output()}"
            )
        last = request("GET", url, timeout=5)[0]
        if last == status:
            return
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer {status} within {timeout}s (last {last})")


def sse_events(raw: bytes) -> Iterator[Any]:
    """The JSON payloads of an SSE body (`data: {json}` events; `[DONE]` yields the string)."""
    for line in raw.decode(errors="replace").splitlines():
        if line.startswith("data:"):
            data = line[len("data:") :].strip()
            yield data if data == "[DONE]" else json.loads(data)


def stream_lines(url: str, body: Any, *, timeout: float = 30) -> Iterator[str]:
    """POST `body` and yield the response's lines as they arrive (for SSE); the status line first as `HTTP <code>`."""
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname or "", parsed.port or 80, timeout=timeout)
    try:
        connection.request("POST", parsed.path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        yield f"HTTP {response.status}"
        while True:
            try:
                line = response.readline()
            except (http.client.IncompleteRead, ConnectionError):
                yield INCOMPLETE
                return
            if not line:
                return
            text = line.decode(errors="replace").rstrip("\n")
            if text:
                yield text
    finally:
        connection.close()
