"""The model cache in the serving simulation: the fill Job's pod as a stand-in that writes the marker, and the pool
pods' wait for it, on local directories that stand for the pods' volumes.

What the operator renders (`disaggspec.render.caches`): a fill Job whose container runs `python3 -c FILL_SCRIPT
<marker> <repo> <revision>...` (huggingface_hub downloads, then the marker `<cache>/.disaggspec/<hash>.done`), and on
every pool pod an init container `sh -c WAIT_SCRIPT <marker>` (claim) or the same fill script (hostPath). kwok marks
init containers done at once and the pod runner runs only `spec.containers`, so the launcher recognises these exact
commands and:

- runs the fill Job's container as `python -m e2e.serving.modelcache init <steps> --`: a stand-in that downloads
  nothing (no network, no huggingface_hub import) and writes the marker, with the fill script's content, where the
  pods' volume puts it; it exits 0, the runner reports the pod Succeeded (restartPolicy Never) and the Job controller
  completes the Job, which is what the operator's ModelCached condition reads;
- runs a pool container as `python -m e2e.serving.modelcache init <steps> -- <emulator argv>`: the pod's init steps in
  order (wait until the marker exists, polling as WAIT_SCRIPT does; or fill, for a hostPath cache), then it execs
  the emulator (same pid, so the runner's signals and process table still hold).

One deviation from a kubelet: the init steps run inside the main container's process, so its startup probe is
already counting while it waits (the operator's startup budgets are minutes; the stand-in fill takes a moment).

Volumes (`volume_dir`): a PersistentVolumeClaim is `<root>/claims/<namespace>/<claim>` (every pod of the namespace
that mounts the claim shares it, as a ReadWriteMany volume), a hostPath is `<root>/nodes/<node>/<path>` (per node);
`root` is the runner's `<state-dir>/serving/volumes` (`VOLUMES_ENV`). Other volume kinds are not mapped.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Final

from disaggspec.render.caches import FILL_SCRIPT, WAIT_SCRIPT

VOLUMES_ENV: Final = "DISAGGSPEC_SERVING_VOLUMES"
"""Where the pod runner keeps the local directories standing for pod volumes (set by `python -m e2e.serving run`)."""
POLL_SECONDS: Final = 0.5
"""How often the wait looks for the marker (WAIT_SCRIPT sleeps 10 s; a simulation need not)."""
Step = dict[str, Any]
"""One init step: {"wait": local marker} or {"fill": local marker, "repos": [repo, revision, ...]}."""


def volume_dir(root: Path, pod: dict[str, Any], name: str) -> Path | None:
    """The local directory standing for volume `name` of `pod`, or None when the volume kind is not mapped."""
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    volume = volumes.get(name) or {}
    claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
    if claim:
        namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
        return root / "claims" / namespace / str(claim)
    host_path = (volume.get("hostPath") or {}).get("path")
    if host_path:
        node = str((pod.get("spec") or {}).get("nodeName") or "unscheduled")
        return root / "nodes" / node / str(host_path).lstrip("/")
    return None


def local_path(root: Path, pod: dict[str, Any], container: dict[str, Any], path: str) -> Path | None:
    """Where `path`, as `container` of `pod` sees it, is on this machine: through the container's volume mount with the
    longest mountPath that contains it; None when no mapped volume holds it."""
    best: tuple[int, Path] | None = None
    for mount in container.get("volumeMounts") or []:
        where = str(mount.get("mountPath", "")).rstrip("/")
        if path != where and not path.startswith(where + "/"):
            continue
        base = volume_dir(root, pod, str(mount.get("name", "")))
        if base is not None and (best is None or len(where) > best[0]):
            best = (len(where), base / os.path.relpath(path, where or "/"))
    return None if best is None else best[1]


def _fill_args(container: dict[str, Any]) -> tuple[str, list[str]] | None:
    """(marker, [repo, revision, ...]) of a container running the operator's fill script, else None."""
    command = [*(container.get("command") or []), *(container.get("args") or [])]
    if len(command) >= 4 and command[:3] == ["python3", "-c", FILL_SCRIPT]:
        return command[3], command[4:]
    return None


def _wait_marker(container: dict[str, Any]) -> str | None:
    command = [*(container.get("command") or []), *(container.get("args") or [])]
    if len(command) == 4 and command[:3] == ["sh", "-c", WAIT_SCRIPT]:
        return str(command[3])
    return None


def fill_step(root: Path, pod: dict[str, Any], container: dict[str, Any]) -> Step | None:
    """The stand-in step of a fill container, with its marker mapped onto the local volume; None when the marker is on
    no mapped volume (or the container is no fill)."""
    found = _fill_args(container)
    if found is None:
        return None
    marker = local_path(root, pod, container, found[0])
    return None if marker is None else {"fill": str(marker), "repos": found[1]}


def init_steps(root: Path, pod: dict[str, Any]) -> list[Step]:
    """The steps standing for the pod's init containers the simulation knows (the model cache's wait and fill), in
    order; any other init container is left out, as kwok marked it done."""
    steps: list[Step] = []
    for container in (pod.get("spec") or {}).get("initContainers") or []:
        wait = _wait_marker(container)
        if wait is not None:
            marker = local_path(root, pod, container, wait)
            if marker is not None:
                steps.append({"wait": str(marker)})
            continue
        step = fill_step(root, pod, container)
        if step is not None:
            steps.append(step)
    return steps


def init_argv(steps: list[Step], then: list[str]) -> list[str]:
    """The argv that runs `steps` and then execs `then` (nothing when empty)."""
    return [sys.executable, "-m", "e2e.serving.modelcache", "init", json.dumps(steps), "--", *then]


# ---- the process ---------------------------------------------------------------------------------------------------


def _fill(marker: Path, repos: list[str]) -> None:
    if marker.exists():
        print(f"model cache stand-in: {marker} present, nothing to do", flush=True)
        return
    for repo, revision in zip(repos[0::2], repos[1::2], strict=False):
        print(f"model cache stand-in: not downloading {repo} {revision or '(default branch)'} (simulation)", flush=True)
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_name(marker.name + ".tmp")
    tmp.write_text(" ".join(repos) + "\n")  # what FILL_SCRIPT writes
    os.replace(tmp, marker)
    print(f"model cache stand-in: wrote {marker}", flush=True)


def _wait(marker: Path) -> None:
    said = 0.0
    while not marker.is_file():
        if time.monotonic() - said >= 10:
            print(f"waiting for the model cache fill job: {marker}", flush=True)
            said = time.monotonic()
        time.sleep(POLL_SECONDS)
    print(f"model cache marker present: {marker}", flush=True)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "init" or argv[2] != "--":
        print("usage: python -m e2e.serving.modelcache init STEPS_JSON -- [ARGV...]", file=sys.stderr)
        return 2
    for step in json.loads(argv[1]):
        if "wait" in step:
            _wait(Path(step["wait"]))
        else:
            _fill(Path(step["fill"]), [str(r) for r in step.get("repos", [])])
    then = argv[3:]
    if then:
        sys.stdout.flush()
        os.execv(then[0], then)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
