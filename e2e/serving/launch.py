"""The serving simulation's launcher: which local process stands for each container the operator renders.

- A router container (its command starts with the launch prefix of a pinned router, `RouterProfile.launch`) runs the
  real router package from its cached venv, with the pod's own flags. It starts through `e2e.serving.router_exec`,
  which first gets a token for the pod's ServiceAccount (so the router's RBAC is the one the operator rendered),
  writes a kubeconfig with it and then becomes the router (exec, no extra process).
- A pool container (`python3 -m sglang.launch_server ...`) runs the SGLang worker emulator with the pod's exact SGLang
  flags, for the release in the pod's `app.kubernetes.io/version` label, configured by the pod's
  `emulator.disaggspec.io/<key>` annotations (see docs/serving-emulator.md), and told its serving revision (the
  pod's `disaggspec.io/spec-fingerprint` label) for the cross-revision oracle unless an annotation sets it. When the
  pod's init containers wait for (or fill) the model cache, the emulator starts after their stand-in steps
  (`e2e.serving.modelcache`).
- The model cache's fill container (the operator's `FILL_SCRIPT`, a fill Job's pod) runs a stand-in that downloads
  nothing and writes the marker on the local directory standing for the claim, then exits 0 (`e2e.serving.modelcache`).
Anything else is not ours: the runner leaves it alone.

Every pod shares this machine's network, which takes two translations, and only these two:

- Addresses, in the argv: `0.0.0.0` and `localhost` in bind and probe addresses become the pod's own loopback IP
  (127.N.x.y), which is what they mean inside a pod's network namespace.
- Names, at connect time: there is no cluster DNS. A multi-node SGLang server's worker pods name their leader by its
  pod hostname record (`--dist-init-addr $(LWS_LEADER_ADDRESS):P`, `<lws>-<group>.<subdomain>.<namespace>`); the
  argv keeps the name, and the emulator resolves it at each attempt to reach its leader through the cluster-DNS
  stand-in (`e2e.serving.clusterdns`: the pod with that hostname and subdomain whose headless Service publishes it,
  read from the API server with the runner's kubeconfig). Every emulator gets `--kubeconfig` and its pod's
  `--namespace` for that. It is not resolved here because the leader pod may have no IP yet when a worker starts;
  a real worker likewise retries until DNS answers.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

from disaggspec import constants as c
from disaggspec.render.rdma import server_command
from disaggspec.sglang.args import LAUNCH as SGLANG_LAUNCH
from disaggspec.sglang.profiles import DRAIN_WAIT_HELPER, PROFILES, ROUTER_READY_HELPER, RouterProfile
from e2e.serving import modelcache
from e2e.serving.plan import Launcher, ProcessPlan, container_env

log = logging.getLogger("e2e.serving.launch")

REPO: Final = Path(__file__).resolve().parents[2]
ROUTER_READY_SOURCE: Final = REPO / "images" / "router" / "router_ready.py"
"""The file the router image installs at ROUTER_READY_HELPER."""
DRAIN_WAIT_SOURCE: Final = REPO / "images" / "sglang" / "drain_wait.py"
"""The file the SGLang image installs at DRAIN_WAIT_HELPER (the pool servers' preStop hook)."""
EMULATOR_ANNOTATION_PREFIX: Final = "emulator.disaggspec.io/"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU_KEY: Final = "gpu"
REVISION_KEY: Final = "revision"
"""The emulate option of the cross-revision oracle (docs/serving-emulator.md), filled from the fingerprint label."""
_ANY_ADDRESS: Final = ("0.0.0.0", "::", "localhost", "127.0.0.1")
_HOST_FLAGS: Final = ("--host", "--prometheus-host")
_PASSED_THROUGH: Final = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "XDG_CACHE_HOME", "PIP_CACHE_DIR")


def router_of(command: list[str]) -> RouterProfile | None:
    """The pinned router whose launch prefix `command` starts with."""
    for profile in PROFILES.values():
        prefix = list(profile.router.launch)
        if command[: len(prefix)] == prefix:
            return profile.router
    return None


