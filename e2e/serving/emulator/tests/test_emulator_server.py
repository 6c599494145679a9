"""The emulator's own HTTP surface, without a router: per-release routes, errors as SGLang answers them, faults."""

from __future__ import annotations

import json
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from disaggspec.servinghealth import samples
from e2e.serving.emulator.tests.harness import Stack, request, sglang_args, sse_events, wait_for

FAST_ENV = {"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "2", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "2"}
FAST = ("ensure-retries=2", "ensure-retry-interval=0.1", "drain-poll-seconds=0.2")


@pytest.mark.parametrize("version", ["0.5.2", "0.5.23"])
def test_routes_errors_and_transfer_failure(stack: Stack, version: str) -> None:
    p = stack.emulator(version, "prefill", 1, emulate=(*FAST, "fail=transfer-failure"), env=FAST_ENV)
    d = stack.emulator(version, "decode", 2, emulate=FAST, env=FAST_ENV)
    base = f"http://{stack.ip(2)}:30000"
    wait_for(f"http://{stack.ip(1)}:30000/health", proc=p)
    wait_for(base + "/health", proc=d)

    # Routes the release has, and 404 (FastAPI's JSON) for those it has not.
    present = {"/get_model_info", "/get_server_info", "/v1/models", "/ping", "/metrics"}
    absent = {"/loads"}
    if version == "0.5.2":
        present |= {"/get_load"}
        absent |= {"/v1/loads", "/ready", "/model_info", "/server_info"}
    else:
        present |= {"/v1/loads", "/ready", "/model_info", "/server_info"}
        absent |= {"/get_load"}
    for path in present:
        assert request("GET", base + path)[0] == 200, path
    for path in absent:
        status, raw, _ = request("GET", base + path)
        assert (status, json.loads(raw)) == (404, {"detail": "Not Found"}), path
    models = json.loads(request("GET", base + "/v1/models")[1])
    assert models["data"][0]["id"] == "llama-emulated" and models["data"][0]["owned_by"] == "sglang"
    info = json.loads(request("GET", base + ("/get_server_info" if version == "0.5.2" else "/server_info"))[1])
    assert info["version"] == version and info["disaggregation_mode"] == "decode"
    assert info["served_model_name"] == "llama-emulated" and info["speculative_algorithm"] == "EAGLE3"
    if version == "0.5.23":
        loads = json.loads(request("GET", base + "/v1/loads?include=core,disagg,queues,memory")[1])
        assert loads["loads"][0]["disaggregation"]["mode"] == "decode" and "speculative" not in loads["loads"][0]
        assert request("GET", base + "/v1/loads?include=bogus")[0] == 400

    # A PD request without a bootstrap room is a 400 abort (SGLang's message, 0.5.2's typo included).
    status, raw, _ = request("POST", base + "/generate", {"text": "x"})
    assert status == 400
    word = "boostrap" if version == "0.5.2" else "bootstrap"
    assert f"Disaggregated request received without {word} room id" in json.loads(raw)["error"]["message"]

    # OpenAI routes want application/json, like validate_json_request.
    status, _, _ = request("POST", base + "/v1/completions", {"prompt": "x"}, headers={"Content-Type": "text/plain"})
    assert status == 400

    # fail=transfer-failure on the prefill: both sides fail the request, with SGLang's messages and counters.
    room = {"bootstrap_host": stack.ip(1), "bootstrap_port": 8998, "bootstrap_room": 42}
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 4}, **room}
    with ThreadPoolExecutor(max_workers=2) as pool:  # both halves at once, as a PD router sends them
        to_prefill = pool.submit(request, "POST", f"http://{stack.ip(1)}:30000/generate", body)
        status, raw, _ = request("POST", base + "/generate", body)
        prefill_status, prefill_raw, _ = to_prefill.result()
    assert status == 500, raw
    message = json.loads(raw)["message"]
    assert "Decode transfer failed for request rank=0" in message
    if version == "0.5.2":
        assert "Failed to get kvcache from prefill instance, it might be dead" in message
    else:
        assert f"Failed to send kv chunk of 42 to {stack.ip(2)}" in message
    assert prefill_status == 500 and "Prefill transfer failed for request rank=0" in json.loads(prefill_raw)["message"]
    text = request("GET", base + "/metrics")[1].decode()
    assert re.search(r"^sglang:num_transfer_failed_reqs_total\{.*\} 1\.0$", text, flags=re.M), text
    prefill_text = request("GET", f"http://{stack.ip(1)}:30000/metrics")[1].decode()
    assert re.search(r"^sglang:num_transfer_failed_reqs_total\{.*\} 1\.0$", prefill_text, flags=re.M)


