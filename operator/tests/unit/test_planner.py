"""The SLA planner's decision core (`disaggspec.autoscale`) and the load signals it reads from `/metrics`.

Windows are synthetic: each pod's scrapes every 15 s over 300 s (the health monitor's defaults), built from rates and
gauges the way SGLang's counters and scheduler gauges would show them. A prefill server serves prompt tokens at a
fixed rate when saturated; a decode server's step time is `A + B x running`, and it generates `running x accept
length` tokens per step (`gen_throughput`), as the capacity-faithful emulator models them.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from disaggspec.autoscale import capacity, signals
from disaggspec.autoscale.planner import (
    Decision,
    PlannerSettings,
    PlannerState,
    PoolLimits,
    PoolWindow,
    ServiceWindow,
    decide,
)
from disaggspec.servinghealth import samples
from disaggspec.servinghealth.samples import PodSample, parse

RECORDED = Path(__file__).parent / "recorded"
STEP, WINDOW = 15.0, 300.0
A, B = 0.01, 0.0002
"""Decode step seconds = A + B x running (per server)."""

Value = float | Callable[[float], float]


def _at(value: Value, t: float) -> float:
    return value(t) if callable(value) else value


def pod(
    now: float,
    *,
    prompt: Value = 0.0,
    requests: Value = 0.0,
    queued: Value = 0.0,
    running: Value = 0.0,
    accept: Value | None = None,
    usage: Value | None = None,
    pd: Value = 0.0,
    transferring: Value = 0.0,
    throughput: bool = True,
    restart_at: float | None = None,
) -> list[tuple[float, PodSample]]:
    """One pod's scrapes over the window ending at `now`: `prompt`/`requests` are rates per second, the rest gauges;
    a decode pod generates running x accept length tokens per step of A + B x running seconds. `restart_at`: the
    server restarted then, its counters starting over from zero."""
    times = [now - WINDOW + STEP * k for k in range(int(WINDOW / STEP) + 1)]
    prompt_total = request_total = generated = 1000.0
    scrapes = []
    for index, t in enumerate(times):
        n = _at(running, t)
        length = _at(accept, t) if accept is not None else 1.0
        rate = n * length / (A + B * n) if n > 0 else 0.0
        if index:
            if restart_at is not None and times[index - 1] < restart_at <= t:
                prompt_total = request_total = generated = 0.0
            prompt_total += _at(prompt, t - STEP / 2) * STEP  # a linear rate's integral over the interval
            request_total += _at(requests, t - STEP / 2) * STEP
            generated += rate * STEP
        sample = PodSample(
            prompt_tokens=prompt_total,
            requests=request_total,
            generation_tokens=generated,
            queued=_at(queued, t),
            running=n,
            pd_queued=_at(pd, t),
            transferring=_at(transferring, t),
            gen_throughput=rate if throughput else None,
            accept_length=_at(accept, t) if accept is not None else None,
            token_usage=_at(usage, t) if usage is not None else None,
        )
        scrapes.append((t, sample))
    return scrapes


def pool(replicas: int, pods: list[list[tuple[float, PodSample]]], ready: int | None = None) -> PoolWindow:
    return PoolWindow(replicas, replicas if ready is None else ready, {f"pod-{i}": p for i, p in enumerate(pods)})


def settings(**changes: object) -> PlannerSettings:
    base = PlannerSettings(
        ttft_seconds=0.5,
        itl_seconds=0.02,
        prefill=PoolLimits(1, 10),
        decode=PoolLimits(1, 10),
        ratio_min=None,
        ratio_max=None,
        lead_seconds=0.0,
        stabilization_seconds=300.0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def prefill_pool(now: float, servers: int, tokens_per_server: Value, queued: Value = 0.0) -> PoolWindow:
    """Prefill servers with 1,000-token prompts."""

    def per_request(t: float) -> float:
        return _at(tokens_per_server, t) / 1000

    return pool(servers, [pod(now, prompt=tokens_per_server, requests=per_request, queued=queued)] * servers)


def decode_pool(now: float, servers: int, running: Value, accept: Value = 2.0, **more: Value) -> PoolWindow:
    """`requests`: requests each server finishes per second (0 unless given: then decode is never sized for what
    prefill hands over, which the tests of that set on purpose)."""
    more.setdefault("requests", 0.0)
    return pool(servers, [pod(now, running=running, accept=accept, **more)] * servers)  # type: ignore[arg-type]


LEARNED = PlannerState(
    prefill_rate=5000.0,
    mean_prompt=1000.0,
    step_samples=tuple((float(n), A + B * n) for n in (10, 20, 40, 80, 120)),
)
"""One prefill server: 5,000 prompt tokens/s; decode steps of A + B x running."""


def run(
    plan: PlannerSettings, state: PlannerState, make: Callable[[float], ServiceWindow], start: float, count: int
) -> tuple[list[Decision], PlannerState]:
    """`count` decisions 15 s apart, each on the window `make(now)`, carrying the state."""
    decisions = []
    for k in range(count):
        decision, state = decide(plan, state, make(start + STEP * k), start + STEP * k)
        decisions.append(decision)
    return decisions, state


# ---- the load signals in /metrics ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.5.2", "0.5.23"])
@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_each_release_s_load_signals_are_read(version: str, role: str) -> None:
    sample = parse((RECORDED / f"sglang-{version}-{role}.prom").read_text())
    assert sample.prompt_tokens == 36  # 0.5.23: the is_streaming series summed
    assert (sample.running, sample.queued, sample.pd_queued) == (0, 0, 0)
    assert (sample.gen_throughput, sample.token_usage) == (0, 0)


def test_load_gauges_sum_dp_groups_skip_priority_breakdowns_and_take_the_fullest_pool() -> None:
    text = "".join(
        [
            'sglang:num_running_reqs{dp_rank="0",priority=""} 7\n',
            'sglang:num_running_reqs{dp_rank="0",priority="1"} 3\n',  # part of the 7 (0.5.23 priority breakdown)
            'sglang:num_running_reqs{dp_rank="0",priority="2"} 4\n',
            'sglang:num_running_reqs{dp_rank="1",priority=""} 5\n',
            'sglang:num_queue_reqs{dp_rank="0"} 2\n',
            'sglang:num_queue_reqs{dp_rank="1"} 1\n',
            "sglang:num_decode_prealloc_queue_reqs 4\n",
            "sglang:num_decode_transfer_queue_reqs 6\n",
            "sglang:num_prefill_inflight_queue_reqs 9\n",  # prefilled already: not a queue for compute
            'sglang:gen_throughput{dp_rank="0"} 100.5\n',
            'sglang:gen_throughput{dp_rank="1"} 50\n',
            'sglang:token_usage{dp_rank="0"} 0.41\n',
            'sglang:token_usage{dp_rank="1"} 0.77\n',
            'sglang:prompt_tokens_total{is_streaming="true"} 10\n',
            'sglang:prompt_tokens_total{is_streaming="false"} 32\n',
        ]
    )
    sample = parse(text)
    assert (sample.running, sample.queued, sample.pd_queued) == (12, 3, 10)
    assert (sample.gen_throughput, sample.token_usage, sample.prompt_tokens) == (150.5, 0.77, 42)
    assert parse("sglang:num_prefill_prealloc_queue_reqs 2\n").pd_queued == 2  # 0.5.2's name of the bootstrap queue
    assert parse("sglang:num_prefill_bootstrap_queue_reqs 3\n").pd_queued == 3  # 0.5.23's
    assert parse("sglang:num_requests_total 1\n").pd_queued is None


def test_every_load_signal_is_a_metric_of_its_release() -> None:
    from e2e.serving.emulator import facts

    kinds = {samples.PROMPT_TOKENS: "counter", samples.GEN_THROUGHPUT: "gauge", samples.TOKEN_USAGE: "gauge"}
    kinds |= dict.fromkeys((samples.RUNNING, samples.QUEUED, samples.TRANSFERRING), "gauge")
    only = {"sglang:num_prefill_prealloc_queue_reqs": "0.5.2", "sglang:num_prefill_bootstrap_queue_reqs": "0.5.23"}
    for version in facts.VERSIONS:
        exported = {m.exposed: m.kind for m in facts.facts_for(version).metrics}
        for name, kind in kinds.items():
            assert exported.get(name) == kind, (version, name)
        for name in samples.PD_QUEUES:
            assert exported.get(name) == ("gauge" if only.get(name, version) == version else None), (version, name)


# ---- signals ---------------------------------------------------------------------------------------------------------


def test_a_restarted_server_s_counters_give_no_negative_rate() -> None:
    now = 1000.0
    restarted = pod(now, prompt=2000.0, requests=2.0, restart_at=now - 100)
    series = {"p": restarted}
    points = signals.rate_points(series, "prompt_tokens")
    assert all(value == pytest.approx(2000.0) for _, value in points)  # the interval of the restart included
    assert signals.rate(series, "prompt_tokens", now - WINDOW, now) == pytest.approx(2000.0)
    window = ServiceWindow(pool(1, [restarted]), decode_pool(now, 1, 0.0), rolling_out=False)
    decision, _ = decide(settings(), LEARNED, window, now)
    assert decision.prefill.inputs["prompt_tokens_per_second"] == pytest.approx(2000.0)
    assert decision.prefill.inputs["requests_per_second"] == pytest.approx(2.0)


def test_a_lagging_running_gauge_counts_nothing_once_no_token_is_generated() -> None:
    now = 1000.0
    scrapes = pod(now, running=lambda t: 30.0 if t <= now - 60 else 0.0, accept=2.0)
    # The scrapes after generation stopped still show the last decode log's batch, as SGLang's gauge lags.
    lagging = [(t, replace(s, running=30.0)) if t > now - 60 else (t, s) for t, s in scrapes]
    points = signals.gauge_points({"d": lagging}, signals.concurrency)
    assert [v for t, v in points if t > now - 60] == [0.0] * 4
    assert [v for t, v in points if t <= now - 60][-1] == 30.0


def test_decode_step_time_is_running_x_accept_length_over_gen_throughput() -> None:
    found = capacity.step_samples({"d": pod(1000.0, running=40.0, accept=3.0)}, after=-math.inf)
    assert found and all(sample == pytest.approx((40.0, A + B * 40)) for sample in found)
    fit = capacity.fit(capacity.remember((), [(n, A + B * n) for n in (5, 10, 40, 80)], 4, 48))
    assert fit is not None and fit.base == pytest.approx(A) and fit.per_request == pytest.approx(B)
    assert fit.holds(0.02, 3.0) == pytest.approx((0.06 - A) / B)


def test_the_step_memory_is_bounded_and_keeps_the_spread_of_batch_sizes() -> None:
    kept: tuple[tuple[float, float], ...] = ((3.0, A + B * 3),)
    for _ in range(200):  # a long steady load at one batch size
        kept = capacity.remember(kept, [(64.0, A + B * 64)], per_bucket=4, limit=48)
    assert len(kept) == 5 and kept[0] == (3.0, A + B * 3)


# ---- decisions -------------------------------------------------------------------------------------------------------


def steady(now: float) -> ServiceWindow:
    """2 prefill servers at 2,500 tokens/s each, 2 decode servers at 100 running each (accept length 2)."""
    return ServiceWindow(prefill_pool(now, 2, 2500.0), decode_pool(now, 2, 100.0), rolling_out=False)


def test_steady_load_under_capacity_changes_nothing() -> None:
    decisions, state = run(settings(), LEARNED, steady, 1000.0, 30)
    for decision in decisions:
        assert (decision.prefill.desired, decision.decode.desired) == (2, 2)
    last = decisions[-1]
    # 5,000 tokens/s over 5,000 x utilisation 0.6 (1 - 0.2 s prefill / 0.5 s TTFT): 2 servers.
    assert last.prefill.inputs["utilisation_target"] == pytest.approx(0.6)
    assert last.prefill.inputs["server_tokens_per_second"] == pytest.approx(5000.0)
    # 200 requests over (0.02 x 2 - A) / B = 150 per server x 0.9: 2 servers.
    assert last.decode.inputs["server_requests"] == pytest.approx(150.0)
    assert last.decode.inputs["accept_length"] == pytest.approx(2.0)
    assert last.message.startswith("prefill 2: 5,000 prompt tokens/s over 2 servers; one server 5,000")
    assert "decode 2: 200 requests over 2 servers at accept length 2.00; one server holds 150.0 at ITL 20 ms" in (
        last.message
    )
    assert state.prefill_rate == pytest.approx(5000.0)


def test_a_persisting_prefill_queue_scales_up_and_teaches_the_server_rate() -> None:
    """2 servers saturated at 5,000 tokens/s each while 6 requests/s each arrive: the queue grows 1 request/s."""
    now = 1000.0

    def growing(t: float) -> float:
        return 3.0 + (t - (now - WINDOW))

    window = ServiceWindow(prefill_pool(now, 2, 5000.0, queued=growing), decode_pool(now, 2, 100.0), False)
    decision, state = decide(settings(prefill=PoolLimits(1, 20)), PlannerState(), window, now)
    assert state.prefill_rate == pytest.approx(5000.0)
    # Arrivals 12,000 tokens/s, plus the 606 requests queued (303 per server) to clear in persist_seconds (30 s):
    # 20,200 tokens/s more; one server 5,000 x 0.6: 11 servers (the arrivals alone would ask 4).
    assert decision.prefill.inputs["prompt_tokens_per_second"] == pytest.approx(12000.0)
    assert decision.prefill.inputs["backlog_prompt_tokens_per_second"] == pytest.approx(606 * 1000 / 30)
    assert decision.prefill.desired == 11 == math.ceil((12000 + 606 * 1000 / 30) / (5000 * 0.6))
    assert decision.message.startswith("prefill 2 -> 11: 12,000 prompt tokens/s + a queue of 606 to clear in 30 s")


def test_the_queue_that_builds_before_new_servers_are_up_is_planned_for() -> None:
    """The same saturated pool with a 60 s lead: the 2,000 tokens/s the 2 ready servers cannot take queue for 60 s
    more before the servers asked now are up, and those servers must clear that too."""
    now = 1000.0

    def growing(t: float) -> float:
        return 3.0 + (t - (now - WINDOW))

    window = ServiceWindow(prefill_pool(now, 2, 5000.0, queued=growing), decode_pool(now, 2, 100.0), False)
    plan = settings(prefill=PoolLimits(1, 20), lead_seconds=60.0)
    decision, _ = decide(plan, replace(LEARNED, mean_prompt=None), window, now)
    inputs = decision.prefill.inputs
    assert inputs["building_prompt_tokens"] == pytest.approx((12000 - 2 * 5000) * 60)
    # Cleared over the lead (60 s): the queue's 606 requests (10,100 tokens/s) and the 120,000 tokens (2,000/s).
    assert decision.prefill.desired == 9 == math.ceil((12000 + 606 * 1000 / 60 + 120000 / 60) / (5000 * 0.6))
    assert "+ 120,000 prompt tokens queueing before new servers are up, to clear in 60 s" in decision.message
    # With every server it asks for ready, nothing more builds.
    served, _ = decide(plan, LEARNED, replace(window, prefill=replace(window.prefill, replicas=3, ready=3)), now)
    assert served.prefill.inputs["building_prompt_tokens"] == 0.0


def test_before_a_rate_is_learned_prefill_s_rate_is_inferred_from_its_queue() -> None:
    """2 servers each serving 3,000 tokens/s (3 requests/s) and keeping 1.5 waiting (below the saturation threshold:
    nothing learned): an M/D/1 queue of 1.5 is a utilisation of sqrt(2.25 + 3) - 1.5 = 0.79, so one server prefills
    about 3,000 / 0.79 = 3,792 tokens/s; the pool is sized on it (TTFT 0.5 s: utilisation 1 - 1000 / 3,792 / 0.5 =
    0.47, the floor 0.5), and nothing is learned from it."""
    now = 1000.0
    window = ServiceWindow(prefill_pool(now, 2, 3000.0, queued=1.5), decode_pool(now, 2, 100.0), False)
    decision, state = decide(settings(prefill=PoolLimits(1, 20)), PlannerState(), window, now)
    rho = math.sqrt(1.5**2 + 3.0) - 1.5
    inputs = decision.prefill.inputs
    assert inputs["server_tokens_per_second"] == pytest.approx(3000.0 / rho)
    assert inputs["inferred_from_queue_per_server"] == pytest.approx(1.5)
    assert decision.prefill.desired == math.ceil(6000.0 / (3000.0 / rho * 0.5) - 1e-9) == 4
    assert "inferred from a queue of 1.5 per server" in decision.prefill.reason
    assert state.prefill_rate is None
    # A queue that persisted at the saturation threshold teaches the rate (what the servers serve), which then wins.
    saturated = ServiceWindow(prefill_pool(now, 2, 3000.0, queued=20.0), decode_pool(now, 2, 100.0), False)
    full, learned = decide(settings(prefill=PoolLimits(1, 20)), PlannerState(), saturated, now)
    assert full.prefill.inputs["server_tokens_per_second"] == pytest.approx(3000.0) == learned.prefill_rate
    assert "inferred_from_queue_per_server" not in full.prefill.inputs
    # A queue too small to read, or a KV pool nearly full (its queue waits for memory): nothing inferred, it holds.
    light = ServiceWindow(prefill_pool(now, 2, 3000.0, queued=0.2), decode_pool(now, 2, 100.0), False)
    held, _ = decide(settings(), PlannerState(), light, now)
    assert held.prefill.desired == 2 and "capacity not learned yet" in held.prefill.reason
    full_kv = pool(2, [pod(now, prompt=3000.0, requests=3.0, queued=1.5, usage=0.95)] * 2)
    blocked, _ = decide(settings(), PlannerState(), replace(window, prefill=full_kv), now)
    assert "inferred_from_queue_per_server" not in blocked.prefill.inputs


def test_before_a_capacity_is_learned_only_a_persisting_queue_moves_a_pool() -> None:
    """Decode servers that export no gen_throughput teach no step time: their persisting queue adds servers in
    proportion to its growth over the served requests; without a queue the pool holds, and it never shrinks."""
    now = 1000.0

    def window(queued: Value, running: float) -> ServiceWindow:
        decode = pool(3, [pod(now, running=running, queued=queued, requests=2.0, throughput=False)] * 3)
        return ServiceWindow(prefill_pool(now, 1, 1000.0), decode, False)

    decision, state = decide(settings(), PlannerState(), window(lambda t: 5.0 + (t - now + WINDOW), 50.0), now)
    # Queue growth 3 requests/s (1 per server) over 6 served/s: 3 x 0.5, rounded up: 2 more.
    assert (decision.decode.current, decision.decode.desired) == (3, 5)
    assert "capacity not learned yet: 2 more" in decision.decode.reason
    assert state.step_samples == ()
    held, _ = decide(settings(), PlannerState(), window(1.0, 5.0), now)
    assert held.decode.desired == 3 and "capacity not learned yet" in held.decode.reason
    # A queue while the servers asked for are still loading waits for them instead of asking for more.
    loading = replace(
        window(lambda t: 5.0 + (t - now + WINDOW), 50.0), decode=replace(window(9.0, 50.0).decode, ready=2)
    )
    waiting, _ = decide(settings(), PlannerState(), loading, now)
    assert waiting.decode.desired == 3 and "waiting for the 3 servers" in waiting.decode.reason


def test_an_accept_length_drop_adds_decode_servers_not_prefill() -> None:
    """The same 400 running requests: accept length 3 holds (0.06 - A) / B = 250 per server, 1.5 holds 100."""

    def window(accept: float) -> Callable[[float], ServiceWindow]:
        return lambda now: ServiceWindow(prefill_pool(now, 2, 2500.0), decode_pool(now, 3, 400 / 3, accept), False)

    plan = settings()
    before, state = run(plan, LEARNED, window(3.0), 1000.0, 2)
    assert before[-1].decode.inputs["server_requests"] == pytest.approx(250.0)
    assert before[-1].decode.desired == 3  # 400 / (250 x 0.9) = 2: a scale-down, held by stabilization
    after, _ = run(plan, state, window(1.5), 1030.0, 1)
    drop = after[0]
    assert drop.decode.inputs["accept_length"] == pytest.approx(1.5)
    assert drop.decode.inputs["server_requests"] == pytest.approx(100.0)
    assert (drop.decode.current, drop.decode.desired) == (3, 5)  # ceil(400 / 90)
    assert (drop.prefill.current, drop.prefill.desired) == (2, 2)
    assert drop.message.startswith("decode 3 -> 5: 400 requests over 3 servers at accept length 1.50; one server holds")


def test_decode_is_also_capped_by_its_kv_pool() -> None:
    """100 requests hold 0.5 of the pool: 180 fit at 0.9, below the 250 the ITL target allows."""
    now = 1000.0
    window = ServiceWindow(prefill_pool(now, 2, 2500.0), decode_pool(now, 2, 100.0, 3.0, usage=0.5), False)
    decision, state = decide(settings(), LEARNED, window, now)
    assert state.kv_requests == pytest.approx(180.0)
    assert decision.decode.inputs["server_requests"] == pytest.approx(180.0)
    assert "one server holds 180.0 (its KV pool)" in decision.decode.reason


def low(rolling_out: bool) -> Callable[[float], ServiceWindow]:
    """4 prefill and 4 decode servers with a quarter of the load 1 server of each holds."""
    return lambda now: ServiceWindow(prefill_pool(now, 4, 200.0), decode_pool(now, 4, 10.0), rolling_out)


def test_scale_down_waits_for_the_stabilization_window_then_removes_at_most_half() -> None:
    decisions, state = run(settings(), LEARNED, low(False), 1000.0, 22)
    for decision in decisions[:20]:  # watched 0 .. 285 s
        assert (decision.prefill.desired, decision.decode.desired) == (4, 4)
        assert "waits for 300 s of lower recommendations" in decision.prefill.reason
    assert (decisions[20].prefill.desired, decisions[20].decode.desired) == (2, 2)  # 300 s: half of 4
    assert "at most half the pool per decision (recommended 1)" in decisions[20].prefill.reason
    assert decisions[20].message.startswith("prefill 4 -> 2: ")
    # The history keeps the stabilization window's recommendations only.
    assert len(state.history) == 21 and state.history[0][0] == pytest.approx(1000.0 + 15 * 21 - 300)


def test_scale_down_is_held_during_a_rollout_but_scale_up_is_not() -> None:
    decisions, _ = run(settings(), LEARNED, low(True), 1000.0, 40)
    assert all((d.prefill.desired, d.decode.desired) == (4, 4) for d in decisions)
    assert "held: a rollout is under way" in decisions[-1].decode.reason

    def busy(now: float) -> ServiceWindow:
        return ServiceWindow(prefill_pool(now, 2, 4500.0), decode_pool(now, 2, 100.0), rolling_out=True)

    up, _ = decide(settings(), LEARNED, busy(1000.0), 1000.0)
    assert up.prefill.desired == 3  # 9,000 over 3,000 per server


def test_a_higher_recommendation_within_the_window_holds_the_scale_down() -> None:
    def busy(now: float) -> ServiceWindow:
        return ServiceWindow(prefill_pool(now, 4, 2500.0), decode_pool(now, 4, 120.0), rolling_out=False)

    plan = settings()
    _, state = run(plan, LEARNED, low(False), 1000.0, 10)
    spike, state = decide(plan, state, busy(1150.0), 1150.0)
    assert (spike.prefill.desired, spike.decode.desired) == (4, 4)  # 10,000 / 3,000 and 480 / 135: both need 4
    held, state = run(plan, state, low(False), 1165.0, 20)  # to 1450 s: the spike is within the last 300 s
    assert all((d.prefill.desired, d.decode.desired) == (4, 4) for d in held)
    assert "scale-down to 1 waits: 4 recommended within the last 300 s" in held[-1].prefill.reason
    after, _ = run(plan, state, low(False), 1465.0, 1)
    assert (after[0].prefill.desired, after[0].decode.desired) == (2, 2)


def test_a_cleared_backlog_s_servers_go_without_waiting_out_the_window() -> None:
    """The saturated pool above asks for 11 prefill servers, 4 for its arrivals and 7 for its queue. Once the queue
    has cleared, the window remembers only the 4 its arrivals needed: the 7 go at the first scale-down the
    stabilization allows, not a window after the backlog."""
    start = 1000.0

    def growing(t: float) -> float:
        return 3.0 + (t - (start - WINDOW))

    plan = settings(prefill=PoolLimits(1, 20), stabilization_seconds=60.0)
    backlog = ServiceWindow(prefill_pool(start, 2, 5000.0, queued=growing), decode_pool(start, 2, 100.0), False)
    asked, state = decide(plan, PlannerState(), backlog, start)
    assert asked.prefill.desired == 11 and state.history[-1][1:] == (11, 2, 4) and math.ceil(12000 / 3000) == 4

    def cleared(now: float, ready: int = 11) -> ServiceWindow:
        servers = prefill_pool(now, 11, 12000.0 / 11)
        return ServiceWindow(replace(servers, ready=ready), decode_pool(now, 2, 100.0), False)

    after, _ = run(plan, state, cleared, start + STEP, 4)
    assert [d.prefill.desired for d in after] == [11, 11, 11, 6]  # watched 15-45 s, then at most half of 11
    assert "at most half the pool per decision (recommended 4); the queue it was clearing has cleared" in (
        after[-1].prefill.reason
    )
    # While the servers asked are loading, the whole recommendation holds (even with no queue left).
    loading, _ = run(plan, state, lambda now: cleared(now, ready=2), start + STEP, 4)
    assert [d.prefill.desired for d in loading] == [11] * 4
    assert "scale-down to 4 waits: 11 recommended within the last 60 s" in loading[-1].prefill.reason
    # So does a queue of the threshold per server over the last 20 s (the backlog has not cleared).
    later = start + 4 * STEP

    def queueing(t: float) -> float:
        return 2.0 if t > later - 20 else 0.0

    queued = ServiceWindow(prefill_pool(later, 11, 12000.0 / 11, queued=queueing), decode_pool(later, 2, 100.0), False)
    still, _ = decide(plan, state, queued, later)
    assert still.prefill.desired == 11 and "scale-down to 5 waits: 11 recommended" in still.prefill.reason
    # A pool whose arrivals needed 11 is held through the window (the test above).
    busy = replace(state, history=((start, 11, 2, 11),))
    held, _ = run(plan, busy, cleared, start + STEP, 4)
    assert [d.prefill.desired for d in held] == [11] * 4
    assert "scale-down to 4 waits: 11 recommended within the last 60 s" in held[-1].prefill.reason


def test_an_idle_service_falls_to_its_minimum_after_the_stabilization_window() -> None:
    plan = settings(prefill=PoolLimits(1, 10), decode=PoolLimits(2, 10))
    state, replicas, seen = PlannerState(), (4, 4), []  # nothing learned: zero demand needs no capacity
    for k in range(24):
        now = 1000.0 + STEP * k
        window = ServiceWindow(prefill_pool(now, replicas[0], 0.0), decode_pool(now, replicas[1], 0.0), False)
        decision, state = decide(plan, state, window, now)
        replicas = (decision.prefill.desired, decision.decode.desired)
        seen.append(replicas)
    assert seen[:20] == [(4, 4)] * 20  # 0 .. 285 s watched
    assert seen[20:] == [(2, 2), (1, 2), (1, 2), (1, 2)]
    assert decision.prefill.reason.startswith("no prompt tokens in the window")
    assert decision.decode.reason.startswith("no request on the decode servers in the window")


def test_replicas_are_clamped_to_each_pool_s_limits() -> None:
    def huge(now: float) -> ServiceWindow:
        # Prefill saturated at 5,000 tokens/s per server while 15 requests/s per server arrive (30,000 tokens/s).
        queue = prefill_pool(now, 2, 5000.0, queued=lambda t: 3.0 + 10 * (t - now + WINDOW))
        return ServiceWindow(queue, decode_pool(now, 2, 900.0), rolling_out=False)

    plan = settings(prefill=PoolLimits(1, 6), decode=PoolLimits(1, 3))
    decision, _ = decide(plan, LEARNED, huge(1000.0), 1000.0)
    assert (decision.prefill.desired, decision.decode.desired) == (6, 3)  # 10 and 14 needed
    # A pool above its maxReplicas goes down to it at once (a limit, not a recommendation).
    above, _ = decide(plan, LEARNED, replace(steady(1000.0), decode=decode_pool(1000.0, 5, 50.0)), 1000.0)
    assert above.decode.desired == 3


def test_the_ratio_band_raises_the_smaller_pool_within_its_max() -> None:
    def window(now: float) -> ServiceWindow:
        # prefill needs 1 (1,000 tokens/s), decode 4 (500 requests over 135 per server)
        return ServiceWindow(prefill_pool(now, 1, 1000.0), decode_pool(now, 4, 125.0), rolling_out=False)

    decision, _ = decide(settings(ratio_min=0.5), LEARNED, window(1000.0), 1000.0)
    assert (decision.prefill.desired, decision.decode.desired) == (2, 4)
    assert "raised to 2 for prefill/decode >= 0.5" in decision.prefill.reason
    capped, _ = decide(settings(ratio_min=0.5, prefill=PoolLimits(1, 1)), LEARNED, window(1000.0), 1000.0)
    assert (capped.prefill.desired, capped.decode.desired) == (1, 4)  # never past maxReplicas, never a needed server

    def wide(now: float) -> ServiceWindow:
        return ServiceWindow(prefill_pool(now, 6, 3000.0), decode_pool(now, 1, 10.0), rolling_out=False)

    raised, _ = decide(settings(ratio_max=2.0), LEARNED, wide(1000.0), 1000.0)
    assert (raised.prefill.desired, raised.decode.desired) == (6, 3)
    assert "raised to 3 for prefill/decode <= 2" in raised.decode.reason


def test_the_lead_forecast_scales_up_earlier_on_a_rising_trend() -> None:
    """Arrivals rising from 1,000 to 4,000 tokens/s per server over the window (one server handles 3,000)."""
    now = 1000.0

    def rising(t: float) -> float:
        return 1000.0 + 10.0 * (t - (now - WINDOW))

    window = ServiceWindow(prefill_pool(now, 2, rising), decode_pool(now, 2, 100.0), rolling_out=False)
    plain, _ = decide(settings(), LEARNED, window, now)
    ahead, _ = decide(settings(lead_seconds=120.0), LEARNED, window, now)
    # Demand now: the mean of the rates of the last 20 s (surge_seconds: the newest two 15 s intervals, 7,550 and
    # 7,850), which is above the last 60 s' (7,250); it lags the trend (20 tokens/s per second) by 15 s: the trend
    # at now is 8,000 either way.
    assert plain.prefill.inputs["prompt_tokens_per_second"] == pytest.approx(7700.0)
    minute, _ = decide(settings(surge_seconds=0.0), LEARNED, window, now)
    assert minute.prefill.inputs["prompt_tokens_per_second"] == pytest.approx(7250.0)
    assert minute.prefill.inputs["forecast_prompt_tokens_per_second"] == pytest.approx(8000.0)
    assert plain.prefill.inputs["forecast_prompt_tokens_per_second"] == pytest.approx(8000.0)
    assert ahead.prefill.inputs["forecast_prompt_tokens_per_second"] == pytest.approx(8000.0 + 20 * 120)
    assert (plain.prefill.desired, ahead.prefill.desired) == (3, 4)  # 8,000 and 10,400 over 3,000
    assert "(forecast 10,400 in 120 s)" in ahead.prefill.reason
    # A falling trend is not forecast: scale-up never looks for a fall.
    falling = ServiceWindow(prefill_pool(now, 2, lambda t: rising(2 * now - WINDOW - t)), window.decode, False)
    down, _ = decide(settings(lead_seconds=120.0), LEARNED, falling, now)
    assert down.prefill.inputs["forecast_prompt_tokens_per_second"] == down.prefill.inputs["prompt_tokens_per_second"]


def test_a_step_up_shows_in_the_last_rounds_before_the_minutes_mean() -> None:
    """Arrivals step from 2,000 to 6,000 tokens/s per server 20 s before now: the last 20 s see the new rate, the
    minute's mean does not yet (the servers of a 3x burst are asked a round or more earlier)."""
    now = 1000.0

    def step(t: float) -> float:
        return 2000.0 if t < now - 20 else 6000.0

    window = ServiceWindow(prefill_pool(now, 2, step), decode_pool(now, 2, 100.0), rolling_out=False)
    surge, _ = decide(settings(), LEARNED, window, now)
    minute, _ = decide(settings(surge_seconds=0.0), LEARNED, window, now)
    assert surge.prefill.inputs["prompt_tokens_per_second"] > 1.4 * minute.prefill.inputs["prompt_tokens_per_second"]
    # The minute's own trend line reaches less than the last 20 s' level even at now.
    assert minute.prefill.inputs["forecast_prompt_tokens_per_second"] < surge.prefill.inputs["prompt_tokens_per_second"]
    # A step is not a trend: however far ahead the lead looks, the last 20 s (the step's level) are flat, so the
    # forecast is that level (the old reading put the whole window's slope, the step itself, on top of its level:
    # 1.5 x, the cap).
    ahead, _ = decide(settings(lead_seconds=600.0), LEARNED, window, now)
    further, _ = decide(settings(lead_seconds=6000.0), LEARNED, window, now)
    demand = ahead.prefill.inputs
    assert further.prefill.inputs["forecast_prompt_tokens_per_second"] == demand["forecast_prompt_tokens_per_second"]
    assert demand["forecast_prompt_tokens_per_second"] == pytest.approx(demand["prompt_tokens_per_second"])
    assert ahead.prefill.desired == surge.prefill.desired


