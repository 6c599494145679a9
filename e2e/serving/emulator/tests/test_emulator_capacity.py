"""The capacity model (capacity.py): its citations are where it says, the memory arithmetic, and the stepped scheduler
against the analytic capacity of the same profile (simulated clock, seeded arrivals: pure and deterministic)."""

from __future__ import annotations

import statistics

import pytest

from e2e.serving.emulator import capacity, pd, profiles
from e2e.serving.emulator.capacity import (
    Limits,
    Request,
    Role,
    Server,
    decode_capacity,
    poisson_arrivals,
    prefill_capacity,
)
from e2e.serving.emulator.dp import Fact
from e2e.serving.emulator.profiles import (
    H100_LLAMA_3_1_8B,
    H100_SXM,
    LLAMA_3_1_8B,
    Model,
    Profile,
    max_total_num_tokens,
    with_eagle3,
)
from e2e.serving.emulator.tests.sglang_sources import read, sglang_tree

PROFILE = H100_LLAMA_3_1_8B
POOL = max_total_num_tokens(H100_SXM, LLAMA_3_1_8B, mem_fraction_static=0.85)
LIMITS = Limits(max_total_num_tokens=POOL, max_running_requests=64)
DURATION, WARMUP = 40.0, 15.0


@pytest.mark.parametrize(
    "fact", capacity.CAPACITY_FACTS + profiles.PROFILE_FACTS, ids=lambda f: f"{f.version}:{f.source}"
)
def test_capacity_facts_point_at_the_code(fact: Fact) -> None:
    if sglang_tree(fact.version) is None:
        pytest.skip(f"no SGLang {fact.version} wheel tree")
    path, _, number = fact.source.rpartition(":")
    first = int(number)
    window = "\n".join(read(fact.version, path).splitlines()[first - 1 : first + 4])
    assert fact.needle in window, f"{fact.version} {fact.source} ({fact.claim}):\n{window}"


def test_memory_model_arithmetic_by_hand() -> None:
    """No published max_total_num_tokens for this exact setup to cite, so the formula is checked by hand:
    8 KV heads x 128 x 32 layers x 2 (K, V) x 2 bytes = 131,072 B/token; 80 GiB x 0.85 = 73,014,444,032 B, minus
    8.03e9 x 2 B of weights = 56,954,444,032 B, over 131,072 = 434,527.6 -> 434,527 tokens; page 64 -> 434,496."""
    assert LLAMA_3_1_8B.kv_bytes_per_token == 131_072
    assert POOL == 434_527
    assert max_total_num_tokens(H100_SXM, LLAMA_3_1_8B, 0.85, page_size=64) == 434_496
    # Memory the process holds besides the weights comes off the pool: 1 GiB is 8,192 tokens.
    assert max_total_num_tokens(H100_SXM, LLAMA_3_1_8B, 0.85, runtime_bytes=1 << 30) == 434_527 - 8_192
    # MLA (DeepSeek-V3 config: kv_lora_rank 512 + qk_rope_head_dim 64, 61 layers, bf16): 576 x 61 x 2 = 70,272 B.
    deepseek = Model("deepseek", params=671e9, layers=61, kv_heads=128, head_dim=128, dtype_bytes=2, mla_kv_dim=576)
    assert deepseek.kv_bytes_per_token == 70_272
    # A fraction too small for the weights leaves no pool, never a negative one.
    assert max_total_num_tokens(H100_SXM, LLAMA_3_1_8B, 0.1) == 0


def test_the_profile_reproduces_the_published_batch_one_decode_rate() -> None:
    """158.34 tokens/s at batch 1 (SGLang docs, 1x H100): what the efficiency and overhead were chosen to give."""
    rate = 1 / PROFILE.decode_step_seconds(1, 1_000)
    assert rate == pytest.approx(158.34, rel=0.02)


def _run(profile: Profile, role: Role, limits: Limits, rate: float, prompt: int, output: int) -> Server:
    server = Server(profile, role, limits)
    server.run(poisson_arrivals(rate, DURATION, prompt, output, seed=7), until=DURATION)
    return server


def _throughput(server: Server) -> float:
    return sum(1 for r in server.done if WARMUP <= (r.finished or 0) < DURATION) / (DURATION - WARMUP)


@pytest.mark.parametrize(("role", "prompt", "output"), [("decode", 1024, 256), ("prefill", 4096, 1)])
def test_a_rate_sweep_plateaus_at_the_analytic_capacity(role: Role, prompt: int, output: int) -> None:
    cap = (
        decode_capacity(PROFILE, LIMITS, prompt, output)
        if role == "decode"
        else prefill_capacity(PROFILE, LIMITS, prompt)
    )
    waits: dict[float, float] = {}
    for load in (0.5, 0.8, 1.3, 2.0):
        server = _run(PROFILE, role, LIMITS, load * cap, prompt, output)
        arrived = len(poisson_arrivals(load * cap, DURATION, prompt, output, seed=7))
        measured = _throughput(server)
        waits[load] = statistics.mean(r.ttft for r in server.done)
        if load < 1:
            # Nothing dropped or stuck: every request that arrived before the last step is done or in flight, the
            # queue stays short, and throughput follows the offered load.
            assert len(server.done) + len(server.running) + (server.chunked is not None) >= arrived - 3
            assert len(server.waiting) <= 3
            assert measured == pytest.approx(load * cap, rel=0.15)
        else:
            assert measured == pytest.approx(cap, rel=0.10), (load, measured, cap)
            assert len(server.waiting) > 0.1 * arrived
    assert waits[2.0] > waits[1.3] > 5 * waits[0.5]


