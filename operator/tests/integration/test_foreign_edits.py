"""Hand edits that make a child's merged form invalid no longer freeze the service (issue 29, item 6).

Against a real kube-apiserver: a person edits, with another field manager, the number of the prefill Deployment's
`http` container port and of the prefill Service's `http` port (server-side apply then merges the operator's item
back next to the edited one: two ports named `http`), and, a second kind of invalid merged form, replaces the router
PodDisruptionBudget's `maxUnavailable` with `minAvailable` ("cannot be both set") and the decode readiness probe's
`httpGet` with `exec` ("may not specify more than 1 handler type"). Before, every pass was refused on its dry-run and
nothing of the service was written any more. Now each such child is repaired (`disaggspec.childrepair`), the rest is
applied, and an Event names the field manager and the field.

The operator is paused (SIGSTOP) while the edits, the deletion of another child and the spec change are made, so one
pass meets all of them at once; the seconds from its resume to the converged service are printed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from e2e.support.fixtures import Cluster
from e2e.support.kube import CommandFailed
from e2e.support.operator_process import OperatorProcess
from e2e.support.workloads import deployment, example, get, load, wait_ready

pytestmark = [pytest.mark.integration, pytest.mark.local_only]

LLAMA = example("llama")
HAND = "hand"
"""The field manager of the hand edits (as `kubectl edit` would be `kubectl-edit`)."""


@contextmanager
def _operator(cluster: Cluster, namespace: str, log: Path) -> Iterator[OperatorProcess]:
    process = OperatorProcess(
        cluster.kubeconfig,
        log,
        webhook=False,
        extra_env={"DISAGGSPEC_RESYNC_SECONDS": "5", "DISAGGSPEC_HEALTH_SOURCE": "off"},
        extra_args=["--namespace", namespace],
    ).start()
    try:
        yield process
    finally:
        process.stop()
        print(f"operator log {log}:\n{process.log_tail(30)}")


def _patch(cluster: Cluster, namespace: str, what: str, ops: list[dict[str, Any]]) -> None:
    cluster.kubectl(
        "patch", *what.split("/"), "-n", namespace, f"--field-manager={HAND}", "--type=json", "-p", json.dumps(ops)
    )


def _index(items: list[dict[str, Any]], name: str) -> int:
    return next(i for i, item in enumerate(items) if item.get("name") == name)


def _wait(description: str, predicate: Callable[[], bool], timeout: float, process: OperatorProcess) -> float:
    started = time.monotonic()
    while time.monotonic() < started + timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {description}\n{process.log_tail(60)}")


def _managers(cluster: Cluster, namespace: str, *what: str) -> set[str]:
    out = cluster.kubectl("get", *what, "-n", namespace, "-o", "json", "--show-managed-fields").stdout
    return {str(entry.get("manager")) for entry in json.loads(out)["metadata"].get("managedFields") or []}


def test_hand_edits_that_break_the_merged_form_are_repaired_and_block_nothing(
    installed_crd: Cluster, namespace: str, tmp_path: Path
) -> None:
    cluster = installed_crd
    name = load(LLAMA)["metadata"]["name"]
    with _operator(cluster, namespace, tmp_path / "operator.log") as process:
        cluster.kubectl("apply", "-n", namespace, "-f", str(LLAMA))
        wait_ready(cluster, namespace, name)
        prefill = deployment(cluster, namespace, name, "prefill")
        decode = deployment(cluster, namespace, name, "decode")
        prefill_name, decode_name = prefill["metadata"]["name"], decode["metadata"]["name"]
        container = prefill["spec"]["template"]["spec"]["containers"][0]
        http_port = _index(container["ports"], "http")
        service_ports = get(cluster, namespace, "service", f"{name}-prefill")["spec"]["ports"]
        service_http = _index(service_ports, "http")
        router_pdb = get(cluster, namespace, "pdb", f"{name}-router")
        assert "maxUnavailable" in router_pdb["spec"]
        want_container_ports = sorted((p["name"], p["containerPort"]) for p in container["ports"])
        want_service_ports = sorted((p["name"], p["port"]) for p in service_ports)

        process.pause()
        try:
            # A container port and a Service port renumbered by hand: the edited item is a new, foreign list item.
            container_path = f"/spec/template/spec/containers/0/ports/{http_port}/containerPort"
            _patch(
                cluster,
                namespace,
                f"deployment/{prefill_name}",
                [{"op": "replace", "path": container_path, "value": 30001}],
            )
            _patch(
                cluster,
                namespace,
                f"service/{name}-prefill",
                [{"op": "replace", "path": f"/spec/ports/{service_http}/port", "value": 30005}],
            )
            # The second kind: a one-of field replaced by its alternative.
            _patch(
                cluster,
                namespace,
                f"pdb/{name}-router",
                [
                    {"op": "remove", "path": "/spec/maxUnavailable"},
                    {"op": "add", "path": "/spec/minAvailable", "value": 0},
                ],
            )
            # Another child deleted, and the spec changed.
            cluster.kubectl("delete", "deployment", decode_name, "-n", namespace, "--wait=false")
            cluster.kubectl(
                "patch",
                "dss",
                name,
                "-n",
                namespace,
                "--type=merge",
                "-p",
                json.dumps({"spec": {"decode": {"replicas": 2}}}),
            )
        finally:
            process.resume()

        def converged() -> bool:
            try:
                live_decode = deployment(cluster, namespace, name, "decode")
                live_prefill = get(cluster, namespace, "deployment", prefill_name)
                service = get(cluster, namespace, "service", f"{name}-prefill")
                pdb = get(cluster, namespace, "pdb", f"{name}-router")
            except (CommandFailed, LookupError):  # not there (yet): keep polling
                return False
            ports = live_prefill["spec"]["template"]["spec"]["containers"][0]["ports"]
            return (
                live_decode["metadata"]["uid"] != decode["metadata"]["uid"]
                and live_decode["spec"]["replicas"] == 2
                and sorted((p["name"], p["containerPort"]) for p in ports) == want_container_ports
                and sorted((p["name"], p["port"]) for p in service["spec"]["ports"]) == want_service_ports
                and pdb["spec"].get("maxUnavailable") == 1
                and "minAvailable" not in pdb["spec"]
            )

        took = _wait("the service to converge despite the hand edits", converged, 30, process)
        print(f"after the resume: decode recreated with the new spec, 3 hand-edited children repaired in {took:.2f}s")

        def degraded_false() -> bool:
            dss = get(cluster, namespace, "dss", name)
            conds = {cond["type"]: cond for cond in (dss.get("status") or {}).get("conditions") or []}
            deg = conds.get("Degraded", {})
            return bool(
                deg.get("status") == "False"
                and dss["status"].get("observedGeneration") == dss["metadata"]["generation"]
            )

        _wait("Degraded=False for the new generation", degraded_false, 30, process)

        events = get(cluster, namespace, "events", "--field-selector", "reason=ForeignEditReverted")["items"]
        messages = [e["message"] for e in events if e["involvedObject"]["kind"] == "DisaggSpecService"]
        print("\n".join(messages))
        assert len(messages) == 3, messages
        assert all(f"field manager '{HAND}'" in m for m in messages), messages
        assert any(
            f"Deployment {prefill_name}" in m and "ports[containerPort=30001,protocol=TCP]" in m for m in messages
        )
        assert any(f"Service {name}-prefill" in m and "spec.ports[port=30005,protocol=TCP]" in m for m in messages)
        assert any(f"PodDisruptionBudget {name}-router" in m and "spec.minAvailable" in m for m in messages)
        # The hand's manager owns nothing any more: the operator's form is back, with no foreign leftovers.
        for what in (("deployment", prefill_name), ("service", f"{name}-prefill"), ("pdb", f"{name}-router")):
            assert HAND not in _managers(cluster, namespace, *what), what


def test_a_replaced_probe_handler_is_repaired(installed_crd: Cluster, namespace: str, tmp_path: Path) -> None:
    """A one-of field inside a container: the repair patch must restore the operator's handler in the same request
    (a probe without one is invalid), then the apply owns it again."""
    cluster = installed_crd
    name = load(LLAMA)["metadata"]["name"]
    with _operator(cluster, namespace, tmp_path / "operator.log") as process:
        cluster.kubectl("apply", "-n", namespace, "-f", str(LLAMA))
        wait_ready(cluster, namespace, name)
        decode = deployment(cluster, namespace, name, "decode")
        decode_name = decode["metadata"]["name"]
        probe = decode["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
        assert "httpGet" in probe
        _patch(
            cluster,
            namespace,
            f"deployment/{decode_name}",
            [
                {"op": "remove", "path": "/spec/template/spec/containers/0/readinessProbe/httpGet"},
                {
                    "op": "add",
                    "path": "/spec/template/spec/containers/0/readinessProbe/exec",
                    "value": {"command": ["true"]},
                },
            ],
        )

        def repaired() -> bool:
            live = get(cluster, namespace, "deployment", decode_name)["spec"]["template"]["spec"]["containers"][0]
            return live["readinessProbe"].get("httpGet") == probe["httpGet"] and "exec" not in live["readinessProbe"]

        took = _wait("the decode readiness probe back to httpGet", repaired, 30, process)
        print(f"replaced probe handler repaired in {took:.2f}s")

        def reported() -> bool:
            # Events follow the pass's status write: the repair may be visible a moment before its Event.
            events = get(cluster, namespace, "events", "--field-selector", "reason=ForeignEditReverted")["items"]
            return any("readinessProbe.exec" in e["message"] and f"'{HAND}'" in e["message"] for e in events)

        _wait("a ForeignEditReverted Event naming the manager and the probe handler", reported, 15, process)
        assert process.alive()