def test_decode_is_sized_for_what_prefill_is_about_to_hand_over() -> None:
    """A 3x step in prefill arrivals 20 s before now, while decode still runs what prefill let through before it: 100
    requests per server, each server finishing 2.5 per second. Decode is asked for the requests the step will keep on
    it (arrivals x the time one takes at the batch decode is sized for) in the same decision as prefill, not a round
    after decode's own load shows it; a steady load, or decode filling up at a warm-up, changes nothing."""
    now = 1000.0

    def step(t: float) -> float:
        return 2500.0 if t < now - 20 else 7500.0

    coupled = ServiceWindow(prefill_pool(now, 2, step), decode_pool(now, 2, 100.0, requests=2.5), False)
    surge, state = decide(settings(), LEARNED, coupled, now)
    alone, _ = decide(settings(handover_gate=math.inf), LEARNED, coupled, now)
    assert alone.decode.desired == 2
    inputs = surge.decode.inputs
    # A request's output: 100 x 2 tokens per 0.03 s step over 2.5 finished per second, 2,667 tokens; at the batch
    # decode is sized for (150 at the ITL target x 0.9 = 135: steps of 0.037 s) it takes 2,667 x 0.037 / 2 = 49 s
    # (40 s at the 100 it runs now).
    assert state.mean_output == pytest.approx(100 * 2 / 0.03 / 2.5)
    assert inputs["decode_seconds"] == pytest.approx(100 * 2 / 0.03 / 2.5 * (A + B * 135) / 2)
    assert inputs["handover_requests_per_second"] == pytest.approx(
        surge.prefill.inputs["forecast_prompt_tokens_per_second"] / 1000
    )
    passing = surge.prefill.inputs["served_requests_per_second"]
    assert inputs["prefill_passing_per_second"] == pytest.approx(passing)
    assert inputs["handover_requests_per_second"] >= 1.15 * passing
    assert inputs["forecast_requests"] == pytest.approx(
        inputs["handover_requests_per_second"] * inputs["decode_seconds"]
    )
    # The surge's last 20 s read 10,000 tokens/s (the 15 s scrapes straddle the step): about 10 requests/s x 49 s
    # over 150 per server x 0.9, twice the servers decode's own 200 requests ask for.
    assert surge.decode.desired == math.ceil(inputs["forecast_requests"] / 135 - 1e-9) == 4
    assert "once prefill hands over" in surge.decode.reason
    consistent = ServiceWindow(prefill_pool(now, 2, 2500.0), decode_pool(now, 2, 100.0, requests=2.5), False)
    steady_decision, _ = decide(settings(), LEARNED, consistent, now)
    assert steady_decision.decode.desired == 2
    assert "handover_requests_per_second" not in steady_decision.decode.inputs
    # Decode filling up over the last minute at a warm-up: few of its requests finished yet, but prefill hands over
    # what it passes now: no surge. Nor is an output length learned from it (tokens over finished requests would
    # count the tokens of the requests still running).

    def filling(t: float) -> float:
        return 100.0 * min(max((t - (now - 60)) / 60, 0.0), 1.0)

    warming = ServiceWindow(prefill_pool(now, 2, 2500.0), decode_pool(now, 2, filling, requests=5 / 6), False)
    warm, warm_state = decide(settings(), LEARNED, warming, now)
    assert "handover_requests_per_second" not in warm.decode.inputs
    assert warm.decode.desired == 2 and warm_state.mean_output is None
    # The same filling decode while prefill's arrivals step up: a surge, but no output length learned yet, so decode
    # is sized for its own requests.
    filling_surge = ServiceWindow(prefill_pool(now, 2, step), warming.decode, False)
    unknown, _ = decide(settings(), LEARNED, filling_surge, now)
    assert "handover_requests_per_second" not in unknown.decode.inputs


