"""status.compute: conditions from the live Deployments and the rule table, stable across resyncs."""

from __future__ import annotations

import itertools
from typing import Any

from disaggspec import conditions as r
from disaggspec import status
from disaggspec.api.v1alpha1 import (
    Condition,
    DisaggSpecServiceStatus,
    RevisionPoolStatus,
    RevisionStatus,
    RevisionTraffic,
)
from disaggspec.rejection import ACCEPTED, Problem, Rejection
from disaggspec.servinghealth.judge import Judgement, Verdict
from disaggspec.status import Observation


def _deployment(replicas: int, ready: int, generation: int = 1, observed: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": observed,
            "replicas": replicas,
            "updatedReplicas": ready,
            "readyReplicas": ready,
            "availableReplicas": ready,
            **extra,
        },
    }


def _by_type(result: DisaggSpecServiceStatus) -> dict[str, Condition]:
    return {cond.type: cond for cond in result.conditions}


def _observe(**deployments: dict[str, Any] | None) -> Observation:
    return Observation(
        generation=3, rejection=ACCEPTED, deployments=deployments, fingerprint="abc", endpoint="svc:8000"
    )


def test_all_rolled_out_is_ready() -> None:
    ready = _deployment(1, 1)
    result = status.compute(_observe(prefill=ready, decode=ready, router=ready), None, "T1")
    conditions = _by_type(result)
    assert conditions["Ready"].status == "True"
    assert conditions["Ready"].reason == r.READY_ALL_REPLICAS.reason
    assert conditions["Progressing"].status == "False"
    assert conditions["Degraded"].status == "False"
    assert conditions["SpecConfigConsistent"].status == "True"
    assert result.observed_generation == 3
    assert result.spec_fingerprint == "abc"


def test_the_wire_form_is_the_camel_case_json_written_today() -> None:
    ready = _deployment(1, 1)
    wire = status.compute(_observe(prefill=ready, decode=ready, router=_deployment(1, 0)), None, "T1").to_wire()
    assert wire == {
        "observedGeneration": 3,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "RolloutInProgress",
                "message": "not all replicas ready: router",
                "observedGeneration": 3,
                "lastTransitionTime": "T1",
            },
            {
                "type": "SpecConfigConsistent",
                "status": "True",
                "reason": "AllRulesPassed",
                "message": "prefill and decode agree",
                "observedGeneration": 3,
                "lastTransitionTime": "T1",
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "RollingOut",
                "message": "waiting for router",
                "observedGeneration": 3,
                "lastTransitionTime": "T1",
            },
            {
                "type": "Degraded",
                "status": "False",
                "reason": "AsExpected",
                "message": "no failures",
                "observedGeneration": 3,
                "lastTransitionTime": "T1",
            },
            {
                "type": "SpecDecodeHealthy",
                "status": "Unknown",
                "reason": "NotMeasured",
                "message": "not measured yet",
                "observedGeneration": 3,
                "lastTransitionTime": "T1",
            },
            {
                "type": "TransferHealthy",
                "status": "Unknown",
                "reason": "NotMeasured",
                "message": "not measured yet",
                "observedGeneration": 3,
                "lastTransitionTime": "T1",
            },
        ],
        "prefill": {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "availableReplicas": 1, "ready": "1/1"},
        "decode": {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "availableReplicas": 1, "ready": "1/1"},
        "router": {"replicas": 1, "readyReplicas": 0, "updatedReplicas": 0, "availableReplicas": 0, "ready": "0/1"},
        "specFingerprint": "abc",
        "endpoint": "svc:8000",
        "revisions": [],
    }


def test_unknown_fingerprint_and_endpoint_are_left_out_and_absent_pools_count_zero() -> None:
    wire = status.compute(Observation(1, ACCEPTED, {}, None, None), None, "T1").to_wire()
    assert "specFingerprint" not in wire and "endpoint" not in wire
    assert wire["decode"] == {
        "replicas": 0,
        "readyReplicas": 0,
        "updatedReplicas": 0,
        "availableReplicas": 0,
        "ready": "0/0",
    }


def test_a_pool_behind_its_generation_is_progressing_not_ready() -> None:
    ready = _deployment(1, 1)
    rolling = _deployment(2, 2, generation=2, observed=1)
    conditions = _by_type(status.compute(_observe(prefill=ready, decode=rolling, router=ready), None, "T1"))
    assert conditions["Ready"].status == "False"
    assert conditions["Progressing"].status == "True"
    assert "decode" in str(conditions["Progressing"].message)


