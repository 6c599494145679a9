"""The pod runner in the background: `start` (detached, logging to `serving/runner.log`), `stop`, `status`.

`serving/runner.pid` holds the runner's pid and start time (written by the runner once its first pod list is
handled); a pid counts as the runner only while its start time matches, so a recycled pid is never signalled.
`stop_runner` sends SIGTERM (the runner stops its processes and exits), SIGKILL after a timeout, and then stops
anything `serving/processes.json` still lists, so no container process outlives it whatever happened to the runner.
`LocalCluster.down` calls it before removing the state directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from e2e.cluster.processes import alive, stop_pid, tail
from e2e.serving import log
from e2e.serving.plan import DEFAULT_LAUNCHER
from e2e.serving.proctable import ProcessTable, is_recorded, leftovers, reap_stale, start_ticks
from e2e.serving.runner import PIDFILE, TABLE, RunnerError, serving_dir

REPO = Path(__file__).resolve().parents[2]
RUNNER_LOG = "runner.log"


def runner_pid(state_dir: Path) -> int | None:
    """The pid of the live runner of `state_dir`, or None."""
    try:
        data = json.loads((serving_dir(state_dir) / PIDFILE).read_text())
        pid, ticks = int(data["pid"]), data.get("start_ticks")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid if alive(pid) and start_ticks(pid) == ticks else None


def start_runner(
    state_dir: Path,
    kubeconfig: Path | None = None,
    launcher: str = DEFAULT_LAUNCHER,
    extra: list[str] | None = None,
    timeout: float = 60.0,
) -> int:
    """Start the runner detached and return its pid once it has handled the first pod list (or the pid of the one
    already running)."""
    state_dir = state_dir.resolve()
    existing = runner_pid(state_dir)
    if existing is not None:
        log(f"already running (pid {existing})")
        return existing
    directory = serving_dir(state_dir)
    directory.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "e2e.serving", "run", "--state-dir", str(state_dir), "--launcher", launcher]
    if kubeconfig is not None:
        argv += ["--kubeconfig", str(kubeconfig.resolve())]
    argv += extra or []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    with (directory / RUNNER_LOG).open("ab") as output:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RunnerError(
                f"the pod runner exited with code {proc.returncode} during start:\n{tail(directory / RUNNER_LOG)}"
            )
        if runner_pid(state_dir) == proc.pid:
            log(f"started (pid {proc.pid}); log {directory / RUNNER_LOG}")
            return proc.pid
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise RunnerError(f"the pod runner was not ready after {timeout:.0f}s:\n{tail(directory / RUNNER_LOG)}")


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


def runner_status(state_dir: Path) -> Iterator[str]:
    state_dir = state_dir.resolve()
    pid = runner_pid(state_dir)
    yield f"pod runner: {'running (pid ' + str(pid) + ')' if pid else 'not running'}"
    yield f"log: {serving_dir(state_dir) / RUNNER_LOG}"
    for record in ProcessTable(serving_dir(state_dir) / TABLE).load():
        state = "running" if is_recorded(record) else ("leftovers" if leftovers(record) else "gone")
        yield f"  {record.describe():<70} {state}"
