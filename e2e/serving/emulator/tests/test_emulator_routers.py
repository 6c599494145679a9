"""End to end without Kubernetes: emulated prefill + decode behind the REAL router of each release (sglang-router
0.1.9 for SGLang 0.5.2, smg 1.13.0 for 0.5.23), started from the cached router venvs with a static
`--prefill URL BOOTSTRAP_PORT --decode URL`, each process on its own loopback IP.

The PD timeouts are shortened through SGLang's own environment variables (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT,
..._WAITING_TIMEOUT) and the 0.5.23 decode's prefill-info retries through emulate options, so failures are quick.
"""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest

from disaggspec.sglang.profiles import PROFILES
from e2e.serving.emulator.tests.harness import (
    INCOMPLETE,
    Stack,
    metric,
    request,
    sse_events,
    stream_lines,
    wait_for,
)
from e2e.serving.routers import ensure_router_venv

VERSIONS = ("0.5.2", "0.5.23")
MODEL = "llama-emulated"
FAST_ENV = {"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "2", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "2"}
FAST = ("ensure-retries=3", "ensure-retry-interval=0.2", "drain-poll-seconds=0.2")


@pytest.fixture(scope="module", autouse=True)
def router_venvs() -> None:
    """Both pinned routers, installed once into the cache (a minute or two when cold)."""
    for version in VERSIONS:
        ensure_router_venv(PROFILES[version].router)  # type: ignore[index]


def start_pd(
    stack: Stack,
    version: str,
    *,
    prefill: tuple[str, ...] = (),
    decode: tuple[str, ...] = (),
    router_bootstrap_port: int = 8998,
    wait_ready: bool = True,
) -> str:
    """Prefill on .1, decode on .2, router on .3, all started at once; returns the router's URL.

    Both routers re-check a worker that failed its first health check after --worker-startup-check-interval (smg:
    30 s by default, sglang-router 0.1.9: 10 s); 1 s lets the router start before its workers listen.
    """
    stack.emulator(version, "prefill", 1, emulate=(*FAST, *prefill), env=FAST_ENV)
    stack.emulator(version, "decode", 2, emulate=(*FAST, *decode), env=FAST_ENV)
    r = stack.router(
        version, 1, 2, 3, bootstrap_port=router_bootstrap_port, extra=("--worker-startup-check-interval", "1")
    )
    url = f"http://{stack.ip(3)}:30000"
    if wait_ready:
        wait_for(url + "/readiness", proc=r, timeout=60)
    return url


def report_of(payload: Any) -> dict[str, Any]:
    """The emulator's pairing report: top-level `emulator`, or meta_info.emulator in /generate."""
    assert isinstance(payload, dict), payload
    found = payload.get("emulator") or (payload.get("meta_info") or {}).get("emulator")
    assert isinstance(found, dict), payload
    return found


def metrics_of(stack: Stack, host: int) -> str:
    return request("GET", f"http://{stack.ip(host)}:30000/metrics")[1].decode()


BODIES: dict[str, dict[str, Any]] = {
    "/generate": {"text": "tell me something", "sampling_params": {"max_new_tokens": 6}},
    "/v1/completions": {"model": MODEL, "prompt": "tell me something", "max_tokens": 6},
    "/v1/chat/completions": {"model": MODEL, "messages": [{"role": "user", "content": "tell me"}], "max_tokens": 6},
}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_api_through_the_real_router_pairs_prefill_and_decode_then_drains(stack: Stack, version: str) -> None:
    url = start_pd(stack, version, decode=("tokens-per-second=40",))
    for path, body in BODIES.items():
        status, raw, _ = request("POST", url + path, {**body, "stream": False})
        assert status == 200, (path, raw[:500])
        payload = json.loads(raw)
        report = report_of(payload)
        assert report["served_by"] == "decode" and report["emulated"] is True
        assert (report["prefill_ip"], report["decode_ip"]) == (stack.ip(1), stack.ip(2))
        assert report["prefill_pod"] == "prefill-1" and report["decode_pod"] == "decode-2"
        assert report["bootstrap_port"] == 8998 and isinstance(report["bootstrap_room"], int)
        assert report["fingerprint_match"] is True and report["sglang_version"] == version
        assert report["prefill_revision"] is None and report["decode_revision"] is None
        assert "emulated-token-1" in raw.decode()
        if path == "/generate":
            assert payload["meta_info"]["completion_tokens"] == 6
            assert payload["meta_info"]["finish_reason"] == {"type": "length", "length": 6}
            assert payload["meta_info"]["spec_verify_ct"] >= 1
        else:
            assert payload["usage"]["completion_tokens"] == 6 and payload["choices"][0]["finish_reason"] == "length"
            assert payload["model"] == MODEL
        status, raw, headers = request("POST", url + path, {**body, "stream": True})
        events = list(sse_events(raw))
        assert status == 200 and INCOMPLETE not in headers, (path, raw[:500])
        assert events[-1] == "[DONE]" and len(events) >= 3, (path, events)
        reports = [report_of(e) for e in events[:-1]]
        assert all(
            (r["prefill_ip"], r["decode_ip"], r["fingerprint_match"]) == (stack.ip(1), stack.ip(2), True)
            for r in reports
        )
        assert len({r["bootstrap_room"] for r in reports}) == 1
    decode_metrics, prefill_metrics = metrics_of(stack, 2), metrics_of(stack, 1)
    assert metric(decode_metrics, "sglang:num_requests_total") >= 6  # + the warm-up request, as SGLang counts it
    assert metric(decode_metrics, "sglang:generation_tokens_total") >= 36
    assert metric(decode_metrics, "sglang:spec_accept_length") > 1.0
    assert metric(prefill_metrics, "sglang:num_requests_total") >= 6
    for text in (decode_metrics, prefill_metrics):
        assert metric(text, "sglang:num_bootstrap_failed_reqs_total") == 0
        assert metric(text, "sglang:num_transfer_failed_reqs_total") == 0
    speed = "sglang:kv_transfer_speed_gb_s" if version == "0.5.2" else "sglang:kv_transfer_speed_gb_s_count"
    assert metric(prefill_metrics, speed) > 0

    # SIGTERM mid-stream: the in-flight stream completes, health turns 503, the process exits 0 once drained.
    decode = next(p for p in stack.procs if p.name == "decode-2")
    body = {**BODIES["/v1/completions"], "max_tokens": 30, "stream": True}
    lines = stream_lines(url + "/v1/completions", body)
    assert next(lines) == "HTTP 200"
    received = [next(lines)]
    decode.popen.send_signal(signal.SIGTERM)
    # SGLang answers health checks 503 at once, so routers stop sending it traffic...
    assert request("GET", f"http://{stack.ip(2)}:30000/health", timeout=5)[0] == 503
    # ...but still serves a request that reaches it (it does not refuse new work while draining).
    direct = {"text": "x", "sampling_params": {"max_new_tokens": 2}, "bootstrap_host": "2.2.2.2", "bootstrap_room": 0}
    assert request("POST", f"http://{stack.ip(2)}:30000/generate", direct, timeout=10)[0] == 200
    received += list(lines)
    assert INCOMPLETE not in received and received[-1] == "data: [DONE]", received[-3:]
    text = "".join(
        json.loads(line[len("data: ") :])["choices"][0]["text"] for line in received[:-1] if line.startswith("data: {")
    )
    assert "emulated-token-30" in text
    assert decode.popen.wait(timeout=15) == 0
    assert request("GET", f"http://{stack.ip(2)}:30000/health", timeout=5)[0] == 0  # gone: connection refused
    status, _, _ = request("POST", url + "/v1/completions", {**BODIES["/v1/completions"], "stream": False}, timeout=30)
    assert status != 200


@pytest.mark.parametrize("version", VERSIONS)
def test_router_with_the_wrong_bootstrap_port_fails_requests_visibly(stack: Stack, version: str) -> None:
    url = start_pd(stack, version, router_bootstrap_port=8999)
    started = time.monotonic()
    status, raw, _ = request("POST", url + "/v1/completions", {**BODIES["/v1/completions"], "stream": False})
    assert status == 500, raw[:500]
    text = raw.decode()
    assert "Decode handshake failed" in text, text
    expected = (
        f"Could not fetch prefill parallel info from bootstrap_addr: {stack.ip(1)}:8999"
        if version == "0.5.2"
        else "Aborted by AbortReq."
    )
    assert expected in text
    assert time.monotonic() - started < 15
    assert metric(metrics_of(stack, 2), "sglang:num_bootstrap_failed_reqs_total") >= 1
    # The prefill waited for a decode that never came, then gave up after SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT.
    deadline = time.monotonic() + 8
    while metric(metrics_of(stack, 1), "sglang:num_bootstrap_failed_reqs_total") < 1:
        assert time.monotonic() < deadline, "the prefill never timed out its bootstrap"
        time.sleep(0.3)


def test_fingerprint_mismatch_is_refused_naming_the_field_0_5_23(stack: Stack) -> None:
    """Patch 0002 (default `fingerprint-mismatch=abort`): the request fails with the message naming the prefill and
    the field, on both the OpenAI route and a streamed /generate."""
    url = start_pd(stack, "0.5.23", prefill=("hidden-size=2048",))
    status, raw, _ = request("POST", url + "/v1/chat/completions", {**BODIES["/v1/chat/completions"], "stream": False})
    assert status == 500, raw[:500]
    text = raw.decode()
    assert f"Prefill server {stack.ip(1)}:8998 refused" in text
    assert "Speculative config mismatch between prefill and decode (draft_hidden_size: prefill=2048 decode=4096" in text
    status, raw, _ = request("POST", url + "/generate", {**BODIES["/generate"], "stream": True})
    events = [e for e in sse_events(raw) if e != "[DONE]"]
    assert status == 200 and events, raw[:500]
    finish = events[-1]["meta_info"]["finish_reason"]
    assert finish["type"] == "abort" and finish["status_code"] == 500 and "draft_hidden_size" in finish["message"]


def test_mismatched_prefill_fails_alone_and_the_decode_keeps_serving_0_5_23(stack: Stack) -> None:
    """One decode behind two prefills, one of them mismatched: its requests fail, the matched prefill's are served
    by the same decode, which stays up (patch 0002 aborts per prefill instead of killing the server)."""
    workers = [
        stack.emulator("0.5.23", "prefill", 1, emulate=(*FAST, "hidden-size=2048"), env=FAST_ENV),
        stack.emulator("0.5.23", "prefill", 4, emulate=FAST, env=FAST_ENV),
        decode := stack.emulator("0.5.23", "decode", 2, emulate=FAST, env=FAST_ENV),
    ]
    for host, worker in zip((1, 4, 2), workers, strict=True):
        wait_for(f"http://{stack.ip(host)}:30000/health", proc=worker)  # the router round-robins over healthy ones
    second_prefill = ("--prefill", f"http://{stack.ip(4)}:30000", "8998")
    router = stack.router(
        "0.5.23", 1, 2, 3, extra=(*second_prefill, "--policy", "round_robin", "--worker-startup-check-interval", "1")
    )
    url = f"http://{stack.ip(3)}:30000"
    wait_for(url + "/readiness", proc=router, timeout=60)
    # smg retries a request the decode fails with 500 (on the other prefill, round robin): the client sees only
    # successes, and each failure is the decode refusing prefill 1, not a dead decode.
    for _ in range(6):
        status, raw, _ = request("POST", url + "/v1/completions", {**BODIES["/v1/completions"], "stream": False})
        assert status == 200, raw[:500]
        assert report_of(json.loads(raw))["prefill_pod"] == "prefill-4"
    assert metric(metrics_of(stack, 2), "sglang:num_bootstrap_failed_reqs_total") >= 1
    log = decode.output()
    assert f"Prefill server {stack.ip(1)}:8998 refused: Speculative config mismatch" in log
    # Judged once, then refused for the back-off without asking its bootstrap server again.
    assert log.count("refusing it for 30 s") == 1, log[-2000:]
    assert decode.popen.poll() is None


def test_fingerprint_mismatch_crash_mode_emulates_the_earlier_image_0_5_23(stack: Stack) -> None:
    """`fingerprint-mismatch=crash`: the image before patch 0002's second pass, where the RuntimeError killed the
    decode scheduler and so the server (SIGKILL via kill_process_tree)."""
    p = stack.emulator("0.5.23", "prefill", 1, emulate=(*FAST, "hidden-dtype=float32"), env=FAST_ENV)
    d = stack.emulator("0.5.23", "decode", 2, emulate=(*FAST, "fingerprint-mismatch=crash"), env=FAST_ENV)
    wait_for(f"http://{stack.ip(1)}:30000/health", proc=p)
    wait_for(f"http://{stack.ip(2)}:30000/health", proc=d)
    body = {**BODIES["/generate"], "bootstrap_host": stack.ip(1), "bootstrap_port": 8998, "bootstrap_room": 7}
    status, _, _ = request("POST", f"http://{stack.ip(2)}:30000/generate", body, timeout=10)
    assert status == 0  # the connection died with the server
    assert d.popen.wait(timeout=10) == -signal.SIGKILL
    assert "draft_hidden_dtype: prefill='float32' decode='float16'" in d.output()


def test_fingerprint_mismatch_is_served_and_recorded_on_0_5_2(stack: Stack) -> None:
    """0.5.2 has no fingerprint check (upstream or in the 0.5.2 patches): the pair serves; the report says so."""
    url = start_pd(stack, "0.5.2", prefill=("hidden-size=2048",))
    status, raw, _ = request("POST", url + "/v1/completions", {**BODIES["/v1/completions"], "stream": False})
    assert status == 200, raw[:500]
    report = report_of(json.loads(raw))
    assert report["fingerprint_match"] is False and report["prefill_fingerprint"] != report["decode_fingerprint"]


@pytest.mark.parametrize("version", VERSIONS)
def test_cross_revision_pairing_fails_visibly_through_the_router(stack: Stack, version: str) -> None:
    """The emulator's test oracle (`revision`, not SGLang): a router pairing a prefill and a decode of different
    revisions gets HTTP 500 naming both revisions, and the report of a same-revision pair names its revision."""
    url = start_pd(stack, version, prefill=("revision=bbbb",), decode=("revision=aaaa",))
    status, raw, _ = request("POST", url + "/v1/completions", {**BODIES["/v1/completions"], "stream": False})
    assert status == 500, raw[:500]
    text = raw.decode()
    assert "cross-revision pairing" in text and "revision bbbb" in text and "revision aaaa" in text, text


@pytest.mark.parametrize("version", VERSIONS)
def test_loading_worker_keeps_the_router_unready(stack: Stack, version: str) -> None:
    url = start_pd(stack, version, prefill=("load-seconds=3",), wait_ready=False)
    prefill_health = f"http://{stack.ip(1)}:30000/health"
    seen: list[int] = []
    router_ready_while_loading = False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        code = request("GET", prefill_health, timeout=5)[0]
        if not seen or seen[-1] != code:
            seen.append(code)
        if code != 200 and request("GET", url + "/readiness", timeout=5)[0] == 200:
            router_ready_while_loading = True
        if code == 200:
            break
        time.sleep(0.1)
    # Loading: the port is closed (SGLang starts uvicorn after the model is loaded); then 503 while warming up.
    assert seen[:1] == [0] and seen[-1] == 200 and 503 in seen, seen
    assert not router_ready_while_loading
    wait_for(url + "/readiness", timeout=60)
    status, raw, _ = request("POST", url + "/v1/completions", {**BODIES["/v1/completions"], "stream": False})
    assert status == 200, raw[:300]
