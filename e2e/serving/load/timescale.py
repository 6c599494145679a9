"""Emulated time against wall-clock time: a load planned in GPU seconds, sent `scale` times slower, reported back.

An emulated server run with `emulator.disaggspec.io/time-scale=S` (docs/serving-emulator.md) takes S wall-clock
seconds per emulated second for every step and KV transfer, so one small machine can drive many servers. The load
that measures it must slow down by the same factor, or it offers S times the rate the user asked for. Callers give
everything (arrival times, the arrival window, the per-request timeout and the drain time, SLA targets) in emulated
seconds; `wall_requests` / `wall_bounds` turn the schedule into wall-clock seconds for `client.run`, and
`to_emulated` divides every measured time of the report by S again (arrival, send and latency times, the run's
elapsed time and window, the pool samples' times), so the summary, the timeline and the plot read in emulated
seconds: TTFT/ITL/e2e in emulated ms, rates in emulated requests/s, the schedule lag in emulated ms. The generator's
CPU seconds stay wall-clock seconds (its cost on this machine). Pure functions; `client.run(..., time_scale=S)` uses
them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from e2e.serving.load.client import Bounds, Request, Result, RunReport


def check_scale(scale: float) -> float:
    """`scale` when it is a finite number > 0 (1: emulated time is wall-clock time)."""
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"time scale must be a finite number > 0, not {scale}")
    return float(scale)


def wall_requests(requests: Sequence[Request], scale: float) -> list[Request]:
    """The same requests due `scale` times later (wall-clock seconds after the start)."""
    return [replace(r, at=r.at * scale) for r in requests]


def wall_bounds(bounds: Bounds, scale: float) -> Bounds:
    """The bounds in wall-clock seconds: the arrival window, the per-request timeout and the drain, times `scale`
    (request and concurrency caps are counts and stay)."""
    drain = None if bounds.drain is None else bounds.drain * scale
    return replace(bounds, duration=bounds.duration * scale, timeout=bounds.timeout * scale, drain=drain)


def _div(value: float | None, scale: float) -> float | None:
    return None if value is None else value / scale


def emulated_result(result: Result, scale: float, scheduled: float | None = None) -> Result:
    """`result` with its times in emulated seconds; `scheduled`, when given, is the emulated due time as planned
    (exact, where dividing the wall time would round)."""
    return replace(
        result,
        scheduled=result.scheduled / scale if scheduled is None else scheduled,
        sent=_div(result.sent, scale),
        ttft=_div(result.ttft, scale),
        e2e=_div(result.e2e, scale),
        itl=_div(result.itl, scale),
        max_gap=_div(result.max_gap, scale),
    )


def to_emulated(report: RunReport, scale: float, planned: Sequence[Request] = ()) -> RunReport:
    """A wall-clock report measured at `scale` as an emulated-time report (see the module documentation).

    `planned` are the requests in emulated time, matched by index, so that due times come back exactly as planned."""
    due = {r.index: r for r in planned}
    results = [emulated_result(r, scale, due[r.index].at if r.index in due else None) for r in report.results]
    requests = [due.get(r.index) or replace(r, at=r.at / scale) for r in report.requests]
    return RunReport(
        requests,
        results,
        elapsed=report.elapsed / scale,
        window=report.window / scale,
        cpu_seconds=report.cpu_seconds,  # the generator's own cost on this machine: wall-clock CPU seconds
        pool_samples=[(t / scale, counts) for t, counts in report.pool_samples],
        time_scale=scale,
    )
