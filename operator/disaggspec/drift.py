"""Decides, without I/O, whether a live child object still matches its rendered manifest.

The operator must send no write at all when nothing changed, yet revert a manual edit of a field it owns. Both come
from one comparison: every field the render sets must be present in the live object with the same value (the API
server adds defaults, which are ignored). Values are compared after normalising the few forms the API server
rewrites (ints sent as strings in quantities, and so on).

Only what the operator owns is compared. Server-side apply merges the lists Kubernetes declares associative
(`x-kubernetes-list-type: map`, the strategic-merge `patchMergeKey` lists) item by item, by key, and never removes
an item another field manager owns: an env var added by `kubectl set env` or a mutating policy, a sidecar's
container, volume and mount, a foreign owner reference. Comparing such a list for equality would see drift that no
apply can remove, and re-apply (and post an Event) on every pass, forever. So `MERGED_LISTS` names, per kind, each
associative list the render emits and its key: every desired item must exist in the live list under its key and be
a subset of it, in any order (server-side apply does not promise to restore the order of a list another manager
appended to either), and items with other keys are ignored. Lists of scalars declared sets (`finalizers`) only need
each desired value present. Every other list is atomic (args, command, tolerations, capabilities, RBAC rules and
subjects): an apply replaces it whole, so it must match in length and order.

What this comparison cannot see is a field or item the operator *stops* rendering (the live object still has it,
which looks like a foreign addition). Such a change always changes the render, so `with_applied_hash` stamps a new
hash annotation on the desired manifest, the live object's differs, and the child is applied: server-side apply
then removes the field the operator no longer owns.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from disaggspec.constants import ANNOTATION_APPLIED_HASH

EMPTY: tuple[object, ...] = ({}, [], None)

SET: Final = "set"
"""A list of scalars merged as a set (`x-kubernetes-list-type: set`)."""

ListKeys = tuple[str, ...] | str
"""How a merged list is keyed: the fields of its map key, or `SET`."""

KEY_DEFAULTS: Mapping[str, str] = {"protocol": "TCP"}
"""Key fields the API server defaults: a desired item without one matches the defaulted live item."""

_METADATA_LISTS: dict[str, ListKeys] = {"metadata.ownerReferences": ("uid",), "metadata.finalizers": SET}


def _pod_spec_lists(prefix: str) -> dict[str, ListKeys]:
    lists: dict[str, ListKeys] = {
        f"{prefix}.volumes": ("name",),
        f"{prefix}.imagePullSecrets": ("name",),
    }
    for containers in ("containers", "initContainers"):
        lists[f"{prefix}.{containers}"] = ("name",)
        lists[f"{prefix}.{containers}[].env"] = ("name",)
        lists[f"{prefix}.{containers}[].ports"] = ("containerPort", "protocol")
        lists[f"{prefix}.{containers}[].volumeMounts"] = ("mountPath",)
    return lists


MERGED_LISTS: Mapping[str, Mapping[str, ListKeys]] = {
    "Deployment": {**_METADATA_LISTS, **_pod_spec_lists("spec.template.spec")},
    "Service": {**_METADATA_LISTS, "spec.ports": ("port", "protocol")},
    # ServiceAccount.imagePullSecrets carries no merge key: atomic.
    "ServiceAccount": {**_METADATA_LISTS, "secrets": ("name",)},
    "Role": _METADATA_LISTS,
    "RoleBinding": _METADATA_LISTS,
    "PodDisruptionBudget": _METADATA_LISTS,
    "Job": {**_METADATA_LISTS, **_pod_spec_lists("spec.template.spec")},
    # The LeaderWorkerSet CRD (v0.9.0) declares the same pod-spec lists `x-kubernetes-list-type: map`, same keys.
    "LeaderWorkerSet": {
        **_METADATA_LISTS,
        **_pod_spec_lists("spec.leaderWorkerTemplate.leaderTemplate.spec"),
        **_pod_spec_lists("spec.leaderWorkerTemplate.workerTemplate.spec"),
    },
}
"""Kind -> path of each associative list (`[]` marks a step into list items) -> its key."""


def manifest_hash(manifest: dict[str, Any]) -> str:
    """A stable hash of a rendered manifest (without the annotation that carries the hash itself)."""
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def with_applied_hash(manifest: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of `manifest` annotated with its own hash."""
    stamped: dict[str, Any] = json.loads(json.dumps(manifest))
    annotations = stamped.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[ANNOTATION_APPLIED_HASH] = manifest_hash(manifest)
    return stamped


def _same_scalar(want: Any, have: Any) -> bool:
    if want == have:
        return True
    # Quantities and int-or-string fields come back as the server normalised them ("8" vs 8).
    if isinstance(want, int | float | str) and isinstance(have, int | float | str) and not isinstance(want, bool):
        return str(want) == str(have)
    return False


def _item_key(item: Any, fields: tuple[str, ...]) -> tuple[str, ...] | None:
    if not isinstance(item, dict):
        return None
    return tuple(str(item.get(name, KEY_DEFAULTS.get(name))) for name in fields)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def is_subset(want: Any, have: Any, lists: Mapping[str, ListKeys] | None = None, path: str = "") -> bool:
    """True when every field of `want` is in `have` with an equal value.

    `lists` maps the path of each associative list (as in `MERGED_LISTS`) to its key: such a list needs each wanted
    item present under its key, foreign items ignored. Any other list must match in length and order.
    """
    lists = lists or {}
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return False
        # The API server drops empty lists and maps (`env: []`): absent is the same as empty.
        return all(
            is_subset(value, have[key], lists, _join(path, key)) if key in have else value in EMPTY
            for key, value in want.items()
        )
    if isinstance(want, list):
        if not isinstance(have, list):
            return False
        keys = lists.get(path)
        item_path = f"{path}[]"
        if keys == SET:
            return all(any(_same_scalar(w, h) for h in have) for w in want)
        if isinstance(keys, tuple):
            by_key: dict[tuple[str, ...], list[Any]] = {}
            for item in have:
                if (key := _item_key(item, keys)) is not None:
                    by_key.setdefault(key, []).append(item)
            return all(
                (key := _item_key(w, keys)) is not None
                and any(is_subset(w, h, lists, item_path) for h in by_key.get(key, []))
                for w in want
            )
        if len(want) != len(have):
            return False
        return all(is_subset(w, h, lists, item_path) for w, h in zip(want, have, strict=True))
    return _same_scalar(want, have)


def needs_apply(desired: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """True when `desired` (as stamped by `with_applied_hash`) must be (re-)applied over `live`."""
    if live is None:
        return True
    want = {key: value for key, value in desired.items() if key not in ("apiVersion", "kind")}
    return not is_subset(want, live, MERGED_LISTS.get(str(desired.get("kind")), _METADATA_LISTS))
