"""The time scale: a schedule in emulated seconds sent S times slower, and the report read back in emulated seconds.

The conversion is checked on synthetic results (no server), then once end to end against a tiny in-process streaming
server on 127.0.0.1 that answers S times slower than the emulated latency asked of it, as a time-scaled emulator does.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from aiohttp import web

from e2e.serving.load.cli import report_lines
from e2e.serving.load.client import Bounds, Request, Result, RunReport, run
from e2e.serving.load.sla import Sla, summary, timeline
from e2e.serving.load.timescale import check_scale, to_emulated, wall_bounds, wall_requests

SCALE = 8.0


def _result(index: int, due: float, lag: float, ttft: float, itl: float, tokens: int = 11) -> Result:
    return Result(
        index,
        scheduled=due,
        prompt_tokens=64,
        output_tokens_asked=tokens,
        sent=due + lag,
        status=200,
        output_tokens=tokens,
        ttft=ttft,
        itl=itl,
        e2e=ttft + itl * (tokens - 1),
        max_gap=itl * 2,
    )


def _emulated_report() -> RunReport:
    """Four requests in emulated seconds: one misses the TTFT target, one the ITL target, one failed."""
    results = [
        _result(0, 0.1, 0.001, 0.2, 0.02),
        _result(1, 0.6, 0.002, 0.9, 0.02),  # TTFT 900 ms > 500
        _result(2, 1.3, 0.001, 0.1, 0.08),  # ITL 80 ms > 50
        Result(3, 1.9, 64, 11, kind="timeout", sent=1.901, e2e=1.0, error="no end"),
    ]
    requests = [Request(r.index, r.scheduled, 64, 11) for r in results]
    report = RunReport(requests, results, elapsed=max(r.done for r in results), window=2.0, cpu_seconds=0.05)
    report.pool_samples = [(0.5, {"prefill": 1, "decode": 2}), (2.5, {"prefill": 1, "decode": 3})]
    return report


def _as_wall(report: RunReport, scale: float) -> RunReport:
    """What `run` measures in wall-clock seconds when the servers are `scale` times slower: every time x scale."""

    def slow(value: float | None) -> float | None:
        return None if value is None else value * scale

    results = [
        Result(
            r.index,
            r.scheduled * scale,
            r.prompt_tokens,
            r.output_tokens_asked,
            kind=r.kind,
            sent=slow(r.sent),
            status=r.status,
            error=r.error,
            output_tokens=r.output_tokens,
            ttft=slow(r.ttft),
            e2e=slow(r.e2e),
            itl=slow(r.itl),
            max_gap=slow(r.max_gap),
        )
        for r in report.results
    ]
    wall = RunReport(
        wall_requests(report.requests, scale),
        results,
        elapsed=report.elapsed * scale,
        window=report.window * scale,
        cpu_seconds=report.cpu_seconds,  # the same work on this machine, however slowly it was sent
    )
    wall.pool_samples = [(t * scale, counts) for t, counts in report.pool_samples]
    return wall


def test_the_schedule_and_bounds_go_to_wall_time() -> None:
    requests = [Request(0, 0.0, 10, 5), Request(1, 0.25, 10, 5), Request(2, 1.5, 10, 5)]
    assert [r.at for r in wall_requests(requests, 4)] == [0.0, 1.0, 6.0]
    assert [(r.index, r.prompt_tokens, r.output_tokens) for r in wall_requests(requests, 4)] == [
        (0, 10, 5),
        (1, 10, 5),
        (2, 10, 5),
    ]
    bounds = wall_bounds(Bounds(max_requests=7, max_concurrency=3, duration=2.0, timeout=30.0, drain=5.0), 4)
    assert bounds == Bounds(max_requests=7, max_concurrency=3, duration=8.0, timeout=120.0, drain=20.0)
    assert wall_bounds(Bounds(drain=None), 4).drain is None  # still "the timeout", which is scaled
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            check_scale(bad)


def test_the_report_comes_back_in_emulated_time() -> None:
    emulated = _emulated_report()
    sla = Sla(ttft_ms=500, itl_ms=50)
    back = to_emulated(_as_wall(emulated, SCALE), SCALE, emulated.requests)
    assert back.time_scale == SCALE and back.cpu_seconds == emulated.cpu_seconds
    assert [r.at for r in back.requests] == [r.at for r in emulated.requests]  # exactly as planned
    assert [r.scheduled for r in back.results] == [r.scheduled for r in emulated.results]
    for got, want in zip(back.results, emulated.results, strict=True):
        for name in ("sent", "ttft", "itl", "e2e", "max_gap"):
            a, b = getattr(got, name), getattr(want, name)
            assert (a is None and b is None) or math.isclose(a, b), (name, a, b)
    assert math.isclose(back.elapsed, emulated.elapsed) and math.isclose(back.window, emulated.window)
    assert [t for t, _ in back.pool_samples] == pytest.approx([0.5, 2.5])

    # The summary of the converted report is the emulated run's: TTFT/ITL/e2e and the lag in emulated ms, rates in
    # emulated requests/s; only the generator's CPU is wall-clock, and the scale is recorded.
    context = {"shape": "poisson", "lengths": "fixed", "api": "completions", "model": "m"}
    figures, reference = summary(back, sla, context), summary(emulated, sla, context)
    assert figures["time_scale"] == SCALE and reference["time_scale"] == 1.0
    assert (
        figures["requests"]
        == reference["requests"]
        == {
            "scheduled": 4,
            "sent": 4,
            "succeeded": 3,
            "met_sla": 1,
            "failed": 1,
        }
    )
    for key in ("window_s", "elapsed_s", "offered_rps", "achieved_rps", "goodput_rps", "output_tokens_per_s"):
        assert figures[key] == pytest.approx(reference[key], abs=0.002), key
    assert figures["offered_rps"] == 2.0  # 4 requests over the 2 emulated seconds (16 wall seconds: 0.25/s)
    for key in ("ttft_ms", "itl_ms", "e2e_ms", "max_gap_ms", "schedule_lag_ms"):
        for q in ("p50", "p99"):
            assert figures[key][q] == pytest.approx(reference[key][q], abs=0.02), (key, q)
    assert figures["ttft_ms"]["p50"] == 200.0 and figures["schedule_lag_ms"]["p50"] == 1.0
    assert figures["sla_misses"] == {"itl_ms": 1, "ttft_ms": 1}
    assert figures["generator"] == reference["generator"]  # CPU: the same wall-clock seconds
    assert any("time scale 8" in line for line in report_lines(figures))
    assert not any("time scale" in line for line in report_lines(reference))

    # The timeline counts emulated seconds: as many rows, the same counts in each.
    rows, expected = timeline(back, sla), timeline(emulated, sla)
    assert len(rows) == len(expected) == math.ceil(emulated.elapsed)
    for key in ("offered", "sent", "completed", "met_sla", "failed", "in_flight", "ready_decode"):
        assert [r[key] for r in rows] == [e[key] for e in expected], key


# ---- end to end against a slow in-process server ------------------------------------------------------------------

FIRST_TOKEN_S = 0.05
"""Emulated seconds to the first token the fake server takes (times its scale in wall-clock seconds)."""
PER_TOKEN_S = 0.01


def _fake_server(scale: float) -> web.Application:
    """A streamed /v1/completions that answers `scale` times slower than FIRST_TOKEN_S, then PER_TOKEN_S a token."""

    async def completions(request: web.Request) -> web.StreamResponse:
        asked = int((await request.json())["max_tokens"])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(FIRST_TOKEN_S * scale)
        for n in range(asked):
            if n:
                await asyncio.sleep(PER_TOKEN_S * scale)
            await response.write(b"data: " + json.dumps({"choices": [{"text": " x"}]}).encode() + b"\n\n")
        usage = {"choices": [], "usage": {"completion_tokens": asked, "prompt_tokens": 16}}
        await response.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    return app


async def _serve_and_run(scale: float, requests: list[Request], bounds: Bounds) -> RunReport:
    runner = web.AppRunner(_fake_server(scale))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        return await run(requests, f"http://127.0.0.1:{port}", bounds=bounds, window=1.0, time_scale=scale)
    finally:
        await runner.cleanup()


def test_run_sends_slower_and_reports_emulated_time() -> None:
    """Against a server 6 times slower: sent 6 times later and slower, measured back in emulated time. The timeout
    (0.2 emulated s) is below the wall-clock answer time (about 0.6 s): only scaled does every request succeed."""
    scale = 6.0
    requests = [Request(i, 0.25 * i, 16, 6) for i in range(4)]
    report = asyncio.run(_serve_and_run(scale, requests, Bounds(duration=1.0, timeout=0.2)))
    assert [r.kind for r in report.results] == ["ok"] * 4, [r.error for r in report.results]
    assert report.time_scale == scale and [r.scheduled for r in report.results] == [0.0, 0.25, 0.5, 0.75]
    # Emulated: first token after 0.05 s, 0.01 s a token. Bounds are loose (a loaded machine answers late in wall
    # time, which shrinks by the scale); unscaled, the TTFT alone would read 0.3 s and the ITL 0.06 s.
    for r in report.results:
        assert r.sent is not None and r.ttft is not None and r.itl is not None
        assert 0 <= r.sent - r.scheduled < 0.05
        assert FIRST_TOKEN_S * 0.9 <= r.ttft < FIRST_TOKEN_S * 3
        assert PER_TOKEN_S * 0.9 <= r.itl < PER_TOKEN_S * 3
    assert report.window == 1.0 and 0.8 < report.elapsed < 1.5
    figures = summary(report, Sla(ttft_ms=200))
    assert figures["time_scale"] == scale and figures["offered_rps"] == 4.0 and figures["sla_attainment"] == 1.0