def test_the_forecast_extrapolates_within_the_window_and_at_most_half_again() -> None:
    # A rate rising 10 per second over 60 s (0 -> 600): now is the mean of the last 20 s (40..60 s: 500, centred 50 s).
    rising = [(float(t), 10.0 * t) for t in range(0, 61, 5)]
    near = signals.demand(rising, 60.0, 60.0, 10.0, surge_seconds=20.0)
    assert near.now == pytest.approx(500.0)
    assert near.forecast == pytest.approx(500.0 + 10.0 * (70.0 - 50.0))  # to now + lead from the points' centre
    # A lead beyond the window: extrapolated only as far as the points it was fitted on span (the last 20 s).
    far = signals.demand(rising, 60.0, 60.0, 600.0, surge_seconds=20.0)
    assert far.forecast == pytest.approx(500.0 + 10.0 * 20.0)
    assert far.forecast < 500.0 + 10.0 * (660.0 - 50.0)
    # A steep rise over the minute alone (no surge window): the line over its 60 s span, capped at 1.5 x now.
    minute = signals.demand(rising, 60.0, 60.0, 600.0)
    assert minute.now == pytest.approx(300.0)
    assert minute.forecast == pytest.approx(signals.FORECAST_GROWTH * 300.0)
    assert minute.forecast < 300.0 + 10.0 * 60.0
    # Too few recent points for a line (two): the whole window's line, from its centre (30 s, 300).
    sparse = [(0.0, 0.0), (20.0, 200.0), (40.0, 400.0), (60.0, 600.0)]
    assert signals.demand(sparse, 60.0, 60.0, 10.0, surge_seconds=20.0).forecast == pytest.approx(
        min(300.0 + 10.0 * 40.0, signals.FORECAST_GROWTH * 500.0)
    )