def test_violations_make_spec_inconsistent_with_the_rule_message() -> None:
    rejection = Rejection((Problem("spec-topk-match", "decode.speculative.eagleTopk", "differs"),))
    conditions = _by_type(status.compute(Observation(3, rejection, {}, None, None), None, "T1"))
    assert conditions["SpecConfigConsistent"].status == "False"
    assert conditions["SpecConfigConsistent"].reason == "RuleViolated"
    assert conditions["SpecConfigConsistent"].message == "[spec-topk-match] decode.speculative.eagleTopk: differs"
    assert conditions["Ready"].reason == "InvalidSpec"
    assert conditions["Progressing"].reason == "InvalidSpec"


def test_stuck_rollout_is_degraded() -> None:
    stuck = _deployment(
        1, 0, conditions=[{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    )
    ready = _deployment(1, 1)
    conditions = _by_type(status.compute(_observe(prefill=stuck, decode=ready, router=ready), None, "T1"))
    assert conditions["Degraded"].status == "True"
    assert conditions["Degraded"].reason == "RolloutStuck"
    assert conditions["Degraded"].message == "prefill: progress deadline exceeded"


def test_apply_error_is_degraded_and_not_ready() -> None:
    ready = _deployment(1, 1)
    observation = Observation(3, ACCEPTED, {"prefill": ready, "decode": ready, "router": ready}, "a", "e", "HTTP 500")
    conditions = _by_type(status.compute(observation, None, "T1"))
    assert (conditions["Degraded"].status, conditions["Degraded"].reason) == ("True", "ApplyFailed")
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("False", "ApplyFailed")


def test_a_refused_child_is_degraded_not_ready_and_not_progressing() -> None:
    ready = _deployment(1, 1)
    message = "the API server refuses Deployment x-prefill: exceeded quota: q; nothing was applied"
    deployments = {"prefill": ready, "decode": ready, "router": ready}
    conditions = _by_type(status.compute(Observation(3, ACCEPTED, deployments, "a", "e", refused=message), None, "T"))
    assert (conditions["Degraded"].status, conditions["Degraded"].reason) == ("True", "ChildRefused")
    assert conditions["Degraded"].message == message
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("False", "ChildRefused")
    assert (conditions["Progressing"].status, conditions["Progressing"].reason) == ("False", "ChildRefused")
    assert conditions["SpecConfigConsistent"].status == "True"  # the spec passed the rules; the namespace says no


def test_a_render_failure_is_an_inconsistent_spec_that_changes_nothing() -> None:
    message = "rendering the children failed: KeyError: 'x'; this is a bug in the operator, please report it"
    conditions = _by_type(status.compute(Observation(3, ACCEPTED, {}, None, None, render_error=message), None, "T"))
    consistent = conditions["SpecConfigConsistent"]
    assert (consistent.status, consistent.reason, consistent.message) == ("False", "RenderFailed", message)
    assert (conditions["Ready"].reason, conditions["Progressing"].reason) == ("RenderFailed", "RenderFailed")
    assert conditions["Degraded"].status == "False"


_RUNTIME_TYPES = ("SpecDecodeHealthy", "TransferHealthy")


def test_runtime_health_conditions_come_straight_from_the_verdict() -> None:
    verdict = Verdict(
        Judgement(r.SPEC_DECODE_LOW_ACCEPT, "mean accept length 1.00 < 1.1 over the last 60s: d-1 1.00 (90 steps)"),
        Judgement(r.TRANSFER_OK, "0 bootstrap/transfer failures for 30 requests in the last 60s (0.00/s)"),
        1.0,
        0.0,
    )
    conditions = _by_type(status.compute(Observation(7, ACCEPTED, {}, None, None, runtime=verdict), None, "T"))
    spec = conditions["SpecDecodeHealthy"]
    assert (spec.status, spec.reason, spec.observed_generation) == ("False", "LowAcceptLength", 7)
    assert spec.message == verdict.spec_decode.message
    assert (conditions["TransferHealthy"].status, conditions["TransferHealthy"].reason) == (
        "True",
        "NoTransferFailures",
    )
    # Ready is about serving only: a runtime-health verdict never changes it.
    assert conditions["Ready"].reason == "RolloutInProgress"


_JOB = "svc-cache-0123456789"
_CACHE_STATES: dict[str, status.ModelCacheObservation] = {
    "absent": status.ModelCacheObservation(_JOB, None),
    "active": status.ModelCacheObservation(_JOB, {"status": {"active": 1, "failed": 1}}),
    "succeeded": status.ModelCacheObservation(
        _JOB,
        {
            "status": {
                "succeeded": 1,
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True"},
                    {"type": "Complete", "status": "True"},
                ],
            }
        },
    ),
    "failed": status.ModelCacheObservation(
        _JOB,
        {
            "status": {
                "failed": 5,
                "conditions": [
                    {"type": "FailureTarget", "status": "True"},
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit",
                    },
                ],
            }
        },
    ),
    "node-local": status.ModelCacheObservation(None),
}


