"""`kubectl port-forward` as a context manager: forwards a Service or pod port to a kernel-chosen loopback port.

kubectl is asked for local port 0 (`:REMOTE`) so parallel forwards never collide; the port it picked is read from its
first banner line (`Forwarding from 127.0.0.1:PORT -> REMOTE`), which `forwarded_port` parses (unit-tested).
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

_BANNER_RE: Final = re.compile(r"^Forwarding from (?:127\.0\.0\.1|\[::1\]):(\d+) -> (\d+)")


def forwarded_port(line: str) -> int | None:
    """The local port of a `kubectl port-forward` banner line; None for any other line."""
    match = _BANNER_RE.match(line.strip())
    return int(match.group(1)) if match else None


@contextmanager
def port_forward(
    kubectl: str, kubeconfig: Path, namespace: str, target: str, remote_port: int, timeout: float = 60
) -> Iterator[int]:
    """Forward `target` (`svc/NAME`, `pod/NAME`, `deployment/NAME`) port `remote_port`; yields the local port."""
    argv = [kubectl, "--kubeconfig", str(kubeconfig), "-n", namespace, "port-forward", target, f":{remote_port}"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def drain() -> None:
        # Keep reading after the banner too: a full pipe would block kubectl's logging and stall the forward.
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=drain, daemon=True).start()
    try:
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        port: int | None = None
        while port is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (process.poll() is not None and lines.empty()):
                raise RuntimeError(f"{' '.join(argv)} gave no forwarding banner; output: {''.join(seen)!r}")
            try:
                line = lines.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            seen.append(line)
            port = forwarded_port(line)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
