"""The rollout planner (issue 18): how many pods each revision gets pass by pass, when the old router goes, when the
rollout holds, and that an older revision renders again from its stored spec exactly as it was applied."""

from __future__ import annotations

import random
from typing import Any

import pytest
import yaml

from disaggspec import rollout
from disaggspec.api import DisaggSpecService, parse_service
from disaggspec.api.v1alpha1 import RevisionStatus
from disaggspec.config import OperatorConfig
from disaggspec.render import Revision, fingerprint, names, render, rollout_timing
from disaggspec.rollout import Count, LiveRevision
from tests.unit.dss_cases import EXAMPLES, edited

NOW = "2026-12-04T12:00:00Z"
OLD = "aaaaaaaaaaaaaaaa"


def _service(prefill: int = 2, decode: int = 2, **rollout_spec: Any) -> DisaggSpecService:
    obj = edited(
        {
            "spec.prefill.replicas": prefill,
            "spec.decode.replicas": decode,
            "spec.rollout": rollout_spec,
            "metadata.namespace": "ns",
        }
    )
    return parse_service(obj)


def _rev(
    fp: str,
    prefill: tuple[int, int],
    decode: tuple[int, int],
    router: tuple[int, int] = (1, 1),
    spec: DisaggSpecService | None = None,
    created: str = "2026-12-04T11:59:00Z",
) -> LiveRevision:
    """A live revision: (asked, ready) per role; every asked pod exists."""
    counts = {
        role: Count(replicas=asked, pods=asked, ready=ready, terminating=0)
        for role, (asked, ready) in (("prefill", prefill), ("decode", decode), ("router", router))
    }
    stored = names.revision_spec(spec) if spec is not None else None
    return LiveRevision(fp, counts, stored, created)


def _plan(
    service: DisaggSpecService, *revisions: LiveRevision, previous: list[dict[str, Any]] | None = None
) -> rollout.Plan:
    """`previous`: status.revisions as written (JSON; the fields a test leaves out get placeholders)."""
    live = {rev.fingerprint: rev for rev in revisions}
    written = [
        RevisionStatus.model_validate({"name": "written", "traffic": "Rolling", **entry}) for entry in previous or []
    ]
    return rollout.plan(service, fingerprint(service), live, written, NOW, rollout_timing(service))


def _replicas(plan: rollout.Plan) -> dict[str, dict[str, int]]:
    return {rev.fingerprint: dict(rev.replicas) for rev in plan.revisions}


def test_a_single_revision_gets_the_spec_replicas_and_is_active() -> None:
    service = _service(3, 2)
    fp = fingerprint(service)
    plan = _plan(service, _rev(fp, (3, 1), (2, 2)))
    assert _replicas(plan) == {fp: {"prefill": 3, "decode": 2, "router": 1}}
    assert [s.traffic for s in plan.status] == ["Active"]
    assert plan.held is None and plan.wake_after is None and not plan.draining


def test_a_new_revision_starts_one_pair_next_to_the_serving_one() -> None:
    service = _service(2, 2)
    fp = fingerprint(service)
    plan = _plan(service, _rev(OLD, (2, 2), (2, 2), spec=service))
    # During the rollout the serving revisions share 2 router slots (the larger pool's replicas) by capacity: the old
    # one, serving alone, has both; the new one a single router pod, which becomes ready once it has a pair.
    assert _replicas(plan) == {
        fp: {"prefill": 1, "decode": 1, "router": 1},
        OLD: {"prefill": 2, "decode": 2, "router": 2},
    }
    assert [s.traffic for s in plan.status] == ["Rolling", "Draining"]
    assert [(s.traffic_share, s.capacity_share) for s in plan.status] == [(0.0, 0.0), (1.0, 1.0)]
    assert plan.draining == (OLD[:8],)
    assert plan.wake_after is not None and plan.wake_after > 0


def test_the_old_revision_shrinks_only_as_the_new_one_serves() -> None:
    service = _service(2, 2)
    fp = fingerprint(service)
    # New pods ready but its router not yet: no traffic reaches them, so nothing old may go.
    not_serving = _plan(service, _rev(fp, (1, 1), (1, 1), router=(1, 0)), _rev(OLD, (2, 2), (2, 2), spec=service))
    assert _replicas(not_serving)[OLD] == {"prefill": 2, "decode": 2, "router": 2}
    serving = _plan(service, _rev(fp, (1, 1), (1, 1)), _rev(OLD, (2, 2), (2, 2), spec=service))
    assert _replicas(serving)[OLD] == {"prefill": 1, "decode": 1, "router": 1}
    # Total pods per pool never exceed replicas + maxSurge: the new one grows once the old one has shrunk.
    assert _replicas(serving)[fp] == {"prefill": 1, "decode": 1, "router": 1}
    grown = _plan(service, _rev(fp, (1, 1), (1, 1)), _rev(OLD, (1, 1), (1, 1), spec=service))
    assert _replicas(grown)[fp] == {"prefill": 2, "decode": 2, "router": 1}


