"""An in-memory stand-in for the API server behind `apply.Client`, for driving `Reconciler` without a cluster.

`FakeClient` implements the requests the reconciler and `apply` send (GET of one object, server-side apply, delete
with a UID precondition, the status merge patch, Event posts) over a dict of objects by REST path, and records every
request, so a test asserts what a pass wrote. It stamps what the API server would (uid, resourceVersion, generation)
and keeps an object's status across applies; it does not run controllers: `roll_out` plays the Deployment controller.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from disaggspec import apply, rollout
from disaggspec import constants as c
from disaggspec.config import OperatorConfig
from disaggspec.reconcile import Reconciler
from disaggspec.runtime.caches import DisaggSpecServiceCache


@dataclass(frozen=True)
class Event:
    """One Event the reconciler emitted."""

    name: str
    type: str
    reason: str
    message: str


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


class FakeClient(apply.Client):
    """Objects by REST path; `requests` lists every (method, path) sent, `events` every Event posted."""

    def __init__(self) -> None:  # no ApiClient: nothing leaves the process
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.events: list[Event] = []
        self.refuse: dict[str, apply.ApiError] = {}
        """REST path -> the error applying it raises (an admission webhook or quota saying no), dry-run or not."""
        self.refuse_merged: dict[str, Callable[[dict[str, Any]], apply.ApiError | None]] = {}
        """REST path -> judges the live object: the error an apply over it raises (a merged form another field
        manager's edit made invalid), or None; a create of the render alone is not refused."""
        self.refuse_writes: dict[str, apply.ApiError] = {}
        """REST path -> the error a real (not dry-run) apply raises: a refusal a dry-run cannot see (a quota that
        each child fits alone, but not all of them together)."""
        self._lock = threading.Lock()  # apply.sync applies children from a thread pool
        self._uids = itertools.count(1)
        self._versions = itertools.count(1)

    # ---- what a test reads ---------------------------------------------------------------------------------------

    @property
    def writes(self) -> list[tuple[str, str]]:
        """Every request but GETs and dry-runs, in order (Event posts excluded: see `events`)."""
        return [(method, path) for method, path in self.requests if method not in ("GET", "DRYRUN", "DRYRUN-CREATE")]

    def reset(self) -> None:
        """Forget the requests and events recorded so far (the objects stay)."""
        with self._lock:
            self.requests.clear()
            self.events.clear()

    def children(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The live children of service `namespace/name` (what the watch-fed `ChildCache` would hold)."""
        with self._lock:
            return [
                copy.deepcopy(obj)
                for obj in self.objects.values()
                if (obj["apiVersion"], obj["kind"]) in apply.KINDS_BY_NAME
                and obj["metadata"].get("namespace") == namespace
                and obj["metadata"].get("labels", {}).get(c.LABEL_SERVICE) == name
            ]

    def service(self, namespace: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.objects[apply.DSS_RESOURCE.item(namespace, name)])

    # ---- what a test sets up ---------------------------------------------------------------------------------------

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` as a create would (new uid, generation 1); returns the stored copy."""
        meta = obj["metadata"]
        path = (
            apply.DSS_RESOURCE.item(meta["namespace"], meta["name"]) if obj["kind"] == c.KIND else apply.located(obj)[1]
        )
        stored = copy.deepcopy(obj)
        with self._lock:
            stored["metadata"].update(uid=f"uid-{next(self._uids)}", generation=1)
            stored["metadata"]["resourceVersion"] = str(next(self._versions))
            self.objects[path] = stored
        return copy.deepcopy(stored)

    def update_spec(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Replace the service's spec as a user's edit would (generation bumped)."""
        path = apply.DSS_RESOURCE.item(namespace, name)
        with self._lock:
            obj = self.objects[path]
            obj["spec"] = copy.deepcopy(spec)
            obj["metadata"]["generation"] += 1
            obj["metadata"]["resourceVersion"] = str(next(self._versions))
            return copy.deepcopy(obj)

    def roll_out(self, namespace: str) -> None:
        """Play the Deployment controller: every Deployment in `namespace` has all its replicas updated and ready."""
        with self._lock:
            for obj in self.objects.values():
                if obj["kind"] == apply.DEPLOYMENT.kind and obj["metadata"]["namespace"] == namespace:
                    replicas = int(obj["spec"].get("replicas", 1))
                    obj["status"] = {
                        "observedGeneration": obj["metadata"]["generation"],
                        "replicas": replicas,
                        "updatedReplicas": replicas,
                        "readyReplicas": replicas,
                        "availableReplicas": replicas,
                        # Kubernetes 1.35+ counts the pods being deleted (none: this controller deletes at once).
                        "terminatingReplicas": 0,
                    }
                    obj["metadata"]["resourceVersion"] = str(next(self._versions))

    # ---- apply.Client --------------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "",
        accept: str = "application/json",
    ) -> dict[str, Any]:
        with self._lock:
            if method == "POST" and (query or {}).get("dryRun"):
                self.requests.append(("DRYRUN-CREATE", path))
                return self._dry_run_create(path, body)
            self.requests.append((method, path))
            if method == "PATCH" and content_type == "application/json-patch+json":
                return self._json_patch(path, body)
            if method == "PATCH" and content_type == "application/merge-patch+json" and path.endswith("/status"):
                return self._merge_status(path.removesuffix("/status"), body)
            if method == "PATCH" and content_type == "application/merge-patch+json" and path.endswith("/scale"):
                target = path.removesuffix("/scale")
                if target not in self.objects:
                    raise apply.ApiError(404, "PATCH", path, "not found")
                self.objects[target]["spec"]["replicas"] = body["spec"]["replicas"]
                self.objects[target]["metadata"]["generation"] += 1
                return {"spec": {"replicas": body["spec"]["replicas"]}}
            if method == "POST":
                return self._post(path, body)
            if method != "GET":
                raise NotImplementedError(f"FakeClient: {method} {path}")
            obj = self.objects.get(path)
            if obj is None:
                raise apply.ApiError(404, method, path, "not found")
            return copy.deepcopy(obj)

    def _dry_run_create(self, collection: str, body: dict[str, Any]) -> dict[str, Any]:
        """A dry-run POST: refused as an apply of the same object would be (`refuse`), else AlreadyExists (409) for
        an existing name, which the API server answers only after validation passed."""
        path = f"{collection}/{body['metadata']['name']}"
        if path in self.refuse:
            raise self.refuse[path]
        if path in self.objects:
            raise apply.ApiError(409, "POST", collection, "already exists", reason="AlreadyExists")
        return copy.deepcopy(body)

    def _post(self, collection: str, body: dict[str, Any]) -> dict[str, Any]:
        """A create: 409 AlreadyExists for an existing name."""
        path = f"{collection}/{body['metadata']['name']}"
        if path in self.objects:
            raise apply.ApiError(409, "POST", collection, "already exists", reason="AlreadyExists")
        stored = copy.deepcopy(body)
        stored["metadata"].update(uid=f"uid-{next(self._uids)}", generation=1)
        stored["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[path] = stored
        return copy.deepcopy(stored)

    def _merge_status(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """A merge patch of an object's status subresource (only `status` changes)."""
        if path not in self.objects:
            raise apply.ApiError(404, "PATCH", path, "not found")
        obj = self.objects[path]
        obj["status"] = merge_patch(obj.get("status"), body["status"])
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(obj)

    def scale(self, path: str, replicas: int) -> None:
        """Play an autoscaler: set spec.replicas through /scale (generation bumped, as for a spec change)."""
        with self._lock:
            obj = self.objects[path]
            obj["spec"]["replicas"] = replicas
            obj["metadata"]["generation"] += 1
            obj["metadata"]["resourceVersion"] = str(next(self._versions))

    def _json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        """RFC 6902 test, add and remove (what the operator sends), all or nothing."""
        if path not in self.objects:
            raise apply.ApiError(404, "PATCH", path, "not found")
        obj = copy.deepcopy(self.objects[path])
        for op in ops:
            *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in op["path"].split("/")[1:]]
            node: Any = obj
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            if op["op"] == "test":
                here = node[int(last)] if isinstance(node, list) else node.get(last)
                if here != op["value"]:
                    raise apply.ApiError(422, "PATCH", path, f"test of {op['path']} failed", reason="Invalid")
            elif op["op"] == "add":
                if isinstance(node, list):
                    node.insert(len(node) if last == "-" else int(last), copy.deepcopy(op["value"]))
                else:
                    node[last] = copy.deepcopy(op["value"])
            elif op["op"] == "remove":
                del node[int(last) if isinstance(node, list) else last]
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[path] = obj
        return copy.deepcopy(obj)

    def apply(self, manifest: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        _, path = apply.located(manifest)
        with self._lock:
            self.requests.append(("DRYRUN" if dry_run else "PATCH", path))
            if path in self.refuse:
                raise self.refuse[path]
            judge = self.refuse_merged.get(path)
            merged_error = judge(self.objects[path]) if judge is not None and path in self.objects else None
            if merged_error is not None:
                raise merged_error
            if dry_run:
                return copy.deepcopy(manifest)
            if path in self.refuse_writes:
                raise self.refuse_writes[path]
            old = self.objects.get(path)
            obj = copy.deepcopy(manifest)
            meta = obj["metadata"]
            if old is None:
                meta.update(uid=f"uid-{next(self._uids)}", generation=1)
            else:
                changed = old.get("spec") != obj.get("spec")
                meta.update(uid=old["metadata"]["uid"], generation=old["metadata"]["generation"] + changed)
                if "status" in old:
                    obj["status"] = old["status"]
            meta["resourceVersion"] = str(next(self._versions))
            self.objects[path] = obj
            return copy.deepcopy(obj)

    def delete(self, obj: dict[str, Any]) -> None:
        _, path = apply.located(obj)
        with self._lock:
            self.requests.append(("DELETE", path))
            held = self.objects.get(path)
            if held is not None and held["metadata"]["uid"] == obj["metadata"]["uid"]:
                del self.objects[path]

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        path = apply.DSS_RESOURCE.item(namespace, name)
        with self._lock:
            self.requests.append(("PATCH", f"{path}/status"))
            obj = self.objects[path]
            obj["status"] = merge_patch(obj.get("status"), status)
            obj["metadata"]["resourceVersion"] = str(next(self._versions))
            return copy.deepcopy(obj)

    def post_event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        with self._lock:
            self.events.append(Event(obj["metadata"]["name"], type_, reason, message))


RECONCILER_START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def reconciler_for(client: FakeClient) -> Reconciler:
    """A reconciler on `client` whose clock (RFC 3339, as the rollout planner reads it) advances a second per reading
    from `RECONCILER_START`."""
    ticks = itertools.count(1)
    return Reconciler(
        client,
        OperatorConfig(),
        client.post_event,
        services=DisaggSpecServiceCache(),
        clock=lambda: rollout.format_time(RECONCILER_START + datetime.timedelta(seconds=next(ticks))),
    )
