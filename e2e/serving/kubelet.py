"""The kubelet duties of the pod runner for one pod (`PodWorker`) and each of its containers (`ContainerWorker`).

Per container (one local process, see `plan.py` for what runs):

- Start: the env is resolved (`podenv.py`; a missing required ConfigMap/Secret key leaves the container waiting with
  CreateContainerConfigError, retried), the launcher's plan is started in a session of its own, stdout and stderr
  appended to `<state-dir>/serving/logs/<namespace>_<pod>_<container>.log`, the pid recorded in `processes.json`.
- Probes (`prober.py`): the startup probe first (liveness and readiness wait for it; its failureThreshold kills),
  then readiness (the container is ready only while it passes; without a readiness probe, once started) and
  liveness (failureThreshold consecutive failures kill the process, which then restarts per restartPolicy). Each
  failed probe is a Warning Event `Unhealthy`. Readiness and liveness probe at once when startup succeeds (the
  kubelet's workers would be mid-period).
- Exit: reported at once (ready false, `state.terminated` with exitCode and reason Completed/Error, exit code
  128+n for signal n); a non-zero exit is a Warning Event (`BackOff` when it restarts, `Failed` when not). With
  restartPolicy Always (or OnFailure and a non-zero exit) the process restarts after the kubelet's back-off: at once
  the first time, then `initial`, doubling up to `cap` (the kubelet's are 10 s and 300 s; here 1 s and 10 s by
  default, see `Settings`), reset after 2 x cap without a crash; meanwhile `state.waiting` CrashLoopBackOff,
  `lastState.terminated` and restartCount + 1. When no container will run again, phase Succeeded or Failed.
- Stop: SIGTERM to the whole session, SIGKILL after the grace period; the session's other processes are killed when
  the main process exits, as the end of a container's cgroup would.

Per pod: the status (`podstatus.py`) is patched whenever a container's state or readiness changes (coalesced, one patch
in flight per pod, retried on errors). When the pod gets a deletionTimestamp: every container is marked not ready, its
preStop hook runs (a pause: `exec: [sleep, N]` or the `sleep` action; another exec hook through the launcher's local
stand-in, its output appended to the container's log, killed at the grace period; any other hook is logged, not run),
then it is stopped within the pod's `deletionGracePeriodSeconds` (at least 2 s, as the kubelet), then the pod is deleted
with grace period 0 and a UID precondition. A pod that vanishes has its processes stopped the same way.

When the runner stops (`PodWorker.shutdown`, `Runtime.stopping`): no process starts or restarts any more, a preStop
pause in progress ends at once, every process gets SIGTERM and SIGKILL after the (shorter) shutdown grace period, a
drain in progress included, and a pod being deleted is left Terminating for the next runner to finalise.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.cluster.proctable import ProcessRecord, ProcessTable, signal_session, start_ticks
from e2e.serving import log
from e2e.serving.events import NORMAL, WARNING, EventRecorder
from e2e.serving.kubeapi import ApiError, KubeApi
from e2e.serving.plan import Launcher, ProcessPlan, container_env
from e2e.serving.podenv import EnvError, expand, resolve_container
from e2e.serving.podstatus import ContainerView, now_rfc3339, running, status_patch, terminated, waiting
from e2e.serving.prober import (
    LIVENESS,
    READINESS,
    STARTUP,
    Outcome,
    ProbeSpec,
    ProbeTracker,
    exec_command,
    http_get,
    probe_host,
    probes_of,
    resolve_port,
    tcp_socket,
)

MIN_GRACE = 2.0
"""The kubelet's minimumGracePeriodInSeconds: a container always gets at least this long after SIGTERM."""
DEFAULT_GRACE = 30.0


@dataclass(frozen=True)
class Settings:
    backoff_initial: float = 1.0
    """First crash-loop delay (the kubelet's is 10 s)."""
    backoff_cap: float = 10.0
    """Longest crash-loop delay (the kubelet's is 300 s): a simulation should recover within seconds."""
    config_retry: float = 5.0
    """How often a container waiting for a missing ConfigMap or Secret retries."""
    shutdown_grace: float = 5.0
    """Grace period of each process when the runner itself stops (or the pod's, if shorter)."""


