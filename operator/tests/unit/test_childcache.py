"""childcache: a packed child unpacks to the same object minus managedFields, smaller than the dict it came from;
the cache keeps the newest state per uid under its owner."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml

from disaggspec.childcache import ChildCache, ServiceCache, pack, unpack
from disaggspec.drift import needs_apply, with_applied_hash

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "llama-3.1-8b-eagle3" / "expected.yaml"


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


def _child(uid: str, name: str, replicas: int = 1) -> dict[str, Any]:
    return {"kind": "Deployment", "metadata": {"name": name, "uid": uid}, "spec": {"replicas": replicas}}


def test_cache_keeps_the_newest_state_per_uid_under_its_owner() -> None:
    cache = ChildCache()
    cache.put(("ns", "a"), _child("u1", "a-prefill"))
    cache.put(("ns", "a"), _child("u2", "a-decode"))
    cache.put(("ns", "b"), _child("u3", "b-prefill"))
    cache.put(("ns", "a"), _child("u1", "a-prefill", replicas=3))
    assert len(cache) == 3
    by_name = {obj["metadata"]["name"]: obj for obj in cache.children("ns", "a")}
    assert set(by_name) == {"a-prefill", "a-decode"}
    assert by_name["a-prefill"]["spec"]["replicas"] == 3
    assert [obj["metadata"]["name"] for obj in cache.children("ns", "b")] == ["b-prefill"]
    assert cache.children("other", "a") == []


def test_cache_moves_a_child_whose_owner_changed_and_forgets_removed_ones() -> None:
    cache = ChildCache()
    cache.put(("ns", "a"), _child("u1", "x"))
    cache.put(("ns", "b"), _child("u1", "x"))
    assert cache.children("ns", "a") == []
    assert [obj["metadata"]["uid"] for obj in cache.children("ns", "b")] == ["u1"]
    cache.remove("u1")
    cache.remove("never-seen")
    assert cache.children("ns", "b") == []
    assert len(cache) == 0


def test_cache_hands_out_copies() -> None:
    cache = ChildCache()
    cache.put(("ns", "a"), _child("u1", "x"))
    cache.children("ns", "a")[0]["spec"]["replicas"] = 9
    assert cache.children("ns", "a")[0]["spec"]["replicas"] == 1


def _service(name: str, version: str, ready: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "resourceVersion": version},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def test_service_cache_never_goes_back_to_an_older_state() -> None:
    cache = ServiceCache()
    cache.put(_service("a", "10", "False"))
    cache.put(_service("a", "12", "True"))  # the operator's own status patch
    cache.put(_service("a", "11", "False"))  # a watch event from before that write, delivered late
    held = cache.get("ns", "a")
    assert held is not None and held["metadata"]["resourceVersion"] == "12"
    cache.put(_service("a", "13", "False"))
    held = cache.get("ns", "a")
    assert held is not None and held["metadata"]["resourceVersion"] == "13"


def test_service_cache_takes_a_non_integer_version_and_forgets_removed_services() -> None:
    cache = ServiceCache()
    cache.put(_service("a", "10", "False"))
    cache.put(_service("a", "opaque", "True"))
    held = cache.get("ns", "a")
    assert held is not None and held["status"]["conditions"][0]["status"] == "True"
    cache.put(_service("b", "3", "True"))
    assert cache.keys() == [("ns", "a"), ("ns", "b")]
    cache.remove("ns", "a")
    assert cache.get("ns", "a") is None and cache.keys() == [("ns", "b")]


def test_synced_once_every_expected_uid_was_put_or_removed_then_stops_tracking() -> None:
    assert ChildCache().synced(set())  # nothing existed at start-up: met at once
    cache = ChildCache()
    cache.put(("ns", "a"), _child("u1", "x"))
    assert not cache.synced({"u1", "u2"})
    cache.remove("u2")  # deleted before it was delivered: heard of all the same
    assert cache.synced({"u1", "u2"})
    assert cache.synced({"never-seen"})  # tracking ended with the first True
