"""Repairing a child whose merged form another field manager's edit made invalid (issue 29, item 6).

The live objects are shaped like what kube-apiserver v1.37 returned on the local control plane after the hand edits
the integration test makes (`kubectl patch --field-manager=hand --type=json`): the edited list item is a new item,
wholly owned by the hand's Update entry, and the operator's Apply entry no longer mentions the item it had.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import json
from typing import Any

import pytest

from disaggspec import admission_children, apply, childrepair, rollout
from disaggspec import conditions as r
from disaggspec import constants as c
from disaggspec.api import parse_service
from disaggspec.childrefusal import Cause, Refusal
from disaggspec.config import OperatorConfig
from disaggspec.reconcile import Reconciler
from disaggspec.runtime.caches import DisaggSpecServiceCache
from tests.unit.dss_cases import edited
from tests.unit.fakes import FakeClient

OWN = c.FIELD_MANAGER
PORT_30000 = 'k:{"containerPort":30000,"protocol":"TCP"}'
PORT_30001 = 'k:{"containerPort":30001,"protocol":"TCP"}'
PORT_8998 = 'k:{"containerPort":8998,"protocol":"TCP"}'
SGLANG = 'k:{"name":"sglang"}'
ITEM: dict[str, Any] = {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}


def _entry(manager: str, fields: dict[str, Any], operation: str = "Update", **extra: str) -> dict[str, Any]:
    return {"manager": manager, "operation": operation, "fieldsType": "FieldsV1", "fieldsV1": fields, **extra}


def _container_fields(inner: dict[str, Any]) -> dict[str, Any]:
    return {"f:spec": {"f:template": {"f:spec": {"f:containers": {SGLANG: inner}}}}}


def _deployment(ports: list[dict[str, Any]], managed: list[dict[str, Any]], **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "svc-prefill-1", "namespace": "ns", "resourceVersion": "42", "managedFields": managed},
        "spec": {"template": {"spec": {"containers": [{"name": "sglang", "ports": ports, **container}]}}},
    }


def _desired_deployment(**container: Any) -> dict[str, Any]:
    ports = [{"name": "http", "containerPort": 30000}, {"name": "bootstrap", "containerPort": 8998}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "svc-prefill-1", "namespace": "ns"},
        "spec": {"template": {"spec": {"containers": [{"name": "sglang", "ports": ports, **container}]}}},
    }


def _ours(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The operator's Apply entry after the hand edit: the bootstrap port only (the http item it had is gone)."""
    inner: dict[str, Any] = {".": {}, "f:name": {}, "f:image": {}, "f:ports": {PORT_8998: ITEM}, **(extra or {})}
    return _entry(OWN, _container_fields(inner), "Apply")


def _duplicate(kind: str, name: str, field: str) -> Refusal:
    return Refusal(kind, name, 422, "Invalid", "is invalid", (Cause(field, 'Duplicate value: "http"'),))


EDITED_PORTS = [
    {"name": "http", "containerPort": 30001, "protocol": "TCP"},
    {"name": "bootstrap", "containerPort": 8998, "protocol": "TCP"},
]


def test_a_hand_edited_container_port_is_removed_and_the_operators_put_back_in_one_guarded_patch() -> None:
    hand = _entry("hand", _container_fields({"f:ports": {PORT_30001: ITEM}}))
    live = _deployment(copy.deepcopy(EDITED_PORTS), [_ours(), hand])
    refusal = _duplicate("Deployment", "svc-prefill-1", "spec.template.spec.containers[0].ports[1].name")

    repair = childrepair.decide(live, _desired_deployment(), refusal, OWN)

    assert repair is not None
    assert [f.manager for f in repair.removed] == ["hand"]
    assert (
        repair.removed[0].field == "spec.template.spec.containers[name=sglang].ports[containerPort=30001,protocol=TCP]"
    )
    assert list(repair.patch) == [
        {"op": "test", "path": "/spec/template/spec/containers/0/ports/0", "value": EDITED_PORTS[0]},
        {
            "op": "add",
            "path": "/spec/template/spec/containers/0/ports/-",
            "value": {"name": "http", "containerPort": 30000},
        },
        {"op": "remove", "path": "/spec/template/spec/containers/0/ports/0"},
    ]
    assert "field manager 'hand'" in repair.message and 'Duplicate value: \\"http\\"' not in repair.message
    assert 'Duplicate value: "http"' in repair.message


