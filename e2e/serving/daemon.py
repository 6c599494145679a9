"""The pod runner in the background: `start_runner` (detached, logging to `serving/runner.log`) and `runner_status`.

`start_runner` returns once the runner has written `serving/runner.pid` (its pid and start time, after its first pod
list is handled). Reading that file and stopping the runner and whatever it left (`runner_pid`, `stop_runner`) live
with the control plane, in `e2e.cluster.servingdir`, because `LocalCluster.down` stops them too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from e2e.cluster.processes import tail
from e2e.cluster.proctable import ProcessTable, is_recorded, leftovers
from e2e.cluster.servingdir import TABLE, runner_pid, serving_dir
from e2e.serving import log
from e2e.serving.plan import DEFAULT_LAUNCHER
from e2e.serving.runner import RunnerError

REPO = Path(__file__).resolve().parents[2]
RUNNER_LOG = "runner.log"


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


def runner_status(state_dir: Path) -> Iterator[str]:
    state_dir = state_dir.resolve()
    pid = runner_pid(state_dir)
    yield f"pod runner: {'running (pid ' + str(pid) + ')' if pid else 'not running'}"
    yield f"log: {serving_dir(state_dir) / RUNNER_LOG}"
    for record in ProcessTable(serving_dir(state_dir) / TABLE).load():
        state = "running" if is_recorded(record) else ("leftovers" if leftovers(record) else "gone")
        yield f"  {record.describe():<70} {state}"
