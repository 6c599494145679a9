"""Start-up, readiness, liveness and shutdown of pool and router pods, from `spec.<pool>.lifecycle`; pure.

Probes follow the release (`SGLangProfile.ready_path`): where SGLang has a cheap `/ready` (0.5.23: no generation,
503 while starting, paused or draining) the startup and readiness probes use it; otherwise (0.5.2) they use
`/health`. Liveness always uses `/health`, which runs a one-token generation and answers 503 once nothing came back
within `SGLANG_HEALTH_CHECK_TIMEOUT` (20 s): a probe of it waits longer than that, so SGLang decides, not the
kubelet's timeout. The startup probe allows `startup_seconds` before the kubelet restarts a server.

A multi-node server's workers (LeaderWorkerSet groups) serve no API: they get a startup probe on the dummy /health
their release starts once the ranks are up, and the same liveness probe (`worker_probes`); readiness is the leader's.

Shutdown of a pool server (`server_prestop`, the image's `disaggspec-drain-wait`, images/sglang/drain_wait.py): a short
preStop pause (`prestop_seconds`), then a bounded wait (`transfer_wait_seconds`) until the server's own PD queue gauges
are zero (no request waiting for its peer's bootstrap or pre-allocation, no KV transfer in flight: a peer still expects
each of them), reported in the container's log; then SIGTERM, on which SGLang drains (it fails /health and /ready, keeps
serving what still arrives, and exits once no request is left); SIGKILL at terminationGracePeriodSeconds = drainSeconds.
Pause and wait take at most half of drainSeconds, so SGLang keeps the rest. SGLang's own drain counts the tokenizer's
table, which holds a PD request until its transfer ended (0.5.2 disaggregation/prefill.py:498-535 answers a prefill
request only then), so the wait does not replace it: it makes the transfers an explicit, bounded and reported step
before SIGTERM (issue 32). A multi-node server's workers serve no API and keep the plain pause.

Both routers drop a pool pod as soon as its deletionTimestamp is set, not when it turns unready: sglang-router 0.1.9 on
the watch event (`service_discovery.rs`: a pod with `deletion_timestamp` goes to `handle_pod_deletion`, which removes
its worker), smg 1.13.0 on its next reconcile, one second after the event (`service_discovery/kubernetes.rs`: a
terminating pod leaves the desired set "so their workers drain at the start of the grace period"). A pause timed for a
readiness-only consumer (probe period x failures) bought nothing and delayed every removal by 35 s. What the pause still
covers: requests a router chose just before it saw the deletion, still on their way, and SGLang's own drain check
(`sigterm_watchdog`, both releases: it looks at the request count every 5 s once SIGTERM set `gracefully_exit`, and
exits at the first look that finds none).

The Deployment's progress deadline is `startup_seconds + drain_seconds + ROLLOUT_MARGIN_SECONDS`: with maxSurge 0 a
rollout replaces one pod at a time, and each step may wait for the old pod's drain (its GPUs), then pull and start the
new one. `status.stuck` reads the Deployment controller's ProgressDeadlineExceeded, so a big model's healthy rollout
is never reported as RolloutStuck.
"""

from __future__ import annotations

import math
from typing import Any, Final

from disaggspec.api.v1alpha1 import PoolLifecycle
from disaggspec.sglang.profiles import DRAIN_WAIT_HELPER, SGLangProfile

HEALTH_PATH: Final = "/health"
STARTUP_SECONDS: Final = 1800
"""Start-up budget of a pool pod with fewer than `LARGE_POD_GPUS` GPUs: download, load, capture CUDA graphs."""
LARGE_STARTUP_SECONDS: Final = 3600
"""Start-up budget of a pod with `LARGE_POD_GPUS` or more GPUs: a DeepSeek-class model, 600+ GB of weights."""
LARGE_POD_GPUS: Final = 8
ROLLOUT_MARGIN_SECONDS: Final = 600
"""Scheduling and pulling a multi-GB SGLang image, per rollout step, on top of start-up and drain."""

PROBE_PERIOD: Final = 10
READINESS_FAILURES: Final = 3
LIVENESS_PERIOD: Final = 30
LIVENESS_FAILURES: Final = 4
"""A server is restarted after two minutes of failed health generations, not after one slow one."""
CHEAP_PROBE_TIMEOUT: Final = 5
HEALTH_TIMEOUT_MARGIN: Final = 5
"""Seconds a /health probe waits beyond SGLang's own health window."""
PRESTOP_SECONDS: Final = 5
"""The pool preStop pause: smg's one-second reconcile delay after the watch event, plus the requests a router
dispatched before it dropped the pod (see the module docstring). The pool Services are headless (no kube-proxy
rules), and an EndpointSlice marks a terminating pod not ready at once, so no other consumer needs longer."""
ROUTER_PRESTOP_SECONDS: Final = 10
"""The router's preStop pause: kube-proxy on every node drops it from the router Service first."""
ROUTER_GONE_MARGIN_SECONDS: Final = 5
"""Beyond the router's preStop pause, until a retiring router counts as gone where terminating pods are not counted."""


