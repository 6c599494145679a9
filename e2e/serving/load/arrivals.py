"""When requests arrive, decided before the load starts: open-loop schedules, seeded and reproducible.

An open-loop generator sends each request at its scheduled time whatever the earlier ones are doing, so a slow server
builds a queue instead of slowing the client down (a closed loop, `e2e.serving.traffic`, waits for each answer before
the next request and so never offers more than the server serves). Every shape here is a Poisson process whose rate
may vary with time: a constant rate, steps, a linear ramp, or a 24-hour curve compressed into N seconds; the times of
a varying rate come from thinning a Poisson process at the curve's peak rate (Lewis and Shedler), so the count in any
interval is Poisson with the curve's integral as its mean. A trace file replays recorded times (and, when it has
them, recorded lengths) instead. The same seed always gives the same schedule.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final, Protocol

HOURS: Final = 24


@dataclass(frozen=True)
class Arrival:
    """One scheduled request: when (seconds after the start), and the lengths a trace recorded (None: drawn later)."""

    at: float
    prompt_tokens: int | None = None
    output_tokens: int | None = None


class RateCurve(Protocol):
    """Requests per second as a function of time, over `[0, duration)`."""

    @property
    def duration(self) -> float: ...

    def rate(self, t: float) -> float: ...

    def peak(self) -> float:
        """An upper bound of `rate` over the whole duration (thinning draws candidates at this rate)."""
        ...

    def describe(self) -> str: ...


def _check_rate(rate: float) -> float:
    if not math.isfinite(rate) or rate < 0:
        raise ValueError(f"a rate must be a finite number >= 0, not {rate}")
    return rate


def _check_duration(duration: float) -> float:
    if not math.isfinite(duration) or duration <= 0:
        raise ValueError(f"a duration must be a finite number > 0, not {duration}")
    return duration


@dataclass(frozen=True)
class Constant:
    """`rate` requests per second for `duration` seconds."""

    rate_per_s: float
    duration: float

    def __post_init__(self) -> None:
        _check_rate(self.rate_per_s)
        _check_duration(self.duration)

    def rate(self, t: float) -> float:
        return self.rate_per_s if 0 <= t < self.duration else 0.0

    def peak(self) -> float:
        return self.rate_per_s

    def describe(self) -> str:
        return f"poisson {self.rate_per_s:g}/s for {self.duration:g}s"


@dataclass(frozen=True)
class Steps:
    """Consecutive steps of (seconds, rate): the rate jumps at each step's start."""

    steps: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("steps: at least one (seconds, rate) step")
        for seconds, rate in self.steps:
            _check_duration(seconds)
            _check_rate(rate)

    @property
    def duration(self) -> float:
        return sum(seconds for seconds, _ in self.steps)

    def rate(self, t: float) -> float:
        start = 0.0
        for seconds, rate in self.steps:
            if start <= t < start + seconds:
                return rate
            start += seconds
        return 0.0

    def peak(self) -> float:
        return max(rate for _, rate in self.steps)

    def describe(self) -> str:
        return "steps " + ", ".join(f"{s:g}s@{r:g}/s" for s, r in self.steps)


@dataclass(frozen=True)
class Ramp:
    """A rate going linearly from `start` to `end` requests per second over `duration` seconds."""

    start: float
    end: float
    duration: float

    def __post_init__(self) -> None:
        _check_rate(self.start)
        _check_rate(self.end)
        _check_duration(self.duration)

    def rate(self, t: float) -> float:
        if not 0 <= t < self.duration:
            return 0.0
        return self.start + (self.end - self.start) * t / self.duration

    def peak(self) -> float:
        return max(self.start, self.end)

    def describe(self) -> str:
        return f"ramp {self.start:g}->{self.end:g}/s over {self.duration:g}s"


def default_daily_shape(trough_ratio: float = 0.25) -> tuple[float, ...]:
    """24 hourly weights (hour 0 = midnight), peak 1.0 at 14:00 and `trough_ratio` at 02:00: a raised cosine.

    A parametric shape, not a measurement: interactive services are busiest in the local afternoon and quietest
    before dawn; give measured hourly weights (`Daily.shape`) to replay a real day."""
    if not 0 <= trough_ratio <= 1:
        raise ValueError(f"trough ratio must be within [0, 1], not {trough_ratio}")
    peak_hour = 14.0
    return tuple(
        trough_ratio + (1 - trough_ratio) * (1 + math.cos(2 * math.pi * (hour - peak_hour) / HOURS)) / 2
        for hour in range(HOURS)
    )


