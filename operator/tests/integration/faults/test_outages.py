"""The operator through API server outages, against a real control plane: one of 25 s (/healthz fails only after
the grace period and recovers; a service created afterwards is reconciled and every status agrees with the live
Deployments again) and two of 80 s in a row under leader election (the same process leads again, no restart and no
backoff, and a service created after each is reconciled promptly).

Both tests stop the API server of the module's own control plane (`plane`, conftest.py); each operator process
watches only its test's namespace and resyncs every RESYNC seconds, and every wait is bounded. They are a module apart
from test_controller_faults (they take over six minutes together) so that pytest-xdist's `--dist loadfile` in
`make test` runs them on another worker than the other fault tests.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from disaggspec.api import parse_service
from disaggspec.render import fingerprint
from e2e.support.fixtures import Cluster
from e2e.support.kube import CommandFailed
from e2e.support.workloads import child_names, deployment, expected_children, wait_ready
from tests.integration.faults.support import (
    RESYNC,
    STOP_GRACE,
    Plane,
    apply,
    election_flags,
    is_ready,
    operator,
    ready_condition,
    service,
    status_truthful,
    wait,
)

pytestmark = [pytest.mark.integration, pytest.mark.local_only, pytest.mark.wall_seconds(300)]


def _pools_available(cluster: Cluster, namespace: str, name: str) -> bool:
    for role in ("prefill", "decode", "router"):
        try:
            live = deployment(cluster, namespace, name, role)
        except (CommandFailed, LookupError):  # the API server does not answer, or not exactly one Deployment
            return False
        status, want = live.get("status", {}), live["spec"].get("replicas", 1)
        if status.get("availableReplicas", 0) < want or status.get("readyReplicas", 0) < want:
            return False
    return True


# ---- h. a 25 s API server outage --------------------------------------------------------------------------------

OUTAGE_SECONDS = 25
HEALTH_GRACE = 5


def test_recovery_after_apiserver_outage(plane: Plane, ns: str, log: Path) -> None:
    cluster = plane.cluster
    before = ["outage-0", "outage-1"]
    args = ["--health-grace-seconds", str(HEALTH_GRACE)]
    with operator(plane, ns, log / "operator.log", args=args) as process:
        apply(cluster, ns, *(service(n) for n in before))
        for n in before:
            wait_ready(cluster, ns, n)
        assert process.probe("/healthz") == 200
        codes: list[tuple[float, int]] = []
        plane.local.stop_component("apiserver", grace=STOP_GRACE)
        stopped = time.monotonic()
        try:
            while (elapsed := time.monotonic() - stopped) < OUTAGE_SECONDS:
                codes.append((elapsed, process.probe("/healthz")))
                time.sleep(0.5)
        finally:
            plane.local.start_component("apiserver")
        back = time.monotonic()
        # A service created once the API server is back proves reconcile resumed, not just that old status stayed.
        apply(cluster, ns, service("outage-after"))
        after_children = expected_children("outage-after", fingerprint(parse_service(service("outage-after"))))
        everything = [*before, "outage-after"]
        state: dict[str, object] = {}

        def recovered() -> bool:
            state.update(
                healthz=process.probe("/healthz"),
                new_service_children=child_names(cluster, ns, "outage-after"),
                truthful={n: status_truthful(cluster, ns, n) for n in everything},
            )
            truthful = state["truthful"]
            assert isinstance(truthful, dict)
            every_child = state["new_service_children"] == after_children
            return state["healthz"] == 200 and every_child and all(truthful.values())

        def diagnose(error: AssertionError) -> AssertionError:
            conditions = {n: ready_condition(cluster, ns, n) for n in everything}
            pools = cluster.kubectl("get", "deployments,pods", "-n", ns, "-o", "wide").stdout
            nodes = cluster.kubectl("get", "nodes", "--no-headers").stdout
            return AssertionError(
                f"last seen: {state}\nReady conditions: {conditions}\npools:\n{pools}\nnodes:\n{nodes}\n{error}"
            )

        # The operator's recovery: healthy again, reconciling (the new service has its children) and every status
        # agrees with the live Deployments.
        try:
            wait("/healthz 200, the new service reconciled, every status truthful", recovered, 60, process)
        except AssertionError as error:
            raise diagnose(error) from None
        recovery = time.monotonic() - back
        print(f"operator recovery after a {OUTAGE_SECONDS}s API server outage: {recovery:.1f}s")
        # Every service Ready again also waits for the control plane's own recovery (kube-controller-manager
        # re-lists and updates Deployment status, kwok re-marks pods). A service whose Deployments are all
        # available yet is not Ready (after a resync to catch up) is the operator's fault; Deployments that stay
        # unavailable are not, and are reported instead.
        try:
            wait("every service Ready", lambda: all(is_ready(cluster, ns, n) for n in everything), 90, process)
            print(
                f"recovery after a {OUTAGE_SECONDS}s API server outage: {time.monotonic() - back:.1f}s until every "
                "service Ready"
            )
        except AssertionError as error:
            time.sleep(RESYNC + 2)
            lagging = [n for n in everything if not is_ready(cluster, ns, n) and _pools_available(cluster, ns, n)]
            if lagging:
                raise diagnose(AssertionError(f"Deployments available but not Ready: {lagging}\n{error}")) from None
            print(
                f"not every service Ready 90s after the outage: their Deployments are unavailable ({diagnose(error)})"
            )
        assert process.alive(), "the operator exited during the outage"
        unhealthy = [t for t, code in codes if code == 500]
        assert unhealthy, f"/healthz never failed during a {OUTAGE_SECONDS}s outage: {codes[-5:]}"
        print(f"/healthz first 500 at {unhealthy[0]:.1f}s into the outage (grace {HEALTH_GRACE}s)")
        assert unhealthy[0] >= HEALTH_GRACE - 1, f"/healthz failed before the grace period: {codes[:12]}"
        assert unhealthy[0] <= HEALTH_GRACE + 15, f"/healthz failed late: first 500 at {unhealthy[0]:.1f}s"
        assert codes[-1][1] == 500, f"/healthz recovered while the API server was still down: {codes[-5:]}"


LONG_OUTAGE_SECONDS = 80
"""Longer than the renew deadline (the leader loses its Lease), the informers' backoff cap and kopf's old watch
backoff (1+1+2+3+5+8+13+21+34 s): what left a new service waiting 21 s, or the pod in CrashLoopBackOff, before."""
PROMPT_SECONDS = 15
"""A service created once the API server answers again has its children within this (measured: a few seconds)."""


def test_repeated_long_outages_keep_the_process_leading_and_reconcile_new_services_promptly(
    plane: Plane, ns: str, log: Path
) -> None:
    cluster = plane.cluster
    election = [*election_flags(ns, "outage-leader"), "--health-grace-seconds", str(HEALTH_GRACE)]
    with operator(plane, ns, log / "operator.log", args=election) as process:
        pid = process.pid
        wait("the lease", process.is_leader, 30, process)
        apply(cluster, ns, service("long-0"))
        wait_ready(cluster, ns, "long-0")
        for round_ in (1, 2):
            plane.local.stop_component("apiserver", grace=STOP_GRACE)
            stopped = time.monotonic()
            codes: list[int] = []
            try:
                while time.monotonic() - stopped < LONG_OUTAGE_SECONDS:
                    codes.append(process.probe("/healthz"))
                    time.sleep(1)
            finally:
                plane.local.start_component("apiserver")
            assert 500 in codes, f"/healthz never failed during a {LONG_OUTAGE_SECONDS}s outage"
            name = f"long-after-{round_}"
            wait(
                "the API server to answer",
                lambda: cluster.kubectl("get", "ns", ns, check=False).returncode == 0,
                60,
                process,
            )
            back = time.monotonic()
            apply(cluster, ns, service(name))
            expected = expected_children(name, fingerprint(parse_service(service(name))))
            took = wait(
                f"{name} reconciled",
                lambda n=name, e=expected: child_names(cluster, ns, n) == e,
                PROMPT_SECONDS,
                process,
            )
            healthy = wait("/healthz 200", lambda: process.probe("/healthz") == 200, PROMPT_SECONDS, process)
            print(
                f"outage {round_} ({LONG_OUTAGE_SECONDS}s): a new service had its children {took:.1f}s after it was "
                f"applied ({time.monotonic() - back:.1f}s after the API server answered), /healthz 200 after "
                f"{healthy:.1f}s more; leader again: {process.is_leader()}"
            )
            assert process.alive() and process.pid == pid, "the operator exited (a restart would mean backoff)"
            assert process.is_leader()
        assert process.metric("disaggspec_leader_losses_total") >= 2, "the outages never cost the lease"