@dataclass
class Runtime:
    """What every worker shares."""

    api: KubeApi
    launcher: Launcher
    events: EventRecorder
    table: ProcessTable
    logs: Path
    settings: Settings = field(default_factory=Settings)
    stopping: bool = False
    """The runner is stopping: no container process is started or restarted any more (set before the workers are
    told to stop, so a process that the shutdown stops, or reaps, is never replaced by one it does not know of)."""


class Backoff:
    """The kubelet's crash-loop back-off of one container; pure (times are passed in)."""

    def __init__(self, initial: float, cap: float) -> None:
        self.initial, self.cap = initial, cap
        self._duration: float | None = None
        self._last = 0.0

    def on_exit(self, finished_at: float) -> float:
        """How long to wait before restarting a container that exited at `finished_at` (monotonic seconds)."""
        if self._duration is None or finished_at - self._last > 2 * self.cap:
            wait, self._duration = 0.0, self.initial
        else:
            wait, self._duration = self._duration, min(2 * self._duration, self.cap)
        self._last = finished_at
        return wait


def exit_code_of(returncode: int) -> int:
    """An asyncio return code as a container exit code: killed by signal n is 128 + n."""
    return 128 - returncode if returncode < 0 else returncode


def prestop_pause(hook: dict[str, Any] | None) -> float | None:
    """Seconds a preStop hook pauses, for the hooks that only pause: `exec: [sleep, N]` (what the operator renders)
    and the `sleep: {seconds: N}` action; None for none or any other hook (the runner runs no arbitrary command)."""
    if not hook:
        return None
    if "sleep" in hook:
        return float(hook["sleep"].get("seconds", 0))
    command = (hook.get("exec") or {}).get("command") or []
    if len(command) == 2 and command[0] in ("sleep", "/bin/sleep"):
        try:
            return max(0.0, float(command[1]))
        except ValueError:
            return None
    return None


def pod_grace(pod: dict[str, Any]) -> float:
    """The grace period to stop the pod's processes with: its deletionGracePeriodSeconds while it is being deleted,
    else spec.terminationGracePeriodSeconds (default 30), never less than `MIN_GRACE`."""
    metadata = pod.get("metadata") or {}
    grace = metadata.get("deletionGracePeriodSeconds")
    if grace is None:
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE)
    return max(float(grace if grace is not None else DEFAULT_GRACE), MIN_GRACE)


