"""Runtime-health benchmark: does a pool pod that never answers `/metrics` slow reconcile passes? Prints figures.

Run: `.venv/bin/python -m e2e.perf.bench_health [--services 50] [--seconds 6]`.

In one process: the real `Reconciler` (over the unit tests' in-memory API server, `operator/tests/unit/fakes.py`, so
a pass costs only the operator's own work) reconciles `--services` services over and over from 4 threads, while the
real `servinghealth.Monitor` measures their pods every 0.5 s over real HTTP with the default 2 s timeout and
concurrency 8: pods answer from a local server with a recorded SGLang 0.5.23 exposition, and a "blackholed" pod's
address is a listening socket that never accepts, so each request to it waits out the whole timeout. Scenarios: no
measurement (source off), every pod answering, one blackholed pod, every decode pod blackholed. For each: reconcile
pass latency (p50, p99, max), passes per second, and how long the monitor's rounds took. It asserts nothing.
"""

from __future__ import annotations

import argparse
import http.server
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "operator"))  # the unit tests' in-memory API server (`tests.unit.fakes`)

from disaggspec.config import HealthSettings, OperatorConfig  # noqa: E402
from disaggspec.reconcile import Reconciler  # noqa: E402
from disaggspec.runtime.caches import DisaggSpecServiceCache  # noqa: E402
from disaggspec.servinghealth.monitor import Monitor  # noqa: E402
from tests.unit.dss_cases import edited  # noqa: E402
from tests.unit.fakes import FakeClient  # noqa: E402

RECORDED = REPO / "operator/tests/unit/recorded/sglang-0.5.23-decode.prom"
ANSWERING, BLACKHOLE = "127.0.0.1", "127.0.0.77"
NAMESPACE = "bench"


def _answering_server(port: int) -> http.server.ThreadingHTTPServer:
    body = RECORDED.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer((ANSWERING, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _blackhole(port: int) -> socket.socket:
    """Listens and never accepts: connects queue in the backlog (or their SYNs are dropped), no byte comes back."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((BLACKHOLE, port))
    sock.listen(1)
    return sock


def _pod(name: str, service: str, role: str, ip: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": NAMESPACE,
            "name": name,
            "labels": {"disaggspec.io/service": service, "disaggspec.io/role": role},
        },
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _pods(services: list[str], blackholed: str) -> list[dict[str, Any]]:
    pods = []
    for index, name in enumerate(services):
        silent_decode = blackholed == "every decode" or (blackholed == "one" and index == 0)
        pods.append(_pod(f"{name}-decode-a-1", name, "decode", BLACKHOLE if silent_decode else ANSWERING))
        pods.append(_pod(f"{name}-prefill-a-1", name, "prefill", ANSWERING))
    return pods


def run(count: int, seconds: float, scenario: str, port: int) -> None:
    client = FakeClient()
    services = [f"svc-{i:03d}" for i in range(count)]
    for name in services:
        obj = edited({})
        obj["metadata"].update(name=name, namespace=NAMESPACE)
        client.create(obj)
    settings = HealthSettings(interval_seconds=0.5, port=port, source="off" if scenario == "off" else "scrape")
    pods = _pods(services, scenario)
    monitor = Monitor(
        settings,
        list_pods=lambda: pods,
        services=lambda: [(NAMESPACE, name) for name in services],
        requeue=lambda keys: None,
    )
    reconciler = Reconciler(
        client,
        OperatorConfig(health=settings),
        lambda *a: None,
        services=DisaggSpecServiceCache(),
        runtime_health=monitor.verdict,
    )
    for _ in range(2):  # converge: children applied, then seen
        for name in services:
            reconciler.reconcile(NAMESPACE, name, client.children)
    rounds: list[float] = []
    stop = threading.Event()

    def measure() -> None:
        while not stop.is_set():
            monitor.run_once()
            rounds.append(monitor.last_round_seconds)
            stop.wait(max(0.0, settings.interval_seconds - monitor.last_round_seconds))

    measurer = threading.Thread(target=measure, daemon=True)
    if scenario != "off":
        measurer.start()
    latencies: list[float] = []
    lock = threading.Lock()

    def work(offset: int) -> None:
        index = offset
        while not stop.is_set():
            started = time.perf_counter()
            reconciler.reconcile(NAMESPACE, services[index % count], client.children)
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)
            index += 4

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(4)]
    for worker in workers:
        worker.start()
    time.sleep(seconds)
    stop.set()
    for worker in workers:
        worker.join()
    if scenario != "off":
        measurer.join()  # the round in flight finishes (and counts) before the next scenario starts
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)]
    round_text = (
        f"monitor rounds {len(rounds)}, median {statistics.median(rounds):.2f} s, max {max(rounds):.2f} s"
        if rounds
        else "no measurement"
    )
    print(
        f"{scenario:>13}: {len(latencies) / seconds:7.0f} passes/s, pass p50 {statistics.median(latencies) * 1e3:6.2f} "
        f"ms, p99 {p99 * 1e3:6.2f} ms, max {latencies[-1] * 1e3:6.2f} ms; {round_text}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--services", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args(argv)
    probe = socket.socket()
    probe.bind((ANSWERING, 0))
    port = probe.getsockname()[1]
    probe.close()
    _answering_server(port)
    hole = _blackhole(port)
    print(f"{args.services} services, 2 pool pods each, {args.seconds:.0f} s per scenario, 4 reconcile threads")
    try:
        for scenario in ("off", "all answering", "one", "every decode"):
            run(args.services, args.seconds, scenario, port)
    finally:
        hole.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