def test_a_trend_within_the_windows_noise_is_not_forecast() -> None:
    # A flat 100 with alternating +-20 noise over 60 s and a rise of 0.1 per second: the fitted slope is positive
    # but within one standard error: the forecast is the level now. The same rise without noise is forecast.
    noisy = [(float(t), 100.0 + 0.1 * t + (20.0 if k % 2 else -20.0)) for k, t in enumerate(range(0, 61, 5))]
    slope, error = signals.trend(noisy)
    assert 0 < slope < error
    flat = signals.demand(noisy, 60.0, 60.0, 30.0)
    assert flat.forecast == pytest.approx(flat.now)
    clean = signals.demand([(t, 100.0 + 0.1 * t) for t, _ in noisy], 60.0, 60.0, 30.0)
    assert signals.trend([(t, 100.0 + 0.1 * t) for t, _ in noisy])[1] == pytest.approx(0.0, abs=1e-9)
    assert clean.forecast == pytest.approx(103.0 + 0.1 * 60.0)  # from the centre (30 s, 103) to now + 30 s


def test_the_state_round_trips_through_its_wire_form() -> None:
    plan = settings()
    _, state = run(plan, LEARNED, steady, 1000.0, 3)
    _, state = decide(
        plan, state, ServiceWindow(steady(1045.0).prefill, decode_pool(1045.0, 2, 100.0, usage=0.5), False), 1045.0
    )
    wire = json.loads(json.dumps(state.to_wire()))
    restored = PlannerState.from_wire(wire)
    assert restored.to_wire() == wire
    assert restored.prefill_rate == pytest.approx(state.prefill_rate or 0.0)
    assert restored.kv_requests == pytest.approx(180.0)
    assert [list(x) for x in restored.step_samples] == [pytest.approx(list(x)) for x in state.step_samples]
    assert restored.history == state.history and restored.watching_since == state.watching_since
    assert decide(plan, restored, steady(1060.0), 1060.0)[0] == decide(plan, state, steady(1060.0), 1060.0)[0]
    assert len(json.dumps(wire)) < 2000
    # What does not read back is learned again, never an error.
    assert PlannerState.from_wire({"version": 2, "prefillTokensPerSecond": 1.0}) == PlannerState()
    assert PlannerState.from_wire(None) == PlannerState()
    broken = PlannerState.from_wire({"version": 1, "prefillTokensPerSecond": "x", "history": [[1, 2]], "kvRequests": 3})
    assert (broken.prefill_rate, broken.history, broken.kv_requests) == (None, (), 3.0)
    # A history written before prefill's arrivals-only column reads as the whole recommendation.
    older = PlannerState.from_wire({"version": 1, "history": [[1000.0, 5, 3]]})
    assert older.history == ((1000.0, 5, 3, 5),)


