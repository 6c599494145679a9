"""status.compute: conditions from the live Deployments and the rule table, stable across resyncs."""

from __future__ import annotations

from typing import Any

from disaggspec import status
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


def _by_type(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {cond["type"]: cond for cond in result["conditions"]}


def _observe(**deployments: dict[str, Any] | None) -> Observation:
    return Observation(generation=3, violations=(), deployments=deployments, fingerprint="abc", endpoint="svc:8000")


def test_all_rolled_out_is_ready() -> None:
    ready = _deployment(1, 1)
    result = status.compute(_observe(prefill=ready, decode=ready, router=ready), None, "T1")
    conditions = _by_type(result)
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Progressing"]["status"] == "False"
    assert conditions["Degraded"]["status"] == "False"
    assert conditions["SpecConfigConsistent"]["status"] == "True"
    assert result["observedGeneration"] == 3
    assert result["prefill"] == {
        "replicas": 1,
        "readyReplicas": 1,
        "updatedReplicas": 1,
        "availableReplicas": 1,
        "ready": "1/1",
    }
    assert result["specFingerprint"] == "abc"


def test_a_pool_behind_its_generation_is_progressing_not_ready() -> None:
    ready = _deployment(1, 1)
    rolling = _deployment(2, 2, generation=2, observed=1)
    conditions = _by_type(status.compute(_observe(prefill=ready, decode=rolling, router=ready), None, "T1"))
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Progressing"]["status"] == "True"
    assert "decode" in conditions["Progressing"]["message"]


def test_violations_make_spec_inconsistent_with_the_rule_message() -> None:
    observation = Observation(3, [("spec-topk-match", "decode.speculative.eagleTopk differs")], {}, None, None)
    conditions = _by_type(status.compute(observation, None, "T1"))
    assert conditions["SpecConfigConsistent"]["status"] == "False"
    assert conditions["SpecConfigConsistent"]["reason"] == "RuleViolated"
    assert "[spec-topk-match] decode.speculative.eagleTopk differs" in conditions["SpecConfigConsistent"]["message"]
    assert conditions["Ready"]["reason"] == "InvalidSpec"


def test_stuck_rollout_is_degraded() -> None:
    stuck = _deployment(
        1, 0, conditions=[{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    )
    ready = _deployment(1, 1)
    conditions = _by_type(status.compute(_observe(prefill=stuck, decode=ready, router=ready), None, "T1"))
    assert conditions["Degraded"]["status"] == "True"
    assert conditions["Degraded"]["reason"] == "RolloutStuck"


def test_transition_time_is_kept_unless_the_status_flips() -> None:
    ready = _deployment(1, 1)
    first = status.compute(_observe(prefill=ready, decode=ready, router=ready), None, "T1")
    again = status.compute(_observe(prefill=ready, decode=ready, router=ready), first, "T2")
    assert again == first
    assert not status.changed(again, first)
    flipped = status.compute(_observe(prefill=_deployment(1, 0), decode=ready, router=ready), first, "T3")
    assert _by_type(flipped)["Ready"]["lastTransitionTime"] == "T3"
    assert _by_type(flipped)["SpecConfigConsistent"]["lastTransitionTime"] == "T1"
    assert status.changed(flipped, first)