def test_ready_capacity_never_drops_below_replicas_minus_max_unavailable() -> None:
    service = _service(4, 4, maxSurge=2)
    fp = fingerprint(service)
    for new_ready in range(0, 5):
        plan = _plan(service, _rev(fp, (4, new_ready), (4, new_ready)), _rev(OLD, (4, 4), (4, 4), spec=service))
        old = _replicas(plan)[OLD]
        for role in ("prefill", "decode"):
            assert new_ready + old[role] >= 4, (new_ready, old)


def test_a_scale_down_the_status_has_not_caught_up_with_is_not_repeated() -> None:
    """The old Deployment was just scaled 2 -> 1 and its status still says 2 ready: the next pass must not take the
    pod being removed for capacity and remove another."""
    service = _service(2, 2)
    fp = fingerprint(service)
    stale = _rev(OLD, (2, 2), (2, 2), spec=service)
    stale = LiveRevision(
        OLD,
        {role: Count(1, 2, 2) if role != "router" else Count(1, 1, 1) for role in stale.counts},
        stale.spec,
        stale.created,
    )
    plan = _plan(service, _rev(fp, (1, 1), (1, 1)), stale)
    assert _replicas(plan)[OLD] == {"prefill": 1, "decode": 1, "router": 1}


def test_a_router_scaled_to_zero_does_not_serve_whatever_its_status_says() -> None:
    """Rolled back onto a revision whose router was just scaled to 0: its status still reports the leaving router
    pod ready. It does not serve (its router's ready pods count only up to spec.replicas), so the revision that does
    serve keeps every pod the floor needs (maxUnavailable 0: all of them)."""
    service = _service(2, 2)
    fp = fingerprint(service)
    back = _rev(fp, (2, 2), (2, 2), spec=service)
    back = LiveRevision(fp, {**back.counts, "router": Count(replicas=0, pods=1, ready=1)}, back.spec, back.created)
    assert not back.serving
    other = _rev(OLD, (2, 2), (2, 2), spec=service)
    plan = _plan(service, back, other)
    assert _replicas(plan)[OLD] == {"prefill": 2, "decode": 2, "router": 2}


def test_a_serving_old_revision_keeps_a_pair_until_both_pools_go() -> None:
    """The new revision has both its prefills ready but one decode: the old one may lose a decode and both
    prefills by capacity, but it would be left serving with no prefill, so it keeps one."""
    service = _service(2, 2)
    fp = fingerprint(service)
    plan = _plan(service, _rev(fp, (2, 2), (2, 1)), _rev(OLD, (2, 2), (2, 2), spec=service))
    assert _replicas(plan)[OLD] == {"prefill": 1, "decode": 1, "router": 1}


def test_a_serving_revision_keeps_its_pair_when_a_pool_status_lags_its_router() -> None:
    """The old revision's router is ready, so one of its prefills is, although the prefill Deployment's status still
    reports none: that pod is its pair and stays (not taken for an unready pod that goes at once) while its decodes
    shrink."""
    service = _service(2, 2)
    fp = fingerprint(service)
    plan = _plan(service, _rev(fp, (2, 2), (1, 1)), _rev(OLD, (1, 0), (2, 2), spec=service))
    assert _replicas(plan)[OLD] == {"prefill": 1, "decode": 1, "router": 1}


MIDDLE = "bbbbbbbbbbbbbbbb"


def test_a_serving_revision_the_budget_can_take_whole_goes_first() -> None:
    """Two serving older revisions, the budget one prefill and one decode: the older cannot go whole (3 decodes), the
    newer can, and goes (its router first); thinning the older instead would free no slot, since each keeps its
    pair."""
    service = _service(2, 4, maxSurge=0, maxUnavailable=1)
    fp = fingerprint(service)
    plan = _plan(
        service,
        _rev(fp, (0, 0), (0, 0), router=(1, 0)),
        _rev(OLD, (1, 1), (3, 3), spec=service, created="2026-12-04T11:00:00Z"),
        _rev(MIDDLE, (1, 1), (1, 1), spec=service, created="2026-12-04T11:30:00Z"),
    )
    # The older one, left the only serving revision that keeps pools, has all 4 router slots.
    assert _replicas(plan)[OLD] == {"prefill": 1, "decode": 3, "router": 4}
    assert _replicas(plan)[MIDDLE] == {"prefill": 1, "decode": 1, "router": 0}


