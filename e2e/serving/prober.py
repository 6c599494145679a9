"""Container probes as the kubelet runs them: the probe settings with Kubernetes' defaults, the threshold bookkeeping
(pure), and the three handlers run against the pod's loopback IP (asyncio).

- httpGet: a GET of `path` on `host` (the pod IP unless the probe names another loopback address) at `port` (a
  number, or the name of one of the container's ports), `scheme` HTTP or HTTPS (certificate not verified, as the
  kubelet does), `httpHeaders` sent; any status from 200 to 399 is a success, redirects are not followed.
- tcpSocket: a TCP connection to the port is a success.
- exec: the launcher's local stand-in for the command (`Launcher.probe_command`) exits 0 within `timeoutSeconds`.
- grpc: not supported; such a probe counts as succeeding (the runner logs so once).

Thresholds follow the kubelet's prober worker: a result is applied once it has repeated `successThreshold` (success)
or `failureThreshold` (failure) times in a row; readiness starts as failed, liveness as succeeded, startup as unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import signal
import ssl
from dataclasses import dataclass, field
from typing import Any

STARTUP = "startup"
READINESS = "readiness"
LIVENESS = "liveness"
FIELDS = {STARTUP: "startupProbe", READINESS: "readinessProbe", LIVENESS: "livenessProbe"}
HANDLERS = ("httpGet", "tcpSocket", "exec", "grpc")
USER_AGENT = "kube-probe/1.37"
MAX_MESSAGE = 200


@dataclass(frozen=True)
class ProbeSpec:
    """One probe of a container with the Kubernetes defaults applied (0 or missing means the default)."""

    role: str
    handler: str
    action: dict[str, Any]
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace: int | None = None
    """`terminationGracePeriodSeconds` of a liveness or startup probe: overrides the pod's when it kills."""

    @classmethod
    def parse(cls, role: str, probe: dict[str, Any]) -> ProbeSpec:
        handler = next((name for name in HANDLERS if probe.get(name) is not None), "")
        success = int(probe.get("successThreshold") or 1)
        grace = probe.get("terminationGracePeriodSeconds")
        return cls(
            role=role,
            handler=handler,
            action=dict(probe.get(handler) or {}) if handler else {},
            initial_delay=float(probe.get("initialDelaySeconds") or 0),
            period=float(probe.get("periodSeconds") or 10),
            timeout=float(probe.get("timeoutSeconds") or 1),
            # The API server refuses anything but 1 for liveness and startup probes.
            success_threshold=success if role == READINESS else 1,
            failure_threshold=int(probe.get("failureThreshold") or 3),
            termination_grace=None if grace is None else int(grace),
        )


def probes_of(container: dict[str, Any]) -> dict[str, ProbeSpec]:
    """The container's probes by role (startup, readiness, liveness); a role without a probe is absent."""
    return {role: ProbeSpec.parse(role, container[key]) for role, key in FIELDS.items() if container.get(key)}


@dataclass
class ProbeTracker:
    """The kubelet prober worker's bookkeeping: the applied result changes only after a run of equal outcomes."""

    spec: ProbeSpec
    result: bool | None = field(init=False)
    """The applied result: True (success), False (failure), None (unknown: no threshold reached yet)."""
    _last: bool | None = field(init=False, default=None)
    _run: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.result = {READINESS: False, LIVENESS: True, STARTUP: None}[self.spec.role]

    def record(self, success: bool) -> bool:
        """Count one probe outcome; True when it reached its threshold (the result is then applied, repeatedly for
        every further equal outcome, as the kubelet does)."""
        if success == self._last:
            self._run += 1
        else:
            self._last, self._run = success, 1
        threshold = self.spec.success_threshold if success else self.spec.failure_threshold
        if self._run < threshold:
            return False
        self.result = success
        return True


def resolve_port(port: Any, container: dict[str, Any]) -> int:
    """A probe's port: a number, a numeric string, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    text = str(port)
    if text.isdigit():
        return int(text)
    for item in container.get("ports") or []:
        if item.get("name") == text:
            return int(item["containerPort"])
    raise ValueError(f"port {text!r} is not the name of a port of container {container.get('name')}")


def probe_host(action: dict[str, Any], pod_ip: str) -> str:
    """The address to probe: the pod IP, or the probe's own `host` when that is a loopback address."""
    host = str(action.get("host") or "")
    if host:
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(host).is_loopback:
                return host
    return pod_ip


@dataclass(frozen=True)
class Outcome:
    success: bool
    message: str = ""


def _describe(error: Exception, host: str, port: int) -> str:
    """A failed connection as the kubelet words it."""
    if isinstance(error, ConnectionRefusedError):
        return f"dial tcp {host}:{port}: connect: connection refused"
    if isinstance(error, ConnectionResetError):
        return f"read tcp {host}:{port}: read: connection reset by peer"
    if isinstance(error, OSError) and error.strerror:
        return f"dial tcp {host}:{port}: {error.strerror.lower()}"
    return str(error)


async def http_get(host: str, port: int, action: dict[str, Any], timeout: float) -> Outcome:
    scheme = str(action.get("scheme") or "HTTP").upper()
    path = str(action.get("path") or "/")
    if not path.startswith("/"):
        path = "/" + path
    context: ssl.SSLContext | None = None
    if scheme == "HTTPS":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    headers = {"Host": f"{host}:{port}", "User-Agent": USER_AGENT, "Accept": "*/*", "Connection": "close"}
    for header in action.get("httpHeaders") or []:
        headers[str(header.get("name"))] = str(header.get("value", ""))
    request = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"

    async def exchange() -> Outcome:
        reader, writer = await asyncio.open_connection(host, port, ssl=context)
        try:
            writer.write(request.encode("latin-1"))
            await writer.drain()
            status_line = (await reader.readline()).decode("latin-1").strip()
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            return Outcome(False, f"HTTP probe failed: malformed status line {status_line[:MAX_MESSAGE]!r}")
        code = int(parts[1])
        if 200 <= code < 400:
            return Outcome(True)
        return Outcome(False, f"HTTP probe failed with statuscode: {code}")

    try:
        return await asyncio.wait_for(exchange(), timeout)
    except TimeoutError:
        return Outcome(False, f'Get "{scheme.lower()}://{host}:{port}{path}": context deadline exceeded')
    except (OSError, ssl.SSLError) as error:
        return Outcome(False, f'Get "{scheme.lower()}://{host}:{port}{path}": {_describe(error, host, port)}')


async def tcp_socket(host: str, port: int, timeout: float) -> Outcome:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except TimeoutError:
        return Outcome(False, f"dial tcp {host}:{port}: i/o timeout")
    except OSError as error:
        return Outcome(False, _describe(error, host, port))
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return Outcome(True)


async def exec_command(argv: list[str], env: dict[str, str], cwd: str | None, timeout: float) -> Outcome:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as error:
        return Outcome(False, f"exec probe {argv[0]!r} could not start: {error}")
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        return Outcome(False, f"command {argv[0]!r} timed out after {timeout:g}s")
    if proc.returncode == 0:
        return Outcome(True)
    lines = [line for line in output.decode(errors="replace").splitlines() if line.strip()]
    last = lines[-1].strip()[-MAX_MESSAGE:] if lines else "(no output)"
    return Outcome(False, f"command {argv[0]!r} exited with {proc.returncode}: {last}")