def startup_seconds(lifecycle: PoolLifecycle, gpus: int) -> int:
    """The start-up budget: the field if set, else by size class (a pod's GPUs stand for the model's size)."""
    if lifecycle.startup_seconds is not None:
        return lifecycle.startup_seconds
    return LARGE_STARTUP_SECONDS if gpus >= LARGE_POD_GPUS else STARTUP_SECONDS


def progress_deadline_seconds(lifecycle: PoolLifecycle, gpus: int) -> int:
    """The pool Deployment's progressDeadlineSeconds (see the module docstring)."""
    return startup_seconds(lifecycle, gpus) + lifecycle.drain_seconds + ROLLOUT_MARGIN_SECONDS


def prestop_seconds(lifecycle: PoolLifecycle) -> int:
    """The preStop pause, at most half the drain budget so SGLang keeps the rest for its own drain."""
    return min(PRESTOP_SECONDS, lifecycle.drain_seconds // 2)


def _http(path: str, period: int, failures: int, timeout: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def pool_probes(profile: SGLangProfile, lifecycle: PoolLifecycle, gpus: int) -> dict[str, dict[str, Any]]:
    """startupProbe, readinessProbe and livenessProbe of a pool's SGLang container."""
    health_timeout = profile.health_check_timeout_seconds + HEALTH_TIMEOUT_MARGIN
    ready_path = profile.ready_path or HEALTH_PATH
    ready_timeout = CHEAP_PROBE_TIMEOUT if profile.ready_path else health_timeout
    startup_failures = math.ceil(startup_seconds(lifecycle, gpus) / PROBE_PERIOD)
    return {
        "startupProbe": _http(ready_path, PROBE_PERIOD, startup_failures, ready_timeout),
        "readinessProbe": _http(ready_path, PROBE_PERIOD, READINESS_FAILURES, ready_timeout),
        "livenessProbe": _http(HEALTH_PATH, LIVENESS_PERIOD, LIVENESS_FAILURES, health_timeout),
    }


def worker_probes(profile: SGLangProfile, lifecycle: PoolLifecycle, gpus: int) -> dict[str, dict[str, Any]]:
    """startupProbe and livenessProbe of a multi-node server's worker pod (see `disaggspec.render.pool.pod_template`):
    its dummy health server answers /health once its schedulers are up, at once and without generating, so the
    start-up budget is the leader's and the liveness probe the same as on every pool pod."""
    startup_failures = math.ceil(startup_seconds(lifecycle, gpus) / PROBE_PERIOD)
    return {
        "startupProbe": _http(HEALTH_PATH, PROBE_PERIOD, startup_failures, CHEAP_PROBE_TIMEOUT),
        "livenessProbe": pool_probes(profile, lifecycle, gpus)["livenessProbe"],
    }


def transfer_wait_seconds(lifecycle: PoolLifecycle) -> int:
    """The longest wait for a server's KV transfers after its preStop pause: pause and wait take at most half of
    drainSeconds (at least 30, so at least 10 s of waiting)."""
    return max(0, lifecycle.drain_seconds // 2 - prestop_seconds(lifecycle))


DRAIN_WAIT_PORT_FLAG: Final = "--port"
"""The server's HTTP port in the drain wait's command (`render.ports.assign` rewrites it with the pod's own port)."""


def server_prestop(lifecycle: PoolLifecycle, port: int) -> dict[str, Any]:
    """A pool server container's `lifecycle`: the preStop hook pauses, then waits for the server's PD queues on its
    HTTP `port` (see the module docstring)."""
    command = [
        "python3",
        DRAIN_WAIT_HELPER,
        DRAIN_WAIT_PORT_FLAG,
        str(port),
        "--pause",
        str(prestop_seconds(lifecycle)),
        "--bound",
        str(transfer_wait_seconds(lifecycle)),
    ]
    return {"preStop": {"exec": {"command": command}}}


def prestop(seconds: int) -> dict[str, Any]:
    """A container `lifecycle` whose preStop pauses `seconds` (`sleep` exists in the SGLang and router images)."""
    return {"preStop": {"exec": {"command": ["sleep", str(seconds)]}}}