def test_no_budget_is_spent_on_a_pod_kept_for_a_pair() -> None:
    """The budget (one prefill) cannot take the oldest revision's only prefill, which it keeps for its pair: it goes
    to the next revision's second prefill, which frees a slot for the new revision."""
    service = _service(2, 4, maxSurge=1, maxUnavailable=0)
    fp = fingerprint(service)
    plan = _plan(
        service,
        _rev(fp, (0, 0), (0, 0), router=(1, 0)),
        _rev(OLD, (1, 1), (2, 2), spec=service, created="2026-12-04T11:00:00Z"),
        _rev(MIDDLE, (2, 2), (2, 2), spec=service, created="2026-12-04T11:30:00Z"),
    )
    # Equal capacities (half of each pool) share the 4 router slots equally.
    assert _replicas(plan)[OLD] == {"prefill": 1, "decode": 2, "router": 2}
    assert _replicas(plan)[MIDDLE] == {"prefill": 1, "decode": 2, "router": 2}


def test_no_budget_is_spent_on_a_revision_kept_as_it_is() -> None:
    """A revision without a readable spec serves and stays as it is until the new one is complete: its ready pods
    count as capacity, but the budget is not spent on them, so the revision that can go does."""
    service = _service(2, 2)
    fp = fingerprint(service)
    legacy = _rev(MIDDLE, (1, 1), (1, 1), created="2026-12-04T10:00:00Z")
    plan = _plan(service, _rev(fp, (1, 1), (1, 1)), legacy, _rev(OLD, (2, 2), (2, 2), spec=service))
    assert _replicas(plan)[OLD] == {"prefill": 2, "decode": 2, "router": 0}
    assert _replicas(plan)[MIDDLE] == {"prefill": 1, "decode": 1, "router": 1}


def test_a_pool_is_not_held_to_the_other_when_that_one_has_no_room_left() -> None:
    """maxSurge 0: the new revision's decode has the one slot the old revision's pair leaves it, ready. It grows only
    once the old revision goes, which needs 5 ready prefills of the new one: the prefill grows past the skew."""
    service = _service(6, 2, maxSurge=0, maxUnavailable=1, maxSkew=0)
    fp = fingerprint(service)
    plan = _plan(service, _rev(fp, (4, 4), (1, 1)), _rev(OLD, (1, 1), (1, 1), spec=service))
    # Capacity 1/2 (its decode) against the old pair's 1/6: 6 router slots, 4.5 and 1.5, the tie to the current.
    assert _replicas(plan)[fp] == {"prefill": 5, "decode": 1, "router": 5}
    assert _replicas(plan)[OLD] == {"prefill": 1, "decode": 1, "router": 1}


def test_a_rollout_the_budgets_allow_no_step_holds_at_once() -> None:
    """A one-replica prefill with maxSurge 0: the old revision keeps its prefill for its pair while it serves, and it
    must serve for the decode's floor (5 - 1): the new revision can start no prefill, ever. Nothing is pending, so no
    deadline would pass: the rollout holds at once, naming the budgets, and changes nothing."""
    service = _service(1, 5, maxSurge=0, maxUnavailable=1)
    fp = fingerprint(service)
    current = _rev(fp, (0, 0), (1, 1), router=(1, 0))
    # The old revision serves alone and has the 5 router slots (the decode's replicas).
    plan = _plan(service, current, _rev(OLD, (1, 1), (4, 4), router=(5, 5), spec=service))
    assert plan.blocked and plan.held is not None
    assert "can take no further step" in plan.held and "maxSurge 0" in plan.held and "decode 5 - 1" in plan.held
    assert [s.traffic for s in plan.status] == ["Failed", "Draining"] and plan.wake_after is None
    assert _replicas(plan) == {
        fp: {"prefill": 0, "decode": 1, "router": 1},
        OLD: {"prefill": 1, "decode": 4, "router": 5},
    }
    # While the old decode's scale-down is still under way (5 pods for 4 asked), the cluster owes the pass a change.
    settling = _rev(OLD, (1, 1), (4, 4), router=(5, 5), spec=service)
    settling = LiveRevision(OLD, {**settling.counts, "decode": Count(4, 5, 5)}, settling.spec, settling.created)
    assert not _plan(service, current, settling).blocked
    # spec.rollout is not in the fingerprint: with a slot for a surge pod the same revision goes on.
    surge = _service(1, 5, maxSurge=1, maxUnavailable=1)
    assert fingerprint(surge) == fp
    goes_on = _plan(surge, current, _rev(OLD, (1, 1), (4, 4), router=(5, 5), spec=service))
    assert not goes_on.blocked and goes_on.held is None
    assert _replicas(goes_on)[fp] == {"prefill": 1, "decode": 2, "router": 1}


