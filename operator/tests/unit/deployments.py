"""Finding a service's Deployment of one role among rendered manifests or live objects, by its labels: its name
carries the revision (`<service>-<role>-<8 hex of the fingerprint>`, `disaggspec.render.names.deployment_name`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from disaggspec import constants as c


def deployment(objects: Iterable[dict[str, Any]], service: str, role: str) -> dict[str, Any]:
    """The one Deployment of `role` of service `service` among `objects`; raises unless there is exactly one."""
    found = [
        obj
        for obj in objects
        if obj.get("kind") == "Deployment"
        and (obj.get("metadata", {}).get("labels") or {}).get(c.LABEL_SERVICE) == service
        and (obj.get("metadata", {}).get("labels") or {}).get(c.LABEL_ROLE) == role
    ]
    if len(found) != 1:
        names = sorted(str(obj["metadata"].get("name")) for obj in found)
        raise LookupError(f"{len(found)} {role} Deployments of service {service}, expected exactly one: {names}")
    return found[0]
