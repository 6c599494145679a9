"""The SLA maths on synthetic results: percentiles, classification, goodput, failures, and the per-second timeline."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from e2e.serving.load.client import Request, Result, RunReport
from e2e.serving.load.sla import Sla, percentile, summary, timeline, write_requests, write_timeline


def ok(index: int, sent: float, ttft: float, itl: float, tokens: int = 10) -> Result:
    """A successful request: its end is ttft + itl x (tokens - 1) after it was sent."""
    return Result(
        index,
        scheduled=sent,
        prompt_tokens=100,
        output_tokens_asked=tokens,
        sent=sent,
        status=200,
        output_tokens=tokens,
        ttft=ttft,
        itl=itl,
        e2e=ttft + itl * (tokens - 1),
        max_gap=itl,
    )


def test_percentile_interpolates_like_numpy() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0.5) == 2.5
    assert math.isclose(percentile(values, 0.9) or 0, 3.7)  # numpy.percentile([1, 2, 3, 4], 90) == 3.7
    assert percentile(values, 0.0) == 1.0 and percentile(values, 1.0) == 4.0
    assert percentile([7.0], 0.99) == 7.0 and percentile([], 0.5) is None
    with pytest.raises(ValueError):
        percentile(values, 1.5)


def test_sla_classification() -> None:
    sla = Sla(ttft_ms=500, itl_ms=50)
    assert sla.met(ok(0, 0.0, 0.5, 0.05))  # on the targets: met (<=)
    assert sla.verdicts(ok(0, 0.0, 0.6, 0.01)) == {"ttft_ms": False, "itl_ms": True}
    assert sla.verdicts(ok(0, 0.0, 0.1, 0.051)) == {"ttft_ms": True, "itl_ms": False}
    failed = Result(1, 0.0, 100, 10, kind="http", sent=0.0, status=503, e2e=0.01)
    assert not sla.met(failed) and sla.verdicts(failed) == {"ttft_ms": False, "itl_ms": False}
    unmeasured = Result(2, 0.0, 100, 10, sent=0.0, status=200, e2e=0.1)  # ok, but no token was timed
    assert not sla.met(unmeasured)
    assert Sla().met(ok(0, 0.0, 9.0, 9.0)) and not Sla().met(failed)  # no targets: every success counts
    assert not Sla(e2e_ms=100).met(ok(0, 0.0, 0.05, 0.01, tokens=10))  # e2e 140 ms
    with pytest.raises(ValueError):
        Sla(ttft_ms=0)


def _report() -> RunReport:
    results = [
        ok(0, 0.1, 0.2, 0.02),  # ends 0.48: good
        ok(1, 0.5, 0.9, 0.02),  # TTFT miss; ends 1.58
        ok(2, 1.2, 0.1, 0.08),  # ITL miss; ends 2.02
        ok(3, 1.7, 0.1, 0.01, tokens=30),  # good; ends 2.09, 30 tokens
        Result(4, 2.2, 100, 10, kind="http", sent=2.2, status=503, error="no prefill", e2e=0.01),
        Result(5, 2.3, 100, 10, kind="client-cap", error="2 requests in flight"),
        Result(6, 2.4, 100, 10, kind="timeout", sent=2.4, e2e=1.0, error="no end within 1s"),
    ]
    requests = [Request(r.index, r.scheduled, 100, 10) for r in results]
    report = RunReport(requests, results, elapsed=max(r.done for r in results), window=3.0, cpu_seconds=0.06)
    report.pool_samples = [(0.2, {"decode": 1, "prefill": 1}), (2.5, {"decode": 2, "prefill": 1})]
    return report


def test_summary() -> None:
    report = _report()
    figures = summary(report, Sla(ttft_ms=500, itl_ms=50), {"api": "chat"})
    assert figures["api"] == "chat"
    assert figures["requests"] == {"scheduled": 7, "sent": 6, "succeeded": 4, "met_sla": 2, "failed": 3}
    assert report.elapsed == 3.4  # the timeout ends last
    assert figures["offered_rps"] == round(7 / 3.0, 3)
    assert figures["achieved_rps"] == round(4 / 3.4, 3)
    assert figures["goodput_rps"] == round(2 / 3.4, 3)
    assert figures["goodput_output_tokens_per_s"] == round(40 / 3.4, 3)
    assert figures["output_tokens_per_s"] == round(60 / 3.4, 3)
    assert figures["sla_attainment"] == round(2 / 7, 4)
    assert figures["sla_misses"] == {"itl_ms": 1, "ttft_ms": 1}
    assert figures["failures"] == {"client-cap": 1, "http": 1, "timeout": 1}
    assert figures["ttft_ms"]["p50"] == 150.0  # successes' TTFTs 100, 100, 200, 900 ms
    assert figures["itl_ms"]["p99"] == pytest.approx(78.2)  # 10, 20, 20, 80: 20 + 60 x 0.97
    assert figures["generator"] == {"cpu_s": 0.06, "cpu_ms_per_request": 10.0}  # per request sent


def test_timeline(tmp_path: Path) -> None:
    report = _report()
    rows = timeline(report, Sla(ttft_ms=500, itl_ms=50))
    assert [r["second"] for r in rows] == [0, 1, 2, 3]
    assert [r["offered"] for r in rows] == [2, 2, 3, 0]
    assert [r["sent"] for r in rows] == [2, 2, 2, 0]
    assert [r["completed"] for r in rows] == [1, 1, 2, 0]
    assert [r["met_sla"] for r in rows] == [1, 0, 1, 0]
    assert [r["failed"] for r in rows] == [0, 0, 2, 1]  # the 503 and the client cap in second 2, the timeout in 3
    # In flight at the end of each second: #1 (0.5-1.58) at 1 s; #2 (1.2-2.02) and #3 (1.7-2.09) at 2 s;
    # #6 (2.4-3.4) at 3 s.
    assert [r["in_flight"] for r in rows] == [1, 2, 1, 0]
    assert rows[0]["ttft_p50_ms"] == 200.0 and rows[1]["ttft_p50_ms"] == 100.0  # by first-token time
    assert rows[3]["ttft_p50_ms"] is None
    assert rows[2]["itl_p50_ms"] == 45.0  # requests #2 and #3 completed in second 2: ITL 80 and 10 ms
    assert [r["ready_prefill"] for r in rows] == [1, 1, 1, 1]
    assert [r["ready_decode"] for r in rows] == [1, 1, 2, 2]

    path = tmp_path / "timeline.csv"
    write_timeline(rows, path)
    written = list(csv.DictReader(path.open()))
    assert len(written) == 4 and written[3]["ttft_p50_ms"] == "" and written[3]["ready_decode"] == "2"
    write_requests(report.results, tmp_path / "requests.csv")
    lines = list(csv.DictReader((tmp_path / "requests.csv").open()))
    assert [line["kind"] for line in lines] == ["ok"] * 4 + ["http", "client-cap", "timeout"]
    assert lines[5]["sent"] == ""