def pod_key(pod: dict[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def log_path(logs: Path, pod: dict[str, Any], container: str) -> Path:
    """`<logs>/<namespace>_<pod>_<container>.log`: a container's stdout and stderr across restarts."""
    return logs / f"{pod['metadata']['namespace']}_{pod['metadata']['name']}_{container}.log"


class ContainerWorker:
    """One container: its process across restarts, its probes, its part of the pod status."""

    def __init__(self, pod_worker: PodWorker, spec: dict[str, Any], observed: dict[str, Any] | None) -> None:
        self.pod_worker = pod_worker
        self.runtime = pod_worker.runtime
        self.spec = spec
        self.name = str(spec["name"])
        observed = observed or {}
        restarts = int(observed.get("restartCount", 0))
        self.view = ContainerView(self.name, str(spec.get("image", "")), restart_count=restarts)
        self._observed_state = dict(observed.get("state") or {})
        self.managed: bool | None = None
        """True: ours; False: the launcher has no plan for it; None: not decided yet."""
        self.done = False
        """Terminated for good: its restart policy does not restart it."""
        self.last_exit: int | None = None
        self.probes = probes_of(spec)
        self.resolved: dict[str, Any] = dict(spec)
        self.plan: ProcessPlan | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self._stop = asyncio.Event()
        self._stop_deadline = float("inf")
        self._probing = False
        """The probes of the running process may act (False once it is exiting or being stopped)."""
        self._kill_request: asyncio.Future[str] | None = None
        self._backoff = Backoff(self.runtime.settings.backoff_initial, self.runtime.settings.backoff_cap)
        self._said: set[str] = set()
        self.task: asyncio.Task[None] | None = None

    # ---- helpers -----------------------------------------------------------------------------------------------

    @property
    def pod(self) -> dict[str, Any]:
        return self.pod_worker.pod

    @property
    def where(self) -> str:
        return f"{pod_key(self.pod)}/{self.name}"

    def _once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log(message)

    def _event(self, kind: str, reason: str, message: str) -> None:
        self.runtime.events.emit(self.pod, self.name, kind, reason, message)

    def _changed(self) -> None:
        self.pod_worker.notify()

    def unmanaged_view(self) -> ContainerView:
        """How a container the launcher left alone is reported in a pod the runner manages: running and ready."""
        if "running" not in self._observed_state:
            self._observed_state = running(now_rfc3339())
        return ContainerView(
            self.name,
            self.view.image,
            ready=True,
            started=True,
            restart_count=self.view.restart_count,
            state=self._observed_state,
        )

    async def _sleep_or_stop(self, seconds: float) -> bool:
        """Sleep; True when a stop was requested meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
        return self._stop.is_set()

    # ---- planning ----------------------------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Resolve the env and ask the launcher for a plan, which decides whether the container is ours. When that
        fails, the container counts as ours and its start loop retries (waiting, as the kubelet reports it)."""
        with contextlib.suppress(_PlanError):
            await self._make_plan()

    async def _make_plan(self) -> None:
        try:
            resolved = await asyncio.to_thread(resolve_container, self.pod, self.spec, self.runtime.api.source_data)
        except (EnvError, ApiError) as error:
            self.managed = True
            self._waiting("CreateContainerConfigError", f"Error: {error}")
            raise _PlanError from error
        for note in resolved.notes:
            self._once(note, f"{self.where}: {note}")
        self.resolved = resolved.container
        try:
            plan = self.runtime.launcher.plan(self.pod, self.resolved)
        except Exception as error:
            log(f"{self.where}: the launcher failed: {error!r}")
            self.managed = True
            self._waiting("RunContainerError", f"the launcher failed: {error}")
            raise _PlanError from error
        if plan is None:
            if self.managed is None:
                log(f"{self.where}: the launcher has no plan for it: left alone")
            self.managed = False
            return
        self.managed = True
        self.plan = plan

    def _waiting(self, reason: str, message: str) -> None:
        self.view.state = waiting(reason, message)
        self.view.ready = self.view.started = False
        self._once(f"{reason}:{message}", f"{self.where}: {reason}: {message}")
        self._event(WARNING, "Failed", message)
        self._changed()

    # ---- the container's life ----------------------------------------------------------------------------------

    def start(self) -> None:
        if "terminated" in self._observed_state:
            # An earlier runner stopped it (or it had exited): this start is a restart.
            self.view.last_state = self._observed_state
            self.view.restart_count += 1
        self.task = asyncio.get_running_loop().create_task(self._guarded_life(), name=f"container {self.where}")

    async def _guarded_life(self) -> None:
        while True:
            try:
                await self._life()
                return
            except Exception as error:  # a bug here must not orphan the process nor end the container silently
                log(f"{self.where}: unexpected error, restarting the container: {error!r}")
                if self.proc is not None:
                    signal_session(self.proc.pid, signal.SIGKILL)
                    await self.proc.wait()
                    self.runtime.table.remove(self.proc.pid)
                    self.proc = None
                self.plan = None
                self._waiting("RunContainerError", f"the pod runner failed: {error}")
                if await self._sleep_or_stop(self.runtime.settings.backoff_cap):
                    return

    async def _life(self) -> None:
        settings = self.runtime.settings
        while not self._stop.is_set():
            if self.plan is None:
                try:
                    await self._make_plan()
                except _PlanError:
                    if await self._sleep_or_stop(settings.config_retry):
                        return
                    continue
                if self.plan is None:  # not ours after all (decided once its env could be resolved): left alone
                    self._changed()
                    return
            if self._stop.is_set() or self.runtime.stopping:  # stopped while planning: nothing was started
                return
            exit_code = await self._run_once(self.plan)
            self.plan = None  # the next start plans again, from the pod as it is then
            if self._stop.is_set() or self.runtime.stopping:
                return
            policy = (self.pod.get("spec") or {}).get("restartPolicy", "Always")
            restart = policy == "Always" or (policy == "OnFailure" and exit_code != 0)
            pod_ref = f"{self.pod['metadata']['name']}_{self.pod['metadata']['namespace']}"
            which = f"container {self.name} in pod {pod_ref}"
            if not restart:
                if exit_code != 0:
                    self._event(WARNING, "Failed", f"{which} exited with code {exit_code} (restartPolicy {policy})")
                self.done = True
                self._changed()
                return
            delay = self._backoff.on_exit(time.monotonic())
            if exit_code != 0:
                self._event(WARNING, "BackOff", f"Back-off restarting failed {which}: exit code {exit_code}")
            self.view.last_state = self.view.state
            self.view.restart_count += 1
            if delay > 0:
                self.view.state = waiting(
                    "CrashLoopBackOff", f"back-off {delay:g}s restarting failed container={self.name} pod={pod_ref}"
                )
                self._changed()
                if await self._sleep_or_stop(delay):
                    return

    def hook_command(self, hook: dict[str, Any] | None) -> list[str] | None:
        """The local argv of an exec lifecycle hook (its command's $(VAR) expanded with the container's env, as the
        kubelet does), or None when there is none or the launcher cannot run it here."""
        command = ((hook or {}).get("exec") or {}).get("command")
        if not command or self.plan is None:
            return None
        env_values = container_env(self.resolved)
        expanded = [expand(str(part), env_values) for part in command]
        return self.runtime.launcher.probe_command(self.pod, self.resolved, expanded)

    async def run_hook(self, argv: list[str], timeout: float) -> None:
        """Run a hook's argv with the container's env, its output appended to the container's log; killed (its
        session) after `timeout` seconds or when cancelled."""
        plan = self.plan
        path = log_path(self.runtime.logs, self.pod, self.name)
        with path.open("ab") as output:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=output,
                    stderr=asyncio.subprocess.STDOUT,
                    env=plan.env if plan is not None else {},
                    cwd=plan.cwd if plan is not None else None,
                    start_new_session=True,
                )
            except OSError as error:
                log(f"{self.where}: preStop hook could not start: {error}")
                return
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            log(f"{self.where}: preStop hook still running after {timeout:g}s: killed")
            signal_session(proc.pid, signal.SIGKILL)
            await proc.wait()
        except asyncio.CancelledError:
            signal_session(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise
        finally:
            if proc.returncode not in (None, 0):
                log(f"{self.where}: preStop hook exited with {exit_code_of(proc.returncode)}")

    async def _spawn(self, plan: ProcessPlan) -> asyncio.subprocess.Process | None:
        path = log_path(self.runtime.logs, self.pod, self.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as output:
            output.write(f"--- {now_rfc3339()} start #{self.view.restart_count}: {shlex.join(plan.argv)}\n".encode())
            output.flush()
            try:
                return await asyncio.create_subprocess_exec(
                    *plan.argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=output,
                    stderr=asyncio.subprocess.STDOUT,
                    env=plan.env,
                    cwd=plan.cwd,
                    start_new_session=True,
                )
            except OSError as error:
                output.write(f"--- could not start: {error}\n".encode())
                self._event(WARNING, "Failed", f"Error: failed to start container {self.name}: {error}")
                return None

    async def _run_once(self, plan: ProcessPlan) -> int:
        """Start the plan, probe it, wait for it to exit (or stop it); report the exit; the exit code."""
        started_at = now_rfc3339()
        proc = await self._spawn(plan)
        if proc is None:
            self.view.ready = self.view.started = False
            self.view.state = terminated(128, started_at, now_rfc3339())
            self.view.state["terminated"]["reason"] = "StartError"
            self.last_exit = 128
            self._changed()
            await self.pod_worker.flush()
            return 128
        self.proc = proc
        metadata = self.pod["metadata"]
        record = ProcessRecord(
            proc.pid,
            start_ticks(proc.pid) or 0,
            list(plan.argv),
            metadata["uid"],
            metadata["namespace"],
            metadata["name"],
            self.name,
        )
        self.runtime.table.add(record)
        log(f"started {record.describe()}: {shlex.join(plan.argv)}")
        self.view.container_id = f"process://{proc.pid}"
        self.view.state = running(started_at)
        self.view.started = STARTUP not in self.probes
        self.view.ready = self.view.started and READINESS not in self.probes
        self._kill_request = asyncio.get_running_loop().create_future()
        self._event(NORMAL, "Started", f"Started container {self.name} (pid {proc.pid})")
        self._changed()

        exited = asyncio.ensure_future(proc.wait())
        stopped: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        kill_request: asyncio.Future[Any] = self._kill_request
        probe_tasks = self._start_probes(time.monotonic())
        try:
            await asyncio.wait({exited, stopped, kill_request}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            # No probing of a container that is exiting or being stopped. The flag as well as the cancel: Python
            # 3.11's wait_for (the HTTP probe's timeout) returns a result that lands with the cancel and drops the
            # cancel, and a probe loop that missed it would run on and keep this container from ever being stopped.
            self._probing = False
            for task in probe_tasks:
                task.cancel()
            await asyncio.gather(*probe_tasks, return_exceptions=True)
            if not exited.done():
                deadline = float("inf")
                if kill_request.done():
                    deadline = time.monotonic() + self._grace_for_kill(kill_request.result())
                await self._terminate(proc, exited, deadline)
        returncode = await exited
        # The rest of the container goes with its main process, as with the end of a cgroup.
        signal_session(proc.pid, signal.SIGKILL)
        self.runtime.table.remove(proc.pid)
        self.proc = None
        code = exit_code_of(returncode)
        self.last_exit = code
        with contextlib.suppress(OSError), log_path(self.runtime.logs, self.pod, self.name).open("a") as output:
            output.write(f"--- {now_rfc3339()} exited with code {code}\n")
        log(f"{record.describe()} exited with code {code}")
        self.view.ready = self.view.started = False
        self.view.state = terminated(code, started_at, now_rfc3339(), self.view.container_id)
        self._changed()
        await self.pod_worker.flush()
        return code

    def _grace_for_kill(self, role: str) -> float:
        probe = self.probes.get(role)
        if probe is not None and probe.termination_grace is not None:
            return max(float(probe.termination_grace), MIN_GRACE)
        spec_grace = (self.pod.get("spec") or {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE)
        return max(float(spec_grace if spec_grace is not None else DEFAULT_GRACE), MIN_GRACE)

    async def _terminate(self, proc: asyncio.subprocess.Process, exited: asyncio.Future[int], deadline: float) -> None:
        """SIGTERM the session; SIGKILL it once `deadline` (or a stop's deadline, which may still shorten) passes."""
        log(f"{self.where} (pid {proc.pid}): SIGTERM")
        signal_session(proc.pid, signal.SIGTERM)
        while not exited.done():
            remaining = min(deadline, self._stop_deadline) - time.monotonic()
            if remaining <= 0:
                log(f"{self.where} (pid {proc.pid}) still running after its grace period: SIGKILL")
                signal_session(proc.pid, signal.SIGKILL)
                break
            await asyncio.wait({exited}, timeout=min(0.2, remaining))
        await exited

    def stop(self, deadline: float) -> None:
        """Stop the container for good: SIGTERM now, SIGKILL at `deadline` (monotonic; an earlier one wins)."""
        self._stop_deadline = min(self._stop_deadline, deadline)
        self._stop.set()

    async def wait(self) -> None:
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)

    # ---- probes ------------------------------------------------------------------------------------------------

    def _start_probes(self, started: float) -> list[asyncio.Task[None]]:
        self._probing = True
        tasks: list[asyncio.Task[None]] = []
        loop = asyncio.get_running_loop()
        if STARTUP in self.probes:
            tasks.append(loop.create_task(self._probe_loop(self.probes[STARTUP], started, tasks)))
        else:
            tasks.extend(self._after_startup(started))
        return tasks

    def _after_startup(self, started: float) -> list[asyncio.Task[None]]:
        loop = asyncio.get_running_loop()
        roles = [role for role in (READINESS, LIVENESS) if role in self.probes]
        return [loop.create_task(self._probe_loop(self.probes[role], started)) for role in roles]

    async def _probe_loop(self, spec: ProbeSpec, started: float, tasks: list[asyncio.Task[None]] | None = None) -> None:
        """Probe every period from `started` + initialDelaySeconds; apply results once over their threshold."""
        tracker = ProbeTracker(spec)
        next_at = max(started + spec.initial_delay, time.monotonic())
        while self._probing:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at + spec.period, time.monotonic())
            outcome = await self._probe(spec)
            if not self._probing:
                return
            if not outcome.success:
                self._event(WARNING, "Unhealthy", f"{spec.role.capitalize()} probe failed: {outcome.message}")
            if not tracker.record(outcome.success):
                continue
            if spec.role == STARTUP:
                if not tracker.result:
                    self._request_kill(STARTUP, "failed startup probe")
                    return
                self.view.started = True
                self.view.ready = READINESS not in self.probes
                self._changed()
                if tasks is not None:
                    tasks.extend(self._after_startup(started))
                return
            if spec.role == READINESS:
                if self.pod_worker.end in ("delete", "shutdown"):
                    continue  # a pod being deleted stays out of the endpoints, whatever its server still answers
                if self.view.ready != tracker.result:
                    log(f"{self.where}: {'ready' if tracker.result else 'not ready'}")
                    self.view.ready = bool(tracker.result)
                    self._changed()
                continue
            if not tracker.result:
                self._request_kill(LIVENESS, "failed liveness probe")
                return

    def _request_kill(self, role: str, why: str) -> None:
        self._event(NORMAL, "Killing", f"Container {self.name} {why}, will be restarted")
        if self._kill_request is not None and not self._kill_request.done():
            self._kill_request.set_result(role)

    async def _probe(self, spec: ProbeSpec) -> Outcome:
        pod_ip = str((self.pod.get("status") or {}).get("podIP", ""))
        try:
            if spec.handler == "httpGet":
                port = resolve_port(spec.action.get("port"), self.spec)
                return await http_get(probe_host(spec.action, pod_ip), port, spec.action, spec.timeout)
            if spec.handler == "tcpSocket":
                port = resolve_port(spec.action.get("port"), self.spec)
                return await tcp_socket(probe_host(spec.action, pod_ip), port, spec.timeout)
            if spec.handler == "exec":
                # The kubelet expands $(VAR) in an exec probe's command with the container's env.
                env_values = container_env(self.resolved)
                command = [expand(str(part), env_values) for part in spec.action.get("command") or []]
                argv = self.runtime.launcher.probe_command(self.pod, self.resolved, command)
                if argv is not None:
                    env = self.plan.env if self.plan is not None else {}
                    cwd = self.plan.cwd if self.plan is not None else None
                    return await exec_command(argv, env, cwd, spec.timeout)
        except ValueError as error:
            return Outcome(False, str(error))
        self._once(
            f"probe-{spec.role}",
            f"{self.where}: its {spec.role} probe ({spec.handler or 'no handler'}) cannot run here: counted as passing",
        )
        return Outcome(True)


class _PlanError(Exception):
    """No plan this time (reported as a waiting state); the start loop retries."""


class PodWorker:
    """One pod on a kwok node: its containers, its status, its deletion."""

    def __init__(self, runtime: Runtime, pod: dict[str, Any]) -> None:
        self.runtime = runtime
        self.pod = pod
        self.uid = str(pod["metadata"]["uid"])
        observed = {s.get("name"): s for s in (pod.get("status") or {}).get("containerStatuses") or []}
        self.containers = [ContainerWorker(self, c, observed.get(c["name"])) for c in pod["spec"]["containers"]]
        self.end: str | None = None
        """Why the worker ends: "delete" (deletionTimestamp), "quiet" (the pod left phase Running), "vanish" (gone
        from the API) or "shutdown" (the runner stops)."""
        self.gone = False
        """The pod no longer exists: nothing more is written to the API."""
        self.passive = False
        """No container of the pod is ours: nothing runs and the status is not touched (deletion still is ours)."""
        self.finished = asyncio.Event()
        self._ended = asyncio.Event()
        self._deadline = float("inf")
        self._stopping = False
        self._hurry = asyncio.Event()
        """Set when the runner stops or the pod vanishes: a preStop pause in progress ends at once."""
        self._dirty = asyncio.Event()
        self._generation = 0
        self._patched = 0
        self._patched_changed = asyncio.Condition()
        self._sent: dict[str, Any] | None = None
        self._sent_conditions: dict[str, dict[str, Any]] = {}
        self._patch_failures = 0
        self._task: asyncio.Task[None] | None = None
        self._patcher: asyncio.Task[None] | None = None

    @property
    def key(self) -> str:
        return pod_key(self.pod)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._main(), name=f"pod {self.key}")

    # ---- what the watch tells ----------------------------------------------------------------------------------

    def update(self, pod: dict[str, Any]) -> None:
        """A newer version of the pod."""
        if pod["metadata"].get("uid") != self.uid:
            return
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self._finish("delete", pod_grace(pod))
        elif (pod.get("status") or {}).get("phase") != "Running":
            self._finish("quiet", pod_grace(pod))
        else:
            self.notify()  # a readiness gate may have changed

    def vanish(self, pod: dict[str, Any] | None) -> None:
        """The pod is gone from the API: stop its processes and write nothing."""
        self.gone = True
        self._finish("vanish", pod_grace(pod or self.pod))

    def shutdown(self, grace: float) -> None:
        self._finish("shutdown", min(grace, pod_grace(self.pod)))

    def _finish(self, why: str, grace: float) -> None:
        # delete > quiet: a pod that left Running and is then deleted still has to be deleted by us.
        if self.end is None or (why == "delete" and self.end == "quiet") or why == "vanish":
            self.end = why
        self._deadline = min(self._deadline, time.monotonic() + grace)
        if why in ("shutdown", "vanish"):
            self._hurry.set()
        if self._stopping or why in ("vanish", "quiet"):
            self._stop_containers()
        self._ended.set()

    def _stop_containers(self) -> None:
        self._stopping = True
        for container in self.containers:
            container.stop(self._deadline)

    # ---- status ------------------------------------------------------------------------------------------------

    def _writes_status(self) -> bool:
        return not self.gone and not self.passive and self.end not in ("quiet", "vanish")

    def notify(self) -> None:
        self._generation += 1
        self._dirty.set()

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait until every change so far is patched (or given up on), at most `timeout` seconds."""
        target = self._generation
        if self._patcher is None or self._patcher.done():
            return

        async def reached() -> None:
            async with self._patched_changed:
                await self._patched_changed.wait_for(lambda: self._patched >= target)

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reached(), timeout)

    def _views(self) -> list[ContainerView]:
        return [c.view if c.managed else c.unmanaged_view() for c in self.containers]

    def _phase(self) -> str | None:
        """Succeeded or Failed once no container will run again (all ours, none restarting), else None."""
        if self.end is not None or not all(c.managed and c.done for c in self.containers):
            return None
        return "Succeeded" if all(c.last_exit == 0 for c in self.containers) else "Failed"

    async def _patch_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await asyncio.sleep(0.02)  # let simultaneous changes land in one patch
            generation = self._generation
            if self._writes_status():
                await self._patch_once()
            async with self._patched_changed:
                self._patched = max(self._patched, generation)
                self._patched_changed.notify_all()

    async def _patch_once(self) -> None:
        observed = {c.get("type"): c for c in (self.pod.get("status") or {}).get("conditions") or []}
        prior = {**observed, **self._sent_conditions}
        patch = status_patch(self.pod, self._views(), prior, now_rfc3339(), self._phase())
        if patch == self._sent:
            return
        metadata = self.pod["metadata"]
        try:
            updated = await asyncio.to_thread(
                self.runtime.api.patch_pod_status, metadata["namespace"], metadata["name"], patch
            )
        except ApiError as error:
            if error.status == 404:
                self.gone = True
                return
            self._patch_failures += 1
            delay = min(2.0 ** (self._patch_failures - 1), 10.0)
            if self._patch_failures == 1:
                log(f"{self.key}: status patch failed, retrying (every {delay:g}s up to 10s): {error}")
            await asyncio.sleep(delay)
            self._dirty.set()
            return
        if self._patch_failures:
            log(f"{self.key}: status patched again after {self._patch_failures} failure(s)")
            self._patch_failures = 0
        if (updated.get("metadata") or {}).get("uid") == self.uid:
            self.pod = {**self.pod, "status": updated.get("status") or {}}
        self._sent = patch
        self._sent_conditions = {c["type"]: c for c in patch["status"]["conditions"]}

    # ---- the pod's life ----------------------------------------------------------------------------------------

    async def _main(self) -> None:
        try:
            if self.end is None:
                await asyncio.gather(*(c.prepare() for c in self.containers))
                self.passive = not any(c.managed for c in self.containers)
                if self.end is None and not self.passive:
                    self._patcher = asyncio.get_running_loop().create_task(self._patch_loop())
                    for container in self.containers:
                        if container.managed:
                            container.start()
                    self.notify()
            await self._ended.wait()
            await self._end()
        except Exception as error:  # never die silently: the processes would be orphaned
            log(f"{self.key}: worker failed: {error!r}")
            self._deadline = min(self._deadline, time.monotonic() + MIN_GRACE)
            self._stop_containers()
            await asyncio.gather(*(c.wait() for c in self.containers))
        finally:
            if self._patcher is not None:
                self._patcher.cancel()
            self.runtime.events.forget(self.uid)
            self.finished.set()

    async def _end(self) -> None:
        running_ones = [c for c in self.containers if c.managed and c.proc is not None]
        if self.end in ("delete", "shutdown") and self._writes_status():
            # Out of the endpoints first, then the signals: what a kubelet does.
            for container in self.containers:
                if container.managed:
                    container.view.ready = False
            if self.end == "delete":
                for container in running_ones:
                    self.runtime.events.emit(
                        self.pod, container.name, NORMAL, "Killing", f"Stopping container {container.name}"
                    )
            self.notify()
            await self.flush(timeout=2.0)
            if self.end == "delete":
                await self._pre_stop(running_ones)
        self._stop_containers()
        await asyncio.gather(*(c.wait() for c in self.containers))
        if self._writes_status():
            await self.flush(timeout=2.0)
        if self.end == "delete" and not self.gone and not self.runtime.stopping:
            # (When the runner stops, the pod stays Terminating with its processes stopped: the next runner
            # finalises it, as a kubelet started again would.)
            await self._delete()

    async def _pre_stop(self, containers: list[ContainerWorker]) -> None:
        """Run the containers' preStop hooks (in parallel, within the grace period) before they get SIGTERM; a
        hook ends early when the runner stops or the pod vanishes."""
        pauses = []
        waits: list[asyncio.Future[Any]] = []
        budget = max(0.0, self._deadline - time.monotonic() - MIN_GRACE)
        for container in containers:
            hook = (container.spec.get("lifecycle") or {}).get("preStop")
            seconds = prestop_pause(hook)
            if seconds is not None:
                log(f"{self.key}/{container.name}: preStop pause {seconds:g}s")
                pauses.append(seconds)
                continue
            argv = container.hook_command(hook)
            if argv is None:
                if hook:
                    log(f"{self.key}/{container.name}: preStop {hook} cannot run here: not run")
                continue
            log(f"{self.key}/{container.name}: preStop exec {shlex.join(argv)}")
            waits.append(asyncio.ensure_future(container.run_hook(argv, budget)))
        if pauses:
            waits.append(asyncio.ensure_future(asyncio.sleep(min(max(pauses), budget))))
        if not waits:
            return
        hurry: asyncio.Future[Any] = asyncio.ensure_future(self._hurry.wait())
        every: asyncio.Future[Any] = asyncio.gather(*waits, return_exceptions=True)
        try:
            await asyncio.wait([every, hurry], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*waits, hurry]:
                task.cancel()
            await asyncio.gather(every, hurry, return_exceptions=True)

    async def _delete(self) -> None:
        metadata = self.pod["metadata"]
        for attempt in range(1, 31):
            if self.gone:
                return
            try:
                deleted = await asyncio.to_thread(
                    self.runtime.api.delete_pod_now, metadata["namespace"], metadata["name"], self.uid
                )
            except ApiError as error:
                log(f"{self.key}: delete failed (attempt {attempt}), retrying in 1s: {error}")
                await asyncio.sleep(1)
                continue
            log(f"{self.key}: {'deleted' if deleted else 'already gone'}")
            return

    async def wait(self) -> None:
        await self.finished.wait()