def _cached(state: str, **deployments: dict[str, Any] | None) -> Condition:
    observation = Observation(3, ACCEPTED, deployments, "abc", "svc", model_cache=_CACHE_STATES[state])
    return _by_type(status.compute(observation, None, "T1"))["ModelCached"]


def test_model_cached_follows_the_fill_job() -> None:
    absent, active = _cached("absent"), _cached("active")
    assert (absent.status, absent.reason) == ("False", r.MODEL_CACHED_FILLING.reason)
    assert (active.status, active.reason) == ("False", r.MODEL_CACHED_FILLING.reason)
    assert active.message == f"Job {_JOB} is downloading (1 active, 1 failed attempt(s))"
    done = _cached("succeeded")
    assert (done.status, done.reason) == ("True", r.MODEL_CACHED_FILLED.reason)
    failed = _cached("failed")
    assert (failed.status, failed.reason) == ("False", r.MODEL_CACHED_FILL_FAILED.reason)
    assert failed.message == f"Job {_JOB} failed: BackoffLimitExceeded: Job has reached the specified backoff limit"
    local = _cached("node-local")
    assert (local.status, local.reason) == ("Unknown", r.MODEL_CACHED_NODE_LOCAL.reason)


def test_no_model_cache_no_condition() -> None:
    ready = _deployment(1, 1)
    result = status.compute(_observe(prefill=ready, decode=ready, router=ready), None, "T1")
    assert "ModelCached" not in _by_type(result)


