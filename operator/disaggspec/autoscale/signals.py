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
import statistics
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


def running(sample: PodSample, previous: PodSample | None) -> float:
    """The running batch, read as empty when the pod generated nothing since its previous scrape (a lagging gauge)."""
    if (
        previous is not None
        and sample.generation_tokens is not None
        and increase(previous.generation_tokens, sample.generation_tokens) <= 0
    ):
        return 0.0
    return sample.running or 0.0


def unfinished(sample: PodSample, _: PodSample | None = None) -> float:
    """A prefill's requests that arrived and whose prompt tokens are not counted yet: waiting to be prefilled, in its
    bootstrap queue (waiting for decode to take them: a full decode pool holds prefill's arrivals there, 0.5.2
    disaggregation/prefill.py:194 `pop_bootstrapped`, 0.5.23 :497) and in its inflight queue (prefilled, their KV
    transfer not ended; the tokenizer counts a request's prompt tokens when it finishes, which on prefill is when
    that transfer ends). Served prompt tokens plus this count's growth are the arrivals, whichever queue holds them."""
    return queued(sample) + (sample.pd_queued or 0.0) + (sample.transferring or 0.0)


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

SURGE_ERRORS = 3.0
"""How many standard errors the last `surge_seconds`' mean must stand above the rounds before it to be read as a step
up. Without the test the higher of the two means was taken at every decision, and the scale-down stabilization keeps
the highest need of its window, so the noise of a few rounds' mean set the pool's size: on seeded Poisson rounds at
DeepSeek's peak (30 requests/s of 8,192 prompt tokens, 5 s rounds at the capacity emulator's time scale 8; one
server 6,492 tokens/s at utilisation 0.9) prefill was held at 7.9 servers on average where 6 serve the load, and at
6.5 with this test and `FORECAST_ERRORS` (`e2e/perf/bench_planner_noise.py`, 8 seeds). A 3x step is read one to five
rounds after it (one to three before), against a model load of many rounds. Three errors: the test runs at every
decision, a dozen of them per minute, and a false step holds its servers through the stabilization window."""

FORECAST_ERRORS = 2.0
"""How many standard errors of the window's slope are taken off it before it is extrapolated: a slope its noise
could make is not forecast (one error forecast a rise at about one decision in six on a steady load, each held
through the stabilization window)."""


def spread(points: Sequence[Point]) -> float:
    """The noise of one round's value: the standard deviation of the values about the window's trend, estimated
    from the successive differences by their median absolute deviation (x 1.4826 for a normal spread, / sqrt 2 as a
    difference holds two rounds' noise). A steady trend moves every difference alike and a step moves one of them,
    so neither reads as noise, as they would in the residuals of a mean or of a line; 0 with fewer than three
    points."""
    differences = [b - a for (_, a), (_, b) in itertools.pairwise(points)]
    if len(differences) < 2:
        return 0.0
    centre = statistics.median(differences)
    return statistics.median(abs(d - centre) for d in differences) * 1.4826 / math.sqrt(2)


def stepped_up(before: Sequence[Point], last: Sequence[Point], noise: float, errors: float) -> bool:
    """Whether the mean of `last` stands more than `errors` standard errors above the mean of `before` (the
    difference of two means of independent rounds, each round's noise `noise`)."""
    if not before or not last:
        return False
    error = noise * math.sqrt(1 / len(before) + 1 / len(last))
    return mean(last) - mean(before) > errors * error


@dataclass(frozen=True)
class Demand:
    """A demand now and where the window's trend puts it `lead` seconds ahead."""

    now: float
    forecast: float
    per_second: float
    """The trend (per second)."""


def demand(
    points: Sequence[Point],
    now: float,
    recent_seconds: float,
    lead_seconds: float,
    surge_seconds: float = 0.0,
    *,
    surge_errors: float = SURGE_ERRORS,
    forecast_errors: float = FORECAST_ERRORS,
) -> Demand:
    """The mean of the recent points (or of the last `surge_seconds` of them, when they stand above the rounds before
    them by more than `surge_errors` standard errors of the rounds' noise: a step up, `stepped_up`), and where the
    trend line of those points puts the demand at `now + lead_seconds` (at most as far beyond their centre as they
    span), its slope less `forecast_errors` standard errors: never below the mean (scale-up looks ahead, it never
    scales for a fall that has not happened) and at most `FORECAST_GROWTH` times it (a window's trend is not
    extrapolated into a surge)."""
    if not points:
        return Demand(0.0, 0.0, 0.0)
    latest = recent(points, points[-1][0], recent_seconds)
    if surge_seconds > 0:
        last = recent(points, points[-1][0], surge_seconds)
        before = [p for p in latest if p[0] < last[0][0]]
        if stepped_up(before, last, spread(latest), surge_errors):
            latest = last
    current = max(mean(latest), 0.0)
    # The trend of the points the level is the mean of (the whole window's when they are too few for a line): after a
    # step up the level is the step's, and the window's slope is the step itself, not a ramp, so extrapolating that
    # slope counted the step twice, up to the cap.
    basis = latest if len(latest) >= 3 else points
    fitted, error = trend(basis)
    centre = sum(t for t, _ in basis) / len(basis)
    # No further ahead than the span the trend was fitted on: beyond it a noisy slope only amplifies its noise (a 60 s
    # window extrapolated over a 120 s lead doubled the demand at the flat top of a day on the capacity emulator).
    horizon = min(now + lead_seconds - centre, basis[-1][0] - basis[0][0])
    rising = fitted - forecast_errors * error
    ahead = mean(basis) + rising * horizon if rising > 0 else current
    return Demand(current, min(max(ahead, current), FORECAST_GROWTH * current), slope(points))


def trailing_run(points: Sequence[Point], holds: Callable[[float], bool]) -> float | None:
    """How long (seconds) the trailing run of rounds whose value `holds` lasts (None: the last round's does not)."""
    since: float | None = None
    for at, value in points:
        since = (at if since is None else since) if holds(value) else None
    return None if since is None else points[-1][0] - since


def persisted(points: Sequence[Point], threshold: float) -> float:
    """How long (seconds) the trailing run of rounds whose value was at least `threshold` lasts (0: none)."""
    return trailing_run(points, lambda value: value >= threshold and value > 0) or 0.0


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
