"""The planner's runtime (spec.autoscaling.mode Planner): fed each measuring round's scrapes by the runtime-health
`Monitor`, it runs the pure `autoscale.planner.decide` per service and sets a pool's size the way an HPA does, through
its scale target's `/scale` subresource; the reconcile pass then renders that size like any other scale.

It runs on the monitor's thread, so only on the leader and never on the reconcile path. Per service it keeps the
planner's state (seeded once from status.autoscaling.learned, so a restart or a failover keeps what was learned) and
its last decision. A decision that changes a pool is an Event (PoolScaled, naming the inputs that drove it), a
count in `disaggspec_autoscaler_decisions_total`, and, after the requeued pass, status.autoscaling.lastDecision;
every round sets `disaggspec_autoscaler_desired_replicas`. The planner reads the pods' own `/metrics`: with the
Prometheus health source (`--health-prometheus-url`) it has no per-pod series and decides nothing.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pydantic

from disaggspec import apply, metrics
from disaggspec import conditions as r
from disaggspec import constants as c
from disaggspec.api import DisaggSpecService, parse_service
from disaggspec.api.v1alpha1 import AutoscalingSpec, PlannerDecisionStatus
from disaggspec.autoscale.planner import (
    Decision,
    PlannerSettings,
    PlannerState,
    PoolLimits,
    PoolWindow,
    ServiceWindow,
    decide,
)
from disaggspec.scaletargets import live_targets, target_name
from disaggspec.servinghealth.samples import PodSample

log = logging.getLogger("disaggspec.autoscaler")

Key = tuple[str, str]
Series = Mapping[str, Sequence[tuple[float, PodSample]]]
"""pod name -> (monotonic seconds, sample), oldest first."""
Lookup = Callable[[str, str], Mapping[str, Any] | None]
EventFn = Callable[[dict[str, Any], str, str, str], None]


def settings_of(scaling: AutoscalingSpec) -> PlannerSettings | None:
    """The planner's settings from spec.autoscaling; None unless the planner drives the pools."""
    planner = scaling.planner
    if scaling.mode != "Planner" or planner is None:
        return None
    band = planner.prefill_decode_ratio
    return PlannerSettings(
        ttft_seconds=planner.ttft_milliseconds / 1000,
        itl_seconds=planner.itl_milliseconds / 1000,
        prefill=PoolLimits(scaling.prefill.min_replicas, scaling.prefill.max_replicas),
        decode=PoolLimits(scaling.decode.min_replicas, scaling.decode.max_replicas),
        ratio_min=band.min if band is not None else None,
        ratio_max=band.max if band is not None else None,
        lead_seconds=float(planner.scale_up_lead_seconds),
        stabilization_seconds=float(planner.scale_down_stabilization_seconds),
    )


def _asked(targets: Mapping[str, Mapping[str, Any]], role: str, service: DisaggSpecService) -> int:
    """What the pool's scale target asks now (from the watch-fed cache, so a scale this planner just made is seen
    before the pass that renders it); the spec's replicas while the target does not exist yet."""
    value = ((targets.get(role) or {}).get("spec") or {}).get("replicas")
    return int(value) if isinstance(value, int) else int(getattr(service.spec, role).replicas)


def window_of(
    service: DisaggSpecService,
    status: Mapping[str, Any],
    targets: Mapping[str, Mapping[str, Any]],
    series: Mapping[str, Series],
) -> ServiceWindow:
    """The planner's input: each pool's asked size, its scraped (ready) servers and their series."""
    pools = {
        role: PoolWindow(_asked(targets, role, service), len(series.get(role, {})), series.get(role, {}))
        for role in c.POOLS
    }
    return ServiceWindow(
        pools[c.ROLE_PREFILL],
        pools[c.ROLE_DECODE],
        rolling_out=len(status.get("revisions") or []) > 1,
        fingerprint=status.get("specFingerprint"),
    )


def _wall() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Autoscaler:
    """The planner's state per service; `observe` is the monitor's per-round hook, `view` the pass's read."""

    def __init__(
        self,
        client: apply.Client,
        emit: EventFn,
        *,
        lookup: Lookup,
        children: Callable[[str, str], list[dict[str, Any]]],
        requeue: Callable[[Iterable[Key]], None],
        wall: Callable[[], str] = _wall,
    ) -> None:
        self.client = client
        self.emit = emit
        self._lookup = lookup
        self._children = children
        self._requeue = requeue
        self._wall = wall
        self._lock = threading.Lock()
        self._states: dict[Key, PlannerState] = {}
        self._decisions: dict[Key, PlannerDecisionStatus] = {}

    def view(self, namespace: str, name: str) -> tuple[PlannerDecisionStatus | None, dict[str, Any] | None]:
        """The last decision this process made and what the planner learned (None, None before its first round)."""
        with self._lock:
            state = self._states.get((namespace, name))
            return self._decisions.get((namespace, name)), state.to_wire() if state is not None else None

    def forget(self, key: Key) -> None:
        with self._lock:
            self._states.pop(key, None)
            self._decisions.pop(key, None)
        metrics.record_autoscaler_desired(*key, None)

    def reset(self) -> None:
        """Not the leader (any more): the next leader seeds from status, as this process will when it leads again."""
        with self._lock:
            self._states.clear()
            self._decisions.clear()

    def observe(self, key: Key, series: Mapping[str, Series], now: float) -> None:
        """One round of one service: decide, and set the pools whose size changes."""
        body = self._lookup(*key)
        if body is None:
            self.forget(key)
            return
        try:
            service = parse_service(body)
        except pydantic.ValidationError:
            return
        scaling = service.spec.autoscaling
        settings = settings_of(scaling) if scaling is not None else None
        if settings is None:
            if key in self._states:
                self.forget(key)
            return
        status = body.get("status") or {}
        with self._lock:
            state = self._states.get(key)
        if state is None:  # first round of this process: what the last leader learned
            state = PlannerState.from_wire((status.get("autoscaling") or {}).get("learned"))
        targets = live_targets(key[1], self._children(*key))
        window = window_of(service, status, targets, series)
        decision, state = decide(settings, state, window, now)
        with self._lock:
            self._states[key] = state
        metrics.record_autoscaler_desired(
            *key, {pool.role: pool.desired for pool in (decision.prefill, decision.decode)}
        )
        if all(pool.desired == pool.current for pool in (decision.prefill, decision.decode)):
            return
        self._scale(key, body, decision)

    def _scale(self, key: Key, body: Mapping[str, Any], decision: Decision) -> None:
        namespace, name = key
        changed = [pool for pool in (decision.prefill, decision.decode) if pool.desired != pool.current]
        for pool in changed:
            path = apply.SCALE_TARGET.item(namespace, target_name(name, pool.role)) + "/scale"
            try:
                self.client.request(
                    "PATCH",
                    path,
                    body={"spec": {"replicas": pool.desired}},
                    content_type="application/merge-patch+json",
                )
            except apply.ApiError as error:  # the target not made yet (first pass pending), or the API refused
                log.warning("%s/%s: cannot scale %s to %d: %s", namespace, name, pool.role, pool.desired, error)
                return
            direction = "up" if pool.desired > pool.current else "down"
            metrics.AUTOSCALER_DECISIONS.labels(namespace, name, pool.role, direction).inc()
        log.info("%s/%s: %s", namespace, name, decision.message)
        with self._lock:
            self._decisions[key] = PlannerDecisionStatus(time=self._wall(), message=decision.message[:1024])
        reason = r.EVENT_POOL_SCALED
        self.emit(dict(body), reason.type, reason.reason, decision.message)
        self._requeue([key])
