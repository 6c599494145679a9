"""Helpers that keep a benchmark's processes from outliving it.

A benchmark's load generators run in worker processes. Killed by a signal, Python runs no `finally` block, and the
workers went on sending load for the rest of their schedule: to pod IPs the next run's local cluster reuses
(127.248.0.0/16), which then served their traffic as its own (measured: a killed bench_autoscale run's generator
scaled the next run's planner arm to 12 prefill servers before that run's load began). `exit_with_parent` ends a
worker once its parent is gone, however the parent died; `exit_on_signals` turns SIGTERM and SIGHUP into SystemExit,
so a benchmark's own clean-up (the operator, the local cluster) runs when it is stopped.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from types import FrameType

__all__ = ["exit_on_signals", "exit_with_parent"]


def exit_with_parent(poll_seconds: float = 0.5) -> None:
    """End this process (os._exit) once its parent has exited: a daemon thread polls the parent's pid, which
    changes when the orphan is re-parented."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def exit_on_signals() -> None:
    """SIGTERM and SIGHUP raise SystemExit in the main thread, so `finally` blocks and context managers run."""
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, _raise_exit)