def test_a_restart_or_failover_restarts_the_watch_but_keeps_what_was_learned() -> None:
    plan = settings()
    _, state = run(plan, LEARNED, low(False), 1000.0, 21)
    restored = PlannerState.from_wire(json.loads(json.dumps(state.to_wire())))
    # Another process: its monotonic clock is behind the stored one.
    decision, after = decide(plan, restored, low(False)(50.0), 50.0)
    assert (decision.prefill.desired, decision.decode.desired) == (4, 4)
    assert after.watching_since == 50.0 and after.prefill_rate == pytest.approx(5000.0)
    # A new spec fingerprint forgets the capacities, not the watch.
    new = replace(low(False)(1315.0), fingerprint="abc")
    _, forgot = decide(plan, state, new, 1315.0)
    assert forgot.fingerprint == "abc" and forgot.watching_since == state.watching_since
    assert forgot.prefill_rate is None and len(forgot.step_samples) < len(state.step_samples)


def _linear(level: float, slope: float, start: float) -> Callable[[float], float]:
    return lambda t: max(level + slope * (t - start), 0.0)


def test_random_windows_keep_every_invariant() -> None:
    """Property check over random loads, limits and states: desired within [min, max] (or raised by the band within
    max), never more than half a pool removed, never below current during a rollout, inputs finite and >= 0."""
    rng = random.Random(20240601)
    for _ in range(300):
        now = 1000.0 + rng.random() * 1000
        lo_p, lo_d = rng.randint(1, 3), rng.randint(1, 3)
        plan = settings(
            prefill=PoolLimits(lo_p, lo_p + rng.randint(0, 8)),
            decode=PoolLimits(lo_d, lo_d + rng.randint(0, 8)),
            ratio_min=rng.choice([None, 0.25, 0.5]),
            ratio_max=rng.choice([None, 2.0, 4.0]),
            lead_seconds=rng.choice([0.0, 60.0, 300.0]),
            stabilization_seconds=rng.choice([0.0, 60.0, 300.0]),
        )
        p, d = rng.randint(1, 12), rng.randint(1, 12)
        slope, level, start = rng.uniform(-10, 10), rng.uniform(0, 6000), now - WINDOW
        window = ServiceWindow(
            prefill_pool(now, p, _linear(level, slope, start), queued=rng.choice([0.0, 5.0])),
            decode_pool(
                now,
                d,
                rng.uniform(0, 300),
                rng.uniform(1, 4),
                usage=rng.choice([0.3, 0.95]),
                requests=rng.choice([0.0, rng.uniform(0.1, 10)]),
                restart_at=now - rng.uniform(0, 400),
            ),
            rolling_out=rng.random() < 0.3,
        )
        state = rng.choice([PlannerState(), LEARNED, replace(LEARNED, clock=now - 15, watching_since=now - 1000)])
        decision, after = decide(plan, state, window, now)
        for pool_decision, limits in ((decision.prefill, plan.prefill), (decision.decode, plan.decode)):
            assert limits.min_replicas <= pool_decision.desired <= max(limits.max_replicas, limits.min_replicas)
            if pool_decision.current <= limits.max_replicas:
                assert pool_decision.desired >= math.ceil(pool_decision.current / 2)
                if window.rolling_out:
                    assert pool_decision.desired >= min(pool_decision.current, limits.max_replicas)
            assert all(math.isfinite(v) and v >= 0 for v in pool_decision.inputs.values()), pool_decision.inputs
            assert pool_decision.reason
        assert after.clock == now and PlannerState.from_wire(after.to_wire()).to_wire() == after.to_wire()