@dataclass(frozen=True)
class Daily:
    """A day compressed into `duration` seconds: hour h of the day lasts duration/24 seconds, and the rate is
    `peak_rate` x the shape's weight, interpolated linearly between hourly points (periodic: 23:00 leads to 00:00).
    The weights are scaled so that the largest is 1, so `peak_rate` is the rate at the busiest hour."""

    peak_rate: float
    duration: float
    shape: tuple[float, ...] = default_daily_shape()

    def __post_init__(self) -> None:
        _check_rate(self.peak_rate)
        _check_duration(self.duration)
        if len(self.shape) != HOURS or any(not math.isfinite(w) or w < 0 for w in self.shape) or max(self.shape) <= 0:
            raise ValueError("daily shape: 24 finite weights >= 0, at least one > 0")

    def rate(self, t: float) -> float:
        if not 0 <= t < self.duration:
            return 0.0
        hour = t / self.duration * HOURS
        low = int(hour) % HOURS
        frac = hour - int(hour)
        top = max(self.shape)
        weight = self.shape[low] * (1 - frac) + self.shape[(low + 1) % HOURS] * frac
        return self.peak_rate * weight / top

    def peak(self) -> float:
        return self.peak_rate

    def describe(self) -> str:
        return f"daily curve, peak {self.peak_rate:g}/s, 24h in {self.duration:g}s"


def mean_rate(curve: RateCurve, samples: int = 10_000) -> float:
    """The curve's average rate over its duration (midpoint rule): the expected number of arrivals / duration."""
    step = curve.duration / samples
    return sum(curve.rate((i + 0.5) * step) for i in range(samples)) / samples


def poisson_arrivals(curve: RateCurve, seed: int, limit: int) -> list[Arrival]:
    """Arrival times of a Poisson process with intensity `curve.rate`, at most `limit` of them (the earliest)."""
    rng = random.Random(seed)
    peak = curve.peak()
    found: list[Arrival] = []
    if peak <= 0 or limit <= 0:
        return found
    t = 0.0
    while len(found) < limit:
        t += rng.expovariate(peak)
        if t >= curve.duration:
            break
        # Thinning: keep a candidate with probability rate(t)/peak. Always draw, so the stream of random numbers
        # (and thus the schedule) does not depend on float ties in the comparison.
        keep = rng.random() * peak < curve.rate(t)
        if keep:
            found.append(Arrival(t))
    return found


# ---- trace files -------------------------------------------------------------------------------------------------

_TIME_COLUMNS: Final = ("timestamp", "time", "at")
_PROMPT_COLUMNS: Final = ("prompt_tokens", "contexttokens", "input_tokens")
_OUTPUT_COLUMNS: Final = ("output_tokens", "generatedtokens")


def _column(header: Sequence[str], names: Sequence[str], required: bool, path: Path) -> int | None:
    lowered = [name.strip().lower() for name in header]
    for name in names:
        if name in lowered:
            return lowered.index(name)
    if required:
        raise ValueError(f"{path}: no column named one of {', '.join(names)} (header: {', '.join(header)})")
    return None


def _seconds(raw: str) -> float:
    """A trace timestamp: seconds (a number) or a date and time (ISO 8601, as the Azure LLM traces write it)."""
    text = raw.strip()
    try:
        return float(text)
    except ValueError:
        pass
    # datetime.fromisoformat takes at most 6 fraction digits; the Azure traces write 7.
    head, dot, fraction = text.partition(".")
    moment = datetime.fromisoformat(head)
    return moment.timestamp() + (float("0." + fraction) if dot and fraction.isdigit() else 0.0)


def read_trace(path: Path, *, speedup: float = 1.0, limit: int | None = None) -> list[Arrival]:
    """Arrivals from a CSV trace with a header: `timestamp,prompt_tokens,output_tokens` (the lengths optional), or the
    Azure LLM inference traces' `TIMESTAMP,ContextTokens,GeneratedTokens`. Times are made relative to the earliest
    row and divided by `speedup`; rows are sorted by time; at most `limit` (the earliest) are kept."""
    if not math.isfinite(speedup) or speedup <= 0:
        raise ValueError(f"trace speedup must be > 0, not {speedup}")
    with path.open(newline="") as handle:
        reader = csv.reader(row for row in handle if row.strip() and not row.startswith("#"))
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: empty trace")
        at = _column(header, _TIME_COLUMNS, True, path)
        prompt = _column(header, _PROMPT_COLUMNS, False, path)
        output = _column(header, _OUTPUT_COLUMNS, False, path)
        rows: list[tuple[float, int | None, int | None]] = []
        for number, row in enumerate(reader, start=2):
            try:
                rows.append(
                    (
                        _seconds(row[at]),  # type: ignore[index]
                        int(row[prompt]) if prompt is not None else None,
                        int(row[output]) if output is not None else None,
                    )
                )
            except (IndexError, ValueError) as error:
                raise ValueError(f"{path}:{number}: {error}") from error
    if not rows:
        return []
    rows.sort(key=lambda r: r[0])
    start = rows[0][0]
    arrivals = [Arrival((t - start) / speedup, p, o) for t, p, o in rows]
    return arrivals[:limit] if limit is not None else arrivals
