"""The open-loop generator against real processes: an emulated SGLang server, then PD pairs behind the real routers.

Each process binds a loopback IP of its own (`e2e.serving.emulator.tests.harness.Stack`). The emulated servers have
no capacity model yet (issue 31, items 1-3): these runs check the wiring and the measurements (every request
streamed and timed, exact lengths, the files written, the bounds), not a server's capacity.
"""

from __future__ import annotations

import asyncio
import csv
import itertools
import json
import math
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from disaggspec.sglang.profiles import PROFILES
from e2e.serving.emulator.tests.harness import HTTP_PORT, Stack, sglang_args, wait_for
from e2e.serving.load.cli import main
from e2e.serving.load.client import Bounds, Request, run
from e2e.serving.load.pools import PoolSampler, ready_servers
from e2e.serving.routers import ensure_router_venv
from e2e.serving.traffic import Endpoint, NotLoopback

COLOCATED_ARGS = [a for a in sglang_args("prefill") if a not in ("--disaggregation-mode", "prefill")]
VERSIONS = ("0.5.2", "0.5.23")
_SUBNETS = itertools.count()


def _subnet() -> str:
    """A /24 of its own: 127.245-249.x, apart from the emulator suites' 127.250-254 (which run at the same time)."""
    n = os.getpid() * 8 + next(_SUBNETS)
    return f"127.{245 + n // 250 % 5}.{n % 250 + 1}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One colocated emulated SGLang 0.5.23 server (no PD: it answers by itself); its base URL."""
    with Stack(tmp_path_factory.mktemp("procs"), subnet=_subnet()) as stack:
        proc = stack.emulator("0.5.23", "colocated", 1, args=COLOCATED_ARGS)
        url = f"http://{stack.ip(1)}:{HTTP_PORT}"
        try:
            wait_for(url + "/health", proc=proc)
            yield url
        except BaseException:
            print(stack.logs())
            raise


def _pod(role: str, ready: bool, worker: str | None = None) -> dict[str, Any]:
    labels = {"disaggspec.io/service": "llama", "disaggspec.io/role": role}
    if worker is not None:
        labels["leaderworkerset.sigs.k8s.io/worker-index"] = worker
    status = "True" if ready else "False"
    return {"metadata": {"labels": labels}, "status": {"conditions": [{"type": "Ready", "status": status}]}}


PODS = [_pod("prefill", True), _pod("decode", True, "0"), _pod("decode", False, "0"), _pod("decode", True, "1")]
"""1 ready prefill; 2 decode group leaders, 1 of them ready; a ready worker (not a server of its own)."""


class _Pods:
    """The API server's answer to the pool sampler's list call."""

    def __init__(self) -> None:
        self.calls = 0

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None) -> Any:
        assert (method, path) == ("GET", "/api/v1/namespaces/ns/pods")
        assert query == {"labelSelector": "disaggspec.io/service=llama"}
        self.calls += 1
        return {"items": PODS}


def test_ready_servers_count_leaders_by_role() -> None:
    assert ready_servers(PODS) == {"decode": 1, "prefill": 1}
    terminating = _pod("router", True)
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert ready_servers([terminating]) == {"router": 0}