def test_long_prompts_saturate_prefill_and_long_outputs_saturate_decode() -> None:
    cases: tuple[tuple[int, int, Role], ...] = ((8192, 16, "prefill"), (256, 2048, "decode"))
    for prompt, output, saturated in cases:
        caps: dict[Role, float] = {
            "prefill": prefill_capacity(PROFILE, LIMITS, prompt),
            "decode": decode_capacity(PROFILE, LIMITS, prompt, output),
        }
        rate = 1.5 * min(caps.values())
        other: Role = "decode" if saturated == "prefill" else "prefill"
        assert caps[saturated] < caps[other] / 3
        busy = _run(PROFILE, saturated, LIMITS, rate, prompt, output)
        idle = _run(PROFILE, other, LIMITS, rate, prompt, output)
        arrived = len(poisson_arrivals(rate, DURATION, prompt, output, seed=7))
        assert len(busy.waiting) > 0.2 * arrived, (saturated, len(busy.waiting), arrived)
        assert len(idle.waiting) <= 3, (other, len(idle.waiting))


def test_a_higher_accept_length_raises_decode_capacity_in_proportion() -> None:
    prompt, output = 1024, 240
    low, high = (with_eagle3(PROFILE, accept, num_steps=3, num_draft_tokens=4) for accept in (2.0, 4.0))
    cap_low, cap_high = decode_capacity(low, LIMITS, prompt, output), decode_capacity(high, LIMITS, prompt, output)
    assert cap_high / cap_low == pytest.approx(2.0, rel=0.05)
    measured = [
        _throughput(_run(p, "decode", LIMITS, 2 * c, prompt, output)) for p, c in ((low, cap_low), (high, cap_high))
    ]
    assert measured[1] / measured[0] == pytest.approx(2.0, rel=0.10)
    assert measured[0] == pytest.approx(cap_low, rel=0.10)


def test_an_exhausted_pool_queues_and_retracts_never_overdraws() -> None:
    limits = Limits(max_total_num_tokens=20_000, max_running_requests=64)
    server = Server(PROFILE, "decode", limits)
    server.waiting.extend(Request(arrival=0.0, prompt=1000, output=3000) for _ in range(30))
    server.step()
    # Pre-allocation (decode.py:385-405): each admission takes prompt + 512 of the allocatable tokens, and stops once
    # they fall below prompt + output - retractable (0: nothing ran before this pass): 20,000 - 11 x 1,512 = 3,368
    # < 4,000, so 11 of the 30 start.
    assert len(server.running) == 11 and len(server.waiting) == 19
    server.run([], until=10_000.0)
    assert server.retractions > 0
    assert server.min_free_tokens >= 0
    assert len(server.done) == 30 and all(r.generated == r.output for r in server.done)
    assert server.free_tokens == limits.max_total_num_tokens
    assert any(r.retractions for r in server.done)


def test_retraction_takes_the_least_decoded_request_first() -> None:
    limits = Limits(max_total_num_tokens=3_000, max_running_requests=8, num_reserved_decode_tokens=0)
    server = Server(PROFILE, "decode", limits)
    for generated in (300.0, 100.0, 200.0):
        req = Request(arrival=0.0, prompt=500, output=2000, prefilled=500, generated=generated, admitted=0.0)
        server.running.append(req)
    server.free_tokens = 1  # fewer than the three tokens the step needs
    server.step()
    assert [int(r.generated) for r in server.retracted] == [100]
    assert sorted(int(r.generated) for r in server.running) == [201, 301]
    assert server.free_tokens >= 0


def test_no_new_admission_while_a_retracted_request_waits() -> None:
    limits = Limits(max_total_num_tokens=3_000, max_running_requests=8)
    server = Server(PROFILE, "decode", limits)
    stuck = Request(arrival=0.0, prompt=2000, output=4000, prefilled=2000, generated=900.0, admitted=0.0)
    server.retracted.append(stuck)  # needs 2,900 + 512 > 3,000 to resume
    newcomer = Request(arrival=0.0, prompt=10, output=10)  # would fit on its own
    server.waiting.append(newcomer)
    server._admit()
    assert not server.running and list(server.waiting) == [newcomer]
    server.retracted.clear()
    server._admit()
    assert list(server.ready) == [newcomer]  # pre-allocated; the KV transfer is instant in pure use
    server._join_running()
    assert server.running == [newcomer]


def test_pd_waits_for_gpu_work_stretch_with_the_time_scale_and_heartbeats_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", "300")
    monkeypatch.delenv("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", raising=False)
    monkeypatch.setenv("SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL", "5")
    scaled = pd.Timeouts.from_env().scaled(8.0)
    assert (scaled.bootstrap, scaled.waiting) == (2400.0, 2400.0)  # 300 emulated s, as SGLang waits
    assert (scaled.heartbeat_interval, scaled.heartbeat_max_failure) == (5.0, 2)
    assert pd.Timeouts.from_env().scaled(1.0) == pd.Timeouts.from_env()
