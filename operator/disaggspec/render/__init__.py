"""Renders a DisaggSpecService into its child manifests; pure: no clock, no environment, no I/O, stable order.

`render(service, config)` returns, in apply order: the router's ServiceAccount, Role and RoleBinding, the model
cache's fill Job (with a claim-backed `spec.model.cache`), the prefill,
decode and router Services, the prefill, decode and router PodDisruptionBudgets, then the prefill, decode and router
Deployments. Callers validate first: render assumes
a spec that passed the rule table.
"""

from __future__ import annotations

from typing import Any

from disaggspec import constants as c
from disaggspec.api import DisaggSpecService
from disaggspec.config import OperatorConfig
from disaggspec.render import caches, pool, router
from disaggspec.render.names import fingerprint

__all__ = ["endpoint", "fingerprint", "render"]

endpoint = router.endpoint


def render(service: DisaggSpecService, config: OperatorConfig) -> list[dict[str, Any]]:
    """Every child object of `service`, in apply order."""
    if not service.metadata.namespace:
        raise ValueError("render needs metadata.namespace: children are namespaced")
    fp = fingerprint(service)
    return [
        *router.rbac(service),
        *caches.fill_job(service),
        pool.headless_service(service, c.ROLE_PREFILL),
        pool.headless_service(service, c.ROLE_DECODE),
        router.service_(service),
        pool.disruption_budget(service, c.ROLE_PREFILL),
        pool.disruption_budget(service, c.ROLE_DECODE),
        router.disruption_budget(service),
        pool.deployment(service, c.ROLE_PREFILL, fp),
        pool.deployment(service, c.ROLE_DECODE, fp),
        router.deployment(service, config, fp),
    ]
