"""One pool's window of scrapes reduced to numbers: counter rates, gauge sums per scrape round, trends (pure).

A window is `Series`: pod name -> (monotonic seconds, `PodSample`), oldest first, as the health monitor keeps it.
Counters (`prompt_tokens`, `requests`, `generation_tokens`) are cumulative since the server started; a decrease is a
restarted server whose new value counts from zero (as PromQL's `increase` reads it), so no rate is ever negative.
Gauges are SGLang's scheduler gauges, which the scheduler sets when it logs a batch (0.5.2
managers/scheduler_metrics_mixin.py:138-141 for a prefill batch, :224-240 every `--decode-log-interval` decode
steps; 0.5.23 managers/scheduler_components/metrics_reporter.py:1076-1083) and, once idle, at most 30 s later (0.5.2
managers/scheduler.py:1469-1496 `check_memory`; 0.5.23 metrics_reporter.py:1476-1521 `_maybe_log_idle_metrics`, at
once when the running gauge disagrees with the batch): a gauge can lag, a counter cannot, so a pod whose generated
tokens did not grow since its previous scrape is read as running nothing. A pool's value at a scrape round is the sum
of each pod's latest sample at or before that time.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from disaggspec.servinghealth.samples import PodSample

Series = Mapping[str, Sequence[tuple[float, PodSample]]]
Point = tuple[float, float]
"""(seconds, value)."""


def increase(before: float | None, after: float | None) -> float:
    """A counter's increase between two scrapes: a decrease is a restart (counted from zero), absence counts none."""
    if before is None or after is None:
        return 0.0
    return after if after < before else after - before


@dataclass(frozen=True)
class Interval:
    """Two consecutive scrapes of one pod."""

    pod: str
    start: float
    end: float
    before: PodSample
    after: PodSample

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def grew(self, field: str) -> float:
        return increase(getattr(self.before, field), getattr(self.after, field))


def intervals(series: Series) -> list[Interval]:
    """Every pod's consecutive scrape pairs (a pod scraped once has none)."""
    return [
        Interval(pod, start, end, before, after)
        for pod, scrapes in series.items()
        for (start, before), (end, after) in itertools.pairwise(scrapes)
        if end > start
    ]


def rounds(series: Series) -> list[float]:
    """The scrape times of the pool, oldest first (the monitor scrapes every pod of a round at one time)."""
    return sorted({at for scrapes in series.values() for at, _ in scrapes})


def span(series: Series) -> tuple[float, float] | None:
    """The first and last scrape time, None without two rounds."""
    times = rounds(series)
    return (times[0], times[-1]) if len(times) >= 2 else None


def rate(series: Series, field: str, start: float, end: float) -> float:
    """The pool's counter increase per second over [start, end], each interval prorated by its overlap."""
    if end <= start:
        return 0.0
    total = 0.0
    for interval in intervals(series):
        overlap = min(end, interval.end) - max(start, interval.start)
        if overlap > 0:
            total += interval.grew(field) * overlap / interval.seconds
    return total / (end - start)


def rate_points(series: Series, field: str) -> list[Point]:
    """The pool's rate of a counter between consecutive rounds, at each pair's midpoint (each interval prorated by
    its overlap with the pair, as `rate` does, in one pass)."""
    times = rounds(series)
    totals = [0.0] * max(len(times) - 1, 0)
    for interval in intervals(series):
        grew = interval.grew(field)
        if grew <= 0:
            continue
        for k in range(max(bisect.bisect_right(times, interval.start) - 1, 0), len(totals)):
            a, b = times[k], times[k + 1]
            if a >= interval.end:
                break
            overlap = min(b, interval.end) - max(a, interval.start)
            if overlap > 0:
                totals[k] += grew * overlap / interval.seconds
    return [((a + b) / 2, total / (b - a)) for (a, b), total in zip(itertools.pairwise(times), totals, strict=True)]


def gauge_points(series: Series, value: Callable[[PodSample, PodSample | None], float]) -> list[Point]:
    """The pool's sum of `value(latest, previous)` over its pods at every round (each pod's latest sample at or
    before the round, and the one before it)."""
    times = rounds(series)
    totals = [0.0] * len(times)
    for scrapes in series.values():
        latest = -1
        for k, at in enumerate(times):
            while latest + 1 < len(scrapes) and scrapes[latest + 1][0] <= at:
                latest += 1
            if latest >= 0:
                totals[k] += value(scrapes[latest][1], scrapes[latest - 1][1] if latest > 0 else None)
    return list(zip(times, totals, strict=True))


def queued(sample: PodSample, _: PodSample | None = None) -> float:
    """SGLang's waiting queue: a prefill's requests bootstrapped but not prefilled, a decode's requests whose KV
    arrived but that have no place in the running batch."""
    return sample.queued or 0.0


def unprefilled(sample: PodSample, _: PodSample | None = None) -> float:
    """A prefill server's requests not prefilled yet: in its waiting queue and in its bootstrap queue, where a request
    waits until its decode has pre-allocated KV for it (SGLang 0.5.2 disaggregation/prefill.py:194
    `pop_bootstrapped`, 0.5.23 :497). A full decode pool holds prefill's backlog there, not in the waiting queue."""
    return queued(sample) + (sample.pd_queued or 0.0)


