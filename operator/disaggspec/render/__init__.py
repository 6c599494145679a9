"""Renders a DisaggSpecService into its child manifests; pure: no clock, no environment, no I/O, stable order.

`render(service, config)` returns, in apply order: the router's ServiceAccount, Role and RoleBinding, the model
cache's fill Job (with a claim-backed `spec.model.cache`), the prefill,
decode and router Services, the prefill, decode and router PodDisruptionBudgets, then the prefill, decode and router
workloads of each revision (`rollout`: one per spec fingerprint while a rollout runs): Deployments, and for a pool
with nodesPerInstance > 1 a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) in its Deployment's place. Callers
validate first: render assumes a spec that passed the rule table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from disaggspec import constants as c
from disaggspec.api import DisaggSpecService
from disaggspec.api import pool as pool_spec
from disaggspec.config import OperatorConfig
from disaggspec.render import caches, lifecycle, pool, router
from disaggspec.render.names import fingerprint
from disaggspec.revision import Revision, RolloutTiming

__all__ = ["Revision", "endpoint", "fingerprint", "render", "rollout_timing"]

endpoint = router.endpoint


def rollout_timing(service: DisaggSpecService) -> RolloutTiming:
    """The rollout planner's time budget for `service`: spec.rollout.progressDeadlineSeconds, else the larger pool
    workload's progress deadline (which grows with the pod's GPUs, standing for the model's size); and how long a
    retiring router counts as present where the API server does not count terminating pods (its preStop pause and
    a margin)."""
    given = service.spec.rollout.progress_deadline_seconds
    deadline = (
        given
        if given is not None
        else max(
            lifecycle.progress_deadline_seconds(pool_spec(service.spec, role).lifecycle, pool.pod_gpus(service, role))
            for role in c.POOLS
        )
    )
    return RolloutTiming(deadline, float(lifecycle.ROUTER_PRESTOP_SECONDS + lifecycle.ROUTER_GONE_MARGIN_SECONDS))


def render(
    service: DisaggSpecService, config: OperatorConfig, revisions: Sequence[Revision] | None = None
) -> list[dict[str, Any]]:
    """Every child object of `service`, in apply order. `revisions` are the revisions to render with their
    replicas (`rollout.plan`); None renders the spec's own revision alone, at the spec's replicas. A revision
    without a service is kept as it is live and renders nothing."""
    if not service.metadata.namespace:
        raise ValueError("render needs metadata.namespace: children are namespaced")
    if revisions is None:
        revisions = [Revision(fingerprint(service), service, {})]
    deployments = [
        manifest
        for revision in revisions
        if revision.service is not None
        for manifest in _revision_deployments(revision.service, config, revision.fingerprint, revision.replicas)
    ]
    return [
        *router.rbac(service),
        *caches.fill_job(service),
        pool.headless_service(service, c.ROLE_PREFILL),
        pool.headless_service(service, c.ROLE_DECODE),
        router.service_(service),
        pool.disruption_budget(service, c.ROLE_PREFILL),
        pool.disruption_budget(service, c.ROLE_DECODE),
        router.disruption_budget(service),
        *deployments,
    ]


def _revision_deployments(
    service: DisaggSpecService, config: OperatorConfig, fp: str, replicas: Mapping[str, int]
) -> list[dict[str, Any]]:
    return [
        pool.workload(service, c.ROLE_PREFILL, fp, replicas.get(c.ROLE_PREFILL)),
        pool.workload(service, c.ROLE_DECODE, fp, replicas.get(c.ROLE_DECODE)),
        router.deployment(service, config, fp, replicas.get(c.ROLE_ROUTER)),
    ]
