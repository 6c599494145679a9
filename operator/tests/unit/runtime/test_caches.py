"""runtime.caches: a packed child unpacks to the same object minus managedFields, smaller than the dict it came from;
the cache keeps the newest state per uid under its owner, a LIST replaces a kind authoritatively, and a deleted
service's tombstone keeps it from coming back."""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from disaggspec.constants import API_VERSION, KIND
from disaggspec.drift import needs_apply, with_applied_hash
from disaggspec.runtime.caches import ChildCache, DisaggSpecServiceCache, pack, unpack

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "llama-3.1-8b-eagle3" / "expected.yaml"


def _live_deployment() -> dict[str, Any]:
    rendered = next(d for d in yaml.safe_load_all(GOLDEN.read_text()) if d["kind"] == "Deployment")
    live = with_applied_hash(rendered)
    live["metadata"].update(uid="u-1", resourceVersion="42")
    live["metadata"]["managedFields"] = [{"manager": "disaggspec", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]
    live["status"] = {"replicas": 1, "readyReplicas": 1, "observedGeneration": 3}
    return live


def _deep_size(obj: Any) -> int:
    if isinstance(obj, dict):
        return sys.getsizeof(obj) + sum(_deep_size(k) + _deep_size(v) for k, v in obj.items())
    if isinstance(obj, list):
        return sys.getsizeof(obj) + sum(_deep_size(v) for v in obj)
    return sys.getsizeof(obj)


def test_round_trip_drops_only_managed_fields_and_leaves_the_input_alone() -> None:
    live = _live_deployment()
    before = copy.deepcopy(live)
    restored = unpack(pack(live))
    assert live == before
    expected = copy.deepcopy(live)
    del expected["metadata"]["managedFields"]
    assert restored == expected


def test_unpacked_child_still_matches_its_render_and_is_a_fresh_copy() -> None:
    rendered = next(d for d in yaml.safe_load_all(GOLDEN.read_text()) if d["kind"] == "Deployment")
    packed = pack(_live_deployment())
    first = unpack(packed)
    assert not needs_apply(with_applied_hash(rendered), first)
    first["spec"]["replicas"] = 7
    assert unpack(packed)["spec"]["replicas"] == rendered["spec"]["replicas"]
    assert needs_apply(with_applied_hash(rendered), first)


def test_packed_child_is_a_small_fraction_of_the_dict() -> None:
    live = _live_deployment()
    assert len(pack(live)) * 5 < _deep_size(live)


def _child(
    uid: str, name: str, replicas: int = 1, owner: str | None = "a", version: str = "1", namespace: str = "ns"
) -> dict[str, Any]:
    refs = [] if owner is None else [{"apiVersion": API_VERSION, "kind": KIND, "name": owner, "controller": True}]
    meta = {"name": name, "uid": uid, "namespace": namespace, "resourceVersion": version, "ownerReferences": refs}
    return {"kind": "Deployment", "metadata": meta, "spec": {"replicas": replicas}}


def test_cache_keeps_the_newest_state_per_uid_under_its_owner() -> None:
    cache = ChildCache()
    assert cache.put(_child("u1", "a-prefill")) == {("ns", "a")}
    cache.put(_child("u2", "a-decode"))
    cache.put(_child("u3", "b-prefill", owner="b"))
    assert cache.put(_child("u1", "a-prefill", replicas=3, version="2")) == {("ns", "a")}
    assert cache.put(_child("u1", "a-prefill", replicas=3, version="2")) == set()  # nothing new
    assert len(cache) == 3
    by_name = {obj["metadata"]["name"]: obj for obj in cache.children("ns", "a")}
    assert set(by_name) == {"a-prefill", "a-decode"}
    assert by_name["a-prefill"]["spec"]["replicas"] == 3
    assert [obj["metadata"]["name"] for obj in cache.children("ns", "b")] == ["b-prefill"]
    assert cache.children("other", "a") == []


def test_cache_moves_a_child_whose_owner_changed_and_forgets_removed_ones() -> None:
    cache = ChildCache()
    cache.put(_child("u1", "x"))
    assert cache.put(_child("u1", "x", owner="b", version="2")) == {("ns", "a"), ("ns", "b")}
    assert cache.children("ns", "a") == []
    assert [obj["metadata"]["uid"] for obj in cache.children("ns", "b")] == ["u1"]
    assert cache.remove("u1") == {("ns", "b")}
    assert cache.remove("never-seen") == set()
    assert cache.children("ns", "b") == []
    assert len(cache) == 0


def test_a_child_whose_owner_reference_is_removed_is_tracked_but_never_handed_out() -> None:
    cache = ChildCache()
    cache.put(_child("u1", "x"))
    assert cache.put(_child("u1", "x", owner=None, version="2")) == {("ns", "a")}
    assert cache.children("ns", "a") == []
    assert cache.versions("Deployment", "ns") == {"u1": "2"}  # still compared with the API server's list


def test_cache_hands_out_copies() -> None:
    cache = ChildCache()
    cache.put(_child("u1", "x"))
    cache.children("ns", "a")[0]["spec"]["replicas"] = 9
    assert cache.children("ns", "a")[0]["spec"]["replicas"] == 1


def test_replace_is_authoritative_for_its_kind_and_scope_and_names_the_changed_owners() -> None:
    cache = ChildCache()
    cache.put(_child("keep", "a-prefill"))
    cache.put(_child("gone", "b-prefill", owner="b"))  # deleted while the watch was down
    cache.put(_child("edited", "c-prefill", owner="c"))
    cache.put(_child("other-ns", "d-prefill", owner="d", namespace="elsewhere"))
    cache.put({**_child("svc", "e", owner="e"), "kind": "Service"})  # another kind: not touched
    listed = [
        _child("keep", "a-prefill"),
        _child("edited", "c-prefill", owner="c", replicas=5, version="7"),
        _child("new", "f-prefill", owner="f"),
    ]
    changed = cache.replace("Deployment", "ns", iter(listed))
    assert changed == {("ns", "b"), ("ns", "c"), ("ns", "f")}
    assert cache.children("ns", "b") == []
    assert cache.children("ns", "c")[0]["spec"]["replicas"] == 5
    assert [o["metadata"]["uid"] for o in cache.children("elsewhere", "d")] == ["other-ns"]
    assert [o["metadata"]["uid"] for o in cache.children("ns", "e")] == ["svc"]
    assert cache.replace("Deployment", "ns", iter(listed)) == set()  # the same list again: nothing changed
    assert cache.replace("Deployment", None, []) == {("ns", "a"), ("ns", "c"), ("ns", "f"), ("elsewhere", "d")}
    assert len(cache) == 1


def test_replace_leaves_the_cache_alone_when_the_listing_fails() -> None:
    cache = ChildCache()
    cache.put(_child("u1", "a-prefill"))

    def pages() -> Iterator[dict[str, Any]]:
        yield _child("u2", "a-decode")
        raise RuntimeError("410 Gone: continue token expired")

    with pytest.raises(RuntimeError):
        cache.replace("Deployment", None, pages())
    assert cache.versions("Deployment", None) == {"u1": "1"}


def _service(name: str, version: str, ready: str, uid: str = "s-1") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "resourceVersion": version, "uid": uid},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def test_service_cache_never_goes_back_to_an_older_state() -> None:
    cache = DisaggSpecServiceCache()
    assert cache.put(_service("a", "10", "False"))
    assert cache.put(_service("a", "12", "True"))  # the operator's own status patch
    assert not cache.put(_service("a", "11", "False"))  # a watch event from before that write, delivered late
    assert not cache.put(_service("a", "12", "True"))  # the echo of that write: nothing new, no pass
    held = cache.get("ns", "a")
    assert held is not None and held["metadata"]["resourceVersion"] == "12"
    assert cache.put(_service("a", "13", "False"))
    held = cache.get("ns", "a")
    assert held is not None and held["metadata"]["resourceVersion"] == "13"


