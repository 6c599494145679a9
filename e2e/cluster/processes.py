"""Process supervision for the local control plane: loopback ports, which PIDs are ours, liveness, stopping, logs.

A recorded PID counts as ours only while its command line still names the cluster's state directory, so a PID the
kernel has recycled for an unrelated process is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path

LOOPBACK = "127.0.0.1"
"""Every listener of the local control plane binds here."""


def log(message: str) -> None:
    print(f"[cluster] {message}", flush=True)


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_ours(pid: int, directory: Path) -> bool:
    """A PID is ours only while its command line still names our state directory (PIDs get recycled)."""
    return any(str(directory) in arg for arg in cmdline(pid))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of this process is dead for our purposes.
    try:
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return status != "Z"


def stop_pid(name: str, pid: int, directory: Path, timeout: float = 15.0) -> None:
    """SIGTERM `pid` if it is alive and ours, SIGKILL it when it is still alive after `timeout` seconds."""
    if not alive(pid) or not is_ours(pid, directory):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not alive(pid):
            return
        time.sleep(0.1)
    log(f"{name} (pid {pid}) ignored SIGTERM for {timeout:.0f}s: killing it")
    os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    # Not our child (started by another command): SIGKILL is delivered asynchronously, so wait for it to land
    # before the caller reuses the port or starts the component again.
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def tail(path: Path, lines: int = 25) -> str:
    if not path.is_file():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
