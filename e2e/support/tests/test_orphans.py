"""exit_with_parent and exit_on_signals, on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}

CHILD = """
import os, sys, time
from e2e.support.orphans import exit_with_parent
exit_with_parent(0.1)
print(os.getpid(), flush=True)
time.sleep(60)
"""

PARENT = f"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}], stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), flush=True)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its new parent) has exited too.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z"))


def test_a_worker_exits_once_its_parent_is_gone() -> None:
    done = subprocess.run([sys.executable, "-c", PARENT], capture_output=True, text=True, env=ENV, timeout=30)
    child = int(done.stdout.strip())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the orphaned worker was still running 10 s after its parent exited"


SIGNALLED = """
import time
from e2e.support.orphans import exit_on_signals
exit_on_signals()
try:
    print("ready", flush=True)
    time.sleep(60)
finally:
    print("cleaned up", flush=True)
"""


def test_sigterm_runs_the_clean_up() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SIGNALLED], stdout=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert out.strip() == "cleaned up" and proc.returncode == 128 + signal.SIGTERM
