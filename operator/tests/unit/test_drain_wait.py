"""The SGLang image's preStop helper (images/sglang/drain_wait.py): which gauges it waits for, its bound, its report.

The helper runs for real in the serving simulation (the pod runner runs exec preStop hooks through the launcher):
e2e/tests/test_serving_local.py scales pools down under load and reads its report from the removed pods' logs. The
gauge names are checked against both wheels with the emulator's metric facts (e2e/serving/emulator/facts.py).
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from e2e.serving.emulator.facts import FACTS_0_5_2, FACTS_0_5_23

REPO = Path(__file__).resolve().parents[3]


def _helper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("drain_wait", REPO / "images" / "sglang" / "drain_wait.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


drain_wait = _helper()

EXPOSITION = """\
# HELP sglang:num_decode_transfer_queue_reqs The number of requests in the decode transfer queue.
# TYPE sglang:num_decode_transfer_queue_reqs gauge
sglang:num_decode_transfer_queue_reqs{dp_rank="0",model_name="m"} 2.0
sglang:num_decode_transfer_queue_reqs{dp_rank="1",model_name="m"} 1.0
sglang:num_decode_prealloc_queue_reqs{model_name="m"} 4.0
sglang:num_running_reqs{model_name="m"} 17.0
sglang:num_decode_transfer_queue_reqs_total 99
"""


def test_every_gauge_it_waits_for_is_a_pd_queue_gauge_of_a_pinned_release() -> None:
    exported = {m.defined_as for facts in (FACTS_0_5_2, FACTS_0_5_23) for m in facts.metrics}
    assert set(drain_wait.PD_QUEUE_GAUGES) <= exported
    for facts in (FACTS_0_5_2, FACTS_0_5_23):
        names = {m.defined_as for m in facts.metrics}
        pd_queues = {
            n
            for n in names
            if n.endswith("_queue_reqs") and n.startswith(("sglang:num_prefill_", "sglang:num_decode_"))
        }
        assert len(pd_queues) == 4  # each release's two prefill and two decode PD queues: all waited for
        assert pd_queues <= set(drain_wait.PD_QUEUE_GAUGES)


def test_in_flight_sums_the_dp_ranks_of_each_pd_gauge_and_ignores_the_rest() -> None:
    assert drain_wait.in_flight(EXPOSITION.splitlines()) == {
        "sglang:num_decode_transfer_queue_reqs": 3.0,
        "sglang:num_decode_prealloc_queue_reqs": 4.0,
    }


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_wait_ends_when_the_queues_are_empty_and_reports_what_it_waited_for() -> None:
    clock = _Clock()
    readings = iter([{"sglang:num_prefill_inflight_queue_reqs": 3.0}, {"sglang:num_prefill_inflight_queue_reqs": 1.0}])
    report = drain_wait.wait(lambda: next(readings, {}), bound=60, clock=clock, sleep=clock.sleep)
    assert report == (
        "KV transfers and bootstrap rooms in flight: 3 (sglang:num_prefill_inflight_queue_reqs 3); "
        "waited 1.0 s for them"
    )


def test_wait_stops_at_its_bound_and_says_what_is_left() -> None:
    clock = _Clock()
    report = drain_wait.wait(
        lambda: {"sglang:num_decode_prealloc_queue_reqs": 2.0}, bound=10, clock=clock, sleep=clock.sleep
    )
    assert "bound of 10 s reached with 2 (sglang:num_decode_prealloc_queue_reqs 2) left" in report
    assert clock.now == pytest.approx(10.0)


def test_unreadable_metrics_end_the_wait_at_once() -> None:
    def refused() -> dict[str, float]:
        raise ConnectionRefusedError("refused")

    assert drain_wait.wait(refused, bound=60, sleep=lambda s: None).startswith("metrics unreadable (refused)")


@pytest.fixture
def server() -> Iterator[tuple[int, list[str]]]:
    """A /metrics endpoint whose decode transfer queue empties after three reads."""
    reads: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            reads.append(self.path)
            left = max(0, 3 - len(reads))
            body = f'sglang:num_decode_transfer_queue_reqs{{dp_rank="0"}} {left}.0\n'.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], reads
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_main_pauses_polls_the_servers_metrics_and_writes_its_report_to_the_log(
    server: tuple[int, list[str]], tmp_path: Path
) -> None:
    port, reads = server
    log = tmp_path / "container.log"
    argv = ["--host", "127.0.0.1", "--port", str(port), "--pause", "0", "--bound", "20", "--log", str(log)]
    assert drain_wait.main(argv) == 0
    lines = log.read_text().splitlines()
    assert lines[0] == (
        "[disaggspec preStop] KV transfers and bootstrap rooms in flight at deletion: 2 "
        "(sglang:num_decode_transfer_queue_reqs 2); leaving the routers: pause 0 s"
    )
    assert lines[1].startswith(
        "[disaggspec preStop] KV transfers and bootstrap rooms in flight: 1 (sglang:num_decode_transfer_queue_reqs 1); "
        "waited "
    )
    assert reads == ["/metrics"] * 3