@pytest.mark.parametrize("version", ["0.5.2", "0.5.23"])
def test_tp8_server_counts_each_failure_on_every_rank_and_the_operator_reads_it_once(
    stack: Stack, version: str
) -> None:
    """Issue 29: every TP rank of a server counts a failed request in its own `tp_rank` series (facts.EVERY_RANK),
    so a tp8 pair with N failed transfers exports eight series of N on each side; the operator's reading of one
    pod's /metrics (`servinghealth.samples.parse`) is N, not 8N."""
    args = {role: sglang_args(role) for role in ("prefill", "decode")}
    for argv in args.values():
        argv[argv.index("--tp-size") + 1] = "8"
    p = stack.emulator(version, "prefill", 1, emulate=(*FAST, "fail=transfer-failure"), args=args["prefill"])
    d = stack.emulator(version, "decode", 2, emulate=FAST, env=FAST_ENV, args=args["decode"])
    wait_for(f"http://{stack.ip(1)}:30000/health", proc=p)
    wait_for(f"http://{stack.ip(2)}:30000/health", proc=d)
    failed = 3
    with ThreadPoolExecutor(max_workers=2) as pool:
        for room in range(failed):
            body: dict[str, Any] = {"text": "hello", "sampling_params": {"max_new_tokens": 4}}
            body |= {"bootstrap_host": stack.ip(1), "bootstrap_port": 8998, "bootstrap_room": 100 + room}
            to_prefill = pool.submit(request, "POST", f"http://{stack.ip(1)}:30000/generate", body)
            assert request("POST", f"http://{stack.ip(2)}:30000/generate", body)[0] == 500
            assert to_prefill.result()[0] == 500
    for host in (1, 2):
        text = request("GET", f"http://{stack.ip(host)}:30000/metrics")[1].decode()
        series = re.findall(r'^sglang:num_transfer_failed_reqs_total\{.*tp_rank="(\d)".*\} (\S+)$', text, flags=re.M)
        assert sorted(series) == [(str(rank), f"{failed}.0") for rank in range(8)], text
        bootstrap = re.findall(r"^sglang:num_bootstrap_failed_reqs_total\{.*\} (\S+)$", text, flags=re.M)
        assert bootstrap == ["0.0"] * 8, text
        sample = samples.parse(text)
        assert (sample.transfer_failed, sample.bootstrap_failed, sample.failures) == (failed, 0, failed), sample


def test_streamed_abort_per_release(stack: Stack) -> None:
    """A 5xx abort mid-stream: 0.5.2 breaks the stream (no [DONE]); 0.5.23 sends the abort as a chunk."""
    old = stack.emulator("0.5.2", "decode", 1, emulate=FAST, env=FAST_ENV)
    new = stack.emulator("0.5.23", "decode", 2, emulate=FAST, env=FAST_ENV)
    body = {"text": "x", "stream": True, "bootstrap_host": stack.ip(9), "bootstrap_port": 8998, "bootstrap_room": 1}
    for proc, host in ((old, 1), (new, 2)):
        wait_for(f"http://{stack.ip(host)}:30000/health", proc=proc)
    status, raw, _ = request("POST", f"http://{stack.ip(1)}:30000/generate", body)
    assert status == 200 and b"[DONE]" not in raw
    status, raw, _ = request("POST", f"http://{stack.ip(2)}:30000/generate", body)
    events = list(sse_events(raw))
    assert status == 200 and events[-1] == "[DONE]"
    assert events[0]["meta_info"]["finish_reason"]["type"] == "abort"


def test_crash_after_n_requests_and_colocated_mode(stack: Stack) -> None:
    args = sglang_args("null", speculative=())
    args = [a for a in args if a not in ("--disaggregation-mode", "null")]
    proc = stack.emulator("0.5.23", "null", 1, emulate=("crash-after=1", "output-tokens=5"), args=args)
    base = f"http://{stack.ip(1)}:30000"
    wait_for(base + "/health", proc=proc)
    # The warm-up request counts: crash-after=1 lets it through, then the next request kills the process.
    assert request("GET", base + "/health")[0] == 200
    status, _, _ = request("POST", base + "/generate", {"text": "x"}, timeout=10)
    assert status == 0
    assert proc.popen.wait(timeout=10) == -signal.SIGKILL
    assert "Scheduler hit an exception" in proc.output()


def test_sigterm_before_load_finishes_exits_cleanly(stack: Stack) -> None:
    proc = stack.emulator("0.5.2", "prefill", 1, emulate=("load-seconds=30",))
    wait_for(f"http://{stack.ip(1)}:8998/health", proc=proc)  # the bootstrap server listens before the model loads
    assert request("GET", f"http://{stack.ip(1)}:30000/health", timeout=2)[0] == 0
    proc.popen.send_signal(signal.SIGTERM)
    assert proc.popen.wait(timeout=15) == 0


def _gauge(base: str, name: str) -> float:
    text = request("GET", base + "/metrics")[1].decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    assert values, name
    return sum(values) / len(values)


