"""Liveness of the operator's own machinery: each component (a watch, the webhook server) reports whether it works.

The `Controller` owns one `Health` and hands it to the informers and the webhook server; `metrics.serve` answers the
probes from it. `/healthz` answers from `status()`: unhealthy once any component has been failing for longer than
the grace period (a watch that cannot reach the API server, or keeps erroring, for that long means the caches are no
longer trustworthy, and a restart is the honest answer). A component that recovers within the grace period never
makes the probe fail. `/readyz` answers from `ready()`: true once every component that gates readiness has reported
healthy at least once (the webhook server serving, the caches listed). Pure bookkeeping, no API access: the clock is
injectable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_GRACE_SECONDS = 60.0
"""How long a component may fail before liveness fails (a few watch retries with backoff fit in it)."""


@dataclass
class _State:
    healthy: bool
    detail: str
    failing_since: float | None
    ever_healthy: bool
    gates_readiness: bool


class Health:
    """Components' latest reports; thread-safe."""

    def __init__(self, grace_seconds: float = DEFAULT_GRACE_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.grace_seconds = grace_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, _State] = {}

    def expect(self, component: str, gates_readiness: bool = True) -> None:
        """Declare a component before it first reports, so readiness waits for it; liveness does not fail on it."""
        with self._lock:
            self._states.setdefault(component, _State(False, "", None, False, gates_readiness))

    def report(self, component: str, healthy: bool, detail: str = "") -> None:
        """Record a component's current state; a failure starts its grace period, a success ends it."""
        now = self._clock()
        with self._lock:
            state = self._states.setdefault(component, _State(healthy, detail, None, False, True))
            if healthy:
                state.failing_since = None
                state.ever_healthy = True
            elif state.failing_since is None or state.healthy:
                state.failing_since = now
            state.healthy = healthy
            state.detail = detail

    def forget(self, component: str) -> None:
        with self._lock:
            self._states.pop(component, None)

    def status(self) -> tuple[bool, list[str]]:
        """(alive, one line per component); alive is False once a component has failed beyond the grace period."""
        now = self._clock()
        alive = True
        lines = []
        with self._lock:
            for name, state in sorted(self._states.items()):
                failing_for = None if state.failing_since is None else now - state.failing_since
                if failing_for is not None and failing_for > self.grace_seconds:
                    alive = False
                    lines.append(f"{name}: failing for {failing_for:.0f}s: {state.detail}")
                elif failing_for is not None:
                    lines.append(
                        f"{name}: failing for {failing_for:.0f}s (grace {self.grace_seconds:.0f}s): {state.detail}"
                    )
                else:
                    lines.append(f"{name}: {'ok' if state.ever_healthy else 'starting'} {state.detail}".rstrip())
        return alive, lines

    def ready(self) -> tuple[bool, list[str]]:
        """(ready, the components that hold readiness back); ready once each gating component was healthy once."""
        with self._lock:
            waiting = [
                name for name, state in sorted(self._states.items()) if state.gates_readiness and not state.ever_healthy
            ]
        return not waiting, [f"{name}: not ready" for name in waiting]
