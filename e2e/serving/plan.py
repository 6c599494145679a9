"""The contract between the pod runner (the kubelet double of serving mode) and a launcher: what to run for a container.

The runner (`python -m e2e.serving run`) watches the pods bound to kwok nodes. For each container of a Running pod
that has an IP it calls `Launcher.plan(pod, container)` and starts the returned `ProcessPlan` as one local process; for
each exec probe it calls `Launcher.probe_command`. A launcher is named on the command line as `module:attr`, where
`attr` is a zero-argument factory (a function or a class) returning the launcher.

What the launcher receives:

- `pod` is the pod object as the API server last returned it (a JSON dict: `metadata`, `spec`, `status`). Its
  `status.podIP` is a loopback address (127.N.x.y): the process must bind it, never 0.0.0.0 or 127.0.0.1.
- `container` is a deep copy of the pod spec's container with everything a kubelet resolves before it starts one:
  - `env` is resolved: every entry is `{"name": ..., "value": ...}` with a plain string value, in the order the
    process would see them. `envFrom` (ConfigMaps, Secrets, with prefixes) is folded into it and removed; `valueFrom`
    (fieldRef, configMapKeyRef, secretKeyRef) is replaced by its value; `$(VAR)` references are expanded as the
    kubelet does. `resourceFieldRef` entries are dropped (the runner logs that). `container_env(container)` gives the
    same as a dict.
  - `command` and `args` have their `$(VAR)` references expanded with that env, as the kubelet does.
- Both are copies: changing them changes nothing in the runner.

What the launcher returns:

- `plan` returns None when the container is not one it knows how to run: the runner then leaves it alone. A pod none
  of whose containers has a plan is not touched at all (it stays Running and not Ready, as kwok left it); in a pod
  with at least one planned container, a container without a plan is reported running and ready.
- `ProcessPlan.argv` is run as is (no shell, no PATH lookup other than execvp's own), in its own session and process
  group, with stdin from /dev/null and stdout and stderr appended to the runner's log for the container.
- `ProcessPlan.env` is the process's whole environment: the runner adds nothing (pass through `os.environ` entries
  such as PATH or HOME yourself when the process needs them).
- `ProcessPlan.cwd` is the working directory; None means the runner's own.
- `probe_command` receives the exec probe's (or exec preStop hook's) `command` with `$(VAR)` already expanded, and
  returns the argv that performs it locally (it runs with the container plan's env and cwd; exit code 0 is success),
  or None when it cannot run here: the runner then counts that probe as succeeding and logs so once (a hook it
  cannot run is skipped and logged). A hook's output is appended to the container's log.

Both methods are called on the runner's event loop and must return quickly (no network calls, no sleeping).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

DEFAULT_LAUNCHER = "e2e.serving.launch:default_launcher"
"""The launcher the runner uses when none is named: SGLang servers, routers and their emulator."""


@dataclass(frozen=True)
class ProcessPlan:
    """How to run one container as a local process."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None


@runtime_checkable
class Launcher(Protocol):
    """Decides which local process stands for a container (see the module documentation for the exact contract)."""

    def plan(self, pod: dict[str, Any], container: dict[str, Any]) -> ProcessPlan | None:
        """The process to run for `container` of `pod`, or None when this container is not ours: leave it."""
        ...

    def probe_command(self, pod: dict[str, Any], container: dict[str, Any], command: list[str]) -> list[str] | None:
        """The local argv that runs the exec probe or preStop hook `command` of `container`, or None when it cannot
        run here."""
        ...


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The resolved environment of a container the runner passed to a launcher, as a dict (later entries win)."""
    return {str(item["name"]): str(item.get("value", "")) for item in container.get("env") or []}


def load_launcher(spec: str) -> Launcher:
    """Import `module:attr`, call it with no arguments and check the result is a `Launcher`."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"launcher {spec!r}: expected module:attr, e.g. {DEFAULT_LAUNCHER}")
    module = importlib.import_module(module_name)
    try:
        factory: Callable[[], object] = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"launcher {spec!r}: module {module_name} has no attribute {attr!r}") from None
    launcher = factory()
    if not isinstance(launcher, Launcher):
        raise ValueError(f"launcher {spec!r}: {type(launcher).__name__} has no plan() and probe_command() methods")
    return launcher
