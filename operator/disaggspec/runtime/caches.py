"""The operator's caches of live objects, fed by watch events: each object packed as compressed JSON bytes. The
`Controller` owns one `ChildCache` and one `DisaggSpecServiceCache`; neither sends an API request.

`ChildCache` holds every Deployment, Service, PodDisruptionBudget, Job, ServiceAccount, Role and RoleBinding the
operator owns, keyed by the service that owns it, for the life of the process, so a reconcile pass needs no LIST. As
Python dicts a pool Deployment costs ~20 KiB; packed it is about a twentieth of that, and a pass unpacks only the
twelve objects of the service it works on. Packed entries are also single allocations, which do not pin the
interpreter's small-object arenas the way millions of small dicts and strings do.

The child cache is fed by the operator's own informers (`informer`): each LIST of a kind is authoritative (`replace`
swaps that kind's entries for the listed ones, dropping what vanished during a watch gap), each watch event then
updates one entry (`put`, `remove`). The cache may still lag the API server (an event not yet delivered), so callers
treat a missing child as unknown, not as absent: reconcile reads it from the API server before applying. Labelled
objects without a controller reference to a service are tracked by uid and resourceVersion only (never packed), so
the periodic check that compares the cache with a metadata-only LIST sees exactly what the watch sees.

`DisaggSpecServiceCache` holds the DisaggSpecServices themselves, so a pass reads its service without a GET. It
also takes the responses of the operator's own status patches, and keeps whichever state is newer, so a watch event
that predates the operator's last status write can never make it compute from, and rewrite over, a stale status;
`put` says whether it stored something newer, so the echo of the operator's own write triggers no pass. A deleted
service leaves a tombstone (its uid, for a while): a status-patch response or a late event of that uid can never
revive it, and no pass creates children for an owner uid that no longer exists.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from disaggspec import constants as c

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


def owner_key(obj: dict[str, Any]) -> OwnerKey | None:
    """The DisaggSpecService `obj` names as its controller, or None (not ours, or no namespace)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    if not namespace:
        return None
    for owner in meta.get("ownerReferences") or ():
        if owner.get("apiVersion") == c.API_VERSION and owner.get("kind") == c.KIND and owner.get("controller"):
            return (str(namespace), str(owner["name"]))
    return None


@dataclass
class _Entry:
    kind: str
    namespace: str
    version: str
    owner: OwnerKey | None
    """None: labelled but owned by no service (tracked for the metadata comparison, never handed to a pass)."""