def bind_to_pod(argv: list[str], pod_ip: str) -> list[str]:
    """`argv` with the value of every bind-address flag that means "this pod" replaced by the pod's IP."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg in _HOST_FLAGS and out[i + 1] in _ANY_ADDRESS:
            out[i + 1] = pod_ip
    return out


def _localhost_to_pod(argv: list[str], pod_ip: str) -> list[str]:
    out = []
    for arg in argv:
        for name in ("localhost", "127.0.0.1"):
            arg = arg.replace(f"//{name}:", f"//{pod_ip}:")
        out.append(arg)
    return out


def _base_env(container: dict[str, Any]) -> dict[str, str]:
    env = {key: os.environ[key] for key in _PASSED_THROUGH if key in os.environ}
    env.update(container_env(container))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "operator")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def drain_timeout(pod: dict[str, Any]) -> float:
    """The emulator's bound on its SIGTERM drain: the pod's terminationGracePeriodSeconds (the kubelet's default 30
    when unset). SGLang's own drain (`TokenizerManager.sigterm_watchdog`, both releases) waits for the requests in
    flight with no bound of its own; what ends it is the kubelet's SIGKILL at the grace period, so a long generation
    on a pod with a long grace period (drainSeconds) is served to the end, as on GPUs."""
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(grace) if grace is not None else 30.0


def emulator_options(pod: dict[str, Any]) -> list[str]:
    """`--emulate key=value` for every `emulator.disaggspec.io/<key>` annotation of the pod, plus `revision=<the
    pod's spec-fingerprint label>` and `gpu=<its nodeSelector's nvidia.com/gpu.product>` when the pod has them and no
    such annotation; sorted by key."""
    meta = pod.get("metadata", {})
    annotations = meta.get("annotations") or {}
    values = {
        key[len(EMULATOR_ANNOTATION_PREFIX) :]: str(value)
        for key, value in annotations.items()
        if key.startswith(EMULATOR_ANNOTATION_PREFIX)
    }
    product = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(GPU_PRODUCT_LABEL)
    if product:
        # The capacity model's GPU: the product the pod was scheduled for (an annotation wins).
        values.setdefault(GPU_KEY, str(product))
    revision = (meta.get("labels") or {}).get(c.LABEL_FINGERPRINT)
    if revision:
        # An explicit annotation wins: a test can put one pod in another revision to provoke the oracle.
        values.setdefault(REVISION_KEY, str(revision))
    options: list[str] = []
    for key in sorted(values):
        options += ["--emulate", f"{key}={values[key]}"]
    return options


class ServingLauncher:
    """Runs routers for real and SGLang servers as emulators (see the module documentation)."""

    def __init__(self, admin_kubeconfig: str | None = None, volumes: Path | None = None) -> None:
        self.admin_kubeconfig = admin_kubeconfig or os.environ.get("KUBECONFIG", "")
        default = os.environ.get(modelcache.VOLUMES_ENV) or str(Path(tempfile.gettempdir()) / "disaggspec-volumes")
        self.volumes = volumes or Path(default)
        """The local directories standing for pod volumes (`e2e.serving.modelcache.volume_dir`)."""

    def plan(self, pod: dict[str, Any], container: dict[str, Any]) -> ProcessPlan | None:
        # With ibDeviceMapping Auto the server command sits behind the device-mapping wrapper; no node here has HCAs.
        command = server_command([*(container.get("command") or []), *(container.get("args") or [])])
        pod_ip = str(pod.get("status", {}).get("podIP") or "")
        if not pod_ip:
            return None
        router = router_of(command)
        if router is not None:
            return self._router(pod, container, router, command, pod_ip)
        if command[: len(SGLANG_LAUNCH)] == list(SGLANG_LAUNCH):
            return self._emulator(pod, container, command[len(SGLANG_LAUNCH) :], pod_ip)
        fill = modelcache.fill_step(self.volumes, pod, container)
        if fill is not None:
            return ProcessPlan(argv=modelcache.init_argv([fill], []), env=_base_env(container), cwd=str(REPO))
        return None

    def _router(
        self, pod: dict[str, Any], container: dict[str, Any], router: RouterProfile, command: list[str], pod_ip: str
    ) -> ProcessPlan:
        meta = pod["metadata"]
        account = pod.get("spec", {}).get("serviceAccountName") or "default"
        env = _base_env(container)
        env["DISAGGSPEC_ADMIN_KUBECONFIG"] = self.admin_kubeconfig
        argv = [
            sys.executable,
            "-m",
            "e2e.serving.router_exec",
            "--package",
            router.package,
            "--namespace",
            str(meta["namespace"]),
            "--service-account",
            str(account),
            "--pod",
            str(meta["name"]),
            "--",
            *bind_to_pod(command, pod_ip),
        ]
        return ProcessPlan(argv=argv, env=env, cwd=str(REPO))

    def _emulator(
        self, pod: dict[str, Any], container: dict[str, Any], args: list[str], pod_ip: str
    ) -> ProcessPlan | None:
        meta = pod["metadata"]
        version = (meta.get("labels") or {}).get(c.LABEL_VERSION)
        if version not in PROFILES:
            log.warning(
                "pod %s/%s has no %s label naming a supported SGLang release: not run",
                meta.get("namespace"),
                meta.get("name"),
                c.LABEL_VERSION,
            )
            return None
        argv = [
            sys.executable,
            "-m",
            "e2e.serving.emulator",
            "--sglang-version",
            version,
            "--bind",
            pod_ip,
            "--pod-name",
            str(meta["name"]),
            "--namespace",
            str(meta.get("namespace") or "default"),
            *(["--kubeconfig", self.admin_kubeconfig] if self.admin_kubeconfig else []),
            "--drain-timeout",
            f"{drain_timeout(pod):g}",
            *emulator_options(pod),
            "--",
            *args,
        ]
        steps = modelcache.init_steps(self.volumes, pod)
        if steps:
            argv = modelcache.init_argv(steps, argv)
        return ProcessPlan(argv=argv, env=_base_env(container), cwd=str(REPO))

    def probe_command(self, pod: dict[str, Any], container: dict[str, Any], command: list[str]) -> list[str] | None:
        pod_ip = str(pod.get("status", {}).get("podIP") or "")
        if command[:2] == ["python3", ROUTER_READY_HELPER]:
            return [sys.executable, str(ROUTER_READY_SOURCE), *_localhost_to_pod(command[2:], pod_ip)]
        if command[:2] == ["python3", DRAIN_WAIT_HELPER]:
            # The pod's localhost is its IP here; its main process's stdout is what the runner writes the container's
            # log from, so the hook's report goes to the hook's stdout, which the runner appends to that log.
            return [sys.executable, str(DRAIN_WAIT_SOURCE), *command[2:], "--host", pod_ip, "--log", "/dev/stdout"]
        return None


def default_launcher() -> Launcher:
    """The runner's default (`e2e.serving.plan.DEFAULT_LAUNCHER`)."""
    return ServingLauncher()