def test_cli_run_against_an_emulated_server(server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    argv = ["--url", server, "--rate", "4", "--duration", "8", "--seed", "3", "--out", str(out)]
    argv += ["--prompt-tokens", "uniform:50:400", "--output-tokens", "uniform:8:24", "--sla-ttft-ms", "2000"]
    argv += ["--sla-itl-ms", "200", "--api", "chat"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "goodput" in printed and "generator CPU" in printed

    summary = json.loads((out / "summary.json").read_text())
    requests = summary["requests"]
    assert 15 <= requests["scheduled"] <= 55  # Poisson, mean 32 (seed 3 gives one fixed count)
    assert requests["succeeded"] == requests["sent"] == requests["scheduled"] == requests["met_sla"]
    assert summary["failures"] == {} and summary["model"] == "llama-emulated"
    for name in ("ttft_ms", "itl_ms", "e2e_ms"):
        assert summary[name]["p50"] > 0 and summary[name]["p99"] >= summary[name]["p50"]
    # The emulator decodes at 100 tokens/s per request: the ITL says so.
    assert 8 <= summary["itl_ms"]["p50"] <= 40
    assert summary["goodput_rps"] == summary["achieved_rps"] > 0
    assert summary["generator"]["cpu_ms_per_request"] > 0

    with (out / "requests.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == requests["scheduled"]
    for row in rows:
        assert row["kind"] == "ok" and row["output_tokens"] == row["output_tokens_asked"], row
        assert float(row["ttft"]) > 0 and float(row["itl"]) > 0 and float(row["sent"]) >= float(row["scheduled"])
    with (out / "timeline.csv").open() as handle:
        seconds = list(csv.DictReader(handle))
    span = max(summary["elapsed_s"], summary["window_s"])  # rounded to the ms: the row count may be one more
    assert math.ceil(span - 0.001) <= len(seconds) <= math.ceil(span + 0.001)
    assert sum(int(s["offered"]) for s in seconds) == requests["scheduled"]
    assert sum(int(s["completed"]) for s in seconds) == requests["succeeded"]
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # The same seed schedules the same requests (capped at 6: the first 6); the prompts are exactly as long as
    # asked (the emulator counts the tokens it was sent).
    again = tmp_path / "again"
    assert main([*argv[:-2], "--api", "completions", "--max-requests", "6", "--out", str(again)]) == 0
    with (again / "requests.csv").open() as handle:
        rerun = list(csv.DictReader(handle))
    assert [(r["scheduled"], r["prompt_tokens"], r["output_tokens_asked"]) for r in rerun] == [
        (r["scheduled"], r["prompt_tokens"], r["output_tokens_asked"]) for r in rows[:6]
    ]
    assert all(r["prompt_tokens_served"] == r["prompt_tokens"] for r in rerun)
    # The cap ended the arrivals early: the offered rate is measured up to the first arrival left out.
    capped = json.loads((again / "summary.json").read_text())
    assert float(rows[5]["scheduled"]) < capped["window_s"] == round(float(rows[6]["scheduled"]), 3) < 8


def test_bounds_and_refusals(server: str, tmp_path: Path) -> None:
    long = [Request(i, 0.05 * i, 20, 300) for i in range(4)]  # 300 tokens: 3 s each at 100 tokens/s

    # At most 2 in flight: the third and fourth are not sent (queueing them would close the loop).
    report = asyncio.run(run(long, server, bounds=Bounds(max_concurrency=2, timeout=0.6, duration=5)))
    assert [r.kind for r in report.results] == ["timeout", "timeout", "client-cap", "client-cap"]
    assert all(r.sent is None for r in report.results[2:])
    assert all(0.55 < (r.e2e or 0) < 1.5 and r.ttft is not None for r in report.results[:2])
    # Every request still in flight when the drain time after the last arrival ends is cut, and says so.
    report = asyncio.run(run(long, server, bounds=Bounds(timeout=30, drain=0.4, duration=5)))
    assert [r.kind for r in report.results] == ["cancelled"] * 4
    assert report.elapsed < 1.5
    # A caller's stop: nothing leaves after it (a long wait for the next arrival included).
    stop = threading.Event()
    late = [Request(0, 0.0, 20, 4), Request(1, 30.0, 20, 4)]
    threading.Timer(0.3, stop.set).start()
    report = asyncio.run(run(late, server, stop=stop))
    assert [r.kind for r in report.results] == ["ok", "stopped"] and report.elapsed < 1
    # Arrivals past the duration, or past the request cap, are never scheduled.
    assert [r.index for r in Bounds(max_requests=2, duration=0.12).admit(long)] == [0, 1]

    class Nowhere:
        refresh_interval: float | None = None

        def refresh(self) -> None:
            pass

        def pick(self) -> Endpoint | None:
            return None

    report = asyncio.run(run(long[:1], Nowhere()))
    assert report.results[0].kind == "no-endpoint"

    class Elsewhere(Nowhere):
        def pick(self) -> Endpoint | None:
            return Endpoint("http://192.0.2.7:30000", "elsewhere")

    with pytest.raises(NotLoopback):  # a target that picks an address off loopback ends the load, nothing is sent
        asyncio.run(run(long[:1], Elsewhere()))
    with pytest.raises(NotLoopback):
        asyncio.run(run(long[:1], "http://10.1.2.3:30000"))
    assert main(["--url", "http://localhost:30000", "--rate", "1", "--out", str(tmp_path)]) == 2
    assert main(["--url", server, "--rate", "1", "--service", "llama", "--out", str(tmp_path)]) == 2


def test_pool_samples_reach_the_timeline_and_the_plot(server: str, tmp_path: Path) -> None:
    pods = _Pods()
    sampler = PoolSampler(pods, "ns", "llama")
    requests = [Request(i, 0.25 * i, 16, 4) for i in range(8)]
    report = asyncio.run(run(requests, server, pools=sampler, pool_interval=0.5, bounds=Bounds(duration=2)))
    assert pods.calls >= 3 and all(counts == {"decode": 1, "prefill": 1} for _, counts in report.pool_samples)
    from e2e.serving.load.plot import plot
    from e2e.serving.load.sla import Sla, timeline

    rows = timeline(report, Sla(ttft_ms=100))
    assert rows[0]["ready_decode"] == 1 and rows[-1]["ready_prefill"] == 1
    plot(rows, Sla(ttft_ms=100), tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 10_000


@pytest.mark.parametrize("version", VERSIONS)
def test_through_the_real_router(version: str, tmp_path: Path) -> None:
    """Prefill + decode (EAGLE3, so a decode step emits up to 2 tokens) behind the release's real router."""
    ensure_router_venv(PROFILES[version].router)  # type: ignore[index]
    with Stack(tmp_path / "procs", subnet=_subnet()) as stack:
        try:
            stack.emulator(version, "prefill", 1)
            stack.emulator(version, "decode", 2)
            router = stack.router(version, 1, 2, 3, extra=("--worker-startup-check-interval", "1"))
            url = f"http://{stack.ip(3)}:{HTTP_PORT}"
            wait_for(url + "/readiness", proc=router, timeout=60)
            requests = [Request(i, 0.15 * i, 32 + 8 * i, 12) for i in range(12)]
            for api in ("chat", "generate"):
                report = asyncio.run(run(requests, url, api=api, model="llama-emulated", bounds=Bounds(duration=4)))
                kinds = {r.kind for r in report.results}
                assert kinds == {"ok"}, [(r.kind, r.error) for r in report.results if not r.ok]
                for r in report.results:
                    assert r.output_tokens == 12 and r.prompt_tokens_served is not None
                    assert (r.ttft or 0) > 0 and (r.itl or 0) > 0 and r.endpoint == stack.ip(3)
        except BaseException:
            print(stack.logs())
            raise
