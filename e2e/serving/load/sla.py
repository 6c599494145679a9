"""The SLA report of an open-loop run: goodput, latency percentiles, failures by kind, and a per-second timeline.

A request *meets the SLA* when it succeeded and each target that is set holds: time to first token <= `ttft_ms`,
inter-token latency (the request's mean time per output token after the first) <= `itl_ms`, end to end <= `e2e_ms`;
this is SGLang's own goodput rule (sglang 0.5.23 benchmark/goodput.py:25-43, TTFT, TPOT and E2EL SLOs). Goodput is
the requests (and their output tokens) that met it, per second of the run (start to the end of the last request, as
SGLang divides by the benchmark's duration). The offered rate is the scheduled requests over the arrival window;
the achieved rate is the successful requests over the run. Percentiles interpolate linearly between the two nearest
ranks (numpy's default, which SGLang's benchmark uses). A report sent at a time scale (`timescale`) is already in
emulated seconds: every figure here reads in emulated time, except the generator's CPU (wall-clock), and the summary
records the scale as `time_scale`. Everything here is pure: results in, numbers out.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from e2e.serving.load.client import FAILURE_KINDS, Result, RunReport

QUANTILES: Final = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class Sla:
    """Latency targets in milliseconds; None: not judged."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value is not None and not value > 0:
                raise ValueError(f"SLA {name} must be > 0, not {value}")

    def verdicts(self, result: Result) -> dict[str, bool]:
        """Per set target, whether `result` met it (a failed request or a missing measurement misses it)."""
        measured = {"ttft_ms": result.ttft, "itl_ms": result.itl, "e2e_ms": result.e2e}
        return {
            name: result.ok and measured[name] is not None and measured[name] * 1000 <= target  # type: ignore[operator]
            for name, target in asdict(self).items()
            if target is not None
        }

    def met(self, result: Result) -> bool:
        """Whether `result` succeeded and met every set target."""
        return result.ok and all(self.verdicts(result).values())


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0 <= q <= 1) with linear interpolation between closest ranks; None for no values."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile must be within [0, 1], not {q}")
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 2)


def latency_summary(values: Sequence[float]) -> dict[str, float | None]:
    """Mean and p50/p90/p99 in milliseconds of `values` (seconds)."""
    out: dict[str, float | None] = {"mean": _ms(sum(values) / len(values)) if values else None}
    for q in QUANTILES:
        out[f"p{round(q * 100)}"] = _ms(percentile(values, q))
    return out


def _rate(count: float, seconds: float) -> float:
    return round(count / seconds, 3) if seconds > 0 else 0.0


