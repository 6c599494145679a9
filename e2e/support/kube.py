"""A handle on one cluster: its kubeconfig, and kubectl and helm bound to it (the binaries `make cluster-build` built).

Used by the test suites (through e2e/support/fixtures.py) and by `make demo`; it raises `CommandFailed` (an
AssertionError, so pytest reports it as a failure with the command's output) when a call that had to succeed did not.
`wait_for` is the polling loop the suites share (`Cluster.wait_for` calls it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from e2e.cluster import build

T = TypeVar("T")

POLL = 0.5
"""Seconds between two tries of a `wait_for` predicate. Most predicates run kubectl, which costs about 80 ms of CPU a
call (its own process; the API server's part is a few ms), and kubectl took 9% of the CPU of a whole `make test` on
2 cores when waits polled every 0.25 s. A wait that must see a change sooner passes its own interval."""


class CommandFailed(AssertionError):
    """A kubectl or helm call that a test expected to succeed failed."""


def _binary(component: build.Component, name: str) -> str:
    if component.is_built():
        return str(component.path(name))
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: run `make cluster-build` or put it on PATH")
    return found


@dataclass(frozen=True)
class Cluster:
    """A handle on the cluster under test: its kubeconfig and kubectl/helm bound to it."""

    kubeconfig: Path
    local: bool

    def _run(self, argv: list[str], input: str | None, check: bool, timeout: float) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        result = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, env=env)
        if check and result.returncode != 0:
            raise CommandFailed(
                f"{' '.join(argv)} exited {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
            )
        return result

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        argv = [_binary(build.KUBERNETES, "kubectl"), "--kubeconfig", str(self.kubeconfig), *args]
        return self._run(argv, input, check, timeout)

    def helm(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        argv = [_binary(build.HELM, "helm"), "--kubeconfig", str(self.kubeconfig), *args]
        return self._run(argv, input, check, timeout)

    def wait_for(self, description: str, predicate: object, timeout: float = 60, interval: float = POLL) -> None:
        """Poll `predicate()` until it is truthy; fail naming `description` when it never is."""
        assert callable(predicate)
        wait_for(description, predicate, timeout, interval)


def wait_for(description: str, predicate: Callable[[], T | None], timeout: float = 60, interval: float = POLL) -> T:
    """Poll `predicate()` until it returns something truthy and return that; raise an AssertionError naming
    `description` when it never does within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {description}")