def test_a_deadline_passed_while_the_cache_fills_is_not_a_stuck_rollout() -> None:
    late = _deployment(
        1, 0, conditions=[{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    )
    ready = _deployment(1, 1)
    for state, reason in (("active", r.DEGRADED_AS_EXPECTED), ("failed", r.DEGRADED_ROLLOUT_STUCK)):
        cache = _CACHE_STATES[state]
        observation = Observation(
            3, ACCEPTED, {"prefill": late, "decode": ready, "router": ready}, "a", "s", model_cache=cache
        )
        assert _by_type(status.compute(observation, None, "T1"))["Degraded"].reason == reason.reason


def test_every_reason_set_is_in_the_vocabulary() -> None:
    ready = _deployment(1, 1)
    stuck = _deployment(1, 0, conditions=[{"type": "ReplicaFailure", "status": "True", "message": "quota"}])
    rejection = Rejection((Problem("r", "f", "m"),))
    observations = [
        _observe(prefill=ready, decode=ready, router=ready),
        _observe(prefill=stuck, decode=ready, router=ready),
        Observation(3, rejection, {}, None, None),
        Observation(3, ACCEPTED, {"prefill": ready, "decode": ready, "router": ready}, None, None, "boom"),
        Observation(3, ACCEPTED, {}, None, None, "boom"),
        Observation(3, ACCEPTED, {}, None, None, None, "kube-system"),
        Observation(3, ACCEPTED, {}, None, None, refused="the API server refuses Deployment x: ..."),
        Observation(3, ACCEPTED, {}, None, None, missing_api="spec.prefill.nodesPerInstance is 2: ..."),
        Observation(3, ACCEPTED, {}, None, None, render_error="rendering the children failed: ..."),
        Observation(3, ACCEPTED, {}, None, None, held="revision 0123abcd has had no pod become ready for 900s"),
        *(Observation(3, ACCEPTED, {}, None, None, model_cache=cache) for cache in _CACHE_STATES.values()),
    ]
    runtime = [reason for reason in r.CONDITION_REASONS if reason.condition in _RUNTIME_TYPES]
    spec_decode = [reason for reason in runtime if reason.condition == "SpecDecodeHealthy"]
    transfer = [reason for reason in runtime if reason.condition == "TransferHealthy"]
    for one, other in itertools.zip_longest(spec_decode, transfer, fillvalue=transfer[0]):
        verdict = Verdict(Judgement(one, "m"), Judgement(other, "m"), None, None)
        observations.append(Observation(3, ACCEPTED, {}, None, None, runtime=verdict))
    known = {(v.condition, v.status, v.reason) for v in r.CONDITION_REASONS}
    seen = {(cond.type, cond.status, cond.reason) for o in observations for cond in status.conditions(o)}
    assert seen <= known
    assert seen == known  # and every documented reason is reachable


def test_transition_time_is_kept_unless_the_status_flips() -> None:
    ready = _deployment(1, 1)
    first = status.compute(_observe(prefill=ready, decode=ready, router=ready), None, "T1")
    written = status.parse_previous(first.to_wire())
    again = status.compute(_observe(prefill=ready, decode=ready, router=ready), written, "T2")
    assert again == first
    assert not status.changed(again, written)
    flipped = status.compute(_observe(prefill=_deployment(1, 0), decode=ready, router=ready), written, "T3")
    assert _by_type(flipped)["Ready"].last_transition_time == "T3"
    assert _by_type(flipped)["SpecConfigConsistent"].last_transition_time == "T1"
    assert status.changed(flipped, written)
    assert status.changed(first, None)


def test_changed_ignores_fields_only_the_server_holds() -> None:
    ready = _deployment(1, 1)
    first = status.compute(_observe(prefill=ready, decode=ready, router=ready), None, "T1")
    held = {**first.to_wire(), "fromANewerOperator": 1}
    assert not status.changed(first, status.parse_previous(held))


def test_a_previous_status_that_cannot_be_read_is_written_afresh() -> None:
    """A status edited by hand into something the model refuses reads as no status: the pass writes it whole."""
    ready = _deployment(1, 1)
    first = status.compute(_observe(prefill=ready, decode=ready, router=ready), None, "T1")
    broken = {**first.to_wire(), "observedGeneration": "not a number"}
    assert status.parse_previous(broken) is None
    assert status.parse_previous({}) is None and status.parse_previous(None) is None
    assert status.changed(first, status.parse_previous(broken))


def _revision(name: str, traffic: RevisionTraffic, prefill: int, decode: int, router: int) -> RevisionStatus:
    def pool(ready: int) -> RevisionPoolStatus:
        return RevisionPoolStatus(replicas=ready, ready_replicas=ready)

    return RevisionStatus(
        fingerprint=name * 2,
        name=name,
        traffic=traffic,
        serving=router > 0,
        prefill=pool(prefill),
        decode=pool(decode),
        router=pool(router),
    )


def test_during_a_rollout_the_pools_count_every_revision_against_the_spec_s_replicas() -> None:
    # The new revision has one of two prefill pods ready; the old one still serves with two.
    current = {
        "prefill": _deployment(1, 1),
        "decode": _deployment(2, 2),
        "router": _deployment(1, 1),
    }
    revisions = (_revision("0123abcd", "Rolling", 1, 2, 1), _revision("4567cdef", "Draining", 2, 0, 1))
    observation = Observation(
        3,
        ACCEPTED,
        current,
        "0123abcd0123abcd",
        "svc:8000",
        revisions=revisions,
        draining=("4567cdef",),
        desired={"prefill": 2, "decode": 2, "router": 1},
    )
    result = status.compute(observation, None, "T1")
    # ready and available add the older revisions' ready pods; updated counts the current revision's only.
    assert result.prefill.model_dump() == {
        "replicas": 2,
        "ready_replicas": 3,
        "updated_replicas": 1,
        "available_replicas": 3,
        "ready": "3/2",
    }
    assert (result.decode.ready, result.router.ready) == ("2/2", "2/1")
    assert [revision.name for revision in result.revisions] == ["0123abcd", "4567cdef"]
    # The new prefill Deployment is at 1 of the spec's 2, and the old revision is still there: the rollout goes on.
    conditions = _by_type(result)
    assert (conditions["Progressing"].status, conditions["Progressing"].reason) == ("True", "RollingOut")
    assert conditions["Progressing"].message == "waiting for prefill, revision 4567cdef to drain"
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("False", "RolloutInProgress")


def test_a_held_rollout_is_not_progressing_and_says_why() -> None:
    ready = _deployment(1, 1)
    held = "revision 0123abcd has had no pod become ready for 900s (spec.rollout.progressDeadlineSeconds 900): ..."
    observation = Observation(
        3, ACCEPTED, {"prefill": ready, "decode": ready, "router": ready}, "a", "e", held=held, draining=("4567cdef",)
    )
    conditions = _by_type(status.compute(observation, None, "T1"))
    progressing = conditions["Progressing"]
    assert (progressing.status, progressing.reason, progressing.message) == ("False", "RolloutHeld", held)
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("False", "RolloutInProgress")
    assert conditions["Degraded"].status == "False"