def unfinished(sample: PodSample, _: PodSample | None = None) -> float:
    """A prefill server's requests that arrived but are not counted in its prompt tokens yet: not prefilled
    (`unprefilled`), or prefilled and waiting for their KV transfer to end, when the request finishes there."""
    return unprefilled(sample) + (sample.transferring or 0.0)


def running(sample: PodSample, previous: PodSample | None) -> float:
    """The running batch, read as empty when the pod generated nothing since its previous scrape (a lagging gauge)."""
    if (
        previous is not None
        and sample.generation_tokens is not None
        and increase(previous.generation_tokens, sample.generation_tokens) <= 0
    ):
        return 0.0
    return sample.running or 0.0


def concurrency(sample: PodSample, previous: PodSample | None) -> float:
    """A decode server's requests: running, waiting for a place in the batch, and in its PD queues (waiting for KV
    memory to pre-allocate, or for their KV to arrive)."""
    return running(sample, previous) + queued(sample) + (sample.pd_queued or 0.0)


def recent(points: Sequence[Point], end: float, seconds: float) -> list[Point]:
    """The points of the last `seconds` before `end` (at least the last point)."""
    kept = [p for p in points if p[0] >= end - seconds]
    return kept or list(points[-1:])


def mean(points: Sequence[Point]) -> float:
    return sum(v for _, v in points) / len(points) if points else 0.0


def slope(points: Sequence[Point]) -> float:
    """The least-squares slope of value over time (per second); 0 with fewer than three points."""
    return trend(points)[0]


def trend(points: Sequence[Point]) -> tuple[float, float]:
    """The least-squares slope of value over time (per second) and its standard error (the residuals' spread over
    the times' spread, n - 2 degrees of freedom); (0, 0) with fewer than three points."""
    if len(points) < 3:
        return 0.0, 0.0
    mt = sum(t for t, _ in points) / len(points)
    mv = mean(points)
    var = sum((t - mt) ** 2 for t, _ in points)
    if var <= 0:
        return 0.0, 0.0
    fitted = sum((t - mt) * (v - mv) for t, v in points) / var
    residuals = sum((v - mv - fitted * (t - mt)) ** 2 for t, v in points)
    return fitted, math.sqrt(residuals / (len(points) - 2) / var)


FORECAST_GROWTH = 1.5
"""The most a forecast adds to the demand now. A daily ramp grows a few percent per minute, so over a lead of a minute
or two its trend adds far less; a load that grows by half within one lead is a burst, which a window's trend does not
predict: extrapolating the steep slope of a step (measured on the capacity emulator, 2x allowed) asked for twice the
servers the burst needed."""


FORECAST_ERRORS = 2.0
"""Standard errors taken off a window's fitted slope before it is extrapolated: a rise the planner scales up for is
held through the scale-down stabilization window, so a slope that noise could make must not pass. With one error a
noisy window's slope passes about one decision in six (a normal slope estimate exceeds its truth by one error 16% of
the time; two: 2%): at the flat peak of the compressed day on the capacity emulator the forecast added 32% to a
Poisson window of 37 requests/s and both pools held a server too many for 45 s (DeepSeek, 17dfedd)."""


@dataclass(frozen=True)
class Demand:
    """A demand now and where the window's trend puts it `lead` seconds ahead."""

    now: float
    forecast: float
    per_second: float
    """The trend (per second)."""


SURGE_ERRORS = 4.0
"""Standard errors by which the last rounds must stand above the line of the rounds before them to be read as a step
up. The larger of two noisy means is biased up: reading the last 20 s whenever their mean was higher sized a steady
load for its upper noise. Four, as every tail is tried and the noise is itself estimated: on Poisson rounds of 6
requests (5 s at 1.25/s, 200 seeded windows of a steady load) three errors read 8% of windows as a step, four 3%,
and the demand now was biased up by 0.4% (the old reading: 4.8%); a 3.5x step was read from its first or second
full round either way (the old reading took four)."""


def jitter(points: Sequence[Point]) -> float:
    """A rate's noise round to round, robust to a step and a trend: the median of the successive differences'
    magnitudes over 0.6745 x sqrt 2 (for independent normal rounds of deviation s a difference has deviation s x
    sqrt 2, and its magnitude's median is 0.6745 of that). One step is one large difference among many, which the
    median passes over; a line's difference is constant and nearly cancels. 0 with fewer than two points."""
    gaps = sorted(abs(b - a) for (_, a), (_, b) in itertools.pairwise(points))
    if not gaps:
        return 0.0
    middle = len(gaps) // 2
    median = gaps[middle] if len(gaps) % 2 else (gaps[middle - 1] + gaps[middle]) / 2
    return median / (0.6745 * math.sqrt(2))