def test_lockstep_keeps_one_pool_from_running_ahead() -> None:
    service = _service(4, 4, maxSurge=4, maxSkew=0.25)
    fp = fingerprint(service)
    # Prefill has 3 ready, decode none: decode may grow (1 + its skew), prefill stays where it is.
    plan = _plan(service, _rev(fp, (3, 3), (1, 0)), _rev(OLD, (4, 4), (4, 4), spec=service))
    assert _replicas(plan)[fp]["prefill"] == 3
    assert _replicas(plan)[fp]["decode"] == 4  # ceil(4 x (3/4 + 1/4)), within the surge of 4
    start = _plan(service, _rev(OLD, (4, 4), (4, 4), spec=service))
    assert _replicas(start)[fp] == {"prefill": 1, "decode": 1, "router": 1}


def test_max_skew_zero_grows_the_pools_in_step() -> None:
    """maxSkew 0: level pools each ask for one more pod (each capped at the other's fraction alone, neither would
    grow); a pool ahead waits while the one behind catches up by one pod."""
    service = _service(4, 4, maxSurge=4, maxSkew=0)
    fp = fingerprint(service)
    old = _rev(OLD, (4, 4), (4, 4), spec=service)
    assert _replicas(_plan(service, _rev(fp, (1, 1), (1, 1)), old))[fp] == {"prefill": 2, "decode": 2, "router": 1}
    ahead = _plan(service, _rev(fp, (2, 2), (2, 1)), old)
    assert _replicas(ahead)[fp] == {"prefill": 2, "decode": 2, "router": 1}


def test_without_surge_an_old_pod_goes_first_when_unavailability_is_allowed() -> None:
    service = _service(1, 1, maxSurge=0, maxUnavailable=1)
    fp = fingerprint(service)
    first = _plan(service, _rev(OLD, (1, 1), (1, 1), spec=service))
    assert _replicas(first)[fp] == {"prefill": 0, "decode": 0, "router": 1}
    # Both old pools reach zero: the old router goes first, its pools stay until it has gone.
    assert _replicas(first)[OLD] == {"prefill": 1, "decode": 1, "router": 0}
    gone = _plan(
        service, _rev(fp, (0, 0), (0, 0), router=(1, 0)), _rev(OLD, (1, 1), (1, 1), router=(0, 0), spec=service)
    )
    assert OLD not in _replicas(gone)
    # Its pods still hold their GPUs while they terminate; once it is gone, the new revision takes the slots.
    assert _replicas(gone)[fp] == {"prefill": 0, "decode": 0, "router": 1}
    alone = _plan(service, _rev(fp, (0, 0), (0, 0), router=(1, 0)))
    assert _replicas(alone)[fp] == {"prefill": 1, "decode": 1, "router": 1}


def test_the_last_old_pair_loses_its_router_before_its_pools() -> None:
    service = _service(1, 1)
    fp = fingerprint(service)
    plan = _plan(service, _rev(fp, (1, 1), (1, 1)), _rev(OLD, (1, 1), (1, 1), spec=service))
    assert _replicas(plan)[OLD] == {"prefill": 1, "decode": 1, "router": 0}
    assert plan.draining == (OLD[:8],)
    # While its router pod is still terminating (asked 0, one pod left) the pools stay too.
    terminating = _rev(OLD, (1, 1), (1, 1), spec=service)
    for router in (Count(replicas=0, pods=1, ready=1), Count(replicas=0, pods=0, ready=0, terminating=1)):
        terminating = LiveRevision(OLD, {**terminating.counts, "router": router}, terminating.spec, None)
        assert OLD in _replicas(_plan(service, _rev(fp, (1, 1), (1, 1)), terminating)), router
    done = _plan(service, _rev(fp, (1, 1), (1, 1)), _rev(OLD, (1, 1), (1, 1), router=(0, 0), spec=service))
    assert list(_replicas(done)) == [fp]
    assert done.wake_after is None and not done.draining


