"""The pod status patch the runner sends (the status subresource, strategic merge); pure.

The patch carries the whole `containerStatuses` list (an atomic list in the pod API: it replaces the stored one), the
conditions `ContainersReady` and `Ready` (merged by `type`, so `PodScheduled` and `Initialized` stay as kwok set them;
a condition's `reason` and `message` are sent as null when it has none, which removes stale ones), and `phase` only
when every container has terminated for good. A condition's `lastTransitionTime` changes only when its status does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


def now_rfc3339(clock: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if clock is None else clock))


@dataclass
class ContainerView:
    """What the runner knows of one container, in the shape of a `ContainerStatus`."""

    name: str
    image: str
    ready: bool = False
    started: bool = False
    restart_count: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    """`{"running": {...}}`, `{"terminated": {...}}` or `{"waiting": {...}}`."""
    last_state: dict[str, Any] = field(default_factory=dict)
    container_id: str = ""
    """`process://<pid>` of the current (or last) process, as a runtime's container ID."""

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            status["containerID"] = self.container_id
        return status


def running(started_at: str) -> dict[str, Any]:
    return {"running": {"startedAt": started_at}}


def terminated(
    exit_code: int, started_at: str, finished_at: str, container_id: str = "", signal: int | None = None
) -> dict[str, Any]:
    """A terminated state; the reason is the kubelet's (`exit_reason`)."""
    body: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": exit_reason(exit_code),
        "startedAt": started_at,
        "finishedAt": finished_at,
    }
    if signal is not None:
        body["signal"] = signal
    if container_id:
        body["containerID"] = container_id
    return {"terminated": body}


def waiting(reason: str, message: str) -> dict[str, Any]:
    return {"waiting": {"reason": reason, "message": message}}


def exit_reason(exit_code: int) -> str:
    """The kubelet's reason for a terminated container: Completed on 0, Error otherwise."""
    return "Completed" if exit_code == 0 else "Error"


def condition(
    kind: str, ready: bool, reason: str | None, message: str | None, prior: dict[str, Any] | None, now: str
) -> dict[str, Any]:
    """Condition `kind`, keeping `prior`'s lastTransitionTime when the status is unchanged."""
    status = "True" if ready else "False"
    unchanged = prior is not None and prior.get("status") == status and prior.get("lastTransitionTime")
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": prior["lastTransitionTime"] if unchanged and prior is not None else now,
    }


def status_patch(
    pod: dict[str, Any],
    containers: list[ContainerView],
    prior_conditions: dict[str, dict[str, Any]],
    now: str,
    phase: str | None = None,
) -> dict[str, Any]:
    """The strategic-merge patch of `pod`'s status for `containers` (every container of the spec, in spec order).

    `prior_conditions` (by type) are the conditions as last known (what the API returned, overlaid by what the runner
    last sent): their lastTransitionTime is kept when the status does not change. Readiness gates (`spec.
    readinessGates`) are honoured: Ready needs every gate's condition True in the pod's status."""
    statuses = [view.to_status() for view in containers]
    containers_ready: tuple[bool, str | None, str | None]
    ready: tuple[bool, str | None, str | None]
    unready = [view.name for view in containers if not view.ready]
    terminal = phase in ("Succeeded", "Failed")
    if terminal:
        containers_ready = (False, "PodCompleted", None)
    elif unready:
        containers_ready = (False, "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]")
    else:
        containers_ready = (True, None, None)
    observed = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
    gates = [str(g.get("conditionType")) for g in (pod.get("spec") or {}).get("readinessGates") or []]
    missing = [gate for gate in gates if (observed.get(gate) or {}).get("status") != "True"]
    if not containers_ready[0]:
        ready = containers_ready
    elif missing:
        message = "; ".join(f'corresponding condition of pod readiness gate "{gate}" is not True' for gate in missing)
        ready = (False, "ReadinessGatesNotReady", message)
    else:
        ready = (True, None, None)
    conditions = [
        condition(kind, ok, reason, message, prior_conditions.get(kind), now)
        for kind, (ok, reason, message) in (("ContainersReady", containers_ready), ("Ready", ready))
    ]
    body: dict[str, Any] = {"conditions": conditions, "containerStatuses": statuses}
    if phase is not None:
        body["phase"] = phase
    return {"status": body}
