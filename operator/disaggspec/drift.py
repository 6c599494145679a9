"""Decides, without I/O, whether a live child object still matches its rendered manifest.

The operator must send no write at all when nothing changed, yet revert a manual edit of a field it owns. Both come
from one comparison: every field the render sets must be present in the live object with the same value (the API
server adds defaults, which are ignored). A render that *drops* a field changes the applied-hash annotation, so it
is caught too. Values are compared after normalising the few forms the API server rewrites (ints sent as strings in
quantities, and so on).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from disaggspec.constants import ANNOTATION_APPLIED_HASH

EMPTY: tuple[object, ...] = ({}, [], None)


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


def is_subset(want: Any, have: Any) -> bool:
    """True when every field of `want` is in `have` with an equal value (lists must match length and order)."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return False
        # The API server drops empty lists and maps (`env: []`): absent is the same as empty.
        return all(is_subset(value, have[key]) if key in have else value in EMPTY for key, value in want.items())
    if isinstance(want, list):
        if not isinstance(have, list) or len(want) != len(have):
            return False
        return all(is_subset(w, h) for w, h in zip(want, have, strict=True))
    return _same_scalar(want, have)


def needs_apply(desired: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """True when `desired` (as stamped by `with_applied_hash`) must be (re-)applied over `live`."""
    if live is None:
        return True
    want = {key: value for key, value in desired.items() if key not in ("apiVersion", "kind")}
    return not is_subset(want, live)
