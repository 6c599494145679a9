"""The per-pool scale targets of a service with `spec.autoscaling`: one `DisaggSpecPool` per pool, what size each
pool runs at, and the targets' status; pure functions plus one I/O edge (`sync`).

Who writes what: the operator creates a target once (POST, `spec.replicas` = the pool's `spec.<pool>.replicas`) and
afterwards writes only its status. Its `spec.replicas` belongs to whoever scales it (kubectl scale, an HPA, KEDA, or
the planner, through the `/scale` subresource), so nothing of the operator ever fights them: the targets are not part
of the server-side-applied children (a forced apply of a value read a moment earlier would revert a scale made in
between), and the pass only reads them. The pool runs the target's replicas clamped to spec.autoscaling's limits
(`scaled`): the current revision's workloads are rendered, and rolled out, with that size, so a rollout keeps the
autoscaled size and a target survives every revision. Without spec.autoscaling the targets are pruned with the other
children that are no longer rendered, and spec.<pool>.replicas rules again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from disaggspec import apply
from disaggspec import constants as c
from disaggspec.api import DisaggSpecService
from disaggspec.api.v1alpha1 import PoolScaleLimits, PoolScaleStatus
from disaggspec.render.names import labels


@dataclass(frozen=True)
class PoolScale:
    """One pool's size under autoscaling."""

    role: str
    target: int | None
    """The target's spec.replicas; None while the target does not exist yet (its initial value is used)."""
    replicas: int
    """What the pool runs: the target (or the initial value) clamped to the limits."""
    min_replicas: int
    max_replicas: int

    @property
    def clamped(self) -> str | None:
        """Why `replicas` differs from the target, or None."""
        if self.target is None or self.target == self.replicas:
            return None
        side = "maxReplicas" if self.target > self.replicas else "minReplicas"
        bound = self.max_replicas if side == "maxReplicas" else self.min_replicas
        limit = f"spec.autoscaling.{self.role}.{side} {bound}"
        return f"spec.replicas {self.target} is outside {limit}: the pool runs {self.replicas}"

    def status(self) -> PoolScaleStatus:
        return PoolScaleStatus(
            target=self.target, replicas=self.replicas, min_replicas=self.min_replicas, max_replicas=self.max_replicas
        )


def target_name(service_name: str, role: str) -> str:
    """`<service>-<role>`, as the pool's Service (another kind, so no clash)."""
    return f"{service_name}-{role}"


def live_targets(service_name: str, live: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The service's live scale targets by role."""
    found: dict[str, Mapping[str, Any]] = {}
    for obj in live:
        if obj.get("kind") != c.POOL_KIND:
            continue
        obj_labels = obj.get("metadata", {}).get("labels") or {}
        role = obj_labels.get(c.LABEL_ROLE)
        if obj_labels.get(c.LABEL_SERVICE) == service_name and role in c.POOLS:
            found[str(role)] = obj
    return found


def _spec_replicas(target: Mapping[str, Any] | None) -> int | None:
    if target is None:
        return None
    value = (target.get("spec") or {}).get("replicas")
    return int(value) if isinstance(value, int) else None


def scaled(
    service: DisaggSpecService, targets: Mapping[str, Mapping[str, Any]]
) -> tuple[DisaggSpecService, dict[str, PoolScale]]:
    """`service` with each pool's replicas as its scale target says (clamped to the limits), and the sizes; the
    service unchanged and no sizes without spec.autoscaling."""
    scaling = service.spec.autoscaling
    if scaling is None:
        return service, {}
    sizes: dict[str, PoolScale] = {}
    pools: dict[str, Any] = {}
    for role in c.POOLS:
        limits: PoolScaleLimits = getattr(scaling, role)
        pool = getattr(service.spec, role)
        target = _spec_replicas(targets.get(role))
        asked = pool.replicas if target is None else target
        replicas = min(max(asked, limits.min_replicas), limits.max_replicas)
        sizes[role] = PoolScale(role, target, replicas, limits.min_replicas, limits.max_replicas)
        pools[role] = pool.model_copy(update={"replicas": replicas})
    spec = service.spec.model_copy(update=pools)
    return service.model_copy(update={"spec": spec}), sizes


def new_target(owner: Mapping[str, Any], service: DisaggSpecService, role: str) -> dict[str, Any]:
    """The target to create for `role`: its initial replicas are the pool's spec.<pool>.replicas."""
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.POOL_KIND,
        "metadata": {
            "name": target_name(service.metadata.name, role),
            "namespace": service.metadata.namespace,
            "labels": labels(service, role),
            "ownerReferences": [apply.owner_reference(dict(owner))],
        },
        "spec": {"replicas": getattr(service.spec, role).replicas},
    }


def selector(service_name: str, role: str) -> str:
    """The label selector of the pool's pods of every revision (the scale subresource's labelSelectorPath)."""
    return f"{c.LABEL_SERVICE}={service_name},{c.LABEL_ROLE}={role}"


def target_status(service_name: str, size: PoolScale, pods: int, ready: int, generation: int | None) -> dict[str, Any]:
    """The target's status (wire form): the pool's pods over every revision, its size and selector."""
    status: dict[str, Any] = {
        "replicas": pods,
        "readyReplicas": ready,
        "desiredReplicas": size.replicas,
        "selector": selector(service_name, size.role),
        "message": size.clamped,
    }
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def _status_differs(live: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    current = live.get("status") or {}
    return any(current.get(key) != value for key, value in wanted.items())


def sync(
    client: apply.Client,
    owner: Mapping[str, Any],
    service: DisaggSpecService,
    targets: Mapping[str, Mapping[str, Any]],
    sizes: Mapping[str, PoolScale],
    pods: Mapping[str, tuple[int, int]],
) -> list[str]:
    """Create the missing targets and write the status of the others where it changed; returns what it wrote.

    A create that finds the target already there (made by a pass whose result the cache had not seen) is fine: the
    next pass reads it. Status is merge-patched on the status subresource, never the spec."""
    written: list[str] = []
    namespace, name = service.metadata.namespace or "", service.metadata.name
    for role, size in sizes.items():
        target = targets.get(role)
        if target is None:
            try:
                client.request("POST", apply.SCALE_TARGET.collection(namespace), body=new_target(owner, service, role))
            except apply.ApiError as error:
                if error.status != 409:
                    raise
            written.append(f"{c.POOL_KIND}/{target_name(name, role)}")
            continue
        count, ready = pods.get(role, (0, 0))
        generation = (target.get("metadata") or {}).get("generation")
        wanted = target_status(name, size, count, ready, generation if isinstance(generation, int) else None)
        if _status_differs(target, wanted):
            path = apply.SCALE_TARGET.item(namespace, target_name(name, role)) + "/status"
            client.request("PATCH", path, body={"status": wanted}, content_type="application/merge-patch+json")
            written.append(f"{c.POOL_KIND}/{target_name(name, role)}/status")
    return written
