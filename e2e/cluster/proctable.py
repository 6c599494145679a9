"""The pod runner's processes: where they are recorded, how a recorded one is recognised, how a whole one is stopped.

Each container process starts a session of its own (so its process group and session ids are its pid); stopping a
container signals every process still in that session, as a kubelet kills a container's whole cgroup. (A process
that starts a session of its own, a daemon, escapes: there are no cgroups here.)

`<state-dir>/serving/processes.json` lists every live container process (pid, start time in clock ticks since boot,
argv, pod and container) and is rewritten atomically on every start and exit, so that after a crash of the runner
`reap_stale` can stop exactly the processes it left behind: a recorded pid counts as ours only while its start time
is the recorded one (pids get recycled; a session id cannot be while any member of the session lives).

It lives with the control plane, not with the runner (`e2e.serving`), because `LocalCluster.down` must stop what the
table records even when the runner is gone (`servingdir.stop_runner`); the runner writes it (`e2e.serving.kubelet`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from e2e.cluster.processes import alive, cmdline


@dataclass(frozen=True)
class ProcessRecord:
    pid: int
    start_ticks: int
    argv: list[str]
    pod_uid: str
    namespace: str
    pod: str
    container: str

    def describe(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.container} (pid {self.pid})"


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3, the state, first)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (field 22 of /proc/<pid>/stat); None when it is gone."""
    fields = _stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def _members(sid: int) -> list[tuple[int, int]]:
    """(pid, process group) of the live (not zombie) processes in session `sid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields and len(fields) > 3 and fields[3] == str(sid) and fields[0] != "Z":
            members.append((int(entry.name), int(fields[2])))
    return members


def session_members(sid: int) -> list[int]:
    """The live (not zombie) processes in session `sid`."""
    return [pid for pid, _ in _members(sid)]


def signal_session(sid: int, signum: int) -> None:
    """Send `signum` once to every process of session `sid`: its process group (whose id is the session's), then
    each member that moved to another group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signum)
    for pid, group in _members(sid):
        if group != sid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)


def is_recorded(record: ProcessRecord) -> bool:
    """True while the recorded leader process itself is alive (same pid, same start time)."""
    return alive(record.pid) and start_ticks(record.pid) == record.start_ticks


def leftovers(record: ProcessRecord) -> list[int]:
    """The processes of a recorded container still alive: its session, when that session is still ours."""
    if alive(record.pid) and start_ticks(record.pid) != record.start_ticks:
        return []  # the pid was recycled, so the recorded session ended long ago
    started = record.start_ticks
    return [pid for pid in session_members(record.pid) if (start_ticks(pid) or 0) >= started]


def stop_recorded(record: ProcessRecord, grace: float) -> bool:
    """SIGTERM what is left of a recorded container, SIGKILL it after `grace` seconds (blocking); True when there
    was something to stop."""
    pids = leftovers(record)
    if not pids:
        return False
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and leftovers(record):
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    for pid in leftovers(record):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and leftovers(record):
        time.sleep(0.05)
    return True


class ProcessTable:
    """`processes.json`: the container processes alive right now, by pid. Safe to share between threads (the
    runner's loop adds and removes while its shutdown reaps in a worker thread)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._records: dict[int, ProcessRecord] = {}
        self._lock = threading.Lock()

    def load(self) -> list[ProcessRecord]:
        """The records on disk (from this or an earlier runner); unreadable entries are skipped."""
        try:
            raw = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return []
        records = []
        for item in raw.get("processes", []) if isinstance(raw, dict) else []:
            with contextlib.suppress(TypeError, KeyError):
                records.append(ProcessRecord(**item))
        return records

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = {"processes": [asdict(r) for r in sorted(self._records.values(), key=lambda r: r.pid)]}
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, self.path)

    def add(self, record: ProcessRecord) -> None:
        with self._lock:
            self._records[record.pid] = record
            self._save()

    def remove(self, pid: int) -> None:
        with self._lock:
            if self._records.pop(pid, None) is not None:
                self._save()

    def replace(self, records: list[ProcessRecord]) -> None:
        """Make `records` the whole table (in memory and on disk)."""
        with self._lock:
            self._records = {r.pid: r for r in records}
            self._save()

    def clear(self) -> None:
        self.replace([])


def reap_stale(table: ProcessTable, grace: float, say: object = print) -> list[ProcessRecord]:
    """Stop every process the table records (left by an earlier runner, or by this one's workers), by pid and start
    time, and wait for them to exit; the records stopped. A record whose pid now belongs to another process (same
    pid, other start time) is dropped and that process left alone. The table keeps only what could not be stopped
    (a process of another user, say), so the next attempt tries again; it is empty otherwise."""
    assert callable(say)
    stopped, survivors = [], []
    for record in table.load():
        if stop_recorded(record, grace):
            argv = " ".join(cmdline(record.pid)) or " ".join(record.argv)
            say(f"stopped {record.describe()}, which was still running: {argv}")
            stopped.append(record)
        remaining = leftovers(record)
        if remaining:
            say(f"could not stop {record.describe()}: pids {remaining} still alive")
            survivors.append(record)
    if table.path.exists() or survivors:
        table.replace(survivors)
    return stopped
