"""Continuous background traffic for tests: `traffic.run` on a thread of its own, until the test stops it.

A test opens `with continuous(load, target) as traffic:`, changes the cluster while the requests flow (a rollout),
then calls `traffic.stop()` for the `Report`: no new request starts after that and the ones in flight finish. It
always ends by itself too: after `load.requests` requests or `load.duration` seconds, whichever comes first (each
request bounded by `load.timeout`); leaving the block stops it in any case, so no thread outlives its test.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from e2e.serving.traffic import Load, Outcome, Report, Target, run

JOIN_SLACK = 10.0
"""Seconds `stop` waits beyond the in-flight requests' own timeout before it calls the thread stuck."""


class Continuous:
    """One background load; see the module documentation."""

    def __init__(self, load: Load, target: Target | None = None) -> None:
        self.load = load
        self.target = target
        self.report = Report(load)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="continuous-traffic", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(run(self.load, self.target, stop=self._stop, report=self.report))
        except BaseException as error:  # handed to the test's thread by `stop`
            self._error = error

    def start(self) -> Continuous:
        """Start sending; returns self."""
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """Whether requests are still being sent (False once stopped or a bound was reached)."""
        return self._thread.is_alive()

    def outcomes(self) -> list[Outcome]:
        """The outcomes so far (a copy; in completion order until the load ends, then in request order)."""
        return list(self.report.outcomes)

    def _halt(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=self.load.timeout + JOIN_SLACK)

    def stop(self) -> Report:
        """Stop starting requests, wait for those in flight and return the report; raises what the load raised."""
        self._halt()
        if self._thread.is_alive():
            raise TimeoutError(f"continuous traffic did not stop within {self.load.timeout + JOIN_SLACK:.0f}s")
        if self._error is not None:
            raise self._error
        return self.report


@contextmanager
def continuous(load: Load, target: Target | None = None) -> Iterator[Continuous]:
    """Send `load` (to `target`, default `load.url`) in the background for the block; stopped when it ends."""
    traffic = Continuous(load, target).start()
    try:
        yield traffic
    finally:
        traffic._halt()  # what the load raised is the test's to ask for (`stop`), not to mask the block's error
