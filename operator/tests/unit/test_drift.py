"""drift.needs_apply: no write when the live object already holds every rendered field; a write when it does not."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from disaggspec.constants import ANNOTATION_APPLIED_HASH, LABEL_ROLE
from disaggspec.drift import MERGED_LISTS, is_subset, manifest_hash, needs_apply, with_applied_hash

RENDERED: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "d", "namespace": "ns", "labels": {"a": "b"}},
    "spec": {
        "replicas": 2,
        "template": {"spec": {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}},
    },
}


def _live(desired: dict[str, Any]) -> dict[str, Any]:
    """What the API server returns: our fields plus defaults, quantities as strings."""
    live: dict[str, Any] = {
        "metadata": {**desired["metadata"], "uid": "u", "resourceVersion": "7", "generation": 1},
        "spec": {
            "replicas": 2,
            "revisionHistoryLimit": 10,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "m", "resources": {"limits": {"nvidia.com/gpu": "8"}}, "imagePullPolicy": "Always"}
                    ],
                    "dnsPolicy": "ClusterFirst",
                }
            },
        },
        "status": {"replicas": 2},
    }
    return live


def test_live_object_with_server_defaults_needs_no_write() -> None:
    desired = with_applied_hash(RENDERED)
    assert not needs_apply(desired, _live(desired))


def test_missing_object_and_manual_edit_need_a_write() -> None:
    desired = with_applied_hash(RENDERED)
    assert needs_apply(desired, None)
    edited = _live(desired)
    edited["spec"]["replicas"] = 5
    assert needs_apply(desired, edited)


def test_a_changed_render_changes_the_hash_even_when_it_only_drops_a_field() -> None:
    smaller = {**RENDERED, "metadata": {"name": "d", "namespace": "ns"}}
    assert manifest_hash(smaller) != manifest_hash(RENDERED)
    old = with_applied_hash(RENDERED)
    assert needs_apply(with_applied_hash(smaller), _live(old))
    assert with_applied_hash(RENDERED)["metadata"]["annotations"][ANNOTATION_APPLIED_HASH] == manifest_hash(RENDERED)


def test_atomic_lists_compare_by_length_and_order_and_bools_are_not_strings() -> None:
    assert not is_subset([1, 2], [2, 1])
    assert not is_subset([1], [1, 2])
    assert is_subset({"x": [{"a": 1}]}, {"x": [{"a": 1, "b": 2}]})
    assert not is_subset(True, "True")


def test_empty_lists_and_maps_the_server_drops_count_as_present() -> None:
    assert is_subset({"env": [], "labels": {}, "x": 1}, {"x": 1})
    assert not is_subset({"env": [{"name": "A"}]}, {})


# ---- lists Kubernetes merges by key: only the operator's own items count -------------------------------------------

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "rdma-multus" / "expected.yaml"
OWNER = {"apiVersion": "x/v1", "kind": "DisaggSpecService", "name": "qwen-rdma", "uid": "owner-uid", "controller": True}


def _golden(kind: str, role: str | None = None) -> dict[str, Any]:
    """A rendered child of the golden case (of `role`, by its label), as `apply.sync` sends it (hash stamped, owner
    reference set)."""
    for doc in yaml.safe_load_all(GOLDEN.read_text()):
        if doc["kind"] == kind and role in (None, doc["metadata"]["labels"].get(LABEL_ROLE)):
            stamped = with_applied_hash(doc)
            stamped["metadata"]["ownerReferences"] = [dict(OWNER)]
            return stamped
    raise AssertionError(f"no {kind} of role {role} in {GOLDEN}")


def _as_served(desired: dict[str, Any]) -> dict[str, Any]:
    """The live object: the desired one plus server-set metadata and a default the render does not set."""
    live = copy.deepcopy(desired)
    live["metadata"].update(uid="child-uid", resourceVersion="42", generation=3)
    if live["kind"] == "Deployment":
        live["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
        for container in live["spec"]["template"]["spec"]["containers"]:
            container["terminationMessagePath"] = "/dev/termination-log"
    return live


def _container(live: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = live["spec"]["template"]["spec"]["containers"][0]
    return container


def _foreign_env(live: dict[str, Any]) -> None:  # `kubectl set env`, or a mutating policy, added a variable
    _container(live)["env"].insert(1, {"name": "HTTPS_PROXY", "value": "http://proxy:3128"})


def _foreign_owner(live: dict[str, Any]) -> None:  # another controller adopted the object too (not as controller)
    live["metadata"]["ownerReferences"].insert(0, {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "cm"})


def _foreign_volume_and_mount(live: dict[str, Any]) -> None:  # a sidecar injector's volume
    live["spec"]["template"]["spec"]["volumes"].append({"name": "istio-envoy", "emptyDir": {}})
    _container(live)["volumeMounts"].insert(0, {"name": "istio-envoy", "mountPath": "/etc/istio/proxy"})


def _foreign_container_port(live: dict[str, Any]) -> None:
    _container(live)["ports"].append({"name": "debug", "containerPort": 5678, "protocol": "TCP"})


def _foreign_container(live: dict[str, Any]) -> None:
    live["spec"]["template"]["spec"]["containers"].insert(0, {"name": "istio-proxy", "image": "proxyv2"})


def _foreign_finalizer(live: dict[str, Any]) -> None:
    live["metadata"]["finalizers"] = ["example.com/backup"]


def _owned_items_reordered(live: dict[str, Any]) -> None:  # a merge by key does not promise the order
    _container(live)["env"].reverse()
    _container(live)["ports"].reverse()


def _changed_owned_env_value(live: dict[str, Any]) -> None:
    env = _container(live)["env"]
    env[0] = {**env[0], "value": "mlx5_9"}


def _removed_owned_env_var(live: dict[str, Any]) -> None:
    del _container(live)["env"][0]


def _reordered_args(live: dict[str, Any]) -> None:  # command/args are atomic: order is meaning
    command = _container(live)["command"]
    command[-2], command[-1] = command[-1], command[-2]


def _extra_arg(live: dict[str, Any]) -> None:
    _container(live)["command"].append("--foreign")


def _changed_owned_port(live: dict[str, Any]) -> None:  # the owned item under its key no longer matches
    ports = _container(live)["ports"]
    ports[0] = {**ports[0], "name": "renamed"}


def _owned_port_moved(live: dict[str, Any]) -> None:  # a different key: ours is gone, a foreign one appeared
    ports = _container(live)["ports"]
    ports[0] = {**ports[0], "containerPort": 1234}


def _owned_volume_changed(live: dict[str, Any]) -> None:
    live["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] = "1Gi"


def _our_owner_reference_replaced(live: dict[str, Any]) -> None:
    live["metadata"]["ownerReferences"] = [{**OWNER, "uid": "someone-else"}]


def _extra_capability(live: dict[str, Any]) -> None:  # capabilities.add is atomic
    _container(live)["securityContext"]["capabilities"]["add"].append("NET_ADMIN")


@pytest.mark.parametrize(
    ("edit", "write"),
    [
        (_foreign_env, False),
        (_foreign_owner, False),
        (_foreign_volume_and_mount, False),
        (_foreign_container_port, False),
        (_foreign_container, False),
        (_foreign_finalizer, False),
        (_owned_items_reordered, False),
        (_changed_owned_env_value, True),
        (_removed_owned_env_var, True),
        (_reordered_args, True),
        (_extra_arg, True),
        (_changed_owned_port, True),
        (_owned_port_moved, True),
        (_owned_volume_changed, True),
        (_our_owner_reference_replaced, True),
        (_extra_capability, True),
    ],
    ids=lambda value: value.__name__.strip("_") if callable(value) else ("apply" if value else "no-apply"),
)
def test_deployment_edits(edit: Callable[[dict[str, Any]], None], write: bool) -> None:
    desired = _golden("Deployment", "prefill")
    live = _as_served(desired)
    assert not needs_apply(desired, live)
    edit(live)
    assert needs_apply(desired, live) is write


def _foreign_service_port(live: dict[str, Any]) -> None:
    live["spec"]["ports"].append({"name": "metrics", "port": 9100, "targetPort": 9100, "protocol": "TCP"})


def _same_port_other_protocol(live: dict[str, Any]) -> None:  # (port, protocol) is the key: UDP 8000 is foreign
    port = live["spec"]["ports"][0]
    live["spec"]["ports"].append({**port, "name": "http-udp", "protocol": "UDP"})


def _changed_target_port(live: dict[str, Any]) -> None:
    live["spec"]["ports"][0]["targetPort"] = 9999


def _removed_service_port(live: dict[str, Any]) -> None:
    del live["spec"]["ports"][0]


@pytest.mark.parametrize(
    ("edit", "write"),
    [
        (_foreign_service_port, False),
        (_same_port_other_protocol, False),
        (_foreign_owner, False),
        (_changed_target_port, True),
        (_removed_service_port, True),
    ],
    ids=lambda value: value.__name__.strip("_") if callable(value) else ("apply" if value else "no-apply"),
)
def test_service_edits(edit: Callable[[dict[str, Any]], None], write: bool) -> None:
    desired = _golden("Service", "prefill")
    live = _as_served(desired)
    assert not needs_apply(desired, live)
    edit(live)
    assert needs_apply(desired, live) is write


def test_rbac_rules_and_subjects_stay_atomic() -> None:
    role = _golden("Role")
    live = _as_served(role)
    live["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})
    assert needs_apply(role, live)
    binding = _golden("RoleBinding")
    live = _as_served(binding)
    live["subjects"].append({"kind": "User", "name": "mallory"})
    assert needs_apply(binding, live)
    live = _as_served(binding)
    live["metadata"]["ownerReferences"].append({"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "cm"})
    assert not needs_apply(binding, live)


def test_a_port_protocol_the_render_leaves_out_matches_the_server_default() -> None:
    lists = {"spec.ports": ("port", "protocol")}
    assert is_subset({"spec": {"ports": [{"port": 80}]}}, {"spec": {"ports": [{"port": 80, "protocol": "TCP"}]}}, lists)
    assert not is_subset(
        {"spec": {"ports": [{"port": 80}]}}, {"spec": {"ports": [{"port": 80, "protocol": "UDP"}]}}, lists
    )


def test_merged_lists_name_every_list_of_objects_the_render_emits() -> None:
    """A new list field in the render must be classified: keyed (MERGED_LISTS) or knowingly atomic (here)."""
    atomic = {
        ("Deployment", "spec.template.spec.tolerations"),
        ("Role", "rules"),
        ("RoleBinding", "subjects"),
    }
    seen: set[tuple[str, str]] = set()

    def walk(kind: str, value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(kind, item, f"{path}.{key}" if path else key)
        elif isinstance(value, list):
            if any(isinstance(item, dict) for item in value):
                seen.add((kind, path))
            for item in value:
                walk(kind, item, f"{path}[]")

    for golden in sorted(GOLDEN.parent.glob("*/expected.yaml")):
        for doc in yaml.safe_load_all(golden.read_text()):
            walk(doc["kind"], doc, "")
    unclassified = {(kind, path) for kind, path in seen if path not in MERGED_LISTS[kind]} - atomic
    assert not unclassified
