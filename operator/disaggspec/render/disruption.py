"""Disruption budgets and spreading of pool and router pods; pure.

Each pool and the router get a PodDisruptionBudget (policy/v1) selecting their pods of every revision:
a node drain or cluster upgrade evicts at most `maxUnavailable` of them at once, and waits for replacements to be
ready before the next. Pods that are not ready may always be evicted (`unhealthyPodEvictionPolicy: AlwaysAllow`):
a pod still loading weights, or crash-looping, serves nothing, and must never block a drain.

Replicas are spread over nodes by a topology spread constraint on `kubernetes.io/hostname` (maxSkew 1), preferred by
default (ScheduleAnyway: GPUs are scarce, a replica sharing a node beats a replica not running), required or off on
request, so one node's loss takes one replica, not all.
"""

from __future__ import annotations

from typing import Any, Final

from disaggspec.api import DisaggSpecService
from disaggspec.api.v1alpha1 import DisruptionSpec, SpreadMode
from disaggspec.render import names

HOSTNAME_KEY: Final = "kubernetes.io/hostname"
_WHEN_UNSATISFIABLE: Final = {"Preferred": "ScheduleAnyway", "Required": "DoNotSchedule"}


def pod_disruption_budget(service: DisaggSpecService, role: str, disruption: DisruptionSpec) -> dict[str, Any]:
    """The PodDisruptionBudget of `role` (a pool or the router), named like its Deployment."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": names.metadata(service, role),
        "spec": {
            "maxUnavailable": disruption.max_unavailable,
            "selector": {"matchLabels": names.selector(service, role)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def topology_spread(service: DisaggSpecService, role: str, mode: SpreadMode) -> dict[str, Any]:
    """`topologySpreadConstraints` for a pod spec of `role` (empty when `mode` is Off)."""
    if mode == "Off":
        return {}
    constraint = {
        "maxSkew": 1,
        "topologyKey": HOSTNAME_KEY,
        "whenUnsatisfiable": _WHEN_UNSATISFIABLE[mode],
        "labelSelector": {"matchLabels": names.selector(service, role)},
    }
    return {"topologySpreadConstraints": [constraint]}
