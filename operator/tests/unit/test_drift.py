"""drift.needs_apply: no write when the live object already holds every rendered field; a write when it does not."""

from __future__ import annotations

from typing import Any

from disaggspec.constants import ANNOTATION_APPLIED_HASH
from disaggspec.drift import is_subset, manifest_hash, needs_apply, with_applied_hash

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


def test_lists_compare_by_length_and_order_and_bools_are_not_strings() -> None:
    assert not is_subset([1, 2], [2, 1])
    assert not is_subset([1], [1, 2])
    assert is_subset({"x": [{"a": 1}]}, {"x": [{"a": 1, "b": 2}]})
    assert not is_subset(True, "True")


def test_empty_lists_and_maps_the_server_drops_count_as_present() -> None:
    assert is_subset({"env": [], "labels": {}, "x": 1}, {"x": 1})
    assert not is_subset({"env": [{"name": "A"}]}, {})
