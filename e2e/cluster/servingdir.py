"""A cluster's serving directory, `<state-dir>/serving/`: the files of serving mode's pod runner (`e2e.serving`), and
how to stop the runner and everything it started, whatever state it is in.

The runner writes `runner.pid` (its pid and start time, once its first pod list is handled) and `processes.json`
(the container processes it started, `proctable.py`). A pid counts as the runner only while its start time matches,
so a recycled pid is never signalled. `stop_runner` sends SIGTERM (the runner stops its processes and exits),
SIGKILL after a timeout, and then stops anything `processes.json` still lists, so no container process outlives it
whatever happened to the runner.

This is the lower layer's half of serving mode: `LocalCluster.down` calls `stop_runner` before it removes the state
directory, so `e2e.cluster` needs nothing from `e2e.serving`, which imports this module for the same paths.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from e2e.cluster.processes import alive, stop_pid
from e2e.cluster.proctable import ProcessTable, reap_stale, start_ticks

SERVING_DIR = "serving"
"""The pod runner's files (pidfile, process table, logs) live in this subdirectory of the cluster's state directory."""
PIDFILE = "runner.pid"
TABLE = "processes.json"


def log(message: str) -> None:
    """The pod runner's log prefix (as `e2e.serving.log`): what is said here is said on the runner's behalf."""
    print(f"[pod-runner] {message}", flush=True)


def serving_dir(state_dir: Path) -> Path:
    return state_dir / SERVING_DIR


def runner_pid(state_dir: Path) -> int | None:
    """The pid of the live runner of `state_dir`, or None."""
    try:
        data = json.loads((serving_dir(state_dir) / PIDFILE).read_text())
        pid, ticks = int(data["pid"]), data.get("start_ticks")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid if alive(pid) and start_ticks(pid) == ticks else None


def stop_runner(state_dir: Path, timeout: float = 30.0) -> None:
    """Stop the runner of `state_dir` and every process it left; idempotent."""
    state_dir = state_dir.resolve()
    directory = serving_dir(state_dir)
    pid = runner_pid(state_dir)
    if pid is not None:
        # Its command line names the state directory, so stop_pid recognises it as ours.
        stop_pid("the runner", pid, state_dir, timeout=timeout)
        log(f"stopped the runner (pid {pid})")
    stale = reap_stale(ProcessTable(directory / TABLE), grace=2.0, say=log)
    if stale:
        log(f"stopped {len(stale)} process(es) the runner left")
    with contextlib.suppress(FileNotFoundError):
        (directory / PIDFILE).unlink()
