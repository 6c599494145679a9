"""The pure parts of e2e.perf.bench_autoscale: the day's shape (6x swing, 3x burst), pool sizing, GPU-seconds
integration, SLA attainment and its windows, the sampler's tally; no cluster."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from typing import Any

import pytest

from disaggspec.api import parse_service
from disaggspec.validation import validate
from e2e.perf.bench_autoscale import (
    PROFILES_BY_NAME,
    Burst,
    ClusterSampler,
    Settings,
    attainment,
    attainment_windows,
    burst_recovery,
    burst_table,
    day_curve,
    failure_reasons,
    gpu_seconds,
    header,
    highest_rate,
    ideal_share,
    reactive_ceiling,
    saved_header,
    scaling_events,
    servers_for,
    service_object,
    sizes,
    step_integral,
    time_weighted_mean,
)
from e2e.perf.bench_capacity import Prediction, Ratio
from e2e.serving.load.arrivals import Steps, mean_rate, poisson_arrivals
from e2e.serving.load.client import Result
from e2e.serving.load.sla import Sla


def test_the_day_swings_six_times_and_bursts_three_times() -> None:
    curve = day_curve(120.0, 720.0, swing=6.0, burst_factor=3.0, burst_hour=6.0, burst_seconds=60.0)
    base = curve.base
    hourly = [base.rate(h * 30.0) for h in range(24)]  # 720 s / 24 h: one hour every 30 s
    assert max(hourly) == pytest.approx(120.0)  # the peak at 14:00
    assert hourly.index(max(hourly)) == 14 and hourly.index(min(hourly)) == 2
    assert max(hourly) / min(hourly) == pytest.approx(6.0)
    # the burst: at 06:00 the rate jumps to three times what it was and holds for its minute, then falls back
    assert curve.start == pytest.approx(180.0)
    before = base.rate(180.0)
    assert curve.rate(179.9) == pytest.approx(before, rel=1e-3)
    for t in (180.0, 200.0, 239.9):
        assert curve.rate(t) == pytest.approx(3.0 * before)
    for t in (240.0, 500.0):
        assert curve.rate(t) == pytest.approx(base.rate(t))
    assert highest_rate(curve) == pytest.approx(3 * before) == pytest.approx(1.125 * 120.0)  # 3 x 0.375 of the peak
    assert curve.peak() >= highest_rate(curve)
    # the schedule follows the curve: the burst's minute gets three times the arrivals the base curve gives it
    arrivals = [a.at for a in poisson_arrivals(curve, 0, 100_000)]
    during = sum(180 <= t < 240 for t in arrivals)
    assert during == pytest.approx(3 * before * 60, rel=0.05)
    assert mean_rate(curve) > mean_rate(base)


def test_a_burst_never_lowers_a_rising_curve() -> None:
    curve = day_curve(10.0, 240.0, swing=6.0, burst_factor=1.2, burst_hour=8.0, burst_seconds=60.0)
    assert all(curve.rate(t) >= curve.base.rate(t) for t in range(240))
    assert curve.rate(139.0) == pytest.approx(curve.base.rate(139.0))  # the base rose past 1.2 x its 08:00 rate


def test_no_burst_is_the_daily_curve() -> None:
    curve = day_curve(60.0, 240.0, swing=6.0, burst_factor=3.0, burst_hour=6.0, burst_seconds=0.0)
    assert all(curve.rate(t) == curve.base.rate(t) for t in range(240))
    with pytest.raises(ValueError):
        day_curve(60.0, 240.0, swing=0.5, burst_factor=3.0, burst_hour=6.0, burst_seconds=10.0)


def test_each_pool_is_sized_for_its_own_demand() -> None:
    assert servers_for(100.0, 30.0, 1.0) == 4
    assert servers_for(90.0, 30.0, 1.0) == 3  # exactly full
    assert servers_for(90.0, 30.0, 0.9) == 4
    assert servers_for(0.0, 30.0, 0.9) == 1  # never fewer than one
    prediction = Prediction(prefill_rps=30.0, decode_rps=94.0, system_rps=30.0, bound="prefill", servers={})
    assert sizes(100.0, prediction, 0.9) == Ratio(4, 2)
    with pytest.raises(ValueError):
        servers_for(10.0, 0.0, 0.9)


HALVES = Steps(((50.0, 10.0), (50.0, 40.0)))
"""10 req/s for 50 s, then 40 for 50 s."""


def test_the_ideal_tracker_holds_what_the_rate_needs_at_each_instant() -> None:
    # One prefill server serves 10 req/s and one decode server 40 (at utilization 1): static-peak holds 4 + 1 pods
    # (one GPU each, decode 8 GPUs in the second case); the tracker 1 + 1 for the first half, 4 + 1 for the second.
    prediction = Prediction(prefill_rps=10.0, decode_rps=40.0, system_rps=10.0, bound="prefill", servers={})
    assert ideal_share(HALVES, prediction, 1.0, Ratio(1, 1), samples=1000) == pytest.approx((2 * 50 + 5 * 50) / 500)
    assert ideal_share(HALVES, prediction, 1.0, Ratio(1, 8), samples=1000) == pytest.approx(
        (9 * 50 + 12 * 50) / (12 * 100)
    )
    # The compressed day at a 6x swing: the tracker holds well under static-peak, never more.
    day = day_curve(30.0, 240.0, 6.0, 3.0, 6.0, 24.0)
    share = ideal_share(day, Prediction(7.0, 60.0, 7.0, "prefill", {}), 0.9, Ratio(1, 1))
    assert 0.3 < share < 1.0


def test_a_stabilization_window_holds_the_ideal_tracker_at_the_most_it_needed_within_it() -> None:
    # 10 req/s then 40 then 10 (30 s each); one server per 10 req/s: the tracker holds 1, 4, 1 prefill servers and
    # 1 decode (40/s each). With a 15 s window the 4 servers stay 15 s into the last third: 15 x 3 GPU-s more.
    prediction = Prediction(prefill_rps=10.0, decode_rps=40.0, system_rps=10.0, bound="prefill", servers={})
    curve = Steps(((30.0, 10.0), (30.0, 40.0), (30.0, 10.0)))
    static = (4 + 1) * 90
    ideal = (1 + 1) * 60 + (4 + 1) * 30
    assert ideal_share(curve, prediction, 1.0, Ratio(1, 1), samples=900) == pytest.approx(ideal / static)
    held = ideal_share(curve, prediction, 1.0, Ratio(1, 1), samples=900, stabilization=15.0)
    assert held == pytest.approx((ideal + 15 * 3) / static, abs=0.01)
    # A window longer than the day holds the peak from when it is first needed: static-peak from then on.
    assert ideal_share(curve, prediction, 1.0, Ratio(1, 1), samples=900, stabilization=1000.0) == pytest.approx(
        (2 * 30 + 5 * 60) / static
    )
    # On the compressed day a longer window never holds less.
    day = day_curve(30.0, 240.0, 6.0, 3.0, 6.0, 24.0)
    model = Prediction(6.5, 12.2, 6.5, "prefill", {})
    shares = [ideal_share(day, model, 0.9, Ratio(8, 8), stabilization=w) for w in (0.0, 10.0, 30.0)]
    assert shares == sorted(shares) and shares[0] < shares[-1]


def test_the_reactive_ceiling_counts_who_waits_past_the_ttft_before_the_burst_s_servers_are_up() -> None:
    # 10 req/s, then a burst to 30 req/s for 20 s at 50 s; one prefill server serves 10 req/s: at the burst the
    # trough-sized pool (1 server) falls behind by 20 req/s. A request arriving t s into the burst waits 2t s (a
    # backlog of 20t at 10/s) or until the new servers are up, whichever is sooner: with a 10 s load and a 2 s TTFT
    # those arriving between 1 s and 8 s miss: 7 s x 30 req/s of the day's 100 x 10 + 20 x 20 = 1,400 arrivals.
    prediction = Prediction(prefill_rps=10.0, decode_rps=100.0, system_rps=10.0, bound="prefill", servers={})
    burst = Burst(Steps(((100.0, 10.0),)), 50.0, 20.0, 3.0)
    assert reactive_ceiling(burst, prediction, 1.0, 10.0, 2.0) == pytest.approx(1 - 7 * 30 / 1400, abs=1e-3)
    # No load time, or no burst: nothing is missed; a longer load misses more.
    assert reactive_ceiling(burst, prediction, 1.0, 0.0, 2.0) == 1.0
    assert reactive_ceiling(Burst(burst.base, 50.0, 0.0, 3.0), prediction, 1.0, 10.0, 2.0) == 1.0
    assert reactive_ceiling(burst, prediction, 1.0, 15.0, 2.0) < reactive_ceiling(burst, prediction, 1.0, 10.0, 2.0)
    # A pool sized with headroom at the trough (utilization 0.5: 2 servers, 20 req/s) falls behind by 10 req/s only.
    assert reactive_ceiling(burst, prediction, 0.5, 10.0, 2.0) == pytest.approx(1 - 4 * 30 / 1400, abs=1e-3)


def test_gpu_seconds_integrate_a_step_function() -> None:
    samples = [(0.0, 2), (10.0, 4), (15.0, 3)]
    assert gpu_seconds(samples, 0.0, 20.0) == pytest.approx(2 * 10 + 4 * 5 + 3 * 5)
    # a window inside the samples, and one starting before the first sample (its value already held)
    assert gpu_seconds(samples, 12.0, 16.0) == pytest.approx(4 * 3 + 3 * 1)
    assert gpu_seconds([(5.0, 8)], 0.0, 10.0) == pytest.approx(80.0)
    # unsorted samples, samples after the window, an empty window
    assert gpu_seconds([(15.0, 3), (0.0, 2), (30.0, 100), (10.0, 4)], 0.0, 20.0) == pytest.approx(55.0)
    assert gpu_seconds(samples, 5.0, 5.0) == 0.0 and gpu_seconds([], 0.0, 10.0) == 0.0
    assert step_integral([(0.0, 1.0), (1.0, 3.0)], 0.0, 2.0) == pytest.approx(4.0)
    assert time_weighted_mean([(0.0, 1.0), (1.0, 3.0)], 0.0, 2.0) == pytest.approx(2.0)
    assert time_weighted_mean([], 0.0, 2.0) is None


def _result(index: int, at: float, ttft: float | None, itl: float | None, kind: str = "ok") -> Result:
    return Result(
        index, scheduled=at, prompt_tokens=10, output_tokens_asked=4, kind=kind, sent=at, status=200,
        output_tokens=4, ttft=ttft, itl=itl, e2e=(ttft or 0) + 3 * (itl or 0),
    )  # fmt: skip


def test_attainment_counts_failures_and_both_targets() -> None:
    sla = Sla(ttft_ms=2000, itl_ms=100)
    results = [
        _result(0, 0.5, 0.1, 0.05),  # met
        _result(1, 1.5, 2.5, 0.05),  # TTFT missed
        _result(2, 2.5, 0.1, 0.2),  # ITL missed
        _result(3, 3.5, None, None, kind="http"),  # failed
        _result(4, 4.5, 1.9, 0.099),  # met
    ]
    assert attainment(results, sla) == pytest.approx(0.4)
    assert attainment([], sla) is None
    windows = attainment_windows(results, sla, window=2.0, horizon=6.0)
    assert [w["requests"] for w in windows] == [2, 2, 1]
    assert [w["attainment"] for w in windows] == [0.5, 0.0, 1.0]
    assert [w["offered_rps"] for w in windows] == [1.0, 1.0, 0.5]
    assert [w["failed"] for w in windows] == [0, 1, 0]
    empty = attainment_windows(results[:1], sla, window=2.0, horizon=6.0)
    assert empty[1]["attainment"] is None and math.isclose(empty[0]["attainment"], 1.0)


def test_failure_reasons_group_aborts_by_cause_without_request_ids() -> None:
    def aborted(index: int, rid: str, cause: str) -> Result:
        error = f"500: Decode transfer failed for request rank=0 decode_req.req.rid='{rid}' with exception {cause}"
        return dataclasses.replace(_result(index, 1.0, None, None, kind="aborted"), error=error)

    results = [
        aborted(0, "a1", "KVTransferError(bootstrap_room=1): Losing connection with prefill instance"),
        aborted(1, "b2", "KVTransferError(bootstrap_room=1): Losing connection with prefill instance"),
        aborted(2, "c3", "KVTransferError(bootstrap_room=2): Aborted by AbortReq."),
        dataclasses.replace(_result(3, 1.0, None, None, kind="http"), error="502: Bad Gateway"),
        _result(4, 1.0, 0.1, 0.05),
    ]
    reasons = failure_reasons(results)
    assert reasons == {
        "aborted: KVTransferError(bootstrap_room=1): Losing connection with prefill instance": 2,
        "aborted: KVTransferError(bootstrap_room=2): Aborted by AbortReq.": 1,
        "http: 502: Bad Gateway": 1,
    }


def test_scaling_events_in_emulated_seconds_oldest_first() -> None:
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).timestamp()
    events = [
        {"reason": "PoolScaled", "lastTimestamp": "2026-01-01T00:00:16Z", "message": "decode 1 -> 2"},
        {"reason": "Scheduled", "lastTimestamp": "2026-01-01T00:00:01Z", "message": "not a scaling"},
        {"reason": "SuccessfulRescale", "eventTime": "2026-01-01T00:00:08.000000Z", "message": "New size: 3"},
        {"reason": "PoolScaled", "message": "no time: left out"},
    ]
    assert scaling_events(events, start, 8.0) == [
        [1.0, "SuccessfulRescale", "New size: 3"],
        [2.0, "PoolScaled", "decode 1 -> 2"],
    ]


def _pod(
    ns: str, role: str, gpus: int, *, node: bool = True, phase: str = "Running", ready: bool = True
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "labels": {"disaggspec.io/role": role}, "uid": f"{ns}-{role}-{gpus}"},
        "spec": {
            "nodeName": "n0" if node else None,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_the_sampler_counts_gpus_held_and_ready_servers() -> None:
    pods = [
        _pod("a", "prefill", 8),
        _pod("a", "decode", 8, ready=False),  # loading: holds its GPUs, not ready
        _pod("a", "decode", 8, node=False, phase="Pending", ready=False),  # unscheduled: holds nothing
        _pod("b", "decode", 1, phase="Succeeded", ready=False),  # gone
        _pod("b", "prefill", 1),
    ]
    sample = ClusterSampler.tally(12.0, pods)
    assert sample.gpus == {"a": 16, "b": 1}
    assert sample.pods == {"a": {"prefill": 1, "decode": 1}, "b": {"prefill": 1}}
    assert sample.ready == {"a": {"prefill": 1}, "b": {"prefill": 1}}


def _windows(attained: list[float | None], requests: int = 10) -> list[dict[str, Any]]:
    return [
        {"start_s": 5.0 * i, "requests": 0 if a is None else requests, "attainment": a} for i, a in enumerate(attained)
    ]


def test_burst_recovery_says_when_the_sla_was_met_again_and_how_the_rest_of_the_day_went() -> None:
    # The burst starts at 12 s (inside the window at 10 s); windows of 5 s.
    dipped = _windows([1.0, 0.9, 0.2, 0.0, 0.5, 0.96, 0.4, 1.0, 1.0, None, 1.0, 0.8])
    found = burst_recovery(dipped, (12.0, 20.0))
    # 25 s (0.96) is followed by a miss: three windows in a row meet the SLA from 35 s on (the empty one counts).
    assert found.after_s == pytest.approx(35.0 - 12.0)
    # Outside [10, 35): windows 0, 1 (before) and 7, 8, 10, 11 (after; 9 has no request).
    assert found.outside == pytest.approx((1.0 + 0.9 + 1.0 + 1.0 + 1.0 + 0.8) / 6)
    steady = burst_recovery(_windows([1.0, 1.0, 1.0, 1.0, 0.99]), (12.0, 20.0))
    assert steady.after_s == 0.0 and steady.outside == pytest.approx(0.998)
    never = burst_recovery(_windows([1.0, 1.0, 0.1, 0.1, 0.99, 0.1]), (12.0, 20.0))
    assert never.after_s is None and never.outside is None
    assert burst_recovery(_windows([1.0]), (0.0, 1.0)).after_s is None
    rows: list[dict[str, Any]] = [
        {"profile": "p", "arm": "planner", "windows": dipped, "burst_emulated_s": [12.0, 20.0]},
        {"profile": "p", "arm": "hpa", "windows": _windows([1.0, 1.0, 0.1, 0.1]), "burst_emulated_s": [12.0, 20.0]},
        {"profile": "p", "arm": "hpa", "skipped": "no metrics pipeline"},
    ]
    assert burst_table(rows)[2:] == ["| p | planner | 23 | 95.0% |", "| p | hpa | never (within the day) | - |"]


def test_a_saved_run_s_header_is_made_again_from_its_settings() -> None:
    settings = _settings()
    profile = dataclasses.replace(PROFILES_BY_NAME["llama-eagle3"], peak_rps=30.0)
    expected = header(settings, "per-profile", [profile])
    saved = json.loads(json.dumps({
        "settings": dataclasses.asdict(settings), "schedule": "per-profile",
        "profiles": [{"name": "llama-eagle3", "peak_rps": 30.0}],
    }))  # fmt: skip
    assert saved_header(saved) == expected
    assert "drops to 1.2" in expected and "llama-eagle3 peak 30 req/s" in expected
    assert saved_header({**saved, "head": "as saved"}) == "as saved"


@pytest.mark.parametrize("profile_name", ["llama-eagle3", "deepseek-mtp"])
def test_a_router_policy_reaches_every_arm_and_passes_the_operator_s_rules(profile_name: str) -> None:
    settings = dataclasses.replace(_settings(), router_policy="power_of_two")
    profile = PROFILES_BY_NAME[profile_name]
    for arm in ("static-peak", "hpa", "planner"):
        obj = service_object(profile, arm, Ratio(2, 1), settings)
        assert obj["spec"]["router"]["policy"] == "power_of_two"
        assert validate(parse_service(obj)) == []
    kept = service_object(profile, "planner", Ratio(2, 1), _settings())
    assert kept["spec"]["router"]["policy"] == "round_robin"  # the example's own
    assert "policy power_of_two" in header(settings, "per-profile", [profile])
    assert "policy" not in header(_settings(), "per-profile", [profile])


def _settings() -> Settings:
    return Settings(
        day_seconds=240.0, swing=6.0, burst_factor=3.0, burst_hour=6.0, burst_seconds=24.0, prompt=8192, output=256,
        time_scale=8.0, utilization=0.9, max_replicas=14, model_load=10.0, lead=15.0, stabilization=30.0,
        accept_drop=(0.45, 1.2), hpa_prefill_metric="q", hpa_prefill_rate_metric="r", hpa_decode_metric="d",
        hpa_prefill_queue=None, hpa_decode_running=None, timeout=120.0, seed=0, ready_timeout=600.0,
    )  # fmt: skip