def test_service_cache_takes_a_non_integer_version_and_forgets_removed_services() -> None:
    cache = DisaggSpecServiceCache()
    cache.put(_service("a", "10", "False"))
    assert cache.put(_service("a", "opaque", "True"))
    held = cache.get("ns", "a")
    assert held is not None and held["status"]["conditions"][0]["status"] == "True"
    cache.put(_service("b", "3", "True", uid="s-2"))
    assert cache.keys() == [("ns", "a"), ("ns", "b")]
    cache.evict("ns", "a")
    assert cache.get("ns", "a") is None and cache.keys() == [("ns", "b")]


def test_a_deleted_service_is_tombstoned_and_never_revived() -> None:
    cache = DisaggSpecServiceCache()
    cache.put(_service("a", "10", "False"))
    cache.delete(_service("a", "11", "False"))
    assert cache.get("ns", "a") is None and ("ns", "a") not in cache
    assert cache.tombstoned("s-1") and cache.deleted("ns", "a") and cache.tombstones() == 1
    # The response of a status patch sent before the deletion, put back after the DELETED event.
    assert not cache.put(_service("a", "12", "True"))
    assert cache.get("ns", "a") is None
    # A new service of the same name is another object.
    assert cache.put(_service("a", "20", "False", uid="s-2"))
    assert not cache.deleted("ns", "a") and not cache.tombstoned("s-2")


def test_a_newer_object_of_the_same_name_replaces_the_cached_one_whatever_its_version() -> None:
    cache = DisaggSpecServiceCache()
    cache.put(_service("a", "10", "False"))
    assert cache.put(_service("a", "9", "True", uid="s-2"))  # versions only compare within one object
    held = cache.get("ns", "a")
    assert held is not None and held["metadata"]["uid"] == "s-2"


def test_evict_tombstones_the_cached_uid() -> None:
    cache = DisaggSpecServiceCache()
    cache.put(_service("a", "10", "False"))
    assert cache.version("ns", "a") == 10
    cache.evict("ns", "a")
    assert cache.get("ns", "a") is None and cache.tombstoned("s-1")


def test_tombstones_expire_and_are_bounded() -> None:
    now = [0.0]
    cache = DisaggSpecServiceCache(clock=lambda: now[0], tombstone_seconds=60.0, tombstone_limit=2)
    for index in range(3):
        cache.delete(_service(f"s{index}", "1", "False", uid=f"u{index}"))
    assert cache.tombstones() == 2 and not cache.tombstoned("u0")  # the oldest went first
    assert cache.tombstoned("u2") and cache.deleted("ns", "s2") and not cache.deleted("ns", "s0")
    now[0] = 61.0
    assert cache.tombstones() == 0 and not cache.deleted("ns", "s2")
    assert cache.put(_service("s2", "1", "False", uid="u2"))  # forgotten: accepted again
