"""Which Events a pass emits: one per transition of the status it just wrote, never on a resync that changed nothing,
plus one `ForeignEditReverted` per child whose conflicting foreign fields the pass removed (`childrepair`).

`transitions` compares the status as last written with the new one (both the typed model) and returns the Events
to emit, in order; the reconciler emits them only after its status write succeeded (as JobSet does), so a failed
write never announces a state the API server does not hold. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from disaggspec import apply, rollout
from disaggspec import conditions as r
from disaggspec import constants as c
from disaggspec.api import DisaggSpecServiceStatus
from disaggspec.api.v1alpha1 import Condition
from disaggspec.conditions import EventReason
from disaggspec.rejection import Rejection

DEGRADED_EVENTS: Mapping[str, EventReason] = {
    r.DEGRADED_APPLY_FAILED.reason: r.EVENT_APPLY_FAILED,
    r.DEGRADED_ROLLOUT_STUCK.reason: r.EVENT_ROLLOUT_STUCK,
    r.DEGRADED_CHILD_REFUSED.reason: r.EVENT_CHILD_REFUSED,
    r.DEGRADED_API_MISSING.reason: r.EVENT_API_MISSING,
}
"""The Warning Event announcing each reason Degraded turns True with."""

RUNTIME_EVENTS: Mapping[str, tuple[EventReason, EventReason]] = {
    c.CONDITION_SPEC_DECODE_HEALTHY: (r.EVENT_LOW_ACCEPT_LENGTH, r.EVENT_ACCEPT_LENGTH_RECOVERED),
    c.CONDITION_TRANSFER_HEALTHY: (r.EVENT_TRANSFER_FAILURES, r.EVENT_TRANSFER_RECOVERED),
}
"""Per runtime-health condition, the Events of its turning False and of its turning True again after False."""


@dataclass(frozen=True)
class Event:
    """One Event to emit on the service."""

    reason: EventReason
    message: str


class _Before:
    """The conditions as last written, by type; an absent condition reads as no status, reason or message."""

    def __init__(self, previous: DisaggSpecServiceStatus | None) -> None:
        self._by_type = {cond.type: cond for cond in previous.conditions} if previous is not None else {}

    def status(self, type_: str) -> str | None:
        cond = self._by_type.get(type_)
        return cond.status if cond is not None else None

    def reason(self, type_: str) -> str | None:
        cond = self._by_type.get(type_)
        return cond.reason if cond is not None else None

    def message(self, type_: str) -> str | None:
        cond = self._by_type.get(type_)
        return cond.message if cond is not None else None


def transitions(
    previous: DisaggSpecServiceStatus | None,
    new: DisaggSpecServiceStatus,
    rejection: Rejection,
    result: apply.SyncResult,
) -> list[Event]:
    """The Events of the change from `previous` (as last written) to `new`, in the order they are emitted."""
    before = _Before(previous)
    after = {cond.type: cond for cond in new.conditions}
    events: list[Event] = []
    consistent = after[c.CONDITION_SPEC_CONSISTENT]
    was_consistent = before.message(c.CONDITION_SPEC_CONSISTENT)
    if rejection and was_consistent != consistent.message:
        events.append(Event(r.EVENT_SPEC_REJECTED, rejection.text))
    if consistent.reason == r.CONSISTENT_RENDER_FAILED.reason and was_consistent != consistent.message:
        events.append(Event(r.EVENT_RENDER_FAILED, consistent.message or ""))
    events.extend(Event(r.EVENT_FOREIGN_EDIT_REVERTED, repair.message) for repair in result.repaired)
    if result.changed and not result.rolled_back:
        events.append(Event(r.EVENT_CHILDREN_APPLIED, f"applied {result.applied}, pruned {result.pruned}"))
    progressing = after[c.CONDITION_PROGRESSING]
    held = r.PROGRESSING_ROLLOUT_HELD.reason
    if progressing.reason == held and before.reason(c.CONDITION_PROGRESSING) != held:
        events.append(Event(r.EVENT_ROLLOUT_HELD, progressing.message or ""))
    events.extend(_revision_events(previous, new))
    events.extend(_traffic_events(previous, new))
    events.extend(_ready_and_degraded(before, after))
    events.extend(_model_cache(before, after.get(c.CONDITION_MODEL_CACHED)))
    for type_, (unhealthy, recovered) in RUNTIME_EVENTS.items():
        now_status, was = after[type_].status, before.status(type_)
        if now_status == "False" and was != "False":
            events.append(Event(unhealthy, after[type_].message or ""))
        elif now_status == "True" and was == "False":
            events.append(Event(recovered, after[type_].message or ""))
    return events


def _ready_and_degraded(before: _Before, after: Mapping[str, Condition]) -> list[Event]:
    events: list[Event] = []
    ready = after[c.CONDITION_READY]
    if ready.status == "True" and before.status(c.CONDITION_READY) != "True":
        events.append(Event(r.EVENT_READY, ready.message or ""))
    denied = r.READY_NAMESPACE_DENIED.reason
    if ready.reason == denied and before.reason(c.CONDITION_READY) != denied:
        events.append(Event(r.EVENT_NAMESPACE_DENIED, ready.message or ""))
    degraded = after[c.CONDITION_DEGRADED]
    if degraded.status == "True" and before.message(c.CONDITION_DEGRADED) != degraded.message:
        events.append(Event(DEGRADED_EVENTS[str(degraded.reason)], degraded.message or ""))
    return events


def _model_cache(before: _Before, cached: Condition | None) -> list[Event]:
    if cached is None:
        return []
    events: list[Event] = []
    if cached.status == "True" and before.status(c.CONDITION_MODEL_CACHED) != "True":
        events.append(Event(r.EVENT_MODEL_CACHE_FILLED, cached.message or ""))
    failed = r.MODEL_CACHED_FILL_FAILED.reason
    if cached.reason == failed and before.message(c.CONDITION_MODEL_CACHED) != cached.message:
        events.append(Event(r.EVENT_MODEL_CACHE_FILL_FAILED, cached.message or ""))
    return events


def _revision_events(previous: DisaggSpecServiceStatus | None, new: DisaggSpecServiceStatus) -> list[Event]:
    """RevisionCreated for a revision that starts next to a serving one, RevisionRetired for one removed."""
    had = [revision.name for revision in previous.revisions] if previous is not None else []
    has = [revision.name for revision in new.revisions]
    events: list[Event] = []
    if had and has and has[0] not in had:
        events.append(
            Event(
                r.EVENT_REVISION_CREATED,
                f"revision {has[0]} started for the new spec; {', '.join(had)} keeps serving until it is replaced",
            )
        )
    events.extend(
        Event(r.EVENT_REVISION_RETIRED, f"revision {name} was drained and removed") for name in had if name not in has
    )
    return events


def _traffic_shares(status: DisaggSpecServiceStatus | None) -> dict[str, float]:
    """Per revision, the traffic share status reports (set only during a rollout)."""
    if status is None:
        return {}
    return {entry.name: entry.traffic_share for entry in status.revisions if entry.traffic_share is not None}


def _traffic_events(previous: DisaggSpecServiceStatus | None, new: DisaggSpecServiceStatus) -> list[Event]:
    """TrafficShifted when a rollout's split changes: a revision's share, or which revisions take part (not when the
    rollout ends: RevisionRetired says that)."""
    shares = _traffic_shares(new)
    if len(shares) < 2 or shares == _traffic_shares(previous):
        return []
    routers = rollout.router_split(new.revisions)
    total = sum(routers.values())
    parts = []
    for entry in new.revisions:
        capacity = "" if entry.capacity_share is None else f", capacity {entry.capacity_share:.2f}"
        parts.append(
            f"revision {entry.name} {round(100 * shares[entry.name])}% ({routers[entry.name]}/{total} routers"
            f"{capacity})"
        )
    return [Event(r.EVENT_TRAFFIC_SHIFTED, ", ".join(parts))]