class ChildCache:
    """Live children by owning service; written by the informer threads, read by reconcile worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._by_owner: dict[OwnerKey, dict[str, PackedChild]] = {}

    def put(self, obj: dict[str, Any]) -> set[OwnerKey]:
        """Record the newest state of a child (its uid identifies it); returns the owners whose children changed.

        `obj` needs `kind` and `metadata` (uid, namespace, resourceVersion). An owner change moves the child; a
        state already held (same resourceVersion, same owner) changes nothing.
        """
        meta = obj["metadata"]
        uid = str(meta["uid"])
        entry = _Entry(
            str(obj.get("kind", "")),
            str(meta.get("namespace", "")),
            str(meta.get("resourceVersion", "")),
            owner_key(obj),
        )
        packed = pack(obj) if entry.owner is not None else None
        with self._lock:
            return self._store(uid, entry, packed)

    def remove(self, uid: str) -> set[OwnerKey]:
        """Forget a child (deleted, or no longer labelled); returns its owner, if it had one. Unknown uids: no-op."""
        with self._lock:
            return self._remove(uid)

    def discard(self, obj: dict[str, Any]) -> set[OwnerKey]:
        """`remove` by the object's uid (the informer's DELETED event)."""
        return self.remove(str(obj["metadata"]["uid"]))

    def replace(self, kind_name: str, namespace_scope: str | None, objects: Iterable[dict[str, Any]]) -> set[OwnerKey]:
        """Make the cached children of one kind (in one namespace, or in all when None) exactly `objects`.

        `objects` is a complete LIST: what the cache holds of that kind and scope but the list lacks was deleted
        while nobody watched, and is dropped. Returns every owner whose children changed (added, changed, moved or
        dropped). `objects` may be a generator over LIST pages: it is consumed (and packed) before the lock is taken,
        and if it raises, the cache is left as it was.
        """
        known = self.versions(kind_name, namespace_scope)
        fresh: dict[str, tuple[_Entry, PackedChild | None]] = {}
        for obj in objects:
            meta = obj["metadata"]
            uid = str(meta["uid"])
            version = str(meta.get("resourceVersion", ""))
            owner = owner_key(obj)
            entry = _Entry(kind_name, str(meta.get("namespace", "")), version, owner)
            # Unchanged since the cache saw it (the common case of a relist): not packed again.
            unchanged = bool(version) and known.get(uid) == version
            fresh[uid] = (entry, None if owner is None or unchanged else pack(obj))
        with self._lock:
            changed: set[OwnerKey] = set()
            vanished = [
                uid
                for uid, entry in self._entries.items()
                if entry.kind == kind_name and _in_scope(entry, namespace_scope) and uid not in fresh
            ]
            for uid in vanished:
                changed |= self._remove(uid)
            for uid, (entry, packed) in fresh.items():
                if entry.owner is not None and packed is None:
                    continue  # unchanged (or changed since `versions` by a newer event: keep the newer state)
                changed |= self._store(uid, entry, packed)
            return changed

    def versions(self, kind_name: str, namespace_scope: str | None) -> dict[str, str]:
        """uid -> resourceVersion of every cached child of one kind and scope (owned or not)."""
        with self._lock:
            return {
                uid: entry.version
                for uid, entry in self._entries.items()
                if entry.kind == kind_name and _in_scope(entry, namespace_scope)
            }

    def children(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Fresh copies of the cached children of one service."""
        with self._lock:
            packed = list(self._by_owner.get((namespace, name), {}).values())
        return [unpack(p) for p in packed]

    def __len__(self) -> int:
        """Every tracked object (owned children and labelled objects no service owns)."""
        with self._lock:
            return len(self._entries)

    def _store(self, uid: str, entry: _Entry, packed: PackedChild | None) -> set[OwnerKey]:
        held = self._entries.get(uid)
        if held is not None and held.version == entry.version and held.owner == entry.owner and entry.version:
            return set()
        changed: set[OwnerKey] = set()
        if held is not None and held.owner is not None:
            changed.add(held.owner)
            if held.owner != entry.owner:
                self._drop(held.owner, uid)
        self._entries[uid] = entry
        if entry.owner is not None and packed is not None:
            self._by_owner.setdefault(entry.owner, {})[uid] = packed
            changed.add(entry.owner)
        return changed

    def _remove(self, uid: str) -> set[OwnerKey]:
        entry = self._entries.pop(uid, None)
        if entry is None or entry.owner is None:
            return set()
        self._drop(entry.owner, uid)
        return {entry.owner}

    def _drop(self, owner: OwnerKey, uid: str) -> None:
        children = self._by_owner.get(owner)
        if children is not None:
            children.pop(uid, None)
            if not children:
                del self._by_owner[owner]


def _in_scope(entry: _Entry, namespace_scope: str | None) -> bool:
    return namespace_scope is None or entry.namespace == namespace_scope