def summary(report: RunReport, sla: Sla, context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run's figures (JSON-ready)."""
    results = report.results
    ok = [r for r in results if r.ok]
    good = [r for r in ok if sla.met(r)]
    sent = [r for r in results if r.sent is not None]
    failures = Counter(r.kind for r in results if not r.ok)
    misses: Counter[str] = Counter()
    for r in ok:
        misses.update(name for name, held in sla.verdicts(r).items() if not held)
    lags = [r.sent - r.scheduled for r in sent if r.sent is not None]
    return {
        **(dict(context) if context else {}),
        "sla": {k: v for k, v in asdict(sla).items() if v is not None},
        "requests": {
            "scheduled": len(results),
            "sent": len(sent),
            "succeeded": len(ok),
            "met_sla": len(good),
            "failed": sum(failures.values()),
        },
        "window_s": round(report.window, 3),
        "elapsed_s": round(report.elapsed, 3),
        "offered_rps": _rate(len(results), report.window),
        "achieved_rps": _rate(len(ok), report.elapsed),
        "goodput_rps": _rate(len(good), report.elapsed),
        "goodput_output_tokens_per_s": _rate(sum(r.output_tokens for r in good), report.elapsed),
        "output_tokens_per_s": _rate(sum(r.output_tokens for r in ok), report.elapsed),
        "sla_attainment": round(len(good) / len(results), 4) if results else None,
        "sla_misses": dict(sorted(misses.items())),
        "failures": {kind: failures[kind] for kind in FAILURE_KINDS if failures[kind]},
        "errors": dict(Counter(f"{r.kind}: {r.error[:120]}" for r in results if not r.ok).most_common(5)),
        "ttft_ms": latency_summary([r.ttft for r in ok if r.ttft is not None]),
        "itl_ms": latency_summary([r.itl for r in ok if r.itl is not None]),
        "e2e_ms": latency_summary([r.e2e for r in ok if r.e2e is not None]),
        "max_gap_ms": latency_summary([r.max_gap for r in ok if r.max_gap is not None]),
        "schedule_lag_ms": latency_summary(lags),
        "time_scale": report.time_scale,
        "generator": {
            "cpu_s": round(report.cpu_seconds, 3),
            "cpu_ms_per_request": round(1000 * report.cpu_seconds / len(sent), 3) if sent else None,
        },
    }


# ---- the per-second timeline -------------------------------------------------------------------------------------


def pool_roles(samples: Iterable[tuple[float, Mapping[str, int]]]) -> list[str]:
    roles: set[str] = set()
    for _, counts in samples:
        roles.update(counts)
    return sorted(roles)


TIMELINE_COLUMNS: Final = (
    "second",
    "offered",
    "sent",
    "completed",
    "met_sla",
    "failed",
    "in_flight",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
)


def timeline(report: RunReport, sla: Sla) -> list[dict[str, Any]]:
    """One row per second from 0 to the end of the run: requests offered (due), sent, completed, met the SLA and
    failed in that second; in flight at its end; TTFT percentiles of first tokens in it, ITL percentiles of requests
    completed in it; and, with pool samples, the ready servers per pool at its end (the latest sample by then)."""
    results = report.results
    seconds = max(1, math.ceil(max(report.elapsed, report.window)))
    rows: list[dict[str, Any]] = [{name: 0 for name in TIMELINE_COLUMNS[:7]} for _ in range(seconds)]
    ttfts: list[list[float]] = [[] for _ in range(seconds)]
    itls: list[list[float]] = [[] for _ in range(seconds)]

    def bucket(t: float) -> int:
        return min(seconds - 1, max(0, int(t)))

    # In flight at the end of second s (time s+1): sent <= s+1 < done. A difference array over those seconds.
    delta = [0] * (seconds + 1)
    for r in results:
        rows[bucket(r.scheduled)]["offered"] += 1
        if r.sent is not None:
            rows[bucket(r.sent)]["sent"] += 1
            first = max(0, math.ceil(r.sent - 1))
            last = min(seconds - 1, math.ceil(r.done - 1) - 1)
            if last >= first:
                delta[first] += 1
                delta[last + 1] -= 1
        end = bucket(r.done)
        if r.ok:
            rows[end]["completed"] += 1
            rows[end]["met_sla"] += int(sla.met(r))
            if r.itl is not None:
                itls[end].append(r.itl)
            if r.first_token_at is not None and r.ttft is not None:
                ttfts[bucket(r.first_token_at)].append(r.ttft)
        else:
            rows[end]["failed"] += 1
    running = 0
    roles = pool_roles(report.pool_samples)
    samples = sorted(report.pool_samples, key=lambda s: s[0])
    cursor = 0
    latest: Mapping[str, int] = {}
    for s, row in enumerate(rows):
        running += delta[s]
        row["second"] = s
        row["in_flight"] = running
        row["ttft_p50_ms"] = _ms(percentile(ttfts[s], 0.5))
        row["ttft_p99_ms"] = _ms(percentile(ttfts[s], 0.99))
        row["itl_p50_ms"] = _ms(percentile(itls[s], 0.5))
        row["itl_p99_ms"] = _ms(percentile(itls[s], 0.99))
        while cursor < len(samples) and samples[cursor][0] < s + 1:
            latest = samples[cursor][1]
            cursor += 1
        for role in roles:
            row[f"ready_{role}"] = latest.get(role) if latest else None
    return rows


def write_timeline(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    columns = list(rows[0]) if rows else list(TIMELINE_COLUMNS)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})


REQUEST_COLUMNS: Final = (
    "index",
    "scheduled",
    "sent",
    "kind",
    "status",
    "prompt_tokens",
    "prompt_tokens_served",
    "output_tokens_asked",
    "output_tokens",
    "ttft",
    "itl",
    "e2e",
    "max_gap",
    "endpoint",
    "error",
)


def write_requests(results: Sequence[Result], path: Path) -> None:
    """Every request's outcome (times in seconds), one row each."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=REQUEST_COLUMNS, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        for r in results:
            row = asdict(r)
            writer.writerow({k: "" if row.get(k) is None else row[k] for k in REQUEST_COLUMNS})