def test_the_planner_imports_only_the_standard_library_samples_and_constants() -> None:
    """Pure: no I/O, no clock, no Kubernetes, nothing of the operator beyond the samples it reads (the layers
    contract in pyproject.toml places it; this pins the narrower rule)."""
    import ast
    import sys

    import disaggspec.autoscale

    allowed = {"disaggspec.servinghealth.samples", "disaggspec.constants"}
    for path in Path(disaggspec.autoscale.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                assert (
                    name in allowed
                    or name.startswith("disaggspec.autoscale")
                    or (top in sys.stdlib_module_names and top not in {"time", "os", "socket", "urllib"})
                    or name == "__future__"
                ), (path.name, name)


def test_a_queue_from_before_the_last_scale_up_adds_no_server() -> None:
    """Three prefill servers, two of them ready for only 20 s: the queue that built up on the first one before they
    came (and still shows on all three) has not persisted 30 s at this size, so the guard waits for them."""
    now = 10_000.0
    old = pod(now, prompt=15_000.0, requests=15.0, queued=40.0)
    new = [scrape for scrape in pod(now, prompt=5000.0, requests=5.0, queued=40.0) if scrape[0] >= now - 20]
    prefill = PoolWindow(3, 3, {"pod-0": old, "pod-1": new, "pod-2": new})
    window = ServiceWindow(prefill, decode_pool(now, 1, running=10.0), rolling_out=False)
    decision, _ = decide(settings(), LEARNED, window, now)
    assert "one more" not in decision.prefill.reason
    # Once the three have held the queue for longer than persist_seconds, it does add one.
    later = [scrape for scrape in pod(now, prompt=5000.0, requests=5.0, queued=40.0) if scrape[0] >= now - 60]
    held = PoolWindow(3, 3, {"pod-0": old, "pod-1": later, "pod-2": later})
    decision, _ = decide(settings(), LEARNED, ServiceWindow(held, window.decode, rolling_out=False), now)
    assert decision.prefill.desired >= 4


# Seeded deviations of about 1 (standard normal draws, rounded): the rounds' noise of the tests below.
DEVIATIONS = [0.3, -1.2, 0.8, -0.4, 1.5, -0.9, 0.1, -1.6, 1.1, 0.6, -0.2, -0.7, 1.3]


def test_the_rounds_noise_is_read_apart_from_a_trend_or_a_step() -> None:
    times = [5.0 * k for k in range(len(DEVIATIONS))]
    noisy = [(t, 1000.0 + 100.0 * d) for t, d in zip(times, DEVIATIONS, strict=True)]
    assert 50.0 < signals.spread(noisy) < 200.0
    # A ramp moves every difference alike, a step moves one: neither is noise; nor do they add to the noise.
    assert signals.spread([(t, 1000.0 + 20.0 * t) for t in times]) == pytest.approx(0.0)
    assert signals.spread([(t, 1000.0 if t < 40 else 3000.0) for t in times]) == pytest.approx(0.0)
    ramped = [(t, v + 20.0 * t) for t, v in noisy]
    assert signals.spread(ramped) == pytest.approx(signals.spread(noisy))
    stepped = [(t, v + (2000.0 if t >= 40 else 0.0)) for t, v in noisy]
    assert signals.spread(stepped) < 1.5 * signals.spread(noisy)
    assert signals.spread(noisy[:2]) == 0.0


def test_a_last_rounds_mean_within_the_noise_is_not_a_step_up() -> None:
    """Noisy rounds at a steady 1,000 whose last four happen to read higher: the level is the minute's mean, not the
    last 20 s'; the same rounds after a real doubling 20 s ago read as the step's level."""
    times = [5.0 * k for k in range(len(DEVIATIONS))]
    steady = [(t, 1000.0 + 100.0 * d) for t, d in zip(times, DEVIATIONS, strict=True)]
    last = [v for t, v in steady if t >= times[-1] - 20.0]
    minute = sum(v for _, v in steady) / len(steady)
    assert sum(last) / len(last) > minute  # the old reading took this higher mean
    read = signals.demand(steady, times[-1], 60.0, 30.0, surge_seconds=20.0)
    assert read.now == pytest.approx(minute)
    assert read.forecast == pytest.approx(minute)  # and no trend within the noise is forecast
    doubled = [(t, v * (2.0 if t >= times[-1] - 20.0 else 1.0)) for t, v in steady]
    step = signals.demand(doubled, times[-1], 60.0, 30.0, surge_seconds=20.0)
    assert step.now == pytest.approx(2 * sum(last) / len(last))


def test_a_slope_within_two_standard_errors_is_not_forecast() -> None:
    times = [5.0 * k for k in range(len(DEVIATIONS))]

    def rising(per_second: float) -> list[tuple[float, float]]:
        return [(t, 1000.0 + per_second * t + 100.0 * d) for t, d in zip(times, DEVIATIONS, strict=True)]

    # 1.5 per second over this noise: the slope is 1.4 standard errors (1.52) out, which one error forecast.
    fitted, error = signals.trend(rising(1.5))
    assert error < fitted < signals.FORECAST_ERRORS * error
    within = signals.demand(rising(1.5), times[-1], 60.0, 30.0)
    assert within.forecast == pytest.approx(within.now)
    # 8 per second: 5.7 errors out, forecast from the points' centre (30 s) to now + 30 s, less two errors.
    fitted, error = signals.trend(rising(8.0))
    beyond = signals.demand(rising(8.0), times[-1], 60.0, 30.0)
    centre = sum(v for _, v in rising(8.0)) / len(times)
    horizon = min(times[-1] + 30.0 - 30.0, times[-1] - times[0])
    assert beyond.forecast == pytest.approx(centre + (fitted - 2 * error) * horizon)
    assert beyond.forecast > beyond.now


def test_prefill_s_arrivals_count_the_requests_a_full_decode_holds_or_whose_transfer_has_not_ended() -> None:
    """Two prefill servers each finish 2,000 prompt tokens/s (1,000-token prompts) while 1 more request/s per server
    piles up in their bootstrap queues (decode takes none): 6,000 tokens/s arrive. Then the same arrivals finished
    in bulk: a decode scale-up releases the inflight queue, the served rate doubles for a while and the inflight
    queue falls as fast: still 6,000."""
    now = 1000.0
    start = now - WINDOW

    def bootstrapping(t: float) -> float:
        return t - start

    held = [pod(now, prompt=2000.0, requests=2.0, pd=bootstrapping) for _ in range(2)]
    decision, _ = decide(settings(), LEARNED, ServiceWindow(pool(2, held), decode_pool(now, 2, 100.0), False), now)
    assert decision.prefill.inputs["prompt_tokens_per_second"] == pytest.approx(6000.0)
    assert decision.prefill.inputs["queued"] == 0.0  # the backlog to clear is the waiting queue's alone
    assert signals.unfinished(held[0][-1][1]) == pytest.approx(WINDOW)

    # One server, 3 requests/s arriving: 1/s finished while decode was full (2/s prefilled, transferring), then
    # decode's scale-up releases them: 5/s finished while the inflight queue falls 2/s.
    def served(t: float) -> float:
        return 5000.0 if t >= now - 60 else 1000.0

    def transferring(t: float) -> float:
        return 2.0 * min(t - start, WINDOW - 60) - 2.0 * max(t - (now - 60), 0.0)

    released = [pod(now, prompt=served, requests=lambda t: served(t) / 1000, transferring=transferring)]
    window = ServiceWindow(pool(1, released), decode_pool(now, 2, 100.0), False)
    bulk, _ = decide(settings(), LEARNED, window, now)
    assert bulk.prefill.inputs["prompt_tokens_per_second"] == pytest.approx(3000.0)
