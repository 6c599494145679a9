"""The per-pool scale targets (`scaletargets`) and the pass with spec.autoscaling, on the fake API: targets created
once with the spec's replicas, their size (clamped) rendered into the pools, their spec never written by the operator,
their status kept, and pruned with autoscaling unset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from disaggspec import apply, render, scaletargets
from disaggspec import constants as c
from disaggspec.api import parse_service
from disaggspec.reconcile import Reconciler
from disaggspec.render import names
from disaggspec.validation import validate
from tests.unit.dss_cases import edited
from tests.unit.fakes import FakeClient, reconciler_for

NAMESPACE = "team"
NAME = "base"
SCALING = {"mode": "External", "prefill": {"maxReplicas": 3}, "decode": {"minReplicas": 2, "maxReplicas": 6}}


def _manifest(scaling: dict[str, Any] | None = SCALING, decode_replicas: int = 2) -> dict[str, Any]:
    edits: dict[str, Any] = {"spec.decode.replicas": decode_replicas}
    if scaling is not None:
        edits["spec.autoscaling"] = scaling
    obj = edited(edits)
    obj["metadata"]["namespace"] = NAMESPACE
    return obj


_reconciler = reconciler_for


def _target_path(role: str) -> str:
    return apply.SCALE_TARGET.item(NAMESPACE, f"{NAME}-{role}")


def _decode_replicas(client: FakeClient) -> int:
    service = parse_service(_manifest())
    path = apply.DEPLOYMENT.item(NAMESPACE, names.deployment_name(service, c.ROLE_DECODE, render.fingerprint(service)))
    return int(client.objects[path]["spec"]["replicas"])


def _converged(scaling: dict[str, Any] | None = SCALING) -> tuple[FakeClient, Reconciler]:
    client = FakeClient()
    client.create(_manifest(scaling))
    reconciler = _reconciler(client)
    for _ in range(3):  # children and targets, then the targets seen, then the pools counted
        reconciler.reconcile(NAMESPACE, NAME, client.children)
        client.roll_out(NAMESPACE)
    return client, reconciler


def test_scaled_clamps_the_target_and_reports_why() -> None:
    service = parse_service(_manifest())
    target = {"kind": c.POOL_KIND, "spec": {"replicas": 9}}
    scaled, sizes = scaletargets.scaled(service, {c.ROLE_DECODE: target})
    assert scaled.spec.decode.replicas == 6
    assert scaled.spec.prefill.replicas == service.spec.prefill.replicas == 1
    assert sizes[c.ROLE_DECODE] == scaletargets.PoolScale(c.ROLE_DECODE, 9, 6, 2, 6)
    assert sizes[c.ROLE_DECODE].clamped == (
        "spec.replicas 9 is outside spec.autoscaling.decode.maxReplicas 6: the pool runs 6"
    )
    assert sizes[c.ROLE_PREFILL] == scaletargets.PoolScale(c.ROLE_PREFILL, None, 1, 1, 3)
    assert sizes[c.ROLE_PREFILL].clamped is None
    _, low = scaletargets.scaled(service, {c.ROLE_DECODE: {"kind": c.POOL_KIND, "spec": {"replicas": 0}}})
    assert low[c.ROLE_DECODE].replicas == 2 and "minReplicas 2" in (low[c.ROLE_DECODE].clamped or "")


def test_without_autoscaling_nothing_is_scaled() -> None:
    service = parse_service(_manifest(None, decode_replicas=3))
    scaled, sizes = scaletargets.scaled(service, {c.ROLE_DECODE: {"kind": c.POOL_KIND, "spec": {"replicas": 5}}})
    assert scaled is service and sizes == {}


def test_targets_are_created_once_with_the_spec_replicas_and_get_status() -> None:
    client, _ = _converged()
    for role, initial in ((c.ROLE_PREFILL, 1), (c.ROLE_DECODE, 2)):
        target = client.objects[_target_path(role)]
        assert target["spec"] == {"replicas": initial}
        assert target["metadata"]["ownerReferences"][0]["kind"] == c.KIND
        assert target["metadata"]["labels"][c.LABEL_ROLE] == role
        assert target["status"]["selector"] == f"{c.LABEL_SERVICE}={NAME},{c.LABEL_ROLE}={role}"
        assert target["status"]["replicas"] == initial == target["status"]["desiredReplicas"]
    status = client.service(NAMESPACE, NAME)["status"]["autoscaling"]
    assert status["mode"] == "External"
    assert status["decode"] == {"target": 2, "replicas": 2, "minReplicas": 2, "maxReplicas": 6}


def test_a_scaled_target_sizes_the_pool_and_the_operator_never_writes_its_spec() -> None:
    client, reconciler = _converged()
    client.scale(_target_path(c.ROLE_DECODE), 5)
    client.reset()
    for _ in range(3):
        reconciler.reconcile(NAMESPACE, NAME, client.children)
        client.roll_out(NAMESPACE)
    assert _decode_replicas(client) == 5
    target_writes = [(method, path) for method, path in client.writes if c.POOL_PLURAL in path]
    assert target_writes and all(path.endswith("/status") for _, path in target_writes)
    assert client.objects[_target_path(c.ROLE_DECODE)]["spec"]["replicas"] == 5
    assert client.objects[_target_path(c.ROLE_DECODE)]["status"]["replicas"] == 5
    # A steady pass writes nothing at all.
    client.reset()
    reconciler.reconcile(NAMESPACE, NAME, client.children)
    assert client.writes == []


def test_a_spec_replicas_edit_does_not_resize_an_autoscaled_pool() -> None:
    client, reconciler = _converged()
    client.scale(_target_path(c.ROLE_DECODE), 4)
    reconciler.services.put(client.update_spec(NAMESPACE, NAME, _manifest(decode_replicas=3)["spec"]))
    for _ in range(2):
        reconciler.reconcile(NAMESPACE, NAME, client.children)
        client.roll_out(NAMESPACE)
    assert _decode_replicas(client) == 4
    assert client.objects[_target_path(c.ROLE_DECODE)]["spec"]["replicas"] == 4


def test_unsetting_autoscaling_prunes_the_targets_and_the_spec_rules_again() -> None:
    client, reconciler = _converged()
    client.scale(_target_path(c.ROLE_DECODE), 5)
    reconciler.reconcile(NAMESPACE, NAME, client.children)
    reconciler.services.put(client.update_spec(NAMESPACE, NAME, _manifest(None, decode_replicas=2)["spec"]))
    reconciler.reconcile(NAMESPACE, NAME, client.children)
    assert _target_path(c.ROLE_DECODE) not in client.objects
    assert _target_path(c.ROLE_PREFILL) not in client.objects
    assert _decode_replicas(client) == 2
    client.roll_out(NAMESPACE)
    reconciler.reconcile(NAMESPACE, NAME, client.children)
    assert "autoscaling" not in client.service(NAMESPACE, NAME)["status"]


EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "autoscaling"


def test_the_planner_example_is_valid() -> None:
    service = parse_service(yaml.safe_load((EXAMPLES / "llama-3.1-8b-planner.yaml").read_text()))
    assert validate(service) == []
    assert service.spec.autoscaling is not None and service.spec.autoscaling.mode == "Planner"


@pytest.mark.parametrize("file", ["hpa.yaml", "keda-scaledobject.yaml"])
def test_autoscaler_examples_target_the_scale_targets(file: str) -> None:
    documents = list(yaml.safe_load_all((EXAMPLES / file).read_text()))
    assert len(documents) == 2
    for document, role in zip(documents, c.POOLS, strict=True):
        ref = document["spec"]["scaleTargetRef"]
        assert (ref["apiVersion"], ref["kind"]) == (c.API_VERSION, c.POOL_KIND)
        assert ref["name"] == scaletargets.target_name("llama-eagle3", role) == document["metadata"]["name"]
