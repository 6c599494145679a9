"""The operator's caches of live objects, fed by watch events: each object packed as compressed JSON bytes.

`ChildCache` holds every Deployment, Service, ServiceAccount, Role and RoleBinding the operator owns, keyed by the
service that owns it, for the life of the process, so a reconcile pass needs no LIST. As Python dicts a pool
Deployment costs ~20 KiB; packed it is about a twentieth of that, and a pass unpacks only the nine objects of the
service it works on. Packed entries are also single allocations, which do not pin the interpreter's small-object
arenas the way millions of small dicts and strings do.

The cache may lag the API server (an event not yet delivered), so callers treat a missing child as unknown, not as
absent: reconcile reads it from the API server before applying. At start-up the operator lists the UIDs of its
children first and holds its workers until the watch has delivered each of them (`synced`), the way controllers wait
for their informers to sync; otherwise every pass of a restart would find its children unlisted and GET them.
This is also why kopf's own indexes are not used: kopf holds every handler back until every indexed object has been
indexed, with a toggle per object whose every change wakes every waiting object, which made a restart with 500
services (4,500 children) take minutes of CPU before the first pass.

`ServiceCache` holds the DisaggSpecServices themselves, so a pass reads its service without a GET. It also takes the
responses of the operator's own status patches, and keeps whichever state is newer, so a watch event that predates
the operator's last status write can never make it compute from, and rewrite over, a stale status.
"""

from __future__ import annotations

import json
import threading
import zlib
from typing import Any

PackedChild = bytes
"""A live child as zlib-compressed compact JSON (see `pack`)."""

# Speed over ratio: level 1 already removes most of the repetition in a manifest, at a fraction of level 6's CPU.
_LEVEL = 1


def pack(obj: dict[str, Any]) -> PackedChild:
    """A live child packed for the cache, without metadata.managedFields (often its largest part; never read)."""
    slim = dict(obj)
    metadata = dict(slim.get("metadata") or {})
    metadata.pop("managedFields", None)
    slim["metadata"] = metadata
    return zlib.compress(json.dumps(slim, separators=(",", ":")).encode(), _LEVEL)


def unpack(packed: PackedChild) -> dict[str, Any]:
    """The child `pack` stored, as a fresh dict the caller may change."""
    obj: dict[str, Any] = json.loads(zlib.decompress(packed))
    return obj


OwnerKey = tuple[str, str]
"""(namespace, name) of the owning DisaggSpecService."""


class ChildCache:
    """Live children by owning service; written from the watch's event loop, read by reconcile worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_owner: dict[OwnerKey, dict[str, PackedChild]] = {}
        self._owner_of: dict[str, OwnerKey] = {}
        self._heard: set[str] | None = set()
        """UIDs put or removed so far, kept only until `synced` first answers True (the start-up barrier)."""

    def synced(self, expected: set[str]) -> bool:
        """True once every uid in `expected` has been put or removed; from then on nothing more is tracked."""
        with self._lock:
            if self._heard is None or expected <= self._heard:
                self._heard = None
                return True
            return False

    def put(self, owner: OwnerKey, obj: dict[str, Any]) -> None:
        """Record the newest state of a child (its uid identifies it; an owner change moves it)."""
        uid = str(obj["metadata"]["uid"])
        packed = pack(obj)
        with self._lock:
            previous = self._owner_of.get(uid)
            if previous is not None and previous != owner:
                self._drop(previous, uid)
            self._by_owner.setdefault(owner, {})[uid] = packed
            self._owner_of[uid] = owner
            if self._heard is not None:
                self._heard.add(uid)

    def remove(self, uid: str) -> None:
        """Forget a child (deleted, or no longer owned by a service); unknown uids are ignored."""
        with self._lock:
            owner = self._owner_of.pop(uid, None)
            if owner is not None:
                self._drop(owner, uid)
            if self._heard is not None:
                self._heard.add(uid)

    def children(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Fresh copies of the cached children of one service."""
        with self._lock:
            packed = list(self._by_owner.get((namespace, name), {}).values())
        return [unpack(p) for p in packed]

    def __len__(self) -> int:
        with self._lock:
            return len(self._owner_of)

    def _drop(self, owner: OwnerKey, uid: str) -> None:
        children = self._by_owner.get(owner)
        if children is not None:
            children.pop(uid, None)
            if not children:
                del self._by_owner[owner]


def _resource_version(obj: dict[str, Any]) -> int | None:
    try:
        return int(obj["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return None


class ServiceCache:
    """The newest known state of each DisaggSpecService, by (namespace, name)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[OwnerKey, PackedChild] = {}
        self._versions: dict[OwnerKey, int | None] = {}

    def put(self, obj: dict[str, Any]) -> None:
        """Keep `obj` unless the cache already holds a newer state of the same object.

        resourceVersion is formally opaque; for objects stored in etcd (custom resources always are) it is the etcd
        revision of the object's last write, an integer that only grows. If one is not an integer, `obj` wins.
        """
        meta = obj["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        version = _resource_version(obj)
        packed = pack(obj)
        with self._lock:
            held = self._versions.get(key)
            if key in self._objects and version is not None and held is not None and held > version:
                return
            self._objects[key] = packed
            self._versions[key] = version

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            packed = self._objects.get((namespace, name))
        return None if packed is None else unpack(packed)

    def remove(self, namespace: str, name: str) -> None:
        with self._lock:
            self._objects.pop((namespace, name), None)
            self._versions.pop((namespace, name), None)

    def keys(self) -> list[OwnerKey]:
        """Every cached service, sorted."""
        with self._lock:
            return sorted(self._objects)