def _resource_version(obj: dict[str, Any]) -> int | None:
    try:
        return int(obj["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return None


TOMBSTONE_SECONDS = 600.0
"""How long a deleted service's uid is remembered (longer than any watch lag or pass in flight)."""
TOMBSTONE_LIMIT = 10_000
"""At most this many tombstones; the oldest go first."""


@dataclass(frozen=True)
class Tombstone:
    """A deleted service: which object it was, its last known resourceVersion, and when to forget it."""

    key: OwnerKey
    version: str
    expires: float


class DisaggSpecServiceCache:
    """The newest known state of each DisaggSpecService, by (namespace, name), and tombstones of deleted ones."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        tombstone_seconds: float = TOMBSTONE_SECONDS,
        tombstone_limit: int = TOMBSTONE_LIMIT,
    ) -> None:
        self._lock = threading.Lock()
        self._objects: dict[OwnerKey, PackedChild] = {}
        self._versions: dict[OwnerKey, int | None] = {}
        self._uids: dict[OwnerKey, str] = {}
        self._tombstones: OrderedDict[str, Tombstone] = OrderedDict()
        self._buried: dict[OwnerKey, str] = {}
        """(namespace, name) -> uid of its newest tombstone."""
        self._clock = clock
        self._tombstone_seconds = tombstone_seconds
        self._tombstone_limit = tombstone_limit

    def put(self, obj: dict[str, Any]) -> bool:
        """Keep `obj` if it is newer than what the cache holds; returns whether it was stored.

        Refused: an object whose uid is tombstoned (deleted: nothing may revive it), and a state not newer than the
        held one (equal: the echo of a write the cache already has). resourceVersion is formally opaque; for objects
        stored in etcd (custom resources always are) it is the etcd revision of the object's last write, an integer
        that only grows. If one is not an integer, `obj` wins.
        """
        meta = obj["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        uid = str(meta.get("uid", ""))
        version = _resource_version(obj)
        with self._lock:
            self._expire()
            if self._refuses(key, uid, version):
                return False
        packed = pack(obj)  # outside the lock: the costly part
        with self._lock:
            if self._refuses(key, uid, version):  # deleted, or a newer state stored, while this was packed
                return False
            self._objects[key] = packed
            self._versions[key] = version
            self._uids[key] = uid
            return True

    def _refuses(self, key: OwnerKey, uid: str, version: int | None) -> bool:
        """`put` must not store this state: its uid is tombstoned, or the cache holds a state of the same object at
        least as new (called with the lock held)."""
        if uid and uid in self._tombstones:
            return True
        held = self._versions.get(key)
        same_object = self._uids.get(key, uid) == uid
        return key in self._objects and same_object and version is not None and held is not None and held >= version

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            packed = self._objects.get((namespace, name))
        return None if packed is None else unpack(packed)

    def delete(self, obj: dict[str, Any]) -> None:
        """A service was deleted (its DELETED event, or a 404 writing it): forget it and tombstone its uid."""
        meta = obj["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        uid = str(meta.get("uid", ""))
        with self._lock:
            if self._uids.get(key, uid) == uid or not uid:
                self._forget(key)
            if uid:
                self._bury(uid, key, str(meta.get("resourceVersion", "")))

    def evict(self, namespace: str, name: str) -> None:
        """A cached service is known to be gone (not in an authoritative LIST): forget it, tombstone its uid."""
        key = (namespace, name)
        with self._lock:
            uid = self._uids.get(key)
            version = self._versions.get(key)
            self._forget(key)
            if uid:
                self._bury(uid, key, "" if version is None else str(version))

    def tombstoned(self, uid: str) -> bool:
        """The service with this uid was deleted (within the tombstone period)."""
        with self._lock:
            self._expire()
            return uid in self._tombstones

    def deleted(self, namespace: str, name: str) -> bool:
        """A service of this name was deleted recently and no newer one is cached."""
        key = (namespace, name)
        with self._lock:
            self._expire()
            return key not in self._objects and key in self._buried

    def version(self, namespace: str, name: str) -> int | None:
        """The cached resourceVersion (None: not cached, or not an integer)."""
        with self._lock:
            return self._versions.get((namespace, name))

    def versions(self, namespace_scope: str | None) -> dict[str, str]:
        """uid -> resourceVersion of the cached services in one namespace (None: all), as `ChildCache.versions`."""
        with self._lock:
            return {
                self._uids[key]: "" if version is None else str(version)
                for key, version in self._versions.items()
                if namespace_scope is None or key[0] == namespace_scope
            }

    def tombstones(self) -> int:
        with self._lock:
            self._expire()
            return len(self._tombstones)

    def keys(self) -> list[OwnerKey]:
        """Every cached service, sorted."""
        with self._lock:
            return sorted(self._objects)

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._objects

    def _forget(self, key: OwnerKey) -> None:
        self._objects.pop(key, None)
        self._versions.pop(key, None)
        self._uids.pop(key, None)

    def _bury(self, uid: str, key: OwnerKey, version: str) -> None:
        self._tombstones.pop(uid, None)
        self._tombstones[uid] = Tombstone(key, version, self._clock() + self._tombstone_seconds)
        self._buried[key] = uid
        while len(self._tombstones) > self._tombstone_limit:
            self._unbury(*self._tombstones.popitem(last=False))

    def _unbury(self, uid: str, stone: Tombstone) -> None:
        if self._buried.get(stone.key) == uid:
            del self._buried[stone.key]

    def _expire(self) -> None:
        now = self._clock()
        while self._tombstones:
            uid, stone = next(iter(self._tombstones.items()))
            if stone.expires > now:
                return
            del self._tombstones[uid]
            self._unbury(uid, stone)
