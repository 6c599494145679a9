"""What a revision is, shared by the rollout planner (which decides them) and the renderer (which renders them).

A revision is the set of children of one spec fingerprint. Its workloads are named `<service>-<role>-<name>`, where
the name is the fingerprint's first hex characters, and each carries the spec it was rendered from, so that an older
revision can be rendered (and scaled) again after the spec moved on. `Revision` is what one pass asks of a revision;
`RolloutTiming` is the time budget of a rollout, which the renderer derives from the pools' lifecycles and the
planner takes as an input (so the planner needs nothing of the renderer). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from disaggspec.api import DisaggSpecService

REVISION_NAME_LENGTH: Final = 8
"""Hex characters of the fingerprint in a revision's workload names: <service>-<pool>-<8 hex> (validation/pools.py
derives the multi-node name limit from it)."""
REVISION_SPEC_ANNOTATION: Final = "disaggspec.io/revision-spec"
"""On each workload (Deployment or LeaderWorkerSet) of a revision: the spec it was rendered from (JSON), so an older
revision can be rendered again (and scaled) after the service's spec moved on, also by an operator that restarted
mid-rollout."""


def revision_name(fingerprint: str) -> str:
    """The revision suffix of the workload names of `fingerprint`."""
    return fingerprint[:REVISION_NAME_LENGTH]


@dataclass(frozen=True)
class Revision:
    """One revision to render (`rollout.plan` makes them)."""

    fingerprint: str
    service: DisaggSpecService | None
    """The spec to render it from; None: its stored spec is unreadable, its live children are kept as they are."""
    replicas: Mapping[str, int]
    """Per role, the replicas to render; a role left out gets the spec's replicas."""


@dataclass(frozen=True)
class RolloutTiming:
    """The time budget of a rollout (`render.rollout_timing` computes it from the spec)."""

    progress_deadline_seconds: int
    """How long the current revision may go without another pod becoming ready before the rollout holds:
    spec.rollout.progressDeadlineSeconds, else the larger pool workload's own progress deadline."""
    router_gone_seconds: float
    """Where neither the router Deployment's status.terminatingReplicas nor a LIST of its pods can be read: how long
    after its router was scaled to zero a retiring revision's router counts as gone (its preStop pause, during which
    it leaves the Service, and a margin). Also how often a retiring revision is looked at again."""