def surge(points: Sequence[Point], recent_seconds: float, surge_seconds: float) -> list[Point] | None:
    """The last rounds that stand above the trend of the recent rounds before them as a step up, None without one.
    Each tail of the last k recent rounds (at least three left before it: the base) is compared with where the line
    through its base puts it, in standard errors of that difference (the recent rounds' `jitter` times the standard
    error factor of a least-squares line's prediction of the mean of k new points). After a
    step k rounds ago the tail of those k rounds stands most errors above: a shorter one leaves step rounds in its
    base, a longer one mixes rounds from before the step into itself. It is taken when that is at least
    `SURGE_ERRORS`. A ramp is no step: its last rounds lie on the base's line, and the forecast carries it. With
    fewer than four recent rounds the noise is unknown: the last `surge_seconds` are taken when their mean is above
    the recent window's. `surge_seconds` <= 0: no surge is looked for."""
    if not points or surge_seconds <= 0:
        return None
    end = points[-1][0]
    latest = recent(points, end, recent_seconds)
    if len(latest) < 4:
        last = recent(points, end, surge_seconds)
        return list(last) if mean(last) > mean(latest) else None

    # A clean line still leaves rounding in the excess: a step must stand out of that too.
    noise = max(jitter(latest), 1e-9 * abs(mean(latest)))

    def standing(k: int) -> float:
        """How many standard errors the tail of k rounds stands above its base's line."""
        tail, base = latest[-k:], latest[:-k]
        fitted, error = trend(base)
        centre = sum(t for t, _ in base) / len(base)
        spread = sum((t - centre) ** 2 for t, _ in base)
        at = sum(t for t, _ in tail) / len(tail)
        factor = 1 / len(tail) + 1 / len(base)
        if abs(fitted) > FORECAST_ERRORS * error and spread > 0:
            factor += (at - centre) ** 2 / spread  # a trend the base's noise cannot make: the tail is held to it
        else:
            fitted = 0.0  # no trend to hold it to: its level (a noisy slope carried far only widens the error)
        return (mean(tail) - mean(base) - fitted * (at - centre)) / math.sqrt(factor) / noise if noise > 0 else 0.0

    k = max(range(1, len(latest) - 2), key=standing)
    return list(latest[-k:]) if standing(k) >= SURGE_ERRORS else None


def demand(
    points: Sequence[Point], now: float, recent_seconds: float, lead_seconds: float, surge_seconds: float = 0.0
) -> Demand:
    """The mean of the recent points (or of the last rounds that stand above them as a step up, `surge`), and where
    the trend line of those points puts the demand at `now + lead_seconds` (at most as far beyond their centre as they
    span), its slope less `FORECAST_ERRORS` standard errors: never below the mean (scale-up looks ahead, it never
    scales for a fall that has not happened) and at most `FORECAST_GROWTH` times it (a window's trend is not
    extrapolated into a surge)."""
    if not points:
        return Demand(0.0, 0.0, 0.0)
    stepped = surge(points, recent_seconds, surge_seconds)
    latest = stepped or recent(points, points[-1][0], recent_seconds)
    current = max(mean(latest), 0.0)
    # The trend of the points the level is the mean of (the whole window's when they are too few for a line): after a
    # step up the level is the step's, and the window's slope is the step itself, not a ramp, so extrapolating that
    # slope counted the step twice, up to the cap. Less `FORECAST_ERRORS` standard errors: a slope the window's noise
    # could make is not extrapolated (at the flat peak of a day on the capacity emulator, prefill asked for 8-10
    # servers where 6 served the load).
    if stepped is not None and len(stepped) < 3 and len(points) - len(stepped) >= 3:
        # The step's own rounds are too few for a line, and the window's line through the step is the step: a step
        # is not a ramp, its level is the demand.
        return Demand(current, current, slope(points))
    basis = latest if len(latest) >= 3 else points
    fitted, error = trend(basis)
    centre = sum(t for t, _ in basis) / len(basis)
    # No further ahead than the span the trend was fitted on: beyond it a noisy slope only amplifies its noise (a 60 s
    # window extrapolated over a 120 s lead doubled the demand at the flat top of a day on the capacity emulator).
    horizon = min(now + lead_seconds - centre, basis[-1][0] - basis[0][0])
    rising = fitted - FORECAST_ERRORS * error
    ahead = mean(basis) + rising * horizon if rising > 0 else current
    return Demand(current, min(max(ahead, current), FORECAST_GROWTH * current), slope(points))


def persisted(points: Sequence[Point], threshold: float) -> float:
    """How long (seconds) the trailing run of rounds whose value was at least `threshold` lasts (0: none)."""
    run: list[float] = []
    for at, value in points:
        run = [*run, at] if value >= threshold and value > 0 else []
    return run[-1] - run[0] if run else 0.0


def accept_length(series: Series, start: float) -> float | None:
    """The accept length of the intervals ending after `start`, weighted by the tokens each generated (idle
    intervals weigh nothing); None without speculative tokens generated. SGLang 0.5.2 exports 0 without speculative
    decoding (managers/scheduler_metrics_mixin.py:201-202), which counts as none."""
    tokens = weighted = 0.0
    for interval in intervals(series):
        length = interval.after.accept_length
        grew = interval.grew("generation_tokens")
        if interval.end > start and length is not None and length > 0 and grew > 0:
            tokens += grew
            weighted += grew * length
    return weighted / tokens if tokens else None