def test_accept_length_changes_at_run_time_and_the_gauge_follows_recent_steps(stack: Stack) -> None:
    """`POST /emulator/options` changes the emulated draft model; `sglang:spec_accept_length` averages the last
    40 verify steps (SGLang's decode log interval), so it follows the change instead of the whole history."""
    args = [a for a in sglang_args("null") if a not in ("--disaggregation-mode", "null")]
    proc = stack.emulator("0.5.23", "null", 1, emulate=("accept-length=1.0", "output-tokens=41"), args=args)
    base = f"http://{stack.ip(1)}:30000"
    wait_for(base + "/health", proc=proc)
    generate = {"text": "x", "sampling_params": {"max_new_tokens": 41}}
    assert request("POST", base + "/generate", generate, timeout=20)[0] == 200
    assert _gauge(base, "sglang:spec_accept_length") == 1.0

    status, raw, _ = request("POST", base + "/emulator/options", {"accept-length": "3"})
    assert (status, json.loads(raw)) == (200, {"accept-length": 2.0})  # clamped to the 2 draft tokens
    for _ in range(2):
        assert request("POST", base + "/generate", generate, timeout=20)[0] == 200
    assert _gauge(base, "sglang:spec_accept_length") == 2.0

    assert request("POST", base + "/emulator/options", {"tokens-per-second": "5"})[0] == 400  # start-up only
    assert request("POST", base + "/emulator/options", {"accept-length": "zero"})[0] == 400


def _pd_request(stack: Stack, prefill: int, decode: int, room: int) -> tuple[tuple[int, bytes], tuple[int, bytes]]:
    """One /generate sent to both halves at once, as a PD router does: ((decode status, body), (prefill's))."""
    body = {
        "text": "hello",
        "sampling_params": {"max_new_tokens": 4},
        "bootstrap_host": stack.ip(prefill),
        "bootstrap_port": 8998,
        "bootstrap_room": room,
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        to_prefill = pool.submit(request, "POST", f"http://{stack.ip(prefill)}:30000/generate", body, timeout=20)
        status, raw, _ = request("POST", f"http://{stack.ip(decode)}:30000/generate", body, timeout=20)
        prefill_status, prefill_raw, _ = to_prefill.result()
    return (status, raw), (prefill_status, prefill_raw)


@pytest.mark.parametrize("version", ["0.5.2", "0.5.23"])
def test_cross_revision_pairing_fails_that_request_and_the_decode_keeps_serving(stack: Stack, version: str) -> None:
    """The test oracle (`--emulate revision`, not SGLang): a decode of revision A fails a request bound to a prefill
    of revision B with HTTP 500 naming both revisions, the prefill's half fails too, and the decode serves its own
    revision's prefill (and a prefill without a revision) before and after."""
    same = stack.emulator(version, "prefill", 1, emulate=(*FAST, "revision=aaaa"), env=FAST_ENV)
    other = stack.emulator(version, "prefill", 3, emulate=(*FAST, "revision=bbbb"), env=FAST_ENV)
    unset = stack.emulator(version, "prefill", 4, emulate=FAST, env=FAST_ENV)
    decode = stack.emulator(version, "decode", 2, emulate=(*FAST, "revision=aaaa"), env=FAST_ENV)
    for host, proc in ((1, same), (3, other), (4, unset), (2, decode)):
        wait_for(f"http://{stack.ip(host)}:30000/health", proc=proc)

    (status, raw), _ = _pd_request(stack, 1, 2, room=11)
    assert status == 200, raw
    report = json.loads(raw)["meta_info"]["emulator"]
    assert (report["prefill_revision"], report["decode_revision"]) == ("aaaa", "aaaa")

    (status, raw), (prefill_status, prefill_raw) = _pd_request(stack, 3, 2, room=12)
    assert status == 500, raw
    message = json.loads(raw)["message"]
    assert "cross-revision pairing" in message and "revision bbbb" in message and "revision aaaa" in message
    assert prefill_status == 500 and "cross-revision pairing" in json.loads(prefill_raw)["message"]
    assert "cross-revision pairing" in decode.output()

    for prefill, room in ((1, 13), (4, 14)):
        (status, raw), _ = _pd_request(stack, prefill, 2, room=room)
        assert status == 200, raw
    assert json.loads(raw)["meta_info"]["emulator"]["prefill_revision"] is None
    assert decode.popen.poll() is None


@pytest.mark.parametrize("version", ["0.5.2", "0.5.23"])
def test_load_failure_exits_1_without_ever_listening(stack: Stack, version: str) -> None:
    """`fail=load-failure`: SGLang's loader error after load-seconds, exit 1; the HTTP port never listened (the
    prefill's bootstrap server did, from the start, as SGLang's tokenizer manager starts it before the model)."""
    proc = stack.emulator(version, "prefill", 1, emulate=("load-seconds=1", "fail=load-failure"))
    wait_for(f"http://{stack.ip(1)}:8998/health", proc=proc)
    while proc.popen.poll() is None:
        assert request("GET", f"http://{stack.ip(1)}:30000/health", timeout=1)[0] == 0
        time.sleep(0.05)
    assert proc.popen.wait(timeout=10) == 1
    output = proc.output()
    assert "Cannot find any model weights with `meta-llama/Llama-3.1-8B-Instruct`" in output, output
    assert "Received sigquit from a child process. It usually means the child failed." in output
    assert request("GET", f"http://{stack.ip(1)}:8998/health", timeout=1)[0] == 0