def test_a_duplicate_name_selects_only_the_foreign_item_with_that_name() -> None:
    """A foreign port added next to the operator's (another name) is a legitimate addition: it stays."""
    metrics_port = 'k:{"containerPort":9100,"protocol":"TCP"}'
    hand = _entry("hand", _container_fields({"f:ports": {PORT_30001: ITEM}}))
    sidecar_tool = _entry("monitoring", _container_fields({"f:ports": {metrics_port: ITEM}}))
    ports = [*copy.deepcopy(EDITED_PORTS), {"name": "metrics", "containerPort": 9100, "protocol": "TCP"}]
    live = _deployment(ports, [_ours(), hand, sidecar_tool])
    refusal = _duplicate("Deployment", "svc-prefill-1", "spec.template.spec.containers[0].ports[1].name")

    repair = childrepair.decide(live, _desired_deployment(), refusal, OWN)

    assert repair is not None
    assert [f.manager for f in repair.removed] == ["hand"]
    # The everything round (only when the targeted one did not help) would take the other foreign item too.
    everything = childrepair.decide(live, _desired_deployment(), refusal, OWN, childrepair.EVERYTHING)
    assert everything is not None and {f.manager for f in everything.removed} == {"hand", "monitoring"}
    removes = [op["path"] for op in everything.patch if op["op"] == "remove"]
    assert removes == ["/spec/template/spec/containers/0/ports/2", "/spec/template/spec/containers/0/ports/0"]


def test_a_hand_edited_service_port_is_removed() -> None:
    port = 'k:{"port":30005,"protocol":"TCP"}'
    ours_port = 'k:{"port":8998,"protocol":"TCP"}'
    item: dict[str, Any] = {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}
    live = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "svc-prefill",
            "namespace": "ns",
            "resourceVersion": "7",
            "managedFields": [
                _entry(OWN, {"f:spec": {"f:clusterIP": {}, "f:ports": {ours_port: item}, "f:selector": {}}}, "Apply"),
                _entry("hand2", {"f:spec": {"f:ports": {port: item}}}),
            ],
        },
        "spec": {
            "clusterIP": "None",
            "ports": [
                {"name": "http", "port": 30005, "protocol": "TCP", "targetPort": "http"},
                {"name": "bootstrap", "port": 8998, "protocol": "TCP", "targetPort": "bootstrap"},
            ],
        },
    }
    desired: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "svc-prefill", "namespace": "ns"},
        "spec": {
            "clusterIP": "None",
            "ports": [
                {"name": "http", "port": 30000, "targetPort": "http"},
                {"name": "bootstrap", "port": 8998, "targetPort": "bootstrap"},
            ],
        },
    }

    repair = childrepair.decide(live, desired, _duplicate("Service", "svc-prefill", "spec.ports[1].name"), OWN)

    assert repair is not None
    assert [(f.manager, f.field) for f in repair.removed] == [("hand2", "spec.ports[port=30005,protocol=TCP]")]
    assert {"op": "remove", "path": "/spec/ports/0"} in repair.patch
    assert {"op": "add", "path": "/spec/ports/-", "value": desired["spec"]["ports"][0]} in repair.patch


def test_a_replaced_probe_handler_gets_the_operators_back_in_the_same_patch() -> None:
    """Removing the foreign `exec` alone would leave a probe without a handler: the patch restores `httpGet`."""
    http_get = {"path": "/health", "port": "http"}
    ours = _ours({"f:readinessProbe": {"f:periodSeconds": {}, "f:httpGet": {"f:path": {}, "f:port": {}}}})
    # After the edit, the operator no longer owns httpGet (it was removed), only periodSeconds.
    ours["fieldsV1"] = _container_fields(
        {".": {}, "f:name": {}, "f:ports": {PORT_8998: ITEM}, "f:readinessProbe": {"f:periodSeconds": {}}}
    )
    hand = _entry("hand4", _container_fields({"f:readinessProbe": {"f:exec": {".": {}, "f:command": {}}}}))
    live = _deployment(
        copy.deepcopy(EDITED_PORTS[1:]),
        [ours, hand],
        readinessProbe={"periodSeconds": 10, "exec": {"command": ["true"]}},
    )
    desired = _desired_deployment(readinessProbe={"periodSeconds": 10, "httpGet": http_get})
    cause = Cause(
        "spec.template.spec.containers[0].readinessProbe.httpGet", "Forbidden: may not specify more than 1 handler type"
    )

    repair = childrepair.decide(
        live, desired, Refusal("Deployment", "svc-prefill-1", 422, "Invalid", "", (cause,)), OWN
    )

    assert repair is not None
    assert [f.field for f in repair.removed] == ["spec.template.spec.containers[name=sglang].readinessProbe.exec"]
    assert {"op": "add", "path": "/spec/template/spec/containers/0/readinessProbe/httpGet", "value": http_get} in (
        repair.patch
    )
    assert repair.patch[-1] == {"op": "remove", "path": "/spec/template/spec/containers/0/readinessProbe/exec"}


