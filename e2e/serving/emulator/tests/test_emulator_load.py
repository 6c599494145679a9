"""The capacity model behind the real router of each release: a burst of long prompts queues on the prefill, a burst
of long outputs on the decode, and SGLang's own gauges (scraped from /metrics, names per release) say which, while
every request still succeeds. Counts and gauges only: nothing here asserts a duration."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from disaggspec.sglang.profiles import PROFILES
from e2e.serving.emulator.tests.harness import Stack, metric, request, wait_for
from e2e.serving.routers import ensure_router_venv

VERSIONS = ("0.5.2", "0.5.23")
BURST = 16
TIME_SCALE = "time-scale=1"
"""H100 time: the bursts last a few seconds, sampled every 50 ms."""


@pytest.fixture(scope="module", autouse=True)
def router_venvs() -> None:
    for version in VERSIONS:
        ensure_router_venv(PROFILES[version].router)  # type: ignore[index]


def _start(stack: Stack, version: str, *, prefill: tuple[str, ...] = (), decode: tuple[str, ...] = ()) -> str:
    stack.emulator(version, "prefill", 1, emulate=(TIME_SCALE, *prefill))
    stack.emulator(version, "decode", 2, emulate=(TIME_SCALE, *decode))
    router = stack.router(version, 1, 2, 3, extra=("--worker-startup-check-interval", "1"))
    url = f"http://{stack.ip(3)}:30000"
    wait_for(url + "/readiness", proc=router, timeout=60)
    return url


def _burst(url: str, prompt: int, output: int) -> tuple[list[int], threading.Thread]:
    statuses: list[int] = []
    body = {
        "input_ids": list(range(prompt)),
        "sampling_params": {"max_new_tokens": output, "ignore_eos": True},
    }

    def send() -> None:
        statuses.append(request("POST", url + "/generate", body, timeout=120)[0])

    threads = [threading.Thread(target=send) for _ in range(BURST)]
    for thread in threads:
        thread.start()

    def join() -> None:
        for thread in threads:
            thread.join()

    waiter = threading.Thread(target=join)
    waiter.start()
    return statuses, waiter


def _peaks(stack: Stack, gauges: dict[int, tuple[str, ...]], until: Callable[[], bool]) -> dict[int, dict[str, float]]:
    """The largest value each gauge showed on each host while the burst ran (sampled every 50 ms)."""
    peak = {host: dict.fromkeys(names, 0.0) for host, names in gauges.items()}
    deadline = time.monotonic() + 120
    while not until() and time.monotonic() < deadline:
        for host, names in gauges.items():
            text = request("GET", f"http://{stack.ip(host)}:30000/metrics")[1].decode()
            for name in names:
                peak[host][name] = max(peak[host][name], metric(text, name))
        time.sleep(0.05)
    return peak


def _bootstrap_queue(version: str) -> str:
    """The prefill's bootstrap-queue gauge: 0.5.2 names it prealloc (metrics/collector.py:257), 0.5.23 bootstrap."""
    return "sglang:num_prefill_prealloc_queue_reqs" if version == "0.5.2" else "sglang:num_prefill_bootstrap_queue_reqs"


@pytest.mark.parametrize("version", VERSIONS)
def test_long_prompts_queue_on_the_prefill(stack: Stack, version: str) -> None:
    # 16 x 8,000-token prompts: one prefill step each (8,192-token chunk budget, ~0.27 s on an H100). The decode
    # pre-allocates them all at once and waits for their KV (transfer queue); nothing waits to run on it.
    url = _start(stack, version)
    statuses, waiter = _burst(url, 8_000, 4)
    gauges = {1: ("sglang:num_queue_reqs",), 2: ("sglang:num_queue_reqs", "sglang:num_decode_transfer_queue_reqs")}
    peaks = _peaks(stack, gauges, lambda: not waiter.is_alive())
    waiter.join()
    prefill, decode = peaks[1], peaks[2]
    assert statuses == [200] * BURST
    assert prefill["sglang:num_queue_reqs"] >= BURST / 2, prefill
    assert decode["sglang:num_decode_transfer_queue_reqs"] >= BURST / 2, decode
    assert decode["sglang:num_queue_reqs"] <= 1, decode


@pytest.mark.parametrize("version", VERSIONS)
def test_long_outputs_queue_on_the_decode_and_hold_the_prefill_in_bootstrap(stack: Stack, version: str) -> None:
    # A decode pool of 4,000 tokens pre-allocates six (100 + 512 reserved)-token requests, each growing to 700
    # tokens: the other ten wait for pre-allocation, and their prefill halves wait in the prefill's bootstrap queue.
    url = _start(stack, version, decode=("kv-pool-tokens=4000",))
    statuses, waiter = _burst(url, 100, 600)
    gauges: dict[int, tuple[str, ...]] = {
        1: ("sglang:num_queue_reqs", _bootstrap_queue(version)),
        2: ("sglang:num_decode_prealloc_queue_reqs", "sglang:token_usage"),
    }
    peaks = _peaks(stack, gauges, lambda: not waiter.is_alive())
    waiter.join()
    prefill, decode = peaks[1], peaks[2]
    assert statuses == [200] * BURST
    assert decode["sglang:num_decode_prealloc_queue_reqs"] >= BURST / 2, decode
    assert decode["sglang:token_usage"] > 0.5, decode
    assert prefill[_bootstrap_queue(version)] >= BURST / 2, prefill
    # The prefill only ever sees what the decode just admitted (a few at once), never the backlog.
    assert prefill["sglang:num_queue_reqs"] <= BURST / 4, prefill
    capacity = request("GET", f"http://{stack.ip(2)}:30000/emulator/capacity")[1].decode()
    assert '"max_total_num_tokens": 4000' in capacity
