"""Continuous background traffic against tiny local HTTP servers on 127.0.0.1: it follows a Service's endpoints as
they change, records which endpoint served each request, and always stops by itself at its bounds; no cluster."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from e2e.serving.continuous import continuous
from e2e.serving.servicetraffic import ServiceTarget
from e2e.serving.traffic import Load
from e2e.support.fakes import SERVICE, FakeApi, pod, serve_http


class _Answer(BaseHTTPRequestHandler):
    """An OpenAI completion with an emulator report naming the server, after a short think."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(0.005)
        name = self.headers.get("Host", "")  # host:port, which says which server answered
        emulator = {"prefill_pod": f"p-{name}", "decode_pod": f"d-{name}", "prefill_revision": "r1"}
        body = json.dumps({"choices": [{"text": "ok"}], "emulator": {**emulator, "decode_revision": "r1"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def load(**overrides: Any) -> Load:
    fields: dict[str, Any] = {
        "url": "",
        "model": "m",
        "streams": 3,
        "requests": 100_000,
        "duration": 30.0,
        "apis": ("completions",),
        "stream": False,
        "timeout": 5.0,
    }
    return Load(**{**fields, **overrides})


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_traffic_follows_the_service_endpoints_and_records_the_router() -> None:
    with serve_http(_Answer) as port_a, serve_http(_Answer) as port_b:
        api = FakeApi(SERVICE, [pod("r-a", "127.0.0.1", port=port_a), pod("r-b", "127.0.0.1", port=port_b)])
        began = time.monotonic()
        with continuous(load(), ServiceTarget(api, "ns", "llama-router")) as traffic:
            wait_until(lambda: len(traffic.outcomes()) >= 30)
            api.pods = [pod("r-a", "127.0.0.1", port=port_a), pod("r-b", "127.0.0.1", port=port_b, ready=False)]
            flipped = time.monotonic()
            wait_until(lambda: time.monotonic() > flipped + 1.0)
            report = traffic.stop()
            assert not traffic.running
    assert report.outcomes and not report.failures, report.summary()
    assert {o.router for o in report.outcomes} == {"r-a", "r-b"}
    # A request started well after r-b turned unready (the view is at most 200 ms old) went to r-a.
    later = [o for o in report.outcomes if began + o.started > flipped + 0.5]
    assert later and {o.router for o in later} == {"r-a"}
    first = report.outcomes[0]
    assert (first.prefill_revision, first.decode_revision) == ("r1", "r1") and first.prefill_pod is not None
    assert [o.index for o in report.outcomes] == list(range(len(report.outcomes)))


def test_a_fixed_url_records_its_ip_as_the_router() -> None:
    with serve_http(_Answer) as port, continuous(load(url=f"http://127.0.0.1:{port}", requests=4)) as traffic:
        wait_until(lambda: not traffic.running)
        report = traffic.stop()
    assert len(report.outcomes) == 4 and not report.failures
    assert {o.router for o in report.outcomes} == {"127.0.0.1"}


def test_it_stops_by_itself_at_its_request_budget_and_its_duration() -> None:
    with serve_http(_Answer) as port:
        api = FakeApi(SERVICE, [pod("r-a", "127.0.0.1", port=port)])
        with continuous(load(requests=7), ServiceTarget(api, "ns", "llama-router")) as traffic:
            wait_until(lambda: not traffic.running)
            assert len(traffic.stop().outcomes) == 7
        started = time.monotonic()
        with continuous(load(duration=0.5), ServiceTarget(api, "ns", "llama-router")) as traffic:
            wait_until(lambda: not traffic.running, timeout=5)
        assert time.monotonic() - started < 3
        assert traffic.stop().outcomes


def test_without_endpoints_requests_fail_at_a_bounded_rate() -> None:
    api = FakeApi(SERVICE, [])
    with continuous(load(duration=0.5, streams=2), ServiceTarget(api, "ns", "llama-router")) as traffic:
        wait_until(lambda: not traffic.running, timeout=5)
    report = traffic.stop()
    assert report.outcomes and len(report.outcomes) < 60
    assert all(
        not o.ok and o.router is None and "no ready endpoint: service ns/llama-router" in o.error
        for o in report.outcomes
    )