def test_a_pdb_with_min_available_by_hand_gets_max_unavailable_back() -> None:
    live = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": "svc-router",
            "namespace": "ns",
            "resourceVersion": "9",
            "managedFields": [
                _entry(OWN, {"f:spec": {"f:selector": {}, "f:unhealthyPodEvictionPolicy": {}}}, "Apply"),
                _entry("hand3", {"f:spec": {"f:minAvailable": {}}}),
            ],
        },
        "spec": {"minAvailable": 0, "selector": {}, "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }
    desired = {**live, "spec": {"maxUnavailable": 1, "selector": {}, "unhealthyPodEvictionPolicy": "AlwaysAllow"}}
    cause = Cause("spec", "Invalid value: {...}: minAvailable and maxUnavailable cannot be both set")

    repair = childrepair.decide(live, desired, Refusal("PodDisruptionBudget", "svc-router", 422, "", "", (cause,)), OWN)

    assert repair is not None
    assert [(f.manager, f.field) for f in repair.removed] == [("hand3", "spec.minAvailable")]
    assert list(repair.patch) == [
        {"op": "test", "path": "/spec/minAvailable", "value": 0},
        {"op": "add", "path": "/spec/maxUnavailable", "value": 1},
        {"op": "remove", "path": "/spec/minAvailable"},
    ]


def test_a_foreign_field_inside_an_operator_item_is_removed_alone() -> None:
    """The operator's item stays (its key has `protocol`, which the render leaves to the API server's default)."""
    ours = _ours()
    ours["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"][SGLANG]["f:ports"][PORT_30000] = ITEM
    hand = _entry("hand", _container_fields({"f:ports": {PORT_30000: {"f:hostIP": {}}}}))
    ports = [{"name": "http", "containerPort": 30000, "protocol": "TCP", "hostIP": "1.2.3.4"}, EDITED_PORTS[1]]
    live = _deployment(ports, [ours, hand])
    cause = Cause("spec.template.spec.containers[0].ports[0].hostIP", "Invalid value: ...")

    repair = childrepair.decide(
        live, _desired_deployment(), Refusal("Deployment", "svc-prefill-1", 422, "", "", (cause,)), OWN
    )

    assert repair is not None
    assert list(repair.patch) == [
        {"op": "test", "path": "/spec/template/spec/containers/0/ports/0/hostIP", "value": "1.2.3.4"},
        {"op": "remove", "path": "/spec/template/spec/containers/0/ports/0/hostIP"},
    ]


def test_what_the_operator_owns_is_never_removed_and_metadata_and_subresources_are_out_of_scope() -> None:
    # Someone created the container item (`.`) and set its image, which the operator owns too; a foreign env var
    # inside it; a foreign owner reference; the HPA's replicas through the scale subresource.
    creator = _entry("kubectl-create", _container_fields({".": {}, "f:image": {}, "f:env": {'k:{"name":"X"}': {}}}))
    owner_ref = _entry("someone", {"f:metadata": {"f:ownerReferences": {'k:{"uid":"u"}': {}}}})
    scaler = _entry("hpa", {"f:spec": {"f:replicas": {}}}, subresource="scale")
    live = _deployment(copy.deepcopy(EDITED_PORTS[1:]), [_ours(), creator, owner_ref, scaler], env=[{"name": "X"}])
    live["spec"]["replicas"] = 3

    candidates = childrepair.foreign_candidates(live, OWN)

    assert [(f.manager, f.field) for f in candidates] == [
        ("kubectl-create", "spec.template.spec.containers[name=sglang].env[name=X]")
    ]


def test_nested_foreign_nodes_are_removed_once_from_the_outermost() -> None:
    hand = _entry("hand", _container_fields({"f:ports": {PORT_30001: ITEM}}))
    renamer = _entry("renamer", _container_fields({"f:ports": {PORT_30001: {"f:name": {}}}}))
    live = _deployment(copy.deepcopy(EDITED_PORTS), [_ours(), hand, renamer])

    repair = childrepair.decide(
        live, _desired_deployment(), Refusal("Deployment", "svc-prefill-1", 500, "", "typed patch"), OWN
    )

    assert repair is not None
    assert [op["path"] for op in repair.patch if op["op"] == "remove"] == ["/spec/template/spec/containers/0/ports/0"]


def test_nothing_foreign_is_no_repair() -> None:
    live = _deployment(copy.deepcopy(EDITED_PORTS[1:]), [_ours()])
    refusal = _duplicate("Deployment", "svc-prefill-1", "spec.template.spec.containers[0].ports[1].name")
    assert childrepair.decide(live, _desired_deployment(), refusal, OWN) is None
    assert childrepair.decide(live, _desired_deployment(), refusal, OWN, childrepair.EVERYTHING) is None


def test_pointer_resolves_keys_sets_and_escapes() -> None:
    obj = {"metadata": {"finalizers": ["a", "b/c"], "labels": {"x/y": "1"}}, "spec": {"ports": [{"port": 1}]}}
    assert childrepair.pointer(obj, ("f:metadata", "v:" + json.dumps("b/c"))) is None  # finalizers not stepped into
    assert childrepair.pointer(obj, ("f:metadata", "f:finalizers", "v:" + json.dumps("b/c"))) == (
        "/metadata/finalizers/1",
        (1,),
    )
    assert childrepair.pointer(obj, ("f:metadata", "f:labels", "f:x/y")) == ("/metadata/labels/x~1y", ())
    assert childrepair.pointer(obj, ("f:spec", "f:ports", 'k:{"port":2}')) is None


# ---- through apply.sync and a reconcile pass (in-memory API server) ---------------------------------------------

NAMESPACE = "team"
NAME = "base"


def _service_manifest() -> dict[str, Any]:
    obj = edited({})
    obj["metadata"]["namespace"] = NAMESPACE
    return obj


def _reconciler(client: FakeClient) -> Reconciler:
    ticks = itertools.count(1)
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    return Reconciler(
        client,
        OperatorConfig(),
        client.post_event,
        services=DisaggSpecServiceCache(),
        clock=lambda: rollout.format_time(start + datetime.timedelta(seconds=next(ticks))),
    )


def _hand_edit_service_port(client: FakeClient, path: str) -> None:
    """What `kubectl patch --field-manager=hand` of the http port's number leaves behind."""
    live = client.objects[path]
    http = next(p for p in live["spec"]["ports"] if p["name"] == "http")
    http["port"] = 30005
    key = json.dumps({"port": 30005, "protocol": "TCP"}, separators=(",", ":"))
    item: dict[str, Any] = {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}
    live["metadata"]["managedFields"] = [
        _entry(OWN, {"f:spec": {"f:selector": {}}}, "Apply"),
        _entry("hand", {"f:spec": {"f:ports": {f"k:{key}": item}}}),
    ]
    live["metadata"]["annotations"][c.ANNOTATION_APPLIED_HASH] = "edited"  # drift: the pass applies it again


def _duplicate_http(live: dict[str, Any]) -> apply.ApiError | None:
    """The API server's answer to the operator's apply over `live`: its http port (30000) merged with a foreign
    item of another number and the same name is a duplicate name."""
    if any(p.get("name") == "http" and p.get("port") != 30000 for p in live["spec"]["ports"]):
        return apply.ApiError(
            422,
            "PATCH",
            "",
            "is invalid",
            reason="Invalid",
            causes=(Cause("spec.ports[1].name", 'Duplicate value: "http"'),),
        )
    return None


def test_a_pass_repairs_the_refused_child_and_applies_everything_else() -> None:
    client = FakeClient()
    client.create(_service_manifest())
    reconciler = _reconciler(client)
    reconciler.reconcile(NAMESPACE, NAME, client.children)
    client.roll_out(NAMESPACE)
    reconciler.reconcile(NAMESPACE, NAME, client.children)
    prefill_service = apply.SERVICE.item(NAMESPACE, f"{NAME}-prefill")
    _hand_edit_service_port(client, prefill_service)
    client.refuse_merged[prefill_service] = _duplicate_http
    decode = next(path for path, obj in client.objects.items() if obj["kind"] == "Deployment" and "-decode-" in path)
    del client.objects[decode]  # deleted by hand as well
    client.reset()

    reconciler.reconcile(NAMESPACE, NAME, client.children)

    assert decode in client.objects, "the deleted Deployment was not recreated"
    ports = client.objects[prefill_service]["spec"]["ports"]
    assert sorted(p["port"] for p in ports) == [8998, 30000]
    patches = [(method, path) for method, path in client.requests if method == "PATCH" and path == prefill_service]
    assert len(patches) == 2  # the repair's JSON patch, then the apply
    degraded = {cond["type"]: cond for cond in client.service(NAMESPACE, NAME)["status"]["conditions"]}["Degraded"]
    assert degraded["status"] == "False", degraded
    reverted = [e for e in client.events if e.reason == r.EVENT_FOREIGN_EDIT_REVERTED.reason]
    assert len(reverted) == 1 and reverted[0].type == "Warning"
    assert (
        "field manager 'hand'" in reverted[0].message and "spec.ports[port=30005,protocol=TCP]" in reverted[0].message
    )


def test_a_child_whose_render_alone_is_refused_is_not_repaired() -> None:
    """The spec's own fault (the render is refused as a create too): no foreign field is touched, nothing applied."""
    client = FakeClient()
    client.create(_service_manifest())
    reconciler = _reconciler(client)
    reconciler.reconcile(NAMESPACE, NAME, client.children)
    prefill_service = apply.SERVICE.item(NAMESPACE, f"{NAME}-prefill")
    _hand_edit_service_port(client, prefill_service)
    before = copy.deepcopy(client.objects[prefill_service])
    client.refuse[prefill_service] = apply.ApiError(
        422, "PATCH", prefill_service, "is invalid", reason="Invalid", causes=(Cause("spec.ports[1].name", "bad"),)
    )
    client.reset()

    try:
        reconciler.reconcile(NAMESPACE, NAME, client.children)
    except apply.ChildrenRefused:
        pass
    else:  # pragma: no cover - the assertion below explains
        raise AssertionError("the refusal was not reported")

    assert client.objects[prefill_service] == before
    assert not client.writes or all(path.endswith("/status") for _, path in client.writes)
    assert not [e for e in client.events if e.reason == r.EVENT_FOREIGN_EDIT_REVERTED.reason]


def test_admission_does_not_refuse_a_spec_because_of_a_foreign_edit() -> None:
    """The webhook's dry-run meets the same merged form: a child whose render alone is valid does not refuse the
    spec (reconcile repairs it); one whose render alone is refused still does."""
    client = FakeClient()
    manifest = client.create(_service_manifest())
    reconciler = _reconciler(client)
    reconciler.reconcile(NAMESPACE, NAME, client.children)
    prefill_service = apply.SERVICE.item(NAMESPACE, f"{NAME}-prefill")
    _hand_edit_service_port(client, prefill_service)
    client.refuse_merged[prefill_service] = _duplicate_http
    service = parse_service(manifest)

    assert admission_children.refusal_text(client, OperatorConfig(), manifest, service) is None

    refusal = _duplicate_http(client.objects[prefill_service])
    assert refusal is not None
    client.refuse[prefill_service] = refusal  # now the render alone is refused too: the spec's own fault
    text = admission_children.refusal_text(client, OperatorConfig(), manifest, service)
    assert text is not None and text.startswith(f"the API server refuses Service {NAME}-prefill: ")


class _RacingClient(FakeClient):
    """Someone changes the foreign port again right after the operator read the child."""

    def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        answer = super().request(method, path, *args, **kwargs)
        if method == "GET" and path.endswith(f"/services/{NAME}-prefill"):
            with self._lock:
                next(p for p in self.objects[path]["spec"]["ports"] if p["name"] == "http")["port"] = 30006
        return answer


def test_a_concurrent_change_fails_the_repair_as_a_transient_error() -> None:
    client = _RacingClient()
    client.create(_service_manifest())
    reconciler = _reconciler(client)
    reconciler.reconcile(NAMESPACE, NAME, client.children)
    prefill_service = apply.SERVICE.item(NAMESPACE, f"{NAME}-prefill")
    _hand_edit_service_port(client, prefill_service)
    client.refuse_merged[prefill_service] = _duplicate_http
    desired = [obj for obj in client.children(NAMESPACE, NAME) if obj["kind"] == "Service"]
    for obj in desired:
        for server_set in ("uid", "resourceVersion", "generation"):
            del obj["metadata"][server_set]
        del obj["metadata"]["annotations"][c.ANNOTATION_APPLIED_HASH]
    owner = client.service(NAMESPACE, NAME)

    with pytest.raises(apply.ApiError) as failed:
        apply.sync(client, owner, desired, client.children(NAMESPACE, NAME), keep=client.children(NAMESPACE, NAME))

    assert failed.value.status == 409 and not failed.value.refused  # retried by the work queue, not reported
    assert any(p["port"] == 30006 for p in client.objects[prefill_service]["spec"]["ports"])  # nothing removed