def test_without_a_terminating_count_the_router_is_given_its_pause() -> None:
    """An API server that does not count terminating pods: the pools go a while after the router was
    scaled to zero (recorded in status): its 10 s preStop pause and a 5 s margin, not at once."""
    service = _service(1, 1)
    fp = fingerprint(service)
    old = _rev(OLD, (1, 1), (1, 1), spec=service)
    old = LiveRevision(OLD, {**old.counts, "router": Count(replicas=0, pods=0, ready=0)}, old.spec, old.created)
    first = _plan(service, _rev(fp, (1, 1), (1, 1)), old)
    assert OLD in _replicas(first) and first.status[1].retiring_since == NOW
    assert first.wake_after == rollout_timing(service).router_gone_seconds == 15
    entry = {"fingerprint": OLD, "retiringSince": "2026-12-04T11:59:50Z"}
    assert OLD in _replicas(_plan(service, _rev(fp, (1, 1), (1, 1)), old, previous=[entry]))
    entry["retiringSince"] = "2026-12-04T11:59:40Z"
    assert OLD not in _replicas(_plan(service, _rev(fp, (1, 1), (1, 1)), old, previous=[entry]))


def _router_pod(fp: str, deleting: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": {"disaggspec.io/role": "router", "disaggspec.io/spec-fingerprint": fp}}
    if deleting:
        meta["deletionTimestamp"] = NOW
    return {"metadata": meta}


def test_without_a_terminating_count_the_router_pods_are_counted_instead_of_a_fixed_wait() -> None:
    """Before Kubernetes 1.35 (no status.terminatingReplicas) the retiring router's pods are listed: its pools stay
    while one of them still stops, however long past the fixed 15 s, and go as soon as none is listed."""
    service = _service(1, 1)
    fp = fingerprint(service)
    current = _rev(fp, (1, 1), (1, 1))
    old = _rev(OLD, (1, 1), (1, 1), spec=service)
    old = LiveRevision(OLD, {**old.counts, "router": Count(replicas=0, pods=0, ready=0)}, old.spec, old.created)
    live = {fp: current, OLD: old}
    # Only the router without a terminating count and without pods is asked about (the current one reports 0).
    assert rollout.router_pods_needed(live) == [OLD]
    assert rollout.router_pods_needed({fp: current}) == []
    long_ago = [{"fingerprint": OLD, "retiringSince": "2026-12-04T11:50:00Z"}]  # 10 min: far past the fixed wait
    stopping = rollout.with_router_pods(live, [OLD], [_router_pod(OLD), _router_pod(fp, deleting=False)])
    assert stopping[OLD].count("router").terminating == 1
    assert stopping[fp] is current
    kept = _plan(service, *stopping.values(), previous=long_ago)
    assert OLD in _replicas(kept) and kept.wake_after is not None
    # The last router pod is gone: the pools go at once, without waiting for the fixed time to pass.
    gone = rollout.with_router_pods(live, [OLD], [_router_pod(fp, deleting=False)])
    assert gone[OLD].count("router").terminating == 0
    just_now = [{"fingerprint": OLD, "retiringSince": NOW}]
    assert list(_replicas(_plan(service, *gone.values(), previous=just_now))) == [fp]


def test_an_old_revision_that_serves_nothing_goes_as_soon_as_its_router_has() -> None:
    """An abandoned revision (a rollout replaced before it served) keeps nothing: its router goes, then the rest; the
    revision that serves keeps all its pods meanwhile."""
    service = _service(2, 2)
    failed = "bbbbbbbbbbbbbbbb"
    serving = _rev(OLD, (2, 2), (2, 2), spec=service)
    plan = _plan(
        service, _rev(failed, (1, 0), (1, 0), router=(1, 0), spec=service, created="2026-12-04T11:59:30Z"), serving
    )
    assert _replicas(plan)[failed] == {"prefill": 1, "decode": 1, "router": 0}
    assert _replicas(plan)[OLD] == {"prefill": 2, "decode": 2, "router": 2}
    gone = _plan(
        service, _rev(failed, (1, 0), (1, 0), router=(0, 0), spec=service, created="2026-12-04T11:59:30Z"), serving
    )
    assert failed not in _replicas(gone)


def test_the_rollout_holds_after_the_deadline_without_progress() -> None:
    service = _service(2, 2, progressDeadlineSeconds=60)
    fp = fingerprint(service)
    previous = [
        {
            "fingerprint": fp,
            "prefill": {"readyReplicas": 0},
            "decode": {"readyReplicas": 0},
            "router": {"readyReplicas": 0},
            "lastProgressTime": "2026-12-04T11:58:00Z",
        }
    ]
    revisions = (_rev(fp, (1, 0), (1, 0), router=(1, 0)), _rev(OLD, (2, 2), (2, 2), spec=service))
    plan = _plan(service, *revisions, previous=previous)
    assert plan.held is not None
    assert "progressDeadlineSeconds 60" in plan.held and "maxUnavailable" in plan.held and OLD[:8] in plan.held
    assert [s.traffic for s in plan.status] == ["Failed", "Draining"]
    assert _replicas(plan)[fp] == {"prefill": 1, "decode": 1, "router": 1}
    assert _replicas(plan)[OLD] == {"prefill": 2, "decode": 2, "router": 2}
    # Before the deadline: no hold, and a wake-up for when it passes.
    early = [{**previous[0], "lastProgressTime": "2026-12-04T11:59:30Z"}]
    waiting = _plan(service, *revisions, previous=early)
    assert waiting.held is None and waiting.wake_after == pytest.approx(31, abs=1)


def test_a_late_pass_with_nothing_pending_does_not_hold() -> None:
    """Every pod the new revision asked for is ready, and the pass comes long after the last became ready (the
    operator was down): nothing was pending, so nothing holds; the clock starts again and the revision grows."""
    service = _service(2, 2, progressDeadlineSeconds=60)
    fp = fingerprint(service)
    previous = [
        {
            "fingerprint": fp,
            "prefill": {"readyReplicas": 1},
            "decode": {"readyReplicas": 1},
            "router": {"readyReplicas": 1},
            "lastProgressTime": "2026-12-04T11:00:00Z",
        }
    ]
    plan = _plan(service, _rev(fp, (1, 1), (1, 1)), _rev(OLD, (1, 1), (1, 1), spec=service), previous=previous)
    assert plan.held is None and plan.status[0].last_progress_time == NOW
    assert _replicas(plan)[fp] == {"prefill": 2, "decode": 2, "router": 1}


def test_a_pod_becoming_ready_is_progress() -> None:
    service = _service(2, 2, progressDeadlineSeconds=60)
    fp = fingerprint(service)
    previous = [
        {
            "fingerprint": fp,
            "prefill": {"readyReplicas": 0},
            "decode": {"readyReplicas": 0},
            "router": {"readyReplicas": 0},
            "lastProgressTime": "2026-12-04T11:00:00Z",
        }
    ]
    plan = _plan(
        service, _rev(fp, (1, 1), (1, 0), router=(1, 0)), _rev(OLD, (2, 2), (2, 2), spec=service), previous=previous
    )
    assert plan.held is None
    assert plan.status[0].last_progress_time == NOW


def test_rolling_back_reuses_the_old_revision() -> None:
    """The spec is set back while the new revision is still starting: the old revision is current again, keeps its
    pods, and the abandoned one (serving nothing) goes."""
    service = _service(2, 2)
    fp = fingerprint(service)
    abandoned = "cccccccccccccccc"
    plan = _plan(service, _rev(fp, (2, 2), (2, 2), spec=service), _rev(abandoned, (1, 0), (1, 0), router=(1, 0)))
    assert list(_replicas(plan)) == [fp]
    assert _replicas(plan)[fp] == {"prefill": 2, "decode": 2, "router": 1}


def test_a_revision_without_a_readable_spec_is_kept_until_the_new_one_is_complete() -> None:
    service = _service(1, 1, maxSurge=1)
    fp = fingerprint(service)
    legacy = _rev(OLD, (1, 1), (1, 1))  # made by an operator that stored no spec
    plan = _plan(service, _rev(fp, (1, 0), (1, 0), router=(1, 0)), legacy)
    kept = next(rev for rev in plan.revisions if rev.fingerprint == OLD)
    assert kept.service is None
    complete = _plan(service, _rev(fp, (1, 1), (1, 1)), legacy)
    assert list(_replicas(complete)) == [fp]
    # It never shrinks, so it does not count against maxSurge: the new revision grows to full size beside it.
    bigger = _service(3, 3, maxSurge=1)
    grown = _plan(bigger, _rev(fingerprint(bigger), (1, 1), (1, 1)), _rev(OLD, (3, 3), (3, 3)))
    assert _replicas(grown)[fingerprint(bigger)]["prefill"] >= 2


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_an_old_revision_renders_from_its_stored_spec_exactly_as_applied(path: Any) -> None:
    """Rendering an older revision again must not change its pods: from the stored spec, the same Deployments."""
    obj = yaml.safe_load(path.read_text())
    obj["metadata"]["namespace"] = "ns"
    service = parse_service(obj)
    fp = fingerprint(service)
    applied = [m for m in render(service, OperatorConfig()) if m["kind"] == "Deployment"]
    stored = rollout.stored_service(service, applied[0]["metadata"]["annotations"][names.REVISION_SPEC_ANNOTATION])
    assert stored is not None
    again = render(stored, OperatorConfig(), [Revision(fp, stored, {})])
    assert [m for m in again if m["kind"] == "Deployment"] == applied


def test_observe_groups_deployments_by_fingerprint() -> None:
    service = _service(1, 1)
    fp = fingerprint(service)
    manifests = render(service, OperatorConfig())
    for manifest in manifests:
        manifest["metadata"]["creationTimestamp"] = "2026-12-04T10:00:00Z"
        if manifest["kind"] == "Deployment":
            manifest["status"] = {"replicas": 1, "readyReplicas": 1}
    other = [
        dict(m, metadata={**m["metadata"], "labels": {**m["metadata"]["labels"], "disaggspec.io/service": "x"}})
        for m in manifests
    ]
    live = rollout.observe("base", manifests + other)
    assert list(live) == [fp]
    assert live[fp].serving and live[fp].count("prefill") == Count(1, 1, 1)
    assert rollout.stored_service(service, live[fp].spec) == service


# ---- traffic by capacity (issue 32) ---------------------------------------------------------------------------------


def test_apportion_shares_the_slots_by_the_largest_remainder() -> None:
    assert rollout.apportion({"a": 0.75, "b": 0.25}, 4) == {"a": 3, "b": 1}
    assert rollout.apportion({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, 3) == {"a": 1, "b": 1, "c": 1}
    # A tie for the last pod goes to the first revision (the planner lists the current one first).
    assert rollout.apportion({"a": 0.5, "b": 0.5}, 3) == {"a": 2, "b": 1}
    # Quotas 2.4, 1.2 and 0.4: the smallest is raised to one pod, which leaves none to share out.
    assert rollout.apportion({"a": 0.6, "b": 0.3, "c": 0.1}, 4) == {"a": 2, "b": 1, "c": 1}
    # More serving revisions than slots: each keeps one router pod, so the total exceeds the slots.
    assert rollout.apportion({"a": 0.5, "b": 0.3, "c": 0.2}, 2) == {"a": 1, "b": 1, "c": 1}
    # No capacity at all (statuses not caught up): one pod each.
    assert rollout.apportion({"a": 0.0, "b": 0.0}, 3) == {"a": 1, "b": 1}
    assert rollout.apportion({}, 3) == {}


def test_apportion_never_gives_more_share_of_pods_than_of_capacity_beyond_one_slot() -> None:
    rng = random.Random(32)
    for _ in range(2000):
        slots = rng.randint(1, 12)
        capacities = {str(i): rng.choice((0.0, rng.random())) for i in range(rng.randint(1, 4))}
        seats = rollout.apportion(capacities, slots)
        assert set(seats) == set(capacities) and min(seats.values()) >= 1, (capacities, slots, seats)
        total = sum(capacities.values())
        if total == 0:
            continue
        pods = sum(seats.values())
        # Exactly the slots, unless the one-pod minimum raised some revision above its quota.
        raised = any(slots * cap / total < 1 for cap in capacities.values())
        assert pods == slots or (raised and pods > slots), (capacities, slots, seats)
        for key, cap in capacities.items():
            assert seats[key] / pods <= cap / total + 1 / slots + 1e-9, (capacities, slots, seats)


def test_the_routers_follow_capacity_while_both_revisions_serve() -> None:
    """Pools of 4 and one router: 4 router slots. The new revision's first ready pair is a quarter of the capacity
    and the old one keeps three quarters after this pass (maxSurge 1, maxUnavailable 0): 1 and 3 router pods, where
    each revision's own spec.router.replicas (1 and 1) would have sent the new pair half the requests."""
    service = _service(4, 4)
    fp = fingerprint(service)
    plan = _plan(service, _rev(fp, (1, 1), (1, 1)), _rev(OLD, (4, 4), (4, 4), router=(4, 4), spec=service))
    assert _replicas(plan)[fp]["router"] == 1
    assert _replicas(plan)[OLD] == {"prefill": 3, "decode": 3, "router": 3}
    current, old = plan.status
    # Once applied: 1 of the 4 ready router pods that stay (the old revision's fourth is being removed).
    assert (current.traffic_share, current.capacity_share) == (0.25, 0.25)
    assert (old.traffic_share, old.capacity_share) == (0.75, 0.75)
    assert rollout.router_split(plan.status) == {current.name: 1, old.name: 3}
    # Three pairs ready, the old revision down to its last pair: 3 and 1.
    late = _plan(
        service, _rev(fp, (3, 3), (3, 3), router=(3, 3)), _rev(OLD, (2, 2), (2, 2), router=(2, 2), spec=service)
    )
    assert _replicas(late)[fp]["router"] == 3 and _replicas(late)[OLD] == {"prefill": 1, "decode": 1, "router": 1}
    # The old revision retiring, the new one serves alone: back to spec.router.replicas.
    done = _plan(service, _rev(fp, (4, 4), (4, 4), router=(3, 3)), _rev(OLD, (1, 1), (1, 1), spec=service))
    assert _replicas(done)[OLD]["router"] == 0 and _replicas(done)[fp]["router"] == 1
    assert done.status[1].capacity_share is None and done.status[0].capacity_share == 1.0


def test_a_current_revision_not_serving_yet_gets_the_routers_its_pair_would_earn() -> None:
    """Its pair is ready but its router not yet: it gets the router pods its capacity would earn next to the serving
    revisions (which share the slots without it meanwhile), so it takes no more than its share once they are ready;
    with no pair, one router pod."""
    service = _service(4, 4, maxSurge=2)
    fp = fingerprint(service)
    old = _rev(OLD, (4, 4), (4, 4), router=(4, 4), spec=service)
    pair = _plan(service, _rev(fp, (2, 2), (2, 2), router=(1, 0)), old)
    assert _replicas(pair)[fp]["router"] == 1 and _replicas(pair)[OLD]["router"] == 4
    assert pair.status[0].traffic_share == 0.0 and pair.status[0].capacity_share == pytest.approx(0.333)
    nothing = _plan(service, _rev(fp, (2, 0), (2, 0), router=(1, 0)), old)
    assert _replicas(nothing)[fp]["router"] == 1


def test_a_router_scaled_to_zero_is_not_brought_back_by_the_split() -> None:
    service = parse_service(
        edited(
            {
                "spec.prefill.replicas": 2,
                "spec.decode.replicas": 2,
                "spec.router.replicas": 0,
                "metadata.namespace": "ns",
            }
        )
    )
    fp = fingerprint(service)
    plan = _plan(
        service, _rev(fp, (1, 1), (1, 1), router=(0, 0)), _rev(OLD, (2, 2), (2, 2), router=(0, 0), spec=service)
    )
    assert _replicas(plan)[fp]["router"] == 0
    assert all(rev.replicas["router"] == 0 for rev in plan.revisions)


def test_an_older_revision_keeps_its_pods_until_the_routers_that_take_its_requests_are_ready() -> None:
    """Two new pairs ready, one new router pod: taking 2 pairs from the old revision needs the new one at 2 of the 4
    router slots. Removing the pods at once would leave the old revision half its capacity and 3 of the 4 ready router
    pods until the new router pod is ready, so this pass only starts it (and lowers the old router); the next pass,
    finding it ready, takes the pods."""
    service = _service(4, 4, maxSurge=2)
    fp = fingerprint(service)
    old = _rev(OLD, (4, 4), (4, 4), router=(4, 4), spec=service)
    first = _plan(service, _rev(fp, (2, 2), (2, 2), router=(1, 1)), old)
    assert first.shifting
    assert _replicas(first) == {
        fp: {"prefill": 2, "decode": 2, "router": 2},
        OLD: {"prefill": 4, "decode": 4, "router": 2},
    }
    then = _plan(
        service, _rev(fp, (2, 2), (2, 2), router=(2, 2)), _rev(OLD, (4, 4), (4, 4), router=(2, 2), spec=service)
    )
    assert not then.shifting
    assert _replicas(then)[OLD] == {"prefill": 2, "decode": 2, "router": 2}
